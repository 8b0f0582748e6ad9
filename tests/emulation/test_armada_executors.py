"""``armada-executors`` at its small size: one fleet of quarter-core nodes, emulated and
simulated with the same seeds (one replication), and the report comparing them.

The emulation is real (root, Mininet hosts, the detector in CPU-quota cgroups); the
experiment runs as a researcher runs it (``testbed experiment``: its study file, the
study engine, its metric function and the generic report). The test checks that both
executors ran every policy of every replication on the same trace and fleet, that the
comparison is paired within replications, and that the report states what it compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.systems.armada.executors_experiment import by_point, sim_minus_emulation
from tests.emulation import experiment_run

pytestmark = pytest.mark.emulation


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the results folder, the report folder) of the small experiment."""
    report = tmp_path_factory.mktemp("executors-report")
    with experiment_run("armada-executors", report,
                        ["--executors", "emulation,sim", "--rerun-degraded"]) as out:
        yield out, report


def test_both_executors_ran_every_policy_on_the_same_traces(
        measured: tuple[Path, Path]) -> None:
    out, _ = measured
    doc = json.loads((out / "metrics.json").read_text())
    names = doc["policies"]
    assert names == ["armada", "geo-nearest"]
    assert len(doc["runs"]) == 2  # one fleet, one replication, two executors
    for run in doc["runs"]:
        assert not run["failed"] and set(run["policies"]) == set(names)
        assert run["fleet_seed"] == 2000 + run["replication"]
        for found in run["policies"].values():
            assert found["mean_ms"] is not None and found["mean_ms"] > 0
    metas = [json.loads(p.read_text())
             for p in (out / "executors" / "cells").glob("*/run/metadata.json")]
    assert {m["executor"] for m in metas} == {"emulation", "sim"}
    assert {m["seeds"]["scenario"] for m in metas} == {2000}
    assert metas[0]["trace"]["sha256"] == metas[1]["trace"]["sha256"]
    for runs in by_point(doc).values():
        diff = sim_minus_emulation(runs, names[0], "mean_ms")
        assert diff is not None and diff.n == 1


def test_the_report_sets_the_executors_side_by_side(measured: tuple[Path, Path]) -> None:
    _, report = measured
    text = (report / "executors.md").read_text()
    assert "| policy | metric | emulation | simulator | sim − emulation |" in text
    assert "Policies by mean latency, emulation:" in text
    assert "How far apart the executors are" in text
