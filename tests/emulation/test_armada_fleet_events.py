"""Armada's fleet behaviour under every kind of fleet event, in one emulated run.

``tests/emulation/scenarios/armada-fleet-events.yaml``: a CPU burner on the node serving
u01, a crash of e01 and the volunteer e04 leaving and rejoining, while six users stream
through the SDK and then, from a fresh deployment on the restored fleet, through
Edge-to-Cloud. The fleet experiments (``armada-scalability``, ``-failures``, ``-churn``,
``-load``) rest on what is checked here: both policies replay the same frames, every
event lands, crashed and departed nodes serve nothing while gone and the Spinner
re-places their replicas, the SDK loses no frame and moves a user off a loaded node,
Edge-to-Cloud starts on the nearest replica and falls back to the cloud for good. The
simulator runs the same scenario too, as ``armada-executors`` runs a fleet on both
executors: the same trace and seeds, every frame and event of both policies. Their
metric functions read this run as they read their own cells; their claims are
unit-tested on hand-made numbers (``tests/unit/test_armada_reports.py``) and the generic
study -> metrics -> claims -> report path on the emulator by
``tests/emulation/test_experiment_emulated.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodes.armada.app_manager import ACTIVE
from nodes.armada.geo import haversine_km
from testbed.analysis.traces import read_traces
from testbed.runner import run_scenario
from testbed.scenario import load_scenario
from testbed.systems.armada.builders import Fleet, fleet_layout
from testbed.systems.armada.churn_experiment import churn_result
from testbed.systems.armada.failures_experiment import failure_intervals
from testbed.systems.armada.load_experiment import load_episodes
from testbed.systems.armada.scalability_experiment import scalability_point

pytestmark = pytest.mark.emulation
SCENARIO = Path(__file__).parent / "scenarios" / "armada-fleet-events.yaml"
POLICIES = ("armada", "edge-to-cloud")
USERS = 6


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = load_scenario(SCENARIO)
    assert scenario.policies == POLICIES
    return run_scenario(scenario, out=tmp_path_factory.mktemp("fleet-events") / "run",
                        progress=lambda _line: None)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same scenario on the simulator (seconds)."""
    return run_scenario(load_scenario(SCENARIO), executor="sim", plots=False,
                        out=tmp_path_factory.mktemp("fleet-events-sim") / "run",
                        progress=lambda _line: None)


def _driver(run: Path) -> dict[str, Any]:
    return json.loads((run / "metadata.json").read_text())["driver"]


def _stream(run: Path, policy: str) -> dict[str, Any]:
    return next(s for s in _driver(run)["streams"] if s["policy"] == policy)


def _applied(stream: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [a for a in stream["applied"] if a["action"] == action]


def test_both_policies_replay_the_same_frames_and_every_event_lands(run: Path) -> None:
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["teardown_errors"] == [] and meta["failed"] == []
    df = read_traces(run)
    per_policy = df.groupby("policy").task_id.apply(sorted)
    assert sorted(per_policy.index) == sorted(POLICIES)
    assert len({tuple(ids) for ids in per_policy}) == 1
    for policy in POLICIES:
        stream = _stream(run, policy)
        assert all(a["error"] is None for a in stream["applied"]), stream["applied"]
        assert [a["target"] for a in _applied(stream, "crash")] == ["e01"]
        assert [a["target"] for a in _applied(stream, "leave")] == ["e04"]
        assert [a["target"] for a in _applied(stream, "join")] == ["e04"]
        assert len(_applied(stream, "load")) == 2


def test_crashed_and_departed_nodes_serve_nothing_while_gone(run: Path) -> None:
    df = read_traces(run)
    driver = _driver(run)
    for policy in POLICIES:
        stream = _stream(run, policy)
        ok = df[(df.policy == policy) & (df.outcome == "ok")]
        (crash,) = _applied(stream, "crash")
        assert "e01" not in set(ok[ok.dispatch_wall > crash["at"] + 0.5].target), policy
        (leave,), (join,) = _applied(stream, "leave"), _applied(stream, "join")
        away = ok[(ok.dispatch_wall > leave["at"] + 0.5) & (ok.dispatch_wall < join["at"])]
        assert "e04" not in set(away.target), policy
        # The Spinner declared e01 dead: nothing active is left there, and its replicas
        # were placed anew on the surviving nodes.
        deployment = driver["deployments"][stream["deployment"]]
        displaced = {r["task_id"] for r in deployment["settled"] if r["node_id"] == "e01"}
        active = [r for r in stream["replicas_after"] if r["status"] in ACTIVE]
        assert "e01" not in {r["node_id"] for r in active}, active
        assert displaced and displaced <= {r["task_id"] for r in active}, active


def test_the_sdk_loses_no_frame_and_keeps_every_user_served(run: Path) -> None:
    result = churn_result(run)  # the SDK's stream is the run's first
    assert result["left"] == ["e01", "e04"] and result["rejoined"] == ["e04"]
    assert len(result["per_user"]) == USERS
    for user, stats in result["per_user"].items():
        assert stats["lost"] == 0 and stats["ok"] == stats["frames"] > 0, (user, stats)


def test_the_sdk_moves_the_user_off_the_loaded_node(run: Path) -> None:
    stream = _stream(run, "armada")
    rows = read_traces(run).query("policy == 'armada'").to_dict("records")
    (episode,) = load_episodes(_applied(stream, "load"), rows)
    # The SDK learns of the load at its next probe round (every 5-7 s) and the loaded
    # node is several times slower than the others, beyond the 20 % switch margin.
    assert episode["moved_after_s"] is not None, episode
    assert episode["moved_to"] != episode["node"]
    if episode["mean_on_loaded_ms"] is not None:
        assert episode["mean_after_move_ms"] < episode["mean_on_loaded_ms"]


def test_edge_to_cloud_starts_nearest_and_falls_back_to_the_cloud_for_good(run: Path) -> None:
    driver = _driver(run)
    stream = _stream(run, "edge-to-cloud")
    layout = fleet_layout(Fleet.from_params(driver["fleet"]))
    settled = driver["deployments"][stream["deployment"]]["settled"]
    running = {r["node_id"] for r in settled if r["status"] == "running"} - {"cloud"}
    for j, (_, lat, lon) in enumerate(layout["users"]):
        nearest = min(running, key=lambda n: haversine_km(
            lat, lon, *layout["sites"][int(n[1:]) - 1]))
        assert stream["picks"][f"u{j + 1:02d}"] == nearest
    df = read_traces(run)
    ok = df[(df.policy == "edge-to-cloud") & (df.outcome == "ok")]
    (crash,) = _applied(stream, "crash")
    for user, mine in ok.groupby("client"):
        if mine.sort_values("dispatch_wall").iloc[0].target == "e01":
            after = mine[mine.dispatch_wall > crash["at"] + 0.5]
            assert set(after.target) <= {"cloud"}, user


def test_the_fleet_experiments_metrics_read_the_run(run: Path) -> None:
    point = scalability_point(run)
    assert (point["nodes"], point["users"]) == (5, USERS)
    assert set(point["policies"]) == set(POLICIES)
    assert all(p["mean_ms"] is not None and p["order"] == k
               for k, p in enumerate(point["policies"].values()))
    stream = _stream(run, "armada")
    phases = failure_intervals(run, "armada")
    assert len(phases) == len(stream["applied"]) + 1
    assert phases[0]["users_at_edge"] == USERS  # before any event everyone is at the edge


def test_the_simulator_replays_the_same_frames_and_events(run: Path, sim_run: Path) -> None:
    emulated, simulated = (json.loads((r / "metadata.json").read_text())
                           for r in (run, sim_run))
    assert (emulated["executor"], simulated["executor"]) == ("emulation", "sim")
    assert simulated["failed"] == [] and simulated["seeds"] == emulated["seeds"]
    assert simulated["trace"]["sha256"] == emulated["trace"]["sha256"]
    frames = {r: read_traces(r).groupby("policy").task_id.apply(sorted).to_dict()
              for r in (run, sim_run)}
    assert frames[sim_run] == frames[run]
    for policy in POLICIES:
        emulated_stream, simulated_stream = _stream(run, policy), _stream(sim_run, policy)
        assert simulated_stream["ok"] == simulated_stream["frames"] > 0
        assert simulated_stream["mean_ms"] > 0
        # the node a load lands on is whichever serves u01 then, each executor's own pick
        assert ([_event(a) for a in simulated_stream["applied"]]
                == [_event(a) for a in emulated_stream["applied"]]), policy


def _event(applied: dict[str, Any]) -> tuple[str, str | None, Any]:
    target = None if applied["action"] == "load" else applied["target"]
    return applied["action"], target, applied["error"]
