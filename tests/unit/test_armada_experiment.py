"""The pieces of the Armada selection experiment that need no root: scenario validation of
dotted programs and Armada scenarios, address references in service parameters, and the
selection scoring."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.emulation.executor import EmulatedTopology
from testbed.errors import EmulationError, ScenarioError, TestbedError
from testbed.runner import run_scenario
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.systems.armada.selection_experiment import matrix_table, score_selection

ARMADA: dict[str, Any] = {
    "name": "mini-armada",
    "topology": {
        "nodes": [{"name": "u1", "role": "client"}, {"name": "sw", "role": "switch"},
                  {"name": "ctl", "role": "server"}],
        "links": [{"a": "u1", "b": "sw"}, {"a": "ctl", "b": "sw"}],
    },
    "services": [{"name": "beacon", "program": "armada.beacon", "node": "ctl",
                  "params": {"app_manager": "http://127.0.0.1:8001",
                             "spinner": "http://127.0.0.1:8002"}}],
    "workload": {"generator": "frame-stream", "params": {"fps": 1}},
    "policies": [],
    "duration": 5,
}


def armada(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(ARMADA)
    doc.update(copy.deepcopy(changes))
    return doc


def test_dotted_programs_of_nodes_subpackages_are_accepted() -> None:
    scenario = scenario_from_dict(armada())
    assert scenario.services[0].program == "armada.beacon"
    assert scenario.policies == ()
    assert scenario_from_dict(scenario.resolved()) == scenario


@pytest.mark.parametrize("program", ["armada.nope", "armada..beacon", "Armada.beacon",
                                     ".armada", "armada.beacon."])
def test_bad_dotted_programs_are_refused(program: str) -> None:
    doc = armada(services=[{**ARMADA["services"][0], "program": program}])
    with pytest.raises(ScenarioError, match=r"services\[0\]\.program"):
        scenario_from_dict(doc)


def test_without_a_beacon_clients_need_a_task_server_of_their_own_system() -> None:
    spinner = {"name": "spinner", "program": "armada.spinner", "node": "ctl"}
    with pytest.raises(ScenarioError, match="task server that client u1"):
        scenario_from_dict(armada(services=[spinner], policies=["random"]))
    tier = {"name": "edge", "program": "tier_server", "node": "ctl", "port": 9000, "tier": "edge",
            "params": {"workers": 1, "mu": 1.0}}
    with pytest.raises(ScenarioError, match="programs of one system"):
        scenario_from_dict(armada(services=[spinner, tier], policies=["random"]))


def test_builtin_armada_selection_loads_and_the_simulator_is_refused(tmp_path: Path) -> None:
    scenario = load_scenario("armada-selection")
    assert not scenario.task_servers()
    assert {s.node for s in scenario.services if s.program == "armada.captain"} == \
        {"ea", "eb", "ec", "cloud"}
    cores = sum(n.cpu for n in scenario.topology.nodes if n.cpu is not None) * 2
    assert cores <= 1.5
    with pytest.raises(TestbedError, match="replays scenarios built by armada-fleet only"):
        run_scenario(scenario, out=tmp_path / "run", executor="sim")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_address_references_expand_to_host_addresses() -> None:
    net = SimpleNamespace(hosts={"ctl": None, "ea": None},
                          ip=lambda node: {"ctl": "10.0.0.1", "ea": "10.0.0.2"}[node])
    topo = EmulatedTopology(scenario=None, infra=None, net=net, workdir=Path("."))
    assert topo.expand("http://{ip:ctl}:8000") == "http://10.0.0.1:8000"
    assert topo.expand("{ip:ea}") == "10.0.0.2"
    assert topo.expand("plain {ip:Bad}") == "plain {ip:Bad}"
    with pytest.raises(EmulationError, match="names no host"):
        topo.expand("{ip:zz}")


def _samples(ms: list[float]) -> list[dict[str, float]]:
    return [{"latency_ms": v, "processing_ms": 1.0, "queue_ms": 0.0} for v in ms]


def test_score_selection_regret_and_tolerance() -> None:
    table = matrix_table({
        "u1": {"a": _samples([20, 21, 22, 23]), "b": _samples([24, 25, 25, 26]),
               "c": _samples([90, 95, 100, 100])},
    })
    assert table["u1"]["a"]["median_ms"] == pytest.approx(21.5)
    best = score_selection(table, {"u1": "a"})["u1"]
    assert best["correct"] and best["regret_ms"] == 0.0
    near = score_selection(table, {"u1": "b"})["u1"]
    assert near["best"] == "a" and near["regret_ms"] == pytest.approx(3.5)
    assert near["correct"]  # within 5 ms + the cells' measured spread
    wrong = score_selection(table, {"u1": "c"})["u1"]
    assert not wrong["correct"] and wrong["regret_ms"] > 70
    assert score_selection(table, {})["u1"]["correct"] is False
