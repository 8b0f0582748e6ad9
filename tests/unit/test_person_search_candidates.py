"""The candidate-set rule of person search as a scenario option, on both executors.

Two hand-made worlds where the rules ``unanalysed`` and ``after-discovery`` differ by a
known number of analyses (worked out by hand below, from Eq. 1-4), then the same rule
through every path that carries it: Algorithm 1 alone, the simulator, a scenario's
policy entry (loader check, ``testbed run --executor sim``, the emulation driver's
request body) and the coordinator over HTTP. Also the reading every report prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nodes.person_search.model import CANDIDATE_RULES, Search, reading
from nodes.person_search.policies import check_policy_params, make_search_policy
from testbed.analysis.traces import read_traces
from testbed.errors import ScenarioError
from testbed.runner import run_scenario
from testbed.scenario.loader import scenario_from_dict
from testbed.study.spec import load_study
from testbed.systems.person_search.deployment import deployment as scenario_deployment
from testbed.systems.person_search.driver import run_body
from testbed.systems.person_search.emulation_claims import judge_emulated
from testbed.systems.person_search.emulation_experiment import claims as emulation_claims
from testbed.systems.person_search.emulation_tables import row_reading
from testbed.systems.person_search.emulation_tables import tables as emulation_tables
from testbed.systems.person_search.sim import simulate
from tests.unit.test_person_search_services import deployment, starts_of
from workloads.person_search import Layout, SearchWorld, build_world

STUDIES = Path(__file__).resolve().parents[2] / "testbed/systems/person_search/studies"

AFTER = {"name": "priority", "label": "priority-after-discovery",
         "params": {"candidates": "after-discovery"}}


def one_target(servers: int, path: list[int]) -> SearchWorld:
    """A line of ``servers`` with one target on server ``path[j]`` at ``T_j``."""
    holder = np.array([path], dtype=np.int64)
    start = np.array([[float(path[0]), 0.0]])
    return SearchWorld(layout=Layout("line", servers), slots=len(path) - 1, start=start,
                       holder=holder)


#: Three servers, slots T_1 and T_2 (item id = 2 * server + slot - 1), the target on
#: server 0 at T_0 and T_1 and on server 2 at T_2 = T_R. Alone (k = 0), Tc = 10, w = 0.001,
#: alpha = sigma_D = 0.5, T_s = 1 (V = 1 at T_2, 0 at T_1), E the normal density:
#:
#: 1. mu_L = 0, T_L = 0 (sigma 1 at T_1, 1.5 at T_2): E(0,T1) = 0.399 is the largest
#:    (E(0,T2) + wV = 0.267, E(1,T1) = 0.242): item 0, which holds the target, so
#:    mu_L = 0, T_L = 1.
#: 2. Now sigma is 0.5 at T_1 and 1 at T_2: E(0,T2) + wV = 0.400 > E(1,T2) + wV = 0.243
#:    > E(1,T1) = 0.108 > E(2,T2) + wV = 0.055 > E(2,T1) = 0.0003: item 1, a miss.
#: 3. Item 3 (server 1, T_2), a miss.
#: 4. Left: item 2 (server 1, T_1 = T_L: E 0.108), item 5 (server 2, T_2: 0.055), item 4
#:    (server 2, T_1: 0.0003). Rule ``unanalysed`` takes item 2, which cannot hold the
#:    target (the target's T_1 item was item 0), then item 5, the required item: 5
#:    analyses. Rule ``after-discovery`` leaves out the T_1 items (at T_L) and takes item
#:    5 at once: 4 analyses.
SMALL = one_target(3, [0, 0, 2])
SMALL_ITEMS = {"unanalysed": [0, 1, 3, 2, 5], "after-discovery": [0, 1, 3, 5]}
#: Three servers, three slots (item id = 3 * server + slot - 1), the target on server 0
#: until T_2, then on server 2 at T_3: found at T_1 and T_2 on server 0 (items 0, 1),
#: misses at T_3 on servers 0 and 1 (items 2, 5); then ``unanalysed`` analyses server 1's
#: T_1 item (before T_L = 2) and its T_2 item (at T_L) before server 2's T_3 item:
#: two analyses more than ``after-discovery``.
LONGER = one_target(3, [0, 0, 0, 2])
LONGER_ITEMS = {"unanalysed": [0, 1, 2, 5, 3, 4, 8], "after-discovery": [0, 1, 2, 5, 8]}


def alone(world: SearchWorld, rule: str) -> list[int]:
    """The items Algorithm 1 analyses for the world's one search under ``rule``."""
    policy = make_search_policy("priority", world.items, 0, candidates=rule)
    return Search.for_target(world, 0).run(policy, lambda item: world.contains(0, item))


# --- the rule on the hand-made worlds --------------------------------------------------------


@pytest.mark.parametrize(("world", "items", "extra"),
                         [(SMALL, SMALL_ITEMS, 1), (LONGER, LONGER_ITEMS, 2)])
def test_hand_made_worlds_differ_by_a_known_count(world: SearchWorld,
                                                  items: dict[str, list[int]],
                                                  extra: int) -> None:
    for rule in CANDIDATE_RULES:
        assert alone(world, rule) == items[rule], rule
    assert len(items["unanalysed"]) - len(items["after-discovery"]) == extra
    # the extra analyses are items at or before T_L, none of which holds the target
    wasted = [i for i in items["unanalysed"] if i not in items["after-discovery"]]
    for item in wasted:
        assert not world.contains(0, item)
    required = world.required_item(0)
    assert items["unanalysed"][-1] == items["after-discovery"][-1] == required


@pytest.mark.parametrize(("world", "items"), [(SMALL, SMALL_ITEMS), (LONGER, LONGER_ITEMS)])
def test_the_simulator_honours_the_rule(world: SearchWorld,
                                        items: dict[str, list[int]]) -> None:
    for rule in CANDIDATE_RULES:
        run = simulate(world, "priority", 0, candidates=rule)
        assert run.a_item.tolist() == items[rule]
        assert run.analyses.tolist() == [len(items[rule])]
        # alone on idle servers every analysis takes Tc = 10
        assert run.total_response == pytest.approx(10.0 * len(items[rule]))


# --- the rule as a scenario setting ----------------------------------------------------------


def scenario_doc(policies: list[Any], **params: Any) -> dict[str, Any]:
    """A person-search scenario (the builder) comparing ``policies``."""
    return {"name": "person-search",
            "build": {"builder": "person-search",
                      "params": {"servers": 5, "targets": 30, "seed": 4, **params}},
            "policies": policies}


def test_a_policy_entry_sets_the_rule() -> None:
    scen = scenario_from_dict(scenario_doc(["priority", AFTER, "random"]), source="x.yaml")
    assert scen.policies == ("priority", "priority-after-discovery", "random")
    entry = scen.policy_entry("priority-after-discovery")
    assert (entry.name, dict(entry.params)) == ("priority", {"candidates": "after-discovery"})


@pytest.mark.parametrize(("entry", "path", "expected", "found"), [
    ({"name": "priority", "label": "p2", "params": {"candidates": "before"}},
     "policies[1].params.candidates", "one of unanalysed, after-discovery", "'before'"),
    ({"name": "priority", "label": "p2", "params": {"candidates": 1}},
     "policies[1].params.candidates", "one of unanalysed, after-discovery", "1"),
    ({"name": "priority", "label": "p2", "params": {"tc": 3}},
     "policies[1].params.tc", "one of the priority parameters", "an unknown key"),
    ({"name": "priority", "label": "p2", "params": {"w": -1}},
     "policies[1].params.w", "a finite number >= 0", "-1"),
    ({"name": "priority", "label": "p2", "params": {"w": True}},
     "policies[1].params.w", "a finite number", "True"),
    ({"name": "random", "label": "r2", "params": {"candidates": "after-discovery"}},
     "policies[1].params.candidates", "no parameters (policy random takes none)",
     "a parameter"),
])
def test_a_bad_rule_is_reported_against_the_file(entry: dict[str, Any], path: str,
                                                  expected: str, found: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(scenario_doc(["priority", entry]), source="x.yaml")
    text = str(err.value)
    assert text.startswith(f"x.yaml: {path}: expected {expected}"), text
    assert f"found <{found}>" in text, text


def test_the_hook_returns_the_params_it_accepts() -> None:
    params = {"candidates": "after-discovery", "w": 0.3, "t_s": None,
              "compensation": "response-time", "alpha": 1, "sigma_d": 0.25}
    assert check_policy_params("priority", params) == params
    assert check_policy_params("load-balance", {}) == {}


def test_sim_run_replays_each_entry_with_its_rule(tmp_path: Path) -> None:
    scen = scenario_from_dict(scenario_doc(["priority", AFTER, "random"]), source="<test>")
    out = run_scenario(scen, out=tmp_path / "run", executor="sim", progress=lambda _l: None)
    df = read_traces(out)
    meta = json.loads((out / "metadata.json").read_text())
    replays = {r["policy"]: r for r in meta["driver"]["replays"]}
    world = build_world(scen.workload.params, scen.workload.seed)
    pseed = replays["priority"]["policy_seed"]
    for label, rule in (("priority", "unanalysed"), ("priority-after-discovery",
                                                      "after-discovery")):
        rows = df[df.policy == label].sort_values("task_id")
        run = simulate(world, "priority", 4, policy_seed=pseed, candidates=rule) \
            if label != "priority" else simulate(world, "priority", 4, policy_seed=pseed)
        assert list(rows["step"] + 1) == run.analyses.tolist(), label
        assert replays[label]["policy_name"] == "priority"
        assert replays[label]["reading"].endswith(f"candidates {rule}")
    assert replays["priority-after-discovery"]["policy_params"] == \
        {"candidates": "after-discovery"}
    assert replays["random"]["reading"] == "plain accounting, T_R items only"
    # the rule changes the analyses on this world
    assert (df[df.policy == "priority"].step.sum()
            > df[df.policy == "priority-after-discovery"].step.sum())


def test_the_driver_sends_the_rule_to_the_coordinator() -> None:
    scen = scenario_from_dict(scenario_doc(["priority", AFTER]), source="<test>")
    dep = scenario_deployment(scen)
    urls = [f"http://10.0.0.{s + 2}:9100" for s in range(5)]
    entry = scen.policy_entry("priority-after-discovery")
    body = run_body(urls, SMALL, entry.name, entry.params, 11, dep)
    assert body["policy"] == "priority"
    assert body["policy_params"] == {"candidates": "after-discovery"}
    assert (body["accounting"], body["policy_seed"], body["slots"]) == ("plain", 11, 2)
    assert "policy_params" not in run_body(urls, SMALL, "priority", {}, 11, dep)


@pytest.mark.parametrize("size", ["small", "full"])
def test_the_emulated_experiment_compares_both_rules(size: str) -> None:
    study = load_study(STUDIES / "emulation" / size / "emulation.yaml")
    assert set(study.policies) == {"priority", "priority-after-discovery", "random",
                                   "load-balance"}
    scen = study.scenario(study.points()[0], 0)
    assert dict(scen.policy_entry("priority").params) == {"candidates": "unanalysed"}
    assert dict(scen.policy_entry(AFTER["label"]).params) == {"candidates": "after-discovery"}


async def test_the_coordinator_honours_the_rule() -> None:
    async with deployment(SMALL) as dep:
        for rule in CANDIDATE_RULES:
            await dep.load()
            result = await dep.run(starts_of(SMALL, [0]), slots=2,
                                   policy_params={"candidates": rule})
            rows = sorted(result["analyses"], key=lambda r: r["step"])
            assert [r["item"] for r in rows] == SMALL_ITEMS[rule], rule
            assert result["requests"][0]["analyses"] == len(SMALL_ITEMS[rule])


# --- the reading beside every number ---------------------------------------------------------


def test_reading_names_accounting_eq1_and_rule() -> None:
    assert reading("priority") == "plain accounting, Eq. 1 with Tc, candidates unanalysed"
    assert reading("priority", "compensated",
                   {"candidates": "after-discovery", "compensation": "response-time",
                    "w": 0.3}) == \
        "compensated accounting, Eq. 1 with Tc l_i, w = 0.3, candidates after-discovery"
    assert reading("load-balance", "plain", {}) == "plain accounting, T_R items only"
    assert row_reading({"policy": "x", "reading": "given"}) == "given"


def compared_rows(worlds: int = 1) -> list[dict[str, Any]]:
    """Hand-made rows of :func:`twin_rows`: one point, priority (both rules) and random,
    in each of ``worlds`` worlds (random twice as slow in the second)."""
    base = {"servers": 10, "movement": "normal", "time_scale": 500.0, "repetition": 0,
            "policy_seed": 1, "targets": 100, "emulated_makespan_s": 1.0,
            "simulated_makespan_s": 1.0, "wall_s": 1.0, "all_found": True, "analyses": 1,
            "round_trip_overhead_ms_mean": 30.0, "analysis_ms_mean": 900.0,
            "round_trip_overhead_ms_p95": 40.0, "timer_lateness_ms_mean": 0.3,
            "decision_us_mean": 5.0}
    rows = []
    for world in range(worlds):
        for policy, emu, sim in (("priority", 110.0, 100.0), ("random", 52.0, 50.0),
                                 ("priority-after-discovery", 90.0, 88.0)):
            scale = 2.0 if policy == "random" and world == 1 else 1.0
            name = "random" if policy == "random" else "priority"
            params = {"candidates": "after-discovery"} if "after" in policy else {}
            rows.append({**base, "policy": policy, "replication": world,
                         "emulated_total_s": emu * scale, "simulated_total_s": sim * scale,
                         "discrepancy": emu / sim - 1.0, "emulated_analyses": 7,
                         "simulated_analyses": 7,
                         "reading": reading(name, "plain", params)})
    return rows


def test_the_emulation_tables_print_the_reading_beside_every_number() -> None:
    table, paper = emulation_tables(compared_rows())
    assert len(table["rows"]) == 3
    for row in table["rows"]:
        policy = row[2]
        rule = "after-discovery" if "after" in policy else "unanalysed"
        expected = "plain accounting, T_R items only" if policy == "random" else \
            f"plain accounting, Eq. 1 with Tc, candidates {rule}"
        assert row[:5] == ["10", "normal", policy, expected, "1"], row
    assert f"priority {1 - 110.0 / 52.0:+.1%} (plain accounting, Eq. 1 with Tc, candidates " \
        "unanalysed)" in paper["rows"][0][1]
    assert "off the simulated ones (over every row of the table; readings: priority: plain " \
        "accounting, Eq. 1 with Tc, candidates unanalysed" in table["note"]


def test_the_emulation_tables_pair_within_each_world() -> None:
    """Two worlds of one point: every number is a mean over them with its interval, and a
    reduction is taken against random of the same world before averaging."""
    table, _ = emulation_tables(compared_rows(worlds=2))
    priority = next(row for row in table["rows"] if row[2] == "priority")
    assert priority[4] == "2" and priority[5].startswith("110 ± 0")
    # reductions 1 - 110/52 and 1 - 110/104, averaged: -0.5096; not 1 - 110/78
    mean = ((1 - 110.0 / 52.0) + (1 - 110.0 / 104.0)) / 2
    assert priority[9].startswith(f"{mean:+.1%} ± ")


def _worlds(totals: dict[tuple[int, str], list[float]]) -> list[dict[str, Any]]:
    """Result rows of normal movement: per (servers, policy) one total per world."""
    return [{"servers": n, "movement": "normal", "policy": policy, "replication": r,
             "reading": f"reading of {policy}", "emulated_total_s": total}
            for (n, policy), values in totals.items() for r, total in enumerate(values)]


def test_emulated_claims_judge_p1_and_p3_within_each_world() -> None:
    """P1 passes only where priority beats the better baseline in every world's pairing;
    P3 needs the reduction against random to grow from N = 10 to N = 50 in each world."""
    results = _worlds({
        (10, "random"): [100.0, 200.0, 150.0], (10, "load-balance"): [90.0, 180.0, 140.0],
        (10, "priority"): [80.0, 160.0, 120.0], (10, "after"): [95.0, 150.0, 160.0],
        (50, "random"): [100.0, 200.0, 150.0], (50, "load-balance"): [90.0, 180.0, 140.0],
        (50, "priority"): [50.0, 100.0, 70.0], (50, "after"): [80.0, 160.0, 120.0]})
    judged = {j.key: j for j in judge_emulated(results, lambda r: r["reading"])}

    def passed(key: str) -> dict[str, bool]:
        return {c.what: c.passed for c in judged[key].conditions}

    assert passed("P1") == {"priority (reading of priority)": True,
                            "after (reading of after)": False}
    assert judged["P1"].verdict == "holds only for priority (reading of priority)"
    evidence = judged["P1"].tables[0].rows
    assert evidence[1][2].startswith("lower in 1 of 2 conditions; not lower in: normal N = 10")
    # priority: 20 % in each world at N = 10 to 50 %, 50 %, 53 % at N = 50: grows
    assert passed("P3")["priority (reading of priority)"] is True
    assert passed("P3")["after (reading of after)"] is False
    one_world = [r for r in results if r["replication"] == 0]
    assert judge_emulated(one_world, lambda r: r["reading"]) == []


def test_the_emulated_claims_need_several_worlds() -> None:
    """One world: no verdict; two: P1 judged (P3 needs two numbers of servers)."""
    assert emulation_claims({"rows": compared_rows()}) == []
    judged = emulation_claims({"rows": compared_rows(worlds=2)})
    assert [c.key for c in judged] == ["P1"] and judged[0].replications == 2
    # priority 110 against random's 52 in the first world: not lower
    assert judged[0].verdict == "fails"
