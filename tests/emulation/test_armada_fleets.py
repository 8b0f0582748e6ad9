"""The Armada fleet experiments in emulation at their small sizes: scalability, edge
nodes failing one by one, volunteer churn and background load.

Each experiment runs once per module (fixtures) and the tests check what the experiment
must show, not its absolute latencies: every frame is accounted for, actions hit the
nodes they name, a crashed or departed node serves nothing afterwards, the SDK loses no
frame through failures and churn, re-placement happens, and the SDK moves a user off a
node loaded by something else.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.armada.app_manager import ACTIVE
from nodes.armada.geo import haversine_km
from testbed.analysis.traces import read_traces
from testbed.cli import main
from testbed.systems.armada.builders import Fleet, fleet_layout
from testbed.systems.armada.churn_experiment import churn_result
from testbed.systems.armada.fleet_report import fleet_json
from testbed.systems.armada.scalability_experiment import SELECTION_POLICIES

pytestmark = pytest.mark.emulation


def _experiment(name: str, factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """``testbed experiment NAME`` at its small size through the generic experiment
    engine (study, metrics, claims, report); yields the results and report folders."""
    out = Path(tempfile.mkdtemp(prefix="ax", dir="/tmp"))  # room for the cells' sockets
    report = factory.mktemp(f"{name}-report")
    try:
        assert main(["experiment", name, "--out", str(out), "--report", str(report)]) == 0
        yield out, report
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ------------------------------------------------------------------ scalability


@pytest.fixture(scope="module")
def scalability(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    yield from _experiment("armada-scalability", tmp_path_factory)


def _runs(out: Path) -> dict[tuple[int, int], Path]:
    """The scalability study's cell runs by (edge nodes, users)."""
    runs = {}
    for cell in (out / "scalability" / "cells").iterdir():
        fleet = fleet_json(cell / "run")["fleet"]
        runs[(fleet["nodes"], fleet["users"])] = cell / "run"
    return runs


def test_every_point_runs_every_policy_on_the_same_trace(
        scalability: tuple[Path, Path]) -> None:
    runs = _runs(scalability[0])
    assert sorted(runs) == [(3, 1), (3, 4), (5, 4)]
    firsts = set()
    for point, run in runs.items():
        df = read_traces(run)
        per_policy = df.groupby("policy").task_id.apply(sorted)
        assert sorted(per_policy.index) == sorted(SELECTION_POLICIES)
        assert len({tuple(ids) for ids in per_policy}) == 1  # the same frames for each
        # Overload may cost frames (that is a result); a broken client serves nobody.
        for (policy, user), mine in df.groupby(["policy", "client"]):
            assert (mine.outcome == "ok").any(), (point, policy, user)
        fleet = fleet_json(run)
        assert fleet["deployment"]["startup_s"] > 0
        assert len(fleet["deployment"]["settled"]) >= 3
        assert json.loads((run / "metadata.json").read_text())["teardown_errors"] == []
        firsts.add(fleet["streams"][0]["policy"])
    assert len(firsts) == 3  # order: rotate puts another policy first at each point


def test_geo_nearest_users_start_on_their_nearest_replica(
        scalability: tuple[Path, Path]) -> None:
    fleet = fleet_json(_runs(scalability[0])[(5, 4)])
    layout = fleet_layout(Fleet.from_params(fleet["fleet"]))
    nodes = dict(enumerate(layout["sites"]))
    k = next(k for k, s in enumerate(fleet["streams"]) if s["policy"] == "geo-nearest")
    before = fleet["streams"][k - 1]["replicas_after"] if k else fleet["deployment"]["settled"]
    replica_nodes = {r["node_id"] for r in before if r["status"] == "running"}
    stream = fleet["streams"][k]
    for j, (_, lat, lon) in enumerate(layout["users"]):
        nearest = min(replica_nodes, key=lambda n: haversine_km(
            lat, lon, *nodes[int(n[1:]) - 1]))
        assert stream["picks"][f"u{j + 1:02d}"] == nearest


def test_scalability_report_names_every_point_and_judges_both_variants(
        scalability: tuple[Path, Path]) -> None:
    out, report = scalability
    text = (report / "scalability.md").read_text()
    for label in ("3n/1u", "3n/4u", "5n/4u"):  # " (degraded)" follows a degraded cell's
        assert f"| {label} |" in text or f"| {label} (degraded) |" in text
    claims = json.loads((report / "scalability.claims.json").read_text())["claims"]
    assert [c["key"] for c in claims] == ["A2 (armada)", "A2 (armada-light)"]
    assert all(c["replications"] == 1 and c["verdict"] != "not run" for c in claims)
    metrics = json.loads((out / "metrics.json").read_text())
    assert [p["label"].split()[0] for p in metrics["points"]] == ["3n/1u", "3n/4u", "5n/4u"]


# ------------------------------------------------------------------ failures


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    yield from _experiment("armada-failures", tmp_path_factory)


def test_crashed_nodes_serve_nothing_afterwards(failures: tuple[Path, Path]) -> None:
    out, _ = failures
    (result,) = json.loads((out / "metrics.json").read_text())["runs"]
    run = _cell_run(out, "failures")
    df_all = read_traces(run)
    fleet = json.loads((run / "metadata.json").read_text())["driver"]
    for k, policy in enumerate(("armada", "edge-to-cloud")):
        stream = next(s for s in fleet["streams"] if s["policy"] == policy)
        assert [a["target"] for a in stream["applied"]] == result["order"]
        assert all(a["error"] is None for a in stream["applied"])
        df = df_all[df_all.policy == policy]
        for crash in stream["applied"]:
            later = df[(df.dispatch_wall > crash["at"] + 0.5) & (df.outcome == "ok")]
            assert crash["target"] not in set(later.target), (policy, crash)
        # The Spinner declared each crashed node dead: nothing active is left there, and
        # replicas were placed anew on the surviving nodes.
        deployment = fleet["deployments"][min(k, len(fleet["deployments"]) - 1)]
        displaced = {r["task_id"] for r in deployment["settled"]
                     if r["node_id"] in result["order"]}
        active = [r for r in stream["replicas_after"] if r["status"] in ACTIVE]
        assert not {r["node_id"] for r in active} & set(result["order"]), active
        assert displaced and displaced <= {r["task_id"] for r in active}, active
        found = result["policies"][policy]
        assert len(found) == len(result["order"]) + 1
        assert found[0]["users_at_edge"] == 10  # before any failure everyone is at the edge


def test_sdk_loses_no_frame_and_edge_to_cloud_users_end_on_the_cloud(
        failures: tuple[Path, Path]) -> None:
    out, report = failures
    (result,) = json.loads((out / "metrics.json").read_text())["runs"]
    assert sum(e["lost"] for e in result["policies"]["armada"]) == 0
    run = _cell_run(out, "failures")
    df = read_traces(run)
    df = df[df.policy == "edge-to-cloud"]
    stream = next(s for s in fleet_json(run)["streams"] if s["policy"] == "edge-to-cloud")
    crashed = {a["target"]: a["at"] for a in stream["applied"]}
    for user, mine in df[df.outcome == "ok"].groupby("client"):
        first = mine.sort_values("dispatch_wall").iloc[0]
        if first.target in crashed:  # its edge node failed: the cloud from then on
            after = mine[mine.dispatch_wall > crashed[first.target] + 0.5]
            assert set(after.target) <= {"cloud"}, user
    assert "/10 |" in (report / "failures.md").read_text()


# ------------------------------------------------------------------ churn




def _cell_run(out: Path, study: str) -> Path:
    """The run folder of a one-cell study."""
    (cell,) = (out / study / "cells").iterdir()
    return cell / "run"


@pytest.fixture(scope="module")
def churn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    for out, report in _experiment("armada-churn", tmp_path_factory):
        yield _cell_run(out, "churn"), report


def test_churn_keeps_every_user_served(churn: tuple[Path, Path]) -> None:
    run, report = churn
    res = churn_result(run)
    assert res["left_share"] >= 0.3
    assert all(a["error"] is None for a in res["applied"])
    for user, stats in res["per_user"].items():
        assert stats["lost"] == 0 and stats["ok"] == stats["frames"] > 0, (user, stats)
    rejoined = {a["target"] for a in res["applied"] if a["action"] == "join"}
    gone = set(res["left"]) - rejoined
    assert not set(res["replicas_after"].values()) & gone  # nothing left on departed nodes
    df = read_traces(run)
    for action in res["applied"]:
        if action["action"] == "leave" and action["target"] in gone:
            later = df[(df.dispatch_wall > action["at"] + 0.5) & (df.outcome == "ok")]
            assert action["target"] not in set(later.target)
    text = (report / "churn.md").read_text()
    assert "### Continuity per user" in text and "| 0 | u01 |" in text


# ------------------------------------------------------------------ background load


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    yield from _experiment("armada-load", tmp_path_factory)


def test_sdk_moves_the_user_off_a_loaded_node(loaded: tuple[Path, Path]) -> None:
    out, report = loaded
    (run,) = json.loads((out / "metrics.json").read_text())["runs"]
    assert run["episodes"]
    for episode in run["episodes"]:
        # The SDK learns of the load at its next probe round (every 5-7 s) and the loaded
        # node is several times slower than the others, beyond the 20 % switch margin.
        assert episode["moved_after_s"] is not None, episode
        assert episode["moved_to"] != episode["node"]
        if episode["mean_on_loaded_ms"] is not None:
            assert episode["mean_after_move_ms"] < episode["mean_on_loaded_ms"]
    text = (report / "load.md").read_text()
    assert "## Claim A6: under background load" in text and "### Load episodes" in text
