"""Whole scenarios in emulation: real hosts, shaped links, tier servers and dispatchers.

These use the project's own pytest plugin (``run_scenario`` fixture), as a researcher
would.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.emulation.cpu_partition import env_partition
from testbed.emulation.tap_rx import env_rx
from testbed.scenario.loader import builtin_scenarios
from workloads.trace import read_trace

pytestmark = pytest.mark.emulation


def test_continuum_compares_policies_on_one_trace(run_scenario) -> None:
    run = run_scenario("continuum", duration=12)
    df = run.traces
    folder = run.folder
    for name in ("metadata.json", "summary.json", "traces.parquet", "traces.csv",
                 "cdf_random.png", "cdf_jsq.png", "trace/trace.csv"):
        assert (folder / name).exists(), name
    tasks, _ = read_trace(folder / "trace")
    assert set(run.summary["policies"]) == {"random", "jsq"}
    for policy in ("random", "jsq"):
        rows = df[df.policy == policy].sort_values("task_id")
        # Identical trace replayed: same ids, sizes and scheduled arrivals for each policy.
        assert list(rows.task_id) == [t.task_id for t in tasks]
        assert np.allclose(rows["size"], [t.size for t in tasks])
        assert np.allclose(rows.arrival_model, [t.arrival for t in tasks])
        assert (rows.outcome == "ok").all()
        stats = run.policy(policy)
        assert stats["n"] == len(tasks)
        assert 0 < stats["p50_ms"] <= stats["p95_ms"] <= stats["p99_ms"]
        # The network part is physical and at least the configured round trip
        # (client-switch-server: 2 x (1 + 2) ms to the edge, 2 x (1 + 20) to the cloud).
        edge = rows[rows.target == "edge"]
        assert (edge.network_s > 0.0059).all()
    meta = run.metadata
    assert meta["shaping_backend"] in ("netem", "userspace")
    assert meta["shaping_engine"] in ({"netem"} if meta["shaping_backend"] == "netem"
                                      else {"shaper-c", "delayer-py"})
    assert meta["shaping_rx"] == (None if meta["shaping_backend"] == "netem" else env_rx())
    expected_cpus = None if meta["shaping_backend"] == "netem" else env_partition()
    assert meta["shaping_cpus"] == (expected_cpus.as_dict() if expected_cpus else None)
    assert meta["machine"]["kernel"]
    assert meta["trace"]["n"] == len(tasks)
    assert meta["scenario"]["duration"] == 12
    assert meta["teardown_errors"] == []


def _single_server(rate: float) -> dict:
    """One client, one single-worker server 1 ms away, Poisson arrivals at ``rate``."""
    return {
        "name": f"load{rate:g}",
        "seed": 7,
        "topology": {
            "nodes": [{"name": "c1", "role": "client"}, {"name": "sw", "role": "switch"},
                      {"name": "srv", "role": "server", "tier": "edge"}],
            "links": [{"a": "c1", "b": "sw", "delay_ms": 1},
                      {"a": "srv", "b": "sw", "delay_ms": 1}],
        },
        "services": [{"name": "edge", "program": "tier_server", "node": "srv",
                      "params": {"workers": 1, "mu": 1.0}}],
        "workload": {"generator": "bursty-pareto",
                     "params": {"rate": rate, "mu": 1.0, "alpha": 2.5}},
        "policies": ["jsq"],
        "duration": 150,
        "time_scale": 50,
    }


def test_queueing_delay_grows_with_offered_load(run_scenario, tmp_path: Path) -> None:
    waits = []
    for rate in (0.2, 0.5, 0.8):
        path = tmp_path / f"load{rate}.yaml"
        path.write_text(yaml.safe_dump(_single_server(rate)))
        run = run_scenario(str(path))
        stats = run.policy("jsq")
        assert stats["n_failed"] == 0
        waits.append(stats["mean_wait_ms"])
    # Waiting emerges from contention in the real server: it must rise with the load.
    assert waits[0] < waits[1] < waits[2], waits
    assert waits[2] > 4 * waits[0], waits


def _with_runtime(tmp_path: Path, runtime: str, switch: str = "linuxbridge") -> Path:
    base = yaml.safe_load(Path(builtin_scenarios()["continuum"]).read_text())
    topo = yaml.safe_load((Path(__file__).parents[2] / "topologies" / "continuum.yaml")
                          .read_text())
    topo.pop("description", None)
    topo["switch"] = switch
    for node in topo["nodes"]:
        if node["name"] == "edge":
            node["runtime"] = runtime
            node["cpu"] = 0.5
            node["memory_mb"] = 256
    scenario = copy.deepcopy(base)
    scenario["topology"] = topo
    scenario["name"] = f"continuum-{runtime}-{switch}"
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


@pytest.mark.parametrize("runtime", ["process", "docker"])
def test_both_runtimes_serve_tasks(run_scenario, tmp_path: Path, runtime: str) -> None:
    run = run_scenario(str(_with_runtime(tmp_path, runtime)), duration=6, policies=["jsq"])
    df = run.traces
    assert (df.outcome == "ok").all()
    assert (df.target == "edge").any()
    assert run.metadata["hosts"]["edge"]["runtime"] == runtime
    versions = run.metadata["helper_versions"]
    if runtime == "docker":
        assert versions["docker_engine"][0].isdigit() and versions["docker_api"]
    else:
        assert "docker_engine" not in versions


def test_ovs_switch_with_controller(run_scenario, tmp_path: Path) -> None:
    run = run_scenario(str(_with_runtime(tmp_path, "process", switch="ovs")), duration=6,
                       policies=["random"])
    df = run.traces
    assert (df.outcome == "ok").all()
    assert set(df.target) >= {"edge", "cloud"}
    assert run.metadata["helper_versions"]["openvswitch"][0].isdigit()


def test_policy_entries_reach_the_dispatchers_as_in_the_simulator(run_scenario) -> None:
    """A labelled entry with parameters runs in the emulation's dispatchers as in the
    simulator: ``random`` by capacity draws from the same seed over the same capacities,
    so every task goes to the same target on both executors, under the entry's label."""
    capacity = {"name": "random", "label": "random-capacity", "params": {"weights": "capacity"}}
    runs = {executor: run_scenario("continuum", duration=10, executor=executor,
                                   policies=[capacity, "random"])
            for executor in ("emulation", "sim")}
    targets = {}
    for executor, run in runs.items():
        df = run.traces
        assert set(df.policy) == {"random-capacity", "random"}
        assert run.metadata["policy_entries"]["random-capacity"]["params"] == {
            "weights": "capacity"}
        rows = df[df.policy == "random-capacity"].sort_values("task_id")
        assert (rows.outcome == "ok").all()
        targets[executor] = list(rows.target)
    assert targets["emulation"] == targets["sim"]
    local = sum(t.endswith("-local") for t in targets["sim"]) / len(targets["sim"])
    assert local < 0.15, targets["sim"]  # capacity 1 of 33 per client, not a third
