"""Tests of the discrete-event executor (``testbed.sim``): rows, polling, events, CLI.

Runs use the built-in ``continuum`` scenario or small variations of it, shortened to a
few model minutes, so each takes well under a second. ``test_sim_theory.py`` checks the
queueing itself against closed forms.
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest

from nodes.offloading import policies
from nodes.offloading.policies.base import Decision, Policy, TaskInfo, View
from nodes.offloading.tier_server import make_app
from testbed import cli
from testbed.analysis.traces import rows_to_frame
from testbed.runner import materialise
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.systems.offloading.sim_replay import TIER_WINDOW_S, build_model, run_sim, simulate
from workloads.trace import Task


def continuum(**changes: Any) -> Any:
    """The built-in continuum scenario with top-level keys replaced."""
    data = load_scenario("continuum").resolved()
    data.update({"duration": 120.0, **changes})
    return scenario_from_dict(data)


def sim_rows(scenario: Any, tmp_path: Path) -> list[dict[str, Any]]:
    trace = materialise(scenario, tmp_path / "trace")
    return run_sim(scenario, "r1", trace, tmp_path, lambda _line: None)["rows"]


@dataclass
class Recorder(Policy):
    """Sends every task to ``edge`` (else the first target) and keeps every view."""

    name: str = field(default="recorder", init=False)
    views: list[View] = field(default_factory=list)
    seen: list[Any] = field(default_factory=list)
    made: ClassVar[list[Recorder]] = []

    def __post_init__(self) -> None:
        Recorder.made.append(self)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        self.views.append(view)
        return Decision("edge" if "edge" in view.targets else min(view.targets), 1.0)

    def observe(self, outcome: Any) -> None:
        self.seen.append(outcome)



@dataclass
class Oracle(Recorder):
    """A recorder that asks for the true state."""

    name: str = field(default="oracle-test", init=False)
    needs_true_state: bool = field(default=True, init=False)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> type[Recorder]:
    Recorder.made = []
    monkeypatch.setitem(policies.POLICIES, "recorder", Recorder)
    monkeypatch.setitem(policies.POLICIES, "oracle-test", Oracle)
    return Recorder


def test_rows_validate_and_pair_across_policies(tmp_path: Path) -> None:
    rows = sim_rows(continuum(repetitions=2), tmp_path)
    df = rows_to_frame(rows)
    assert set(df["policy"]) == {"random", "jsq"}
    assert (df["outcome"] == "ok").all()
    ok = df[df["outcome"] == "ok"]
    assert (ok["latency_s"] - (ok["network_s"] + ok["wait_s"] + ok["service_s"])).abs().max() \
        < 1e-9
    assert (ok["response_model"] - ok["dispatch_model"] - ok["latency_s"]).abs().max() < 1e-9
    assert ((ok["end_wall"] - ok["server_arrival_wall"]) * 20
            - (ok["wait_s"] + ok["service_s"])).abs().max() < 1e-9
    assert (ok["latency_wall_s"] - (ok["response_wall"] - ok["dispatch_wall"])).abs().max() \
        < 1e-9
    assert (ok["decision_us"] > 0).all()
    # service = size / node speed; network = twice the path delay (+ jitter on cloud)
    speed = ok["target"].map({"edge": 2.0, "cloud": 1.5, "c1-local": 1.0, "c2-local": 1.0})
    assert (ok["service_s"] - ok["size"] / speed).abs().max() < 1e-9
    edge = ok[ok["target"] == "edge"]["network_s"]
    assert edge.sub(0.006).abs().max() < 1e-12
    cloud = ok[ok["target"] == "cloud"]["network_s"]
    assert cloud.between(0.042 - 0.002, 0.042 + 0.002).all()
    local = ok[ok["target"].str.endswith("-local")]
    assert (local["network_s"] == 0).all()
    assert (local["client"] == local["target"].str[:2]).all()
    tasks = {(p, r): g.sort_values("task_id")[["task_id", "client", "arrival_model", "size"]]
             for (p, r), g in df.groupby(["policy", "repetition"])}
    first = next(iter(tasks.values())).reset_index(drop=True)
    for frame in tasks.values():
        pd.testing.assert_frame_equal(frame.reset_index(drop=True), first)


def test_same_seed_same_rows(tmp_path: Path) -> None:
    scenario = continuum(policies=["random"])
    a, b = (sim_rows(scenario, tmp_path / name) for name in ("a", "b"))
    for row in a + b:
        row.pop("decision_us")
    assert a == b
    other = sim_rows(continuum(policies=["random"], seed=2), tmp_path / "c")
    assert [r["target"] for r in other] != [r["target"] for r in a]


def test_views_are_stale_by_the_poll_interval(tmp_path: Path, recorder: type) -> None:
    scenario = continuum(policies=["recorder"])
    rows = sim_rows(scenario, tmp_path)
    assert {r["target"] for r in rows} == {"edge"}
    poll_wall = scenario.executor.poll_interval_ms / 1000.0
    views = [v for policy in recorder.made for v in policy.views]
    assert len(views) == len(rows)
    ages = [t.age_s for v in views for t in v.targets.values()]
    assert max(ages) <= poll_wall + 0.05 and min(ages) >= 0.0
    assert sum(ages) / len(ages) == pytest.approx(poll_wall / 2, rel=0.2)
    late = views[-1].targets
    assert late["edge"].delay_s == pytest.approx(0.006)
    assert late["cloud"].delay_s == pytest.approx(0.042, abs=0.002)
    assert late["c1-local" if "c1-local" in late else "c2-local"].delay_s == 0.0
    # the edge's state is what polls saw: busy at most c, arrival rate counts both clients
    edge_states = [v.targets["edge"] for v in views]
    assert max(s.busy for s in edge_states) <= 4 and max(s.queue for s in edge_states) > 0
    rate = sum(s.arrival_rate for s in edge_states[len(edge_states) // 2:]) \
        / (len(edge_states) - len(edge_states) // 2)
    assert rate == pytest.approx(len(rows) / scenario.duration, rel=0.5)
    assert all(s.service_rate == 2.0 and s.active == 4 and s.c == 4 for s in edge_states)
    # observations come back, one per task, with the estimate the policy made
    outcomes = [o for policy in recorder.made for o in policy.seen]
    assert len(outcomes) == len(rows) and all(o.estimate_s == 1.0 and o.ok for o in outcomes)


def test_true_state_policy_sees_backlog_now(tmp_path: Path, recorder: type) -> None:
    rows = sim_rows(continuum(policies=["oracle-test"]), tmp_path)
    assert all(r["state_age_s"] == 0.0 for r in rows)
    states = [v.targets["edge"] for p in recorder.made for v in p.views]
    assert all(s.backlog is not None and len(s.backlog.in_service) == s.busy
               and len(s.backlog.queued) == s.queue for s in states)
    assert all(0 <= r <= 20 for s in states for r in s.backlog.in_service)


def test_poll_interval_scales_staleness(tmp_path: Path, recorder: type) -> None:
    data = continuum(policies=["recorder"]).resolved()
    data["executor"]["poll_interval_ms"] = 1000.0
    sim_rows(scenario_from_dict(data), tmp_path)
    ages = [t.age_s for p in recorder.made for v in p.views for t in v.targets.values()]
    assert max(ages) > 0.9 and sum(ages) / len(ages) == pytest.approx(0.5, rel=0.2)


def test_crash_fails_tasks_until_join(tmp_path: Path, recorder: type) -> None:
    events = [{"at": 30.0, "action": "crash", "target": "edge"},
              {"at": 60.0, "action": "join", "target": "edge"}]
    data = continuum(policies=["recorder"]).resolved()
    data["events"] = events
    df = rows_to_frame(sim_rows(scenario_from_dict(data), tmp_path))
    errors = df[df["outcome"] == "error"]
    assert len(errors) > 10
    assert errors["arrival_model"].between(0, 60.0).all()
    assert errors["error"].str.contains("edge").all()
    assert errors["response_wall"].notna().all() and errors["latency_s"].isna().all()
    after = df[df["arrival_model"] > 61.0]
    assert (after["outcome"] == "ok").all() and len(after) > 10


def test_link_change_changes_network_time(tmp_path: Path) -> None:
    data = continuum(policies=["jsq"]).resolved()
    data["events"] = [{"at": 60.0, "action": "link_change", "target": "edge-s1",
                       "params": {"delay_ms": 30.0}}]
    df = rows_to_frame(sim_rows(scenario_from_dict(data), tmp_path))
    edge = df[df["target"] == "edge"]
    before = edge[edge["arrival_model"] < 59]["network_s"]
    after = edge[edge["arrival_model"] > 61]["network_s"]
    assert before.max() == pytest.approx(0.006)
    assert after.min() == pytest.approx(0.062)
    # the shift: a request is 31 ms * 20 = 0.62 model s on its way to the edge
    shifted = edge[edge["arrival_model"] > 61]
    wall_shift = shifted["server_arrival_wall"] - shifted["dispatch_wall"]
    assert wall_shift.to_numpy() == pytest.approx(0.031)


def test_link_down_times_out_and_load_slows_compute_tiers(recorder: type) -> None:
    data = continuum(policies=["recorder"]).resolved()
    for svc in data["services"]:
        if svc["name"] == "edge":
            svc["params"]["model"] = "compute"
    data["topology"]["nodes"][3]["cpu"] = 0.5
    data["events"] = [{"at": 20.0, "action": "load", "target": "edge", "params": {"cpu": 0.25}},
                      {"at": 60.0, "action": "link_down", "target": "edge-s1"}]
    scenario = scenario_from_dict(data)
    tasks = [Task(i, "c1", float(i), 1.0, "small") for i in range(100)]
    res = simulate(build_model(scenario), tasks, "recorder", seed=1)
    service = [res.end[i] - res.start[i] for i in range(100)]
    assert service[10] == pytest.approx(0.5)  # size 1 at speed 2
    assert service[30] == pytest.approx(1.0)  # half the node's CPU taken: speed 1
    assert list(res.outcome[61:]) == [3] * 39  # timeouts
    assert "link is down" in res.errors[70]


def test_without_network_shift_arrivals_are_instant() -> None:
    scenario = continuum(policies=["jsq"])
    tasks = [Task(i, "c1" if i % 2 else "c2", i * 0.3, 0.7, "small") for i in range(200)]
    shifted = simulate(build_model(scenario), tasks, "jsq", seed=1)
    flat = simulate(build_model(scenario, shift_network=False), tasks, "jsq", seed=1)
    assert all(flat.server_arrival[i] == tasks[i].arrival for i in range(200))
    assert any(shifted.server_arrival[i] > tasks[i].arrival for i in range(200))


def test_window_matches_the_tier_server_default() -> None:
    assert inspect.signature(make_app).parameters["window_s"].default == TIER_WINDOW_S


def test_cli_runs_continuum_in_simulation(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    code = cli.main(["run", "continuum", "--executor", "sim", "--out", str(out),
                     "--duration", "30"])
    assert code == 0
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["executor"] == "sim" and meta["shift_network"] is True
    assert {r["policy"] for r in meta["replays"]} == {"random", "jsq"}
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == {"random", "jsq"}
    df = pd.read_parquet(out / "traces.parquet")
    assert len(df) == 2 * meta["trace"]["n"] and not math.isnan(df["latency_s"].mean())
    assert "results:" in capsys.readouterr().out
