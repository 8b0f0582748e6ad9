"""Simulator speed: ``testbed.sim`` against SimPy and Ciw models of the same system.

``python -m tests.bench.bench_sim [--quick] [--tasks N] [--rounds R] [--million]`` from the
repository root (no root needed; ``pip install .[test]`` brings SimPy and Ciw).

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
background load matters less). Ciw, an order of magnitude slower, runs once. ``--quick``
runs 20k tasks and 3 rounds; ``--million`` also times one million tasks with ``hybrid``
(target: under 20 s). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from testbed.policies import make_policy
from testbed.policies.base import Outcome, Policy, TargetState, TaskInfo, View
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.scenario.model import Scenario
from testbed.sim.tiers import OK
from testbed.sim.tiers_replay import TIER_WINDOW_S, build_model, simulate
from workloads import generate
from workloads.trace import Task

RHO = 0.8
CAPACITY = 34.0  # 2 locals x 1 + edge 4 x 2 + cloud 16 x 1.5 tasks per model second
T_975_29 = 2.045


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


def compare(scenario: Scenario, tasks: list[Task], policy: str,
            rounds: int) -> dict[str, Any]:
    """Speeds and mean latencies of the three implementations with ``policy``."""
    ours, simpy = [], []
    for _ in range(rounds):
        ours.append(run_ours(scenario, tasks, policy))
        simpy.append(run_simpy(scenario, tasks, policy))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_sim",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k tasks, 3 rounds")
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks per comparison (default 100k, --quick 20k)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="testbed/SimPy rounds per policy (default 5, --quick 3)")
    parser.add_argument("--million", action="store_true",
                        help="also time 1,000,000 tasks with hybrid")
    args = parser.parse_args(argv)
    count = args.tasks or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (3 if args.quick else 5)
    scenario = bench_scenario(count / (RHO * CAPACITY))
    tasks = trace_for(scenario, 1)
    print(f"continuum at rho = {RHO}: {len(tasks)} tasks, time_scale "
          f"{scenario.time_scale:g}, polls every {scenario.executor.poll_interval_ms:g} ms; "
          f"testbed and SimPy: median of {rounds} alternating rounds, Ciw: one run")
    print(f"{'policy':<8} {'simulator':<10} {'tasks/s':>10} {'testbed/this':>13} "
          f"{'mean latency s (95% CI)':>25}")
    for policy in ("jsq", "hybrid"):
        result = compare(scenario, tasks, policy, rounds)
        for label in ("testbed", "simpy", "ciw"):
            mean, half = result["latency"][label]
            print(f"{policy:<8} {label:<10} {result['speed'][label]:>10.0f} "
                  f"{result['ratio'][label]:>13.2f} {mean:>15.3f} +- {half:.3f}")
        print(f"{policy:<8} rounds, tasks/s: testbed "
              f"{', '.join(f'{v:.0f}' for v in result['rounds_testbed'])}; simpy "
              f"{', '.join(f'{v:.0f}' for v in result['rounds_simpy'])}; mean latencies "
              f"{'agree' if agree(result['latency']) else 'DISAGREE'} within their intervals")
    if args.million:
        big = bench_scenario(1_000_000 / (RHO * CAPACITY))
        million = trace_for(big, 2)
        result = run_ours(big, million, "hybrid")
        print(f"hybrid, {len(million)} tasks: {result['wall_s']:.1f} s "
              f"({result['tasks_per_s']:.0f} tasks/s; target < 20 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
