"""``armada-storage`` at its small size, as a researcher runs it (``testbed experiment``:
its study files, the study engine, the storage driver, its metric and claim functions,
the generic report).

Real emulation (root, Mininet hosts, the Cargos' SQLite stores, the face task's Haar
cascade). The tests check what the run must show: every frame of the read-then-write
workload is answered by every policy, what is not recognised is written, nearest
allocation takes the nearest Cargos, eventual replication lag is measured, every
acknowledged write is read back from every replica, and when the serving Cargo's node
crashes mid-workload no operation fails, nothing acknowledged is lost and the
replication factor is restored. The containerised Cargo's crash and volume are tested in
``test_cargo_docker.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.analysis.traces import read_traces
from testbed.systems.armada.builders import cargo_node
from tests.emulation import experiment_run

pytestmark = pytest.mark.emulation
FRAMES = 12  # the small study files'


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the results folder, the report folder) of the small experiment."""
    report = tmp_path_factory.mktemp("storage-report")
    with experiment_run("armada-storage", report) as out:
        yield out, report


def _metrics(out: Path) -> dict[str, Any]:
    return json.loads((out / "metrics.json").read_text())


def test_every_frame_is_answered_by_every_policy(measured: tuple[Path, Path]) -> None:
    (run,) = _metrics(measured[0])["selection"]
    assert run["mode"] == "read-write"
    assert set(run["policies"]) == {"nearest", "random", "eventual"}
    for policy, found in run["policies"].items():
        assert found["ok"] == found["frames"] == FRAMES, (policy, found)
        # every frame is read; what was not recognised is written
        assert found["recognised"] + found["writes"] == FRAMES and found["recognised"] > 0
        assert found["written"] > 0 and found["read_mean"] > 0 and found["write_mean"] > 0
        rb = found["readback"]
        assert rb["found"] == rb["expected"] == found["written"] * 3, (policy, rb)
    nearest = {c for c, _ in run["policies"]["nearest"]["cargos"]}
    assert nearest == {cargo_node(i) for i in range(3)}
    assert len(run["policies"]["random"]["cargos"]) == 3
    assert run["policies"]["eventual"]["lag_ms"], "no replication lag measured"


def test_a_crashed_cargo_loses_no_acknowledged_write(measured: tuple[Path, Path]) -> None:
    (fault,) = _metrics(measured[0])["fault"]
    assert fault["lost"] == [cargo_node(0)] == [fault["serving_cargo"]]
    assert fault["failed"] == 0 and fault["ok"] == FRAMES and fault["written"] > 0
    rb = fault["readback"]
    assert rb["replicas"] == 3 and rb["found"] == rb["expected"], rb
    assert [r["lost"] for r in fault["restores"]] == [cargo_node(0)]
    assert cargo_node(0) not in fault["ready_after"] and len(fault["ready_after"]) == 3
    events = [json.loads(line) for p in (measured[0] / "fault" / "cells").glob(
        "*/run/work/events.jsonl") for line in p.read_text().splitlines()]
    assert [(e["action"], e["target"], e["outcome"]) for e in events] == [
        ("crash", cargo_node(0), "applied")]


def test_traces_carry_the_cargo_operations(measured: tuple[Path, Path]) -> None:
    cells = sorted((measured[0] / "storage" / "cells").glob("*/run"))
    (cell,) = cells
    df = read_traces(cell)
    assert set(df["kind"]) == {"storage"} and len(df) == 3 * FRAMES
    reads = df[df["op"].fillna("").str.contains("read")]
    assert len(reads) and reads["read_ms"].notna().all() and (reads["read_ms"] > 0).all()


def test_the_report_judges_both_claims(measured: tuple[Path, Path]) -> None:
    _, report = measured
    text = (report / "storage.md").read_text()
    assert "Cargo selection and consistency, per workload and policy" in text
    assert "A Cargo crashed mid-workload" in text and "Staleness of eventual reads" in text
    claims = {c["key"]: c for c in json.loads((report / "storage.claims.json").read_text())
              ["claims"]}
    assert claims["S2"]["verdict"] == "holds", claims["S2"]
    assert claims["S1"]["verdict"] != "not run" and claims["S1"]["replications"] == 1
