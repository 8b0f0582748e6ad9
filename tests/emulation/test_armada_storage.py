"""Armada's storage layer in emulation at its small size: Cargo selection, consistency
policies and a Cargo killed mid-workload, under the face-recognition workloads.

The experiment runs once (fixture); the tests check what it must show: every frame is
answered, reads recognise the known faces, nearest allocation puts the data on the
nearest Cargos, eventual replication lag is measured, and after the serving Cargo is
killed no operation fails, every acknowledged write is on every replica and the
replication factor is restored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from testbed.systems.armada.builders import WORKLOADS, site_name
from testbed.systems.armada.storage_experiment import SIZES, run_storage, write_storage_report

pytestmark = pytest.mark.emulation
SIZE = SIZES["small"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_storage("small", tmp_path_factory.mktemp("storage") / "run",
                       progress=lambda _line: None)


def _result(out: Path) -> dict:
    return json.loads((out / "storage.json").read_text())


def test_every_frame_is_answered_and_known_faces_are_recognised(stored: Path) -> None:
    res = _result(stored)
    assert len(res["streams"]) == 3 * len(WORKLOADS)
    for s in res["streams"]:
        assert s["ok"] == s["frames"] == SIZE.frames, s
        if s["mode"] == "read":  # the read workload shows known identities only
            assert s["recognised"] == s["frames"], s
            assert s["read"]["n"] == s["frames"] and s["write"]["n"] == 0
        if s["mode"] == "write":
            assert s["write"]["n"] == s["frames"] and s["read"]["n"] == 0


def test_nearest_allocation_takes_the_nearest_cargos(stored: Path) -> None:
    res = _result(stored)
    near = {r["cargo_id"] for r in res["deployments"]["nearest"]["allocation"]["replicas"]}
    assert near == {site_name(i) for i in range(3)}
    assert len(res["deployments"]["random"]["allocation"]["replicas"]) == 3


def test_eventual_replication_lag_is_measured(stored: Path) -> None:
    lags = _result(stored)["eventual_lag"]
    samples = [x for lag in lags.values() for x in lag["samples"]]
    assert samples and all(x >= 0 for x in samples)


def test_a_killed_cargo_loses_no_acknowledged_write(stored: Path) -> None:
    fault = _result(stored)["fault"]
    assert fault["stream"]["failed"] == 0, fault["stream"]["errors"]
    assert fault["stream"]["written"] > 0
    rb = fault["readback"]
    assert rb["replicas"] == 3 and rb["found"] == rb["expected"], rb
    assert fault["victim"] not in {r["cargo_id"] for r in fault["replicas_after"]
                                   if r["state"] == "ready"}
    assert fault["restores"] and fault["restores"][0]["lost"] == fault["victim"]


def test_traces_and_report(stored: Path, tmp_path: Path) -> None:
    df = read_traces(stored)
    assert set(df["kind"]) == {"storage"}
    assert len(df) == SIZE.frames * (3 * len(WORKLOADS) + 1)
    assert (df[df["outcome"] == "ok"]["latency_s"] > 0).all()
    report = write_storage_report(stored, tmp_path / "storage.md", "test")
    text = report.read_text()
    assert "## 3. Fault tolerance" in text and "| nearest |" in text
    assert (tmp_path / "storage.png").stat().st_size > 0
