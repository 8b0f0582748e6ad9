"""Armada experiment 1 in emulation at its small size: the SDK picks each user's best node.

The topology's margins are built in (``topologies/armada-selection.yaml``): each user's
best node beats the next by tens of milliseconds of network alone, and user uc's nearest
node ec has 0.04 cores, so a 16 ms frame spans at least three 100 ms CFS periods there.
Correctness is judged against the latency matrix measured in the same run, within the
tolerance :func:`testbed.systems.armada.selection_experiment.score_selection` derives
from the measured spread. The experiment runs as a researcher runs it, through the study
engine, its metric and claim functions and the generic report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from tests.emulation import experiment_run
from workloads.trace import read_trace

pytestmark = pytest.mark.emulation


@pytest.fixture(scope="module")
def selection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, Path, Path]]:
    """``testbed experiment armada-selection`` at its small size: (its one replication's
    metrics, the cell's run folder, the report folder)."""
    report = tmp_path_factory.mktemp("selection-report")
    with experiment_run("armada-selection", report) as out:
        (run,) = json.loads((out / "metrics.json").read_text())["runs"]
        (cell,) = (out / "selection" / "cells").iterdir()
        yield run, cell / "run", report


def test_sdk_picks_the_best_node_for_every_user(selection: tuple[dict, Path, Path]) -> None:
    run, _, report = selection
    scores = run["scores"]
    assert set(scores) == {"ua", "ub", "uc"}
    for user, score in scores.items():
        assert score["correct"], (user, score, run["matrix"][user])
    # Tier 1: a user sharing a LAN with a capable node offloads there.
    assert scores["ua"]["pick"] == "ea"
    assert scores["ub"]["pick"] == "eb"
    # The paper's case: uc's nearest node ec is resource-limited; ec was a candidate
    # (same GeoHash area), so probing, not the candidate list, turned uc to a farther node.
    assert scores["uc"]["pick"] != "ec"
    assert "ec" in {c["node_id"] for c in run["first_probes"]["uc"]["candidates"]}
    matrix = run["matrix"]["uc"]
    assert matrix["ec"]["median_ms"] > matrix[scores["uc"]["pick"]]["median_ms"]
    assert matrix["ec"]["processing_median_ms"] > 3 * matrix["ea"]["processing_median_ms"]
    claims = json.loads((report / "selection.claims.json").read_text())["claims"]
    assert [(c["key"], c["verdict"], c["replications"]) for c in claims] == [("A1", "holds", 1)]


def test_replicas_run_inside_their_node(selection: tuple[dict, Path, Path]) -> None:
    run, _, _ = selection
    assert run["contained"] == {"ea": True, "eb": True, "ec": True, "cloud": True}


def test_every_streamed_frame_has_an_ok_row(selection: tuple[dict, Path, Path]) -> None:
    _, cell_run, _ = selection
    tasks, _ = read_trace(cell_run / "trace")
    df = read_traces(cell_run)
    assert (df.kind == "frame").all()
    assert sorted(df.task_id) == sorted(t.task_id for t in tasks)
    assert (df.outcome == "ok").all(), df[df.outcome != "ok"][["client", "error"]]
    for user in ("ua", "ub", "uc"):
        mine = df[df.client == user]
        assert list(mine.sort_values("frame_index").frame_index) == list(range(len(mine)))
        assert len(mine) == sum(t.client == user for t in tasks) > 0
    meta = json.loads((cell_run / "metadata.json").read_text())
    assert meta["teardown_errors"] == []
    assert "idle_share" in meta["driver"]["host"]
