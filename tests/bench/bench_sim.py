"""Simulator speed: ``testbed.sim`` against SimPy and Ciw models of the same system.

``python -m tests.bench.bench_sim [--quick] [--tasks N] [--mmc-tasks N] [--rounds R]
[--million]`` from the repository root (no root needed; ``pip install .[test]`` brings
SimPy and Ciw). :func:`run` and :func:`keys` serve ``tests.bench.run``.

The model is the built-in ``continuum`` scenario (two clients with a local tier each,
the edge and the cloud, their link delays, polling every 100 ms wall at time_scale 20)
with plain Poisson arrivals at rho = 0.8 of the total capacity (34 tasks per model s)
and Pareto(2.5) sizes; the burst and the cloud link's jitter are removed so that every
implementation draws nothing but the shared trace. All three replay the same trace with
the same policy objects (one per client, seed 1), the same polling staleness and the
same ``delay * time_scale`` shift of instants, and report simulated tasks per second of
wall time and the mean latency with a 95 % batch-means interval (30 batches). The
policy's own decision cost is part of all three; the SimPy model is
:func:`run_simpy` below, the Ciw model :mod:`tests.bench.ciw_model`.

Per policy, ``testbed.sim`` and SimPy run ``--rounds`` times, alternating; the tables
show each one's median speed and the median of the per-round ratios (paired, so drifting
background load matters less). Ciw, an order of magnitude slower, runs once.

The kernel alone: a bare M/M/10 at rho = 0.8 (Poisson arrivals, exponential sizes, a
zero-delay link, one answer to the first poll and no more), placed by ``jsq`` with its
one target, against the same queue written plainly in SimPy (a source process and a
resource; it calls no policy, so the policy call and the view are costs only
``testbed.sim`` pays). Both replay the same trace, so their mean waits agree; the table
prints them with the Erlang-C mean.

``--quick`` runs 20k continuum tasks, 200k M/M/c tasks and 3 rounds (default 100k, 500k,
5); ``--million`` also times one million tasks with ``hybrid`` (target: under 20 s).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from nodes.offloading.policies import make_policy
from nodes.offloading.policies.base import Outcome, Policy, TargetState, TaskInfo, View
from nodes.offloading.queueing import mmc_wait
from testbed.registry import generate
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.scenario.model import Scenario
from testbed.systems.offloading.sim import OK, SimModel
from testbed.systems.offloading.sim_replay import (
    TIER_WINDOW_S,
    build_model,
    one_tier_model,
    simulate,
)
from workloads.trace import Task

RHO = 0.8
CAPACITY = 34.0  # 2 locals x 1 + edge 4 x 2 + cloud 16 x 1.5 tasks per model second
T_975_29 = 2.045
#: The bare M/M/c: workers, their rate, and the trivial policy (one target to choose).
MMC_WORKERS = 10
MMC_MU = 1.0
MMC_POLICY = "jsq"


def bench_scenario(duration: float) -> Scenario:
    """The continuum scenario at rho = 0.8 without bursts or jitter."""
    data = load_scenario("continuum").resolved()
    data["workload"]["params"] = {"rate": RHO * CAPACITY / 2, "mu": 1.0, "alpha": 2.5}
    for link in data["topology"]["links"]:
        link["jitter_ms"] = 0.0
    data["duration"] = duration
    return scenario_from_dict(data)


def trace_for(scenario: Scenario, seed: int) -> list[Task]:
    """The scenario's Poisson/Pareto trace for both clients, seeded ``seed``."""
    return generate("bursty-pareto", scenario.workload.params, ["c1", "c2"],
                    scenario.duration, seed)


def mean_ci(latencies: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % batch-means interval (30 batches)."""
    size = len(latencies) // 30
    means = [statistics.fmean(latencies[b * size:(b + 1) * size]) for b in range(30)]
    return statistics.fmean(means), T_975_29 * statistics.stdev(means) / math.sqrt(30)


def run_ours(scenario: Scenario, tasks: list[Task], policy: str) -> dict[str, Any]:
    """Our simulator: tasks per second and mean latency."""
    model = build_model(scenario)
    began = time.perf_counter()
    res = simulate(model, tasks, policy, seed=1)
    took = time.perf_counter() - began
    lat = [res.network[i] + res.end[i] - res.server_arrival[i]
           for i in range(len(tasks)) if res.outcome[i] == OK]
    return {"tasks_per_s": len(tasks) / took, "wall_s": took, "latency": mean_ci(lat)}


def run_simpy(scenario: Scenario, tasks: list[Task], policy_name: str) -> dict[str, Any]:
    """The same model written with SimPy processes and resources."""
    import simpy

    model = build_model(scenario)
    k = model.time_scale
    poll_every = model.poll_interval_s * k
    window = TIER_WINDOW_S * k
    env = simpy.Environment()
    servers = [simpy.Resource(env, capacity=s.workers) for s in model.servers]
    arrivals: list[deque[float]] = [deque() for _ in model.servers]
    one_way = [sum(model.links[j].delay_ms for j in r.links) / 1000.0 for r in model.routes]
    cache = [(0, 0, model.servers[r.server].workers, 0.0, 0.0) for r in model.routes]
    latencies: list[float] = [math.nan] * len(tasks)
    policies = [make_policy(policy_name, 1) for _ in model.clients]
    observing = [type(p).observe is not Policy.observe for p in policies]

    def rate(s: int, now: float) -> float:
        window_arrivals = arrivals[s]
        while window_arrivals and window_arrivals[0] < now - window:
            window_arrivals.popleft()
        if not window_arrivals:
            return 0.0
        return len(window_arrivals) / max(min(window, now), 1e-6 * k)

    def poller(p: int) -> Any:
        s = model.routes[p].server
        while env.now <= tasks[-1].arrival:  # as in testbed.sim: none after the last arrival
            send = env.now
            yield env.timeout(one_way[p] * k)
            answer = (len(servers[s].queue), servers[s].count, model.servers[s].workers,
                      rate(s, env.now), env.now)
            yield env.timeout(one_way[p] * k)
            cache[p] = answer
            yield env.timeout(max(0.0, send + poll_every - env.now))

    def task(i: int, p: int, client: int, estimate: float | None) -> Any:
        s = model.routes[p].server
        yield env.timeout(one_way[p] * k)
        at_server = env.now
        arrivals[s].append(at_server)
        with servers[s].request() as request:
            yield request
            began = env.now
            yield env.timeout(tasks[i].size / model.servers[s].speed)
            done = env.now
        network = 2 * one_way[p]
        latencies[i] = network + done - at_server
        if observing[client]:
            yield env.timeout(one_way[p] * k)
            policies[client].observe(Outcome(
                tasks[i].task_id, model.servers[s].name, latencies[i], began - at_server,
                done - began, network, estimate))

    def source() -> Any:
        index = {name: j for j, name in enumerate(model.clients)}
        for i, t in enumerate(tasks):
            yield env.timeout(t.arrival - env.now)
            client = index[t.client]
            states = {}
            for p in model.client_routes[client]:
                spec = model.servers[model.routes[p].server]
                q, b, a, r, at = cache[p]
                states[spec.name] = TargetState(
                    name=spec.name, tier=spec.tier, queue=q, busy=b, active=a,
                    c=spec.workers, service_rate=spec.mu * spec.speed, arrival_rate=r,
                    delay_s=2 * one_way[p], age_s=(env.now - at) / k, speed=spec.speed)
            policy = policies[client]
            decision = policy.choose(
                TaskInfo(t.task_id, t.client, t.arrival,
                         t.size if policy.sees_sizes else None),
                View(env.now, t.client, states))
            route = next(p for p in model.client_routes[client]
                         if model.servers[model.routes[p].server].name == decision.target)
            env.process(task(i, route, client, decision.estimate_s))

    for p in range(len(model.routes)):
        env.process(poller(p))
    began = time.perf_counter()
    env.process(source())
    env.run(until=tasks[-1].arrival + 10_000.0)
    took = time.perf_counter() - began
    done = [x for x in latencies if not math.isnan(x)]
    return {"tasks_per_s": len(tasks) / took, "wall_s": took, "latency": mean_ci(done)}


def run_ciw(scenario: Scenario, tasks: list[Task], policy: str) -> dict[str, Any]:
    """The same model in Ciw (:mod:`tests.bench.ciw_model`)."""
    from tests.bench.ciw_model import run_ciw as replay

    model = build_model(scenario)
    began = time.perf_counter()
    latencies = replay(model, tasks, policy)
    took = time.perf_counter() - began
    done = [x for x in latencies if not math.isnan(x)]
    return {"tasks_per_s": len(tasks) / took, "wall_s": took, "latency": mean_ci(done)}


def timed(replay: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``replay(*args)`` after a full garbage collection, so that neither side pays for
    a collection of what earlier rounds left."""
    gc.collect()
    return replay(*args)


def compare(scenario: Scenario, tasks: list[Task], policy: str,
            rounds: int) -> dict[str, Any]:
    """Speeds and mean latencies of the three implementations with ``policy``."""
    ours, simpy = [], []
    for _ in range(rounds):
        ours.append(timed(run_ours, scenario, tasks, policy))
        simpy.append(timed(run_simpy, scenario, tasks, policy))
    ciw = run_ciw(scenario, tasks, policy)
    speed = {"testbed": statistics.median(r["tasks_per_s"] for r in ours),
             "simpy": statistics.median(r["tasks_per_s"] for r in simpy),
             "ciw": ciw["tasks_per_s"]}
    ratio = {"testbed": 1.0,
             "simpy": statistics.median(a["tasks_per_s"] / b["tasks_per_s"]
                                        for a, b in zip(ours, simpy, strict=True)),
             "ciw": speed["testbed"] / ciw["tasks_per_s"]}
    latency = {"testbed": ours[0]["latency"], "simpy": simpy[0]["latency"],
               "ciw": ciw["latency"]}
    return {"policy": policy, "speed": speed, "ratio": ratio, "latency": latency,
            "rounds_testbed": [r["tasks_per_s"] for r in ours],
            "rounds_simpy": [r["tasks_per_s"] for r in simpy]}


def agree(latency: dict[str, tuple[float, float]]) -> bool:
    """Whether every pair of mean latencies differs by less than their two half-widths."""
    values = list(latency.values())
    return all(abs(a[0] - b[0]) <= a[1] + b[1] for a in values for b in values)


def mmc_model() -> SimModel:
    """One client, one tier of :data:`MMC_WORKERS` workers at rate :data:`MMC_MU`, a
    zero-delay link, and no polling after the first answer (the trivial policy's one
    target makes the state irrelevant): a bare M/M/c queue."""
    return dataclasses.replace(one_tier_model(MMC_WORKERS, MMC_MU, MMC_POLICY),
                               poll_interval_s=math.inf)


def mmc_trace(count: int, seed: int) -> list[Task]:
    """``count`` Poisson arrivals at rho = :data:`RHO` with exponential sizes."""
    rng = random.Random(seed)
    lam = RHO * MMC_WORKERS * MMC_MU
    tasks, now = [], 0.0
    for i in range(count):
        now += rng.expovariate(lam)
        tasks.append(Task(i, "c1", now, rng.expovariate(MMC_MU), "small"))
    return tasks


def wait_ci(waits: Sequence[float]) -> tuple[float, float]:
    """Mean wait and its 95 % batch-means half-width, the first 5 % (warm-up) dropped."""
    return mean_ci(waits[len(waits) // 20:])


def run_mmc_ours(model: SimModel, tasks: list[Task]) -> dict[str, Any]:
    """Our simulator on the bare M/M/c: tasks per second and the mean wait."""
    began = time.perf_counter()
    res = simulate(model, tasks, MMC_POLICY, seed=1)
    took = time.perf_counter() - began
    if any(o != OK for o in res.outcome):
        raise RuntimeError("M/M/c: a task did not complete; the comparison needs all")
    waits = [res.start[i] - res.server_arrival[i] for i in range(len(tasks))]
    return {"tasks_per_s": len(tasks) / took, "wall_s": took, "wait": wait_ci(waits)}


def run_mmc_simpy(model: SimModel, tasks: list[Task]) -> dict[str, Any]:
    """The bare M/M/c as one writes it in SimPy: a source process and one resource of
    ``c`` workers. It places nothing (the queue has one target), so testbed.sim's policy
    call and view are costs the peer does not pay."""
    import simpy

    spec = model.servers[0]
    env = simpy.Environment()
    server = simpy.Resource(env, capacity=spec.workers)
    waits = [math.nan] * len(tasks)

    def task(i: int) -> Any:
        at_server = env.now
        with server.request() as request:
            yield request
            waits[i] = env.now - at_server
            yield env.timeout(tasks[i].size / spec.speed)

    def source() -> Any:
        for i, t in enumerate(tasks):
            yield env.timeout(t.arrival - env.now)
            env.process(task(i))

    began = time.perf_counter()
    env.process(source())
    env.run()
    took = time.perf_counter() - began
    return {"tasks_per_s": len(tasks) / took, "wall_s": took, "wait": wait_ci(waits)}


def compare_mmc(count: int, rounds: int) -> dict[str, Any]:
    """Speeds and mean waits of testbed.sim and SimPy on a bare M/M/c, against Erlang C."""
    model = mmc_model()
    tasks = mmc_trace(count, 1)
    ours, peer = [], []
    for _ in range(rounds):
        ours.append(timed(run_mmc_ours, model, tasks))
        peer.append(timed(run_mmc_simpy, model, tasks))
    erlang = mmc_wait(RHO * MMC_WORKERS * MMC_MU, MMC_MU, MMC_WORKERS)
    mean, half = ours[0]["wait"]
    peer_mean, peer_half = peer[0]["wait"]
    return {
        "tasks": count, "workers": MMC_WORKERS, "policy": MMC_POLICY,
        "speed": {"testbed": statistics.median(r["tasks_per_s"] for r in ours),
                  "simpy": statistics.median(r["tasks_per_s"] for r in peer)},
        "ratio": statistics.median(a["tasks_per_s"] / b["tasks_per_s"]
                                   for a, b in zip(ours, peer, strict=True)),
        "wait": {"testbed": ours[0]["wait"], "simpy": peer[0]["wait"], "erlang_c": erlang},
        "agree_simpy": abs(mean - peer_mean) <= half + peer_half,
        "agree_erlang_c": abs(mean - erlang) <= half,
        "rounds_testbed": [r["tasks_per_s"] for r in ours],
        "rounds_simpy": [r["tasks_per_s"] for r in peer]}


#: Trace sizes (continuum, M/M/c) of the simulator comparison in ``tests.bench.run``.
COMBINED = (20_000, 200_000)


def measure(count: int, mmc_count: int, rounds: int) -> dict[str, Any]:
    """Every comparison: the continuum model per policy, then the bare M/M/c."""
    scenario = bench_scenario(count / (RHO * CAPACITY))
    tasks = trace_for(scenario, 1)
    return {"tasks": len(tasks), "rounds": rounds, "time_scale": scenario.time_scale,
            "poll_interval_ms": scenario.executor.poll_interval_ms,
            "continuum": {policy: compare(scenario, tasks, policy, rounds)
                          for policy in ("jsq", "hybrid")},
            "mmc": compare_mmc(mmc_count, rounds)}


def keys(result: dict[str, Any]) -> dict[str, float]:
    """The paired median speed ratios against SimPy, under their summary names."""
    return {"sim.continuum_hybrid_ratio_vs_simpy":
            result["continuum"]["hybrid"]["ratio"]["simpy"],
            "sim.mmc_ratio_vs_simpy": result["mmc"]["ratio"]}


def print_tables(result: dict[str, Any]) -> None:
    """The comparisons as text tables."""
    print(f"continuum at rho = {RHO}: {result['tasks']} tasks, time_scale "
          f"{result['time_scale']:g}, polls every {result['poll_interval_ms']:g} ms; "
          f"testbed and SimPy: median of {result['rounds']} alternating rounds, Ciw: one run")
    print(f"{'policy':<8} {'simulator':<10} {'tasks/s':>10} {'testbed/this':>13} "
          f"{'mean latency s (95% CI)':>25}")
    for policy, row in result["continuum"].items():
        for label in ("testbed", "simpy", "ciw"):
            mean, half = row["latency"][label]
            print(f"{policy:<8} {label:<10} {row['speed'][label]:>10.0f} "
                  f"{row['ratio'][label]:>13.2f} {mean:>15.3f} +- {half:.3f}")
        print(f"{policy:<8} rounds, tasks/s: testbed "
              f"{', '.join(f'{v:.0f}' for v in row['rounds_testbed'])}; simpy "
              f"{', '.join(f'{v:.0f}' for v in row['rounds_simpy'])}; mean latencies "
              f"{'agree' if agree(row['latency']) else 'DISAGREE'} within their intervals")
    mmc = result["mmc"]
    print(f"\nbare M/M/{mmc['workers']} at rho = {RHO} (mu {MMC_MU:g}, exponential sizes, no "
          f"network, no polling, policy {mmc['policy']}): {mmc['tasks']} tasks, median of "
          f"{result['rounds']} alternating rounds")
    print(f"{'simulator':<10} {'tasks/s':>10} {'testbed/this':>13} {'mean wait s (95% CI)':>25}")
    for label in ("testbed", "simpy"):
        mean, half = mmc["wait"][label]
        ratio = 1.0 if label == "testbed" else mmc["ratio"]
        print(f"{label:<10} {mmc['speed'][label]:>10.0f} {ratio:>13.2f} "
              f"{mean:>15.4f} +- {half:.4f}")
    print(f"{'erlang-c':<10} {'':>10} {'':>13} {mmc['wait']['erlang_c']:>15.4f}")
    print(f"rounds, tasks/s: testbed {', '.join(f'{v:.0f}' for v in mmc['rounds_testbed'])}; "
          f"simpy {', '.join(f'{v:.0f}' for v in mmc['rounds_simpy'])}; testbed's mean wait "
          f"{'agrees' if mmc['agree_simpy'] else 'DISAGREES'} with SimPy's within their "
          f"intervals and Erlang C is {'inside' if mmc['agree_erlang_c'] else 'OUTSIDE'} "
          f"its interval")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_sim",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20k continuum and 200k M/M/c tasks, 3 rounds")
    parser.add_argument("--tasks", type=int, default=None,
                        help="continuum tasks per comparison (default 100k, --quick 20k)")
    parser.add_argument("--mmc-tasks", type=int, default=None,
                        help="M/M/c tasks (default 500k, --quick 200k)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="testbed/SimPy rounds per comparison (default 5, --quick 3)")
    parser.add_argument("--million", action="store_true",
                        help="also time 1,000,000 tasks with hybrid")
    args = parser.parse_args(argv)
    count = args.tasks or (COMBINED[0] if args.quick else 100_000)
    mmc_count = args.mmc_tasks or (COMBINED[1] if args.quick else 500_000)
    rounds = args.rounds or (3 if args.quick else 5)
    result = measure(count, mmc_count, rounds)
    print_tables(result)
    print("summary: " + ", ".join(f"{key} = {value:.2f}" for key, value in keys(result).items()))
    if args.million:
        big = bench_scenario(1_000_000 / (RHO * CAPACITY))
        million = trace_for(big, 2)
        single = run_ours(big, million, "hybrid")
        print(f"hybrid, {len(million)} tasks: {single['wall_s']:.1f} s "
              f"({single['tasks_per_s']:.0f} tasks/s; target < 20 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
