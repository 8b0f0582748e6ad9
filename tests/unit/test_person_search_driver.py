"""The person-search emulation driver's pure parts: the built scenario, how the ground
truth is split among the edge servers, trace rows and the report's reductions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.analysis.traces import rows_to_frame
from testbed.scenario import Scenario
from testbed.scenario.loader import scenario_from_dict
from testbed.study.spec import load_study
from testbed.systems.person_search.builders import edge_name
from testbed.systems.person_search.driver import overheads, run_rows, world_truths
from testbed.systems.person_search.emulation_tables import reductions
from workloads.person_search import build_world

STUDIES = Path(__file__).resolve().parents[2] / "testbed/systems/person_search/studies"


def search_scenario(servers: int, targets: int = 1000, movement: str = "normal",
                    time_scale: float = 500.0, seed: int = 0) -> Scenario:
    """The ``person-search`` builder's scenario, loaded as a scenario file would be."""
    params: dict[str, Any] = {"servers": servers, "targets": targets, "movement": movement,
                              "time_scale": time_scale, "seed": seed}
    return scenario_from_dict({"name": "person-search",
                               "build": {"builder": "person-search", "params": params}})


@pytest.mark.parametrize("servers", [10, 50])
def test_scenario_has_a_coordinator_and_one_data_server_per_edge_node(servers: int) -> None:
    scen = search_scenario(servers, 100, "straight", time_scale=200.0, seed=3)
    programs = [s.program for s in scen.services]
    assert programs.count("person_search.coordinator") == 1
    assert programs.count("person_search.edge_server") == servers
    indices = sorted(int(s.params["server_index"]) for s in scen.services
                     if s.program == "person_search.edge_server")
    assert indices == list(range(servers))
    assert scen.workload.params["movement"] == "straight"
    assert scen.time_scale == 200.0
    assert {n.name for n in scen.topology.nodes} >= {edge_name(s) for s in range(servers)}


def test_scenario_links_are_seeded() -> None:
    def delays(seed: int) -> list[float]:
        return [lk.delay_ms for lk in search_scenario(10, seed=seed).topology.links]

    assert delays(1) == delays(1)
    assert delays(1) != delays(2)


def test_every_target_is_on_exactly_one_server_per_slot() -> None:
    world = build_world({"servers": 7, "targets": 40, "movement": "normal"}, 5)
    truths = world_truths(world.holder, 7)
    assert len(truths) == 7
    for j in range(1, world.slots + 1):
        seen = sorted(k for t in truths for k in t[str(j)])
        assert seen == list(range(40))
        for s, t in enumerate(truths):
            assert all(int(world.holder[k, j]) == s for k in t[str(j)])


def _analysis(search: int, step: int, server: int, sent: float, admitted: float,
              ended: float, answered: float, k: int = 0) -> dict:
    return {"search": search, "step": step, "item": server * 5 + step, "server": server,
            "sent_wall": sent, "admitted_wall": admitted, "ended_wall": ended,
            "answered_wall": answered, "running_at_admission": k,
            "coordinator_load": k, "factor": 1.0, "present": False, "decision_us": 10.0}


def test_rows_split_a_search_into_network_and_service_time() -> None:
    t0 = 1000.0
    result = {"requests": [{"search": 0, "analyses": 2, "response_wall_s": 0.25,
                            "response_model_s": 50.0, "found_item": 9}],
              "analyses": [_analysis(0, 1, 1, t0 + 0.12, t0 + 0.13, t0 + 0.23, t0 + 0.25),
                           _analysis(0, 0, 2, t0, t0 + 0.01, t0 + 0.11, t0 + 0.12, k=3)]}
    names = [edge_name(s) for s in range(3)]
    rows = run_rows(result, "r", "random", 0, t0, 200.0, 10.0, "cloud", names)
    (row,) = rows
    assert row["target"] == edge_name(1) and row["step"] == 1 and row["item"] == "9"
    assert row["client"] == "cloud"
    assert row["queue_at_arrival"] == 3
    assert row["network_s"] == pytest.approx(200.0 * (0.02 + 0.03))
    assert row["service_s"] == pytest.approx(50.0 - 10.0)
    assert row["decision_us"] == 20.0
    df = rows_to_frame(rows)  # the trace schema accepts it
    assert len(df) == 1
    ov = overheads(result, tc_wall=0.05)
    assert ov["round_trip_overhead_ms_mean"] == pytest.approx(25.0)
    # durations 0.10 s against the rule's 0.05 x (k + 1): 0.2 (k = 3) and 0.05 (k = 0)
    assert ov["timer_lateness_ms_mean"] == pytest.approx(((0.1 - 0.2) + (0.1 - 0.05)) / 2 * 1e3)


def test_reductions_are_relative_to_random_of_the_same_point() -> None:
    results = [{"servers": 10, "movement": "normal", "policy": p, "total": t}
               for p, t in (("random", 100.0), ("priority", 40.0), ("load-balance", 95.0))]
    results.append({"servers": 50, "movement": "normal", "policy": "random", "total": 7.0})
    # another world of the first point: compared with its own random run
    results += [{"servers": 10, "movement": "normal", "policy": p, "total": t,
                 "replication": 1} for p, t in (("random", 50.0), ("priority", 40.0))]
    red = reductions(results, "total")
    assert red[(10, "normal", 0)]["priority"] == pytest.approx(0.6)
    assert red[(10, "normal", 0)]["load-balance"] == pytest.approx(0.05)
    assert red[(10, "normal", 1)]["priority"] == pytest.approx(0.2)
    assert red[(50, "normal", 0)] == {"random": 0.0}


def test_the_full_emulated_study_covers_the_paper_s_points() -> None:
    study = load_study(STUDIES / "emulation" / "full" / "emulation.yaml")
    scale = {}
    for point in study.points():
        values = dict(point.values)
        scale[values["build.params.servers"]] = values["build.params.time_scale"]
    assert set(scale) >= {10, 50} and scale[50] < scale[10]
    assert dict(study.fixed)["build.params.targets"] == 1000
    assert study.replications == 10 and set(study.executors) == {"emulation", "sim"}
