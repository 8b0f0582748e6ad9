"""Armada's scenario builders, built-in scenarios and pure selection rules (no root).

The built-in fleet scenarios must stay what the experiments run at their small size, so
they are checked against the experiments' own plans (failure order, churn schedule).
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodes.armada.baselines import (
    baseline_choice,
    check_baseline,
    fails_over_to_cloud,
    reconnect_order,
)
from nodes.armada.sdk.choice import Candidate
from testbed.errors import ScenarioError
from testbed.registry import get_system, resolve
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.study.spec import load_study
from testbed.systems.armada.builders import (
    PATH_PARAMS,
    Fleet,
    anchor_paths,
    armada_fleet,
    armada_storage,
    volunteer_nodes,
)
from testbed.systems.armada.churn_experiment import churn_schedule
from testbed.systems.armada.driver import FrameDriver, StorageDriver, make_driver
from testbed.systems.armada.failures_experiment import failure_order
from testbed.systems.armada.fleet import (
    StreamPlan,
    fleet_of,
    fleet_scenario,
)
from testbed.systems.armada.load_experiment import load_schedule
from testbed.systems.armada.model import replay_seed, user_seed

ARMADA_STUDIES = Path(__file__).resolve().parents[2] / "testbed/systems/armada/studies"
BUILT_IN = ("armada-scalability", "armada-failures", "armada-churn", "armada-load",
            "armada-storage", "armada-selection", "armada-failover")


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_scenarios_load_with_registered_policies(name: str) -> None:
    scenario = load_scenario(name)
    system = get_system("armada")
    assert scenario.system == "armada"
    assert scenario.policies and set(scenario.policies) <= set(system.policies)
    assert "issue" not in Path(scenario.source).read_text()  # product text, not process
    cores = sum(n.cpu for n in scenario.topology.nodes if n.cpu is not None) * 2
    assert cores <= 1.5


@pytest.mark.parametrize(("size", "nodes", "failures", "interval"), [("small", 5, 2, 10.0),
                                                                    ("full", 6, 5, 15.0)])
def test_the_failures_study_files_crash_in_the_seeded_order(size: str, nodes: int,
                                                            failures: int,
                                                            interval: float) -> None:
    """Each size's study file crashes :func:`failure_order`'s nodes every ``interval``
    (the small one is the built-in scenario) on the fleet of stronger nodes."""
    study = load_study(ARMADA_STUDIES / "failures" / size / "failures.yaml")
    scenario = study.scenario(study.points()[0], 0)
    fleet = fleet_of(scenario)
    assert fleet == Fleet(nodes=nodes, users=10, cloud=True, fps=2.0,
                          node_cores=(0.12, 0.15, 0.18), replica_cpu=0.06,
                          duration=(failures + 1) * interval)
    order = failure_order(fleet.edge_names, failures, fleet.seed)
    assert [(e.at, e.action, e.target) for e in scenario.events] == [
        ((k + 1) * interval, "crash", node) for k, node in enumerate(order)]
    assert scenario.policies == ("armada", "edge-to-cloud")


@pytest.mark.parametrize(("size", "leave_share", "rejoin_share"), [("small", 0.34, 0.5),
                                                                   ("full", 0.42, 0.6)])
def test_the_churn_study_files_hold_the_seeded_schedule(size: str, leave_share: float,
                                                        rejoin_share: float) -> None:
    """Each size's study file writes out :func:`churn_schedule` of its fleet (the small
    one is the built-in scenario), leaving at least 30 % of the nodes, volunteers only."""
    study = load_study(ARMADA_STUDIES / "churn" / size / "churn.yaml")
    scenario = study.scenario(study.points()[0], 0)
    fleet = fleet_of(scenario)
    assert fleet is not None and fleet.volunteer_share == 0.67
    actions = churn_schedule(fleet.edge_names, volunteer_nodes(fleet), fleet.duration,
                             leave_share, rejoin_share, fleet.seed)
    assert [(e.at, e.action, e.target) for e in scenario.events] == [
        (a.offset_s, a.action, a.target) for a in actions]
    left = {e.target for e in scenario.events if e.action == "leave"}
    assert len(left) / fleet.nodes >= 0.3 and left <= set(volunteer_nodes(fleet))


@pytest.mark.parametrize(("size", "episodes", "duration"), [("small", 1, 26.0),
                                                             ("full", 4, 110.0)])
def test_the_load_study_files_hold_the_seeded_schedule(size: str, episodes: int,
                                                       duration: float) -> None:
    """Each size's study file writes out :func:`load_schedule` of its fleet's seed, and
    the built-in scenario is the small study's fleet."""
    study = load_study(ARMADA_STUDIES / "load" / size / "load.yaml")
    fleet = fleet_of(study.scenario(study.points()[0], 0))
    assert fleet is not None and fleet.duration == duration
    actions = load_schedule(episodes, 14.0 if size == "small" else 15.0, duration,
                            fleet.seed, 0.5)
    assert list(fleet.actions) == [a.to_event() for a in actions]
    if size == "small":
        builtin = fleet_of(load_scenario("armada-load"))
        assert builtin == fleet


def test_built_in_load_scenario_streams_the_small_schedule() -> None:
    scenario = load_scenario("armada-load")
    stream = StreamPlan.of_scenario(scenario, "armada")
    assert [(a.offset_s, a.target) for a in stream.actions] == [
        (4.47, "serving:u01"), (18.47, "last:load")]


def test_fleet_actions_name_a_moving_target_and_are_checked() -> None:
    with pytest.raises(ValueError, match=r"params\.actions\[0\]\.target: expected serving"):
        armada_fleet({"nodes": 3, "users": 2,
                      "actions": [{"at": 1, "action": "crash", "target": "e01"}]})
    with pytest.raises(ValueError, match=r"params\.actions\[0\]\.params\.cpu"):
        armada_fleet({"nodes": 3, "users": 2, "actions": [
            {"at": 1, "action": "load", "target": "serving:u01", "params": {"cpu": 2}}]})


def test_a_fleet_round_trips_through_its_scenario() -> None:
    fleet = Fleet(nodes=5, users=7, seed=4, cloud=True, node_cores=(0.1, 0.12))
    scenario = fleet_scenario(fleet, "mine", ["armada", "random"])
    assert fleet_of(scenario) == fleet
    assert scenario.policies == ("armada", "random")
    assert {n.name for n in scenario.clients()} == set(fleet.user_names)
    assert fleet_of(load_scenario("armada-selection")) is None  # written out by hand


def test_the_file_overrides_the_builders_keys() -> None:
    doc = {"name": "x", "description": "mine", "policies": ["armada"], "duration": 3,
           "build": {"builder": "armada-fleet", "params": {"nodes": 3, "users": 2}}}
    scenario = scenario_from_dict(doc)
    assert scenario.description == "mine" and scenario.duration == 3
    assert armada_fleet({"nodes": 3, "users": 2})["duration"] == 20.0


@pytest.mark.parametrize("params,message", [
    ({"users": 2}, r"params\.nodes: expected an integer in \[1, 9999\], found nothing"),
    ({"nodes": 3.5, "users": 2}, r"params\.nodes: expected an integer"),
    ({"nodes": 3, "users": 0}, r"params\.users: expected an integer in \[1, 9999\], found 0"),
    ({"nodes": 3, "users": 2, "cloud": "yes"}, r"params\.cloud: expected true or false"),
    ({"nodes": 3, "users": 2, "fps": 0}, r"params\.fps: expected a finite number > 0"),
    ({"nodes": 3, "users": 2, "frame": [240]}, r"params\.frame: expected 2 integers"),
    ({"nodes": 3, "users": 2, "node_cores": []}, r"params\.node_cores: expected a non-empty"),
    ({"nodes": 3, "users": 2, "volunteer_share": 1.5}, r"params\.volunteer_share"),
    ({"nodes": 3, "users": 2, "max_replicas": 0}, r"params\.max_replicas"),
])
def test_bad_fleet_params_name_the_field(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        armada_fleet(params)


def test_the_loader_reports_builder_errors_against_the_file() -> None:
    doc = {"name": "x", "policies": ["nearest"],
           "build": {"builder": "armada-storage", "params": {"sites": 9}}}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(doc, source="s.yaml")
    assert str(err.value).startswith("s.yaml: build.params.sites: expected an integer in [3, 6]")


def test_storage_folders_are_relative_until_anchored() -> None:
    doc = armada_storage({"sites": 3})
    folders = [s["params"][k] for s in doc["services"] for k in PATH_PARAMS
               if k in s["params"]]
    assert folders and not any(f.startswith("/") for f in folders)
    anchored = anchor_paths(doc, "/run/work/")
    assert all(s["params"][k].startswith("/run/work/") for s in anchored["services"]
               for k in PATH_PARAMS if k in s["params"])
    docker = armada_storage({"sites": 3, "cargo_runtime": "docker"})
    cargos = [s for s in docker["services"] if s["program"] == "armada.cargo"]
    assert {s["node"] for s in cargos} == {"c01", "c02", "c03"}
    assert all(s["params"]["data_dir"].startswith("/") for s in cargos)  # its volume


def test_events_become_wall_actions_of_a_stream() -> None:
    scenario = load_scenario("armada-failures").with_overrides(time_scale=2)
    plan = StreamPlan.of_scenario(scenario, "edge-to-cloud")
    assert plan.duration_s == 15.0
    assert [(a.offset_s, a.action, a.target) for a in plan.actions] == [
        (5.0, "crash", "e03"), (10.0, "crash", "e04")]
    with pytest.raises(ValueError, match="policy: expected one of"):
        StreamPlan.of_scenario(scenario, "nearest")


def test_client_seeds_pair_the_policies_of_a_repetition() -> None:
    scenario = load_scenario("armada-scalability")
    seed = resolve(get_system("armada").policy_seed)
    assert seed(scenario, 0) == replay_seed(scenario, 0) == scenario.seed * 1000
    assert [user_seed(scenario, 1, i) for i in range(3)] == [seed(scenario, 1) + i
                                                             for i in range(3)]
    assert seed(scenario, 0) != seed(scenario, 1)


def test_the_driver_follows_what_the_scenario_runs() -> None:
    assert isinstance(make_driver(load_scenario("armada-storage")), StorageDriver)
    frames = make_driver(load_scenario("armada-scalability"))
    assert isinstance(frames, FrameDriver) and frames.fleet is not None


def test_registration_and_builders_import_no_framework() -> None:
    code = ("import sys, testbed.systems.armada, testbed.systems.armada.builders; "
            "from testbed.registry import systems; systems(); "
            "print(sorted(m for m in ('aiohttp', 'mininet', 'docker', 'requests', "
            "'matplotlib', 'pandas', 'cv2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ pure selection rules


def _listed(*nodes: str) -> list[Candidate]:
    return [Candidate(f"t-{n}", f"http://{n}", n) for n in nodes]


def test_geo_nearest_and_edge_to_cloud_rules() -> None:
    working = _listed("a", "b", "cloud")
    far = {"t-a": 5.0, "t-b": 1.0, "t-cloud": 200.0}
    rng = random.Random(0)
    assert baseline_choice("geo-nearest", working, None, far, (), False, rng).node_id == "b"
    assert baseline_choice("edge-to-cloud", working, "t-b", far, {"cloud"}, False,
                           rng).node_id == "b"
    assert baseline_choice("edge-to-cloud", working, "t-b", far, {"cloud"}, True,
                           rng).node_id == "cloud"
    assert baseline_choice("edge-to-cloud", working[:2], None, far, {"cloud"}, True,
                           rng) is None
    assert fails_over_to_cloud("edge-to-cloud", "a", {"cloud"})
    assert not fails_over_to_cloud("edge-to-cloud", "cloud", {"cloud"})
    assert not fails_over_to_cloud("geo-nearest", "a", {"cloud"})


def test_random_rule_keeps_a_working_choice_and_draws_seeded() -> None:
    working = _listed("a", "b", "c")
    assert baseline_choice("random", working, "t-c", {}, (), False,
                           random.Random(1)).task_id == "t-c"
    draws = [baseline_choice("random", working, None, {}, (), False, random.Random(s)).task_id
             for s in range(30)]
    again = [baseline_choice("random", list(reversed(working)), None, {}, (), False,
                             random.Random(s)).task_id for s in range(30)]
    assert draws == again and len(set(draws)) == 3  # seeded, order-free, uniform support
    with pytest.raises(ValueError, match="policy: expected one of geo-nearest"):
        check_baseline("armada")


def test_reconnect_skips_failed_servers_in_the_managers_order() -> None:
    listed = [{"url": "http://a"}, {"url": "http://b"}, {"url": "http://c"}]
    assert reconnect_order(listed, {"http://a"}) == listed[1:]
    assert reconnect_order(listed, {"http://a", "http://b", "http://c"}) == []


def test_a_simulator_only_fleet_lifts_the_host_bound_and_emulation_refuses_it() -> None:
    from testbed.errors import TestbedError
    from testbed.systems.armada.run_checks import check_run

    big = {"nodes": 120, "users": 150, "node_cores": [1.0, 2.0]}
    with pytest.raises(ValueError, match="params.node_cores: expected at most 1.5 cores .* "
                                         "host_cores: null"):
        armada_fleet(big)
    doc = armada_fleet({**big, "host_cores": None})
    names = [n["name"] for n in doc["topology"]["nodes"]]
    assert {"e001", "e120", "u001", "u150"} <= set(names)  # names widen past 99
    scenario = scenario_from_dict({"name": "paper", "policies": ["armada"],
                                   "build": {"builder": "armada-fleet",
                                             "params": {**big, "host_cores": None}}})
    check_run(scenario, "sim")  # the simulator takes it
    with pytest.raises(TestbedError, match="at most 1.5 cores over every node for emulation"):
        check_run(scenario, "emulation")
    assert Fleet.from_params({"nodes": 3, "users": 2}).edge_names == ["e01", "e02", "e03"]
