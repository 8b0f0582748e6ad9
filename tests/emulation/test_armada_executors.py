"""``armada-executors`` at its small size: one fleet of quarter-core nodes, emulated and
simulated with the same seeds, two replications, and the report comparing them.

The emulation is real (root, Mininet hosts, the detector in CPU-quota cgroups); the
test checks that both executors ran every policy of every replication on the same
trace, that the comparison is paired within replications, and that the report states
what it compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.systems.armada.executors_experiment import (
    SIZES,
    by_point,
    labels,
    run_executors,
    sim_minus_emulation,
    write_executors_report,
)

pytestmark = pytest.mark.emulation


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("executors")
    run_executors("small", out, progress=lambda _line: None)
    return out


def test_both_executors_ran_every_policy_on_the_same_traces(measured: Path) -> None:
    doc = json.loads((measured / "executors.json").read_text())
    plan = SIZES["small"]
    names = labels(plan.policies)
    assert len(doc["runs"]) == len(plan.points) * plan.replications * 2
    for run in doc["runs"]:
        assert not run["failed"] and set(run["policies"]) == set(names)
        for found in run["policies"].values():
            assert found["mean_ms"] is not None and found["mean_ms"] > 0
    for r in range(plan.replications):
        pair = [json.loads((measured / run["run"] / "metadata.json").read_text())
                for run in doc["runs"] if run["replication"] == r]
        assert {m["executor"] for m in pair} == {"emulation", "sim"}
        assert pair[0]["trace"]["sha256"] == pair[1]["trace"]["sha256"]
    for runs in by_point(doc).values():
        diff = sim_minus_emulation(runs, names[0], "mean_ms")
        assert diff is not None and diff.n == plan.replications


def test_the_report_sets_the_executors_side_by_side(measured: Path, tmp_path: Path) -> None:
    report = write_executors_report(measured, tmp_path / "executors.md", "test")
    text = report.read_text()
    assert "| policy | metric | emulation | simulator | sim − emulation |" in text
    assert "Fidelity guard:" in text and "rank the policies" in text
