"""The two confounders of the offloading comparisons as scenario settings both executors
honour: the state polling interval in model time (``executor.poll_interval_model_s``) and
the tier servers' arrival-rate window in model time (``window_model_s``); and the
simulator refusing, as the tier server does, a task longer than the task timeout."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from nodes.config import parse_argv
from nodes.offloading.tier_server import app_from_params
from nodes.offloading.tier_server_config import TierServerParams
from testbed.errors import ScenarioError
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.systems.offloading.sim import ERROR, OK, Simulation
from testbed.systems.offloading.sim_replay import build_model, simulate
from tests.secured import AUTH, secured
from workloads.trace import Task


def continuum(executor: dict[str, Any] | None = None, **changes: Any) -> Any:
    data = load_scenario("continuum").resolved()
    data.update(changes)
    if executor is not None:
        data["executor"] = {**data["executor"], **executor}
    return scenario_from_dict(data, source="s.yaml")


@pytest.mark.parametrize("time_scale", [4, 10, 20])
def test_a_poll_interval_in_model_time_is_the_same_staleness_at_every_time_scale(
        time_scale: float) -> None:
    scenario = continuum({"poll_interval_model_s": 0.5}, time_scale=time_scale)
    wall = scenario.executor.poll_interval_wall_s(scenario.time_scale)
    assert wall == pytest.approx(0.5 / time_scale)  # what the dispatchers are given
    model = build_model(scenario)
    assert model.poll_interval_s * model.time_scale == pytest.approx(0.5)
    assert scenario_from_dict(scenario.resolved()) == scenario
    # without it the wall interval holds and model-time staleness follows the time scale
    plain = continuum(time_scale=time_scale)
    assert plain.executor.poll_interval_wall_s(time_scale) == 0.1


def test_a_poll_interval_below_the_timing_floor_is_refused() -> None:
    with pytest.raises(ScenarioError) as err:
        continuum({"poll_interval_model_s": 0.01}, time_scale=20)  # 0.5 ms of wall time
    assert err.value.path == "executor.poll_interval_model_s"
    assert "timing floor" in err.value.expected


async def test_the_tier_server_turns_a_model_window_into_its_wall_window() -> None:
    argv = ["--workers", "2", "--speed", "1", "--time-scale", "20", "--mu", "1",
            "--window-model-s", "40"]
    params = parse_argv(TierServerParams, argv, "tier_server", "")
    app = secured(app_from_params(params, ("127.0.0.1", 0)))
    async with TestClient(TestServer(app), headers=AUTH) as client:
        state = await (await client.get("/state")).json()
    assert state["window_s"] == pytest.approx(2.0)  # 40 model s at time_scale 20


def test_the_simulator_uses_each_servers_window() -> None:
    data = load_scenario("continuum").resolved()
    for svc in data["services"]:
        if svc["name"] == "edge":
            svc["params"]["window_model_s"] = 20.0
        if svc["name"] == "cloud":
            svc["params"]["window_s"] = 3.0
    scenario = scenario_from_dict(data)
    model = build_model(scenario)
    windows = {s.name: s.window_model_s for s in model.servers}
    assert windows["edge"] == 20.0
    assert windows["cloud"] == 3.0 * scenario.time_scale
    assert windows["c1-local"] == 10.0 * scenario.time_scale  # the tier server's default
    sim = Simulation(model, [], [], [], [], [])
    assert {s.spec.name: s.window for s in sim.servers} == windows


def test_the_simulator_refuses_a_task_longer_than_the_timeout_as_the_server_does() -> None:
    scenario = continuum(policies=["edge-first"], task_timeout=5.0)
    tasks = [Task(0, "c1", 0.0, 9.0, "big"), Task(1, "c1", 1.0, 10.1, "big")]
    res = simulate(build_model(scenario), tasks, "edge-first", seed=1)  # edge speed 2
    assert res.outcome[0] == OK
    assert res.outcome[1] == ERROR
    assert "task timeout of 5 model s" in res.errors[1]
    assert res.server_arrival[1] != res.server_arrival[1]  # NaN: never counted as arriving
