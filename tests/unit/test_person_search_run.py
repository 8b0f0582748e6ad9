"""Person search through the generic path, without root: the ``person-search`` builder, the
deployment a scenario declares, and ``testbed run person-search --executor sim`` writing
the standard results folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from testbed.analysis.traces import read_traces
from testbed.cli import main
from testbed.errors import ScenarioError, TestbedError
from testbed.registry import get_system
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario, scenario_from_dict
from testbed.systems.person_search.builders import DEFAULTS, edge_name, person_search_line
from testbed.systems.person_search.deployment import deployment
from testbed.systems.person_search.sim import policy_seed_for, simulate
from workloads.person_search import read_ground_truth

POLICIES = ("priority", "random", "load-balance")


def built(params: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A scenario document that calls the builder with ``params``."""
    return {"name": "person-search", "build": {"builder": "person-search", "params": params},
            **top}


# --- the builder -----------------------------------------------------------------------


def test_builder_is_a_pure_function_of_its_params() -> None:
    one = person_search_line({"servers": 4, "seed": 2})
    assert one == person_search_line({"servers": 4, "seed": 2})
    assert one != person_search_line({"servers": 4, "seed": 3})
    assert one["workload"]["params"]["servers"] == 4
    assert one["workload"]["params"]["tc_s"] == DEFAULTS["tc"]
    assert one["policies"] == list(POLICIES)
    low, high = DEFAULTS["edge_delay_ms"]
    edges = [lk for lk in one["topology"]["links"] if lk["a"] != "cloud"]
    assert [lk["a"] for lk in edges] == [edge_name(s) for s in range(4)]
    assert all(low <= lk["delay_ms"] <= high for lk in edges)


@pytest.mark.parametrize(("params", "field"), [
    ({"servers": 0}, "servers"), ({"servers": 2.5}, "servers"), ({"targets": True}, "targets"),
    ({"movement": "zigzag"}, "movement"), ({"time_scale": 0.5}, "time_scale"),
    ({"tc": 0}, "tc"), ({"sharing": "fifo"}, "sharing"), ({"edge_delay_ms": 3}, "edge_delay_ms"),
    ({"nodes": 3}, "nodes"), ({"layout": "ring"}, "layout"),
    ({"layout": "grid", "servers": 10}, "servers"), ({"boundary": "wrap"}, "boundary"),
    ({"accounting": "literal"}, "accounting"),
])
def test_bad_builder_params_are_reported_at_their_field(params: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^params\.{field}: expected .*, found"):
        person_search_line(params)
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(built(params), source="x.yaml")
    assert err.value.path.startswith(f"build.params.{field}")
    assert str(err.value).startswith(f"x.yaml: build.params.{field}")


def test_file_keys_override_the_builders() -> None:
    scen = scenario_from_dict(built({"servers": 3, "targets": 10},
                                    policies=["random"], description="mine"))
    assert scen.policies == ("random",)
    assert scen.description == "mine"
    assert scen.system == "person-search"


def test_a_new_seed_draws_another_world_over_the_same_links() -> None:
    scen = load_scenario("person-search")
    other = scen.with_overrides(seed=3)
    assert (scen.workload.seed, other.workload.seed) == (0, 3)
    assert other.topology.links == scen.topology.links


def test_builtin_scenario_is_the_small_line() -> None:
    scen = load_scenario("person-search")
    dep = deployment(scen)
    assert len(dep.edges) == 10 and dep.client == "cloud"
    assert dep.names == tuple(edge_name(s) for s in range(10))
    assert scen.policies == POLICIES
    assert set(get_system(scen.system).executors) == {"emulation", "sim"}


# --- the deployment --------------------------------------------------------------------


def _doc(**edit: Any) -> dict[str, Any]:
    doc = person_search_line({"servers": 3, "targets": 10})
    doc["name"] = "ps"
    for i, params in edit.items():
        doc["services"][int(i[1:])]["params"].update(params)
    return doc


def test_deployment_refuses_edge_servers_with_different_models() -> None:
    with pytest.raises(TestbedError, match=r"disagree on params\.tc"):
        deployment(scenario_from_dict(_doc(s2={"tc": 5.0})))


def test_deployment_refuses_a_gap_in_the_server_indices() -> None:
    with pytest.raises(TestbedError, match="server_index 0 .. N-1"):
        deployment(scenario_from_dict(_doc(s3={"server_index": 7})))


def test_edge_servers_take_the_scenarios_time_scale() -> None:
    # the program's registered context: a service may not set its own
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(_doc(s1={"time_scale": 50.0}))
    assert err.value.path == "services[1].params.time_scale"
    assert deployment(scenario_from_dict(_doc())).time_scale == DEFAULTS["time_scale"]


def test_a_parameter_left_out_is_the_programs_default() -> None:
    doc = _doc()
    for svc in doc["services"][1:]:
        del svc["params"]["tc"], svc["params"]["sharing"]
    dep = deployment(scenario_from_dict(doc))
    assert (dep.tc, dep.sharing) == (10.0, "paper")


# --- testbed run --executor sim ---------------------------------------------------------


def test_cli_runs_the_builtin_scenario_in_the_simulator(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["run", "person-search", "--executor", "sim", "--out", str(out)]) == 0
    assert "results:" in capsys.readouterr().out
    for name in ("metadata.json", "summary.json", "traces.parquet", "traces.csv",
                 "trace/trace.csv", "trace/person_search.json",
                 *(f"cdf_{p}.png" for p in POLICIES)):
        assert (out / name).exists(), name
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["executor"] == "sim"
    assert meta["scenario"]["name"] == "person-search"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == set(POLICIES)
    df = read_traces(out)
    assert len(df) == 100 * len(POLICIES)
    assert set(df["kind"]) == {"search"} and (df["outcome"] == "ok").all()
    assert df["step"].notna().all() and df["item"].notna().all()
    # the CSV carries the same rows as the Parquet file
    assert len(pd.read_csv(out / "traces.csv")) == len(df)


def test_sim_rows_are_the_simulator_runs_on_the_materialised_world(tmp_path: Path) -> None:
    scen = scenario_from_dict(built({"servers": 5, "targets": 30, "seed": 4}),
                              source="<test>").with_overrides(repetitions=2)
    out = run_scenario(scen, out=tmp_path / "run", executor="sim", progress=lambda _l: None)
    world = read_ground_truth(out / "trace")
    df = read_traces(out)
    assert len(df) == 30 * len(POLICIES) * 2
    replays = json.loads((out / "metadata.json").read_text())["driver"]["replays"]
    assert len(replays) == len(POLICIES) * 2
    for rep in (0, 1):
        for policy in POLICIES:
            rows = df[(df.policy == policy) & (df.repetition == rep)].sort_values("task_id")
            run = simulate(world, policy, 4, policy_seed=policy_seed_for(4, rep))
            assert rows["latency_s"].sum() == pytest.approx(run.total_response)
            assert list(rows["step"] + 1) == run.analyses.tolist()
            # every search ends on the item holding its target at T_R, on that server
            assert list(rows["item"].astype(int)) == \
                [world.required_item(k) for k in range(world.targets)]
            assert list(rows["target"]) == \
                [edge_name(int(world.holder[k, world.slots])) for k in range(world.targets)]
            assert set(rows["client"]) == {"cloud"}
    # repetitions seed the policies differently: random draws other items
    random = df[df.policy == "random"]
    assert list(random[random.repetition == 0]["step"]) != \
        list(random[random.repetition == 1]["step"])



# --- the readings a scenario chooses: layout, boundary, accounting, run options -------------


def test_layout_boundary_and_accounting_reach_the_world_and_the_coordinator() -> None:
    doc = person_search_line({"servers": 9, "layout": "grid", "boundary": "reflect",
                              "accounting": "compensated"})
    assert doc["workload"]["params"]["layout"] == "grid"
    assert doc["workload"]["params"]["boundary"] == "reflect"
    assert "3 x 3 grid" in doc["description"]
    dep = deployment(scenario_from_dict({**doc, "name": "ps"}))
    assert dep.accounting == "compensated"
    assert deployment(load_scenario("person-search")).accounting == "plain"


def _sim(tmp_path: Path, params: dict[str, Any], policies: list[Any]) -> list[dict[str, Any]]:
    scen = scenario_from_dict(built({"servers": 4, "targets": 12, "seed": 5, **params},
                                    policies=policies), source="<test>")
    out = run_scenario(scen, out=tmp_path / "run", executor="sim", progress=lambda _l: None)
    return json.loads((out / "metadata.json").read_text())["driver"]["replays"]


def test_the_simulator_runs_the_scenarios_accounting_and_each_entrys_run_options(
        tmp_path: Path) -> None:
    replays = _sim(tmp_path, {"accounting": "compensated"}, [
        "priority", {"name": "priority", "label": "mu0", "params": {"start": "continuous"}},
        {"name": "load-balance", "label": "batch", "params": {"sequential": False}},
        {"name": "priority", "label": "alone", "params": {"isolated": True}}])
    by = {r["policy"]: r for r in replays}
    world = read_ground_truth(tmp_path / "run" / "trace")
    for label, name, options in (("priority", "priority", {}),
                                 ("mu0", "priority", {"start": "continuous"}),
                                 ("batch", "load-balance", {"sequential": False})):
        run = simulate(world, name, 5, accounting="compensated", **options)
        assert by[label]["total_response_s"] == run.total_response
        assert by[label]["accounting"] == "compensated"
    assert "first mu_L at the continuous mu_0" in by["mu0"]["reading"]
    assert "before it" in by["batch"]["reading"]
    assert by["alone"]["total_response_s"] == by["priority"]["total_response_s"]
    assert 1.0 <= by["alone"]["alone_mean_analyses"] <= by["alone"]["mean_analyses"] + 5
    assert "alone_mean_analyses" not in by["priority"]
    assert {"mean_past", "mean_factor", "end_share", "mean_analyses_rest"} <= set(by["priority"])
    assert by["priority"]["mean_factor"] >= 1.0


@pytest.mark.parametrize(("params", "expected"), [
    ({"sequential": 1}, "params.sequential: expected one of true, false, found <1>"),
    ({"start": "mu0"}, "params.start: expected one of server, continuous, found"),
    ({"isolated": "yes"}, "params.isolated: expected one of true, false"),
])
def test_bad_run_options_are_reported_at_their_entry(params: dict, expected: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(built({"servers": 3}, policies=[
            {"name": "random", "label": "r", "params": params}]), source="x.yaml")
    assert expected in str(err.value)


def test_the_emulation_refuses_a_run_option_the_coordinator_does_not_run() -> None:
    from testbed.systems.person_search.driver import make_driver

    ok = scenario_from_dict(built({"servers": 3}, policies=[
        {"name": "priority", "label": "p", "params": {"start": "server", "isolated": False}}]))
    make_driver(ok)  # the defaults are what the coordinator runs
    bad = scenario_from_dict(built({"servers": 3}, policies=[
        {"name": "priority", "label": "mu0", "params": {"start": "continuous"}}]))
    with pytest.raises(TestbedError, match=r"policy mu0: params\.start: expected server "
                                           r"in emulation"):
        make_driver(bad)
