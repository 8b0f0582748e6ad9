"""Simulator speed: ``testbed.sim`` against a SimPy model of the same system.

``python -m tests.bench.bench_sim [--tasks N] [--million]`` from the repository root (no
root needed; ``pip install .[test]`` brings SimPy).

The model is the built-in ``continuum`` scenario (two clients with a local tier each,
the edge and the cloud, their link delays, polling every 100 ms wall at time_scale 20)
with plain Poisson arrivals at rho = 0.8 of the total capacity (34 tasks per model s)
and Pareto(2.5) sizes; the burst and the cloud link's jitter are removed so that both
implementations draw nothing but the shared trace. Both replay the same trace with the
same policy objects (one per client), the same polling staleness and the same
``delay * time_scale`` shift of instants, and report simulated tasks per second of
wall time and the mean latency with a 95 % batch-means interval (30 batches). The
policy's own decision cost is part of both. ``--million`` also times one million tasks
with ``hybrid``. Nothing is asserted.
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
from testbed.sim.engine import OK
from testbed.sim.executor import TIER_WINDOW_S, build_model, simulate
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
        while True:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_sim",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200_000, help="tasks per comparison")
    parser.add_argument("--million", action="store_true",
                        help="also time 1,000,000 tasks with hybrid")
    args = parser.parse_args(argv)
    scenario = bench_scenario(args.tasks / (RHO * CAPACITY))
    tasks = generate("bursty-pareto", scenario.workload.params, ["c1", "c2"],
                     scenario.duration, 1)
    print(f"continuum at rho = {RHO}: {len(tasks)} tasks, time_scale "
          f"{scenario.time_scale:g}, polls every {scenario.executor.poll_interval_ms:g} ms")
    print(f"{'policy':<8} {'simulator':<10} {'tasks/s':>10} {'mean latency (95% CI)':>24}"
          f" {'ours/peer':>10}")
    for policy in ("jsq", "hybrid"):
        ours = run_ours(scenario, tasks, policy)
        peer = run_simpy(scenario, tasks, policy)
        for label, result in (("testbed", ours), ("simpy", peer)):
            mean, half = result["latency"]
            ratio = ours["tasks_per_s"] / result["tasks_per_s"]
            print(f"{policy:<8} {label:<10} {result['tasks_per_s']:>10.0f} "
                  f"{mean:>14.3f} +- {half:<6.3f} {ratio:>10.2f}")
    if args.million:
        big = bench_scenario(1_000_000 / (RHO * CAPACITY))
        million = generate("bursty-pareto", big.workload.params, ["c1", "c2"],
                           big.duration, 2)
        result = run_ours(big, million, "hybrid")
        print(f"hybrid, {len(million)} tasks: {result['wall_s']:.1f} s "
              f"({result['tasks_per_s']:.0f} tasks/s; target < 20 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
