"""The simulation executor: the scenario's trace and policies, replayed in model time.

:func:`run_sim` is the simulator's counterpart of
:func:`testbed.emulation.executor.run_emulation`: for each repetition and policy it
replays the materialised trace with fresh policy objects (one per client, seeded
``scenario.seed * 1000 + repetition`` like the emulated dispatchers) and returns the same
per-task rows (``docs/traces.md``) plus run details. Nothing is built and no root is
needed. ``docs/simulator.md`` describes the model and every approximation.

Wall-clock columns. The simulator has no wall clock; it fills the ``*_wall`` columns
with the instants the emulation's clock would show, ``model / time_scale`` seconds after
a virtual start at 0, built from the latency parts exactly as the dispatcher's formulas
relate them (``server_arrival = dispatch + request delay``, ``start = server_arrival +
wait / K``, ...). Decisions take no model time, so ``dispatch_model = arrival_model``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nodes.offloading.policies import make_policy
from testbed.replays import replay_each
from testbed.scenario.model import Scenario
from testbed.systems.offloading.sim import (
    OK,
    OUTCOME_NAMES,
    Results,
    SimLink,
    SimModel,
    SimRoute,
    SimServer,
    Simulation,
)
from workloads.trace import Task, read_trace

Progress = Callable[[str], None]
#: The tier server's arrival-rate window (its ``--window-s`` default), wall seconds.
TIER_WINDOW_S = 10.0


def window_model_s(params: Mapping[str, Any], time_scale: float) -> float:
    """A tier server's arrival-rate window in model seconds, as the server computes it
    from its params: ``window_model_s``, else ``window_s`` (wall, default
    :data:`TIER_WINDOW_S`) times the time scale."""
    if params.get("window_model_s") is not None:
        return float(params["window_model_s"])
    return float(params.get("window_s", TIER_WINDOW_S)) * time_scale


def build_model(scenario: Scenario, shift_network: bool = True) -> SimModel:
    """Translate ``scenario`` into the simulator's model.

    Tiers are the scenario's ``tier_server`` services; each client's candidates are
    :meth:`Scenario.servers_for`; a route's links are the topology's fewest-hop path
    between the client's node and the server's (none for the client's own local tier).
    ``shift_network`` makes physical delays also delay instants by ``delay *
    time_scale`` model seconds, as in the emulation.
    """
    topology = scenario.topology
    links = tuple(SimLink(lk.name, lk.a, lk.b, lk.delay_ms, lk.jitter_ms, lk.loss_pct)
                  for lk in topology.links)
    link_index = {lk.name: j for j, lk in enumerate(topology.links)}
    services = scenario.task_servers()
    servers = []
    for svc in services:
        node = topology.node(svc.node)
        servers.append(SimServer(
            name=svc.name, tier=svc.tier or "", node=svc.node,
            workers=int(svc.params["workers"]), mu=float(svc.params["mu"]),
            speed=node.speed, compute=svc.params.get("model") == "compute",
            cpu_share=node.cpu if node.cpu is not None else 1.0,
            window_model_s=window_model_s(svc.params, scenario.time_scale)))
    server_index = {s.name: j for j, s in enumerate(servers)}
    clients = scenario.clients()
    routes: list[SimRoute] = []
    client_routes = []
    for k, client in enumerate(clients):
        mine = []
        for svc in scenario.servers_for(client):
            path = topology.path(client.name, svc.node)
            mine.append(len(routes))
            routes.append(SimRoute(k, server_index[svc.name],
                                   tuple(link_index[lk.name] for lk in path)))
        client_routes.append(tuple(mine))
    return SimModel(
        clients=tuple(c.name for c in clients), servers=tuple(servers), links=links,
        routes=tuple(routes), client_routes=tuple(client_routes),
        time_scale=scenario.time_scale,
        poll_interval_s=scenario.executor.poll_interval_wall_s(scenario.time_scale),
        window_s=TIER_WINDOW_S, timeout_s=scenario.task_timeout,
        shift_network=shift_network, events=scenario.events)


def one_tier_model(workers: int, mu: float, policy: str = "jsq", duration: float = 1.0
                   ) -> SimModel:
    """One client joined by a zero-delay link to one tier of ``workers`` workers serving
    at rate ``mu``: the system queueing theory describes (M/M/c, M/G/c with the trace's
    sizes), for checking the engine against Erlang C or Allen-Cunneen and for timing the
    bare kernel. ``policy`` is what the scenario names (its only target is the tier);
    ``duration`` sets the default task timeout (the duration, at least 60 s), so a trace
    of long waits needs its horizon here."""
    from testbed.scenario import scenario_from_dict

    return build_model(scenario_from_dict({
        "name": "one-tier", "seed": 1,
        "topology": {"nodes": [{"name": "c1", "role": "client"},
                               {"name": "srv", "role": "server", "tier": "edge"}],
                     "links": [{"a": "c1", "b": "srv"}]},
        "services": [{"name": "tier", "program": "tier_server", "node": "srv",
                      "params": {"workers": workers, "mu": mu}}],
        "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": mu}},
        "policies": [policy], "duration": duration}))


def policy_seed(scenario: Scenario, repetition: int) -> int:
    """The policy seed of a repetition, the same as the emulation's dispatchers use."""
    return scenario.seed * 1000 + repetition


def simulate(model: SimModel, tasks: Sequence[Task], policy: str, seed: int,
             network_seed: int | str = 0,
             policy_params: Mapping[str, Any] | None = None) -> Results:
    """Replay ``tasks`` on ``model`` with policy ``policy`` (one instance per client).

    ``seed`` seeds the policies, ``network_seed`` the jitter and loss draws;
    ``policy_params`` are passed to :func:`make_policy` (sensitivity sweeps).
    """
    client_index = {name: k for k, name in enumerate(model.clients)}
    policies = [make_policy(policy, seed, **(policy_params or {})) for _ in model.clients]
    sim = Simulation(model, [t.task_id for t in tasks], [client_index[t.client] for t in tasks],
                     [t.arrival for t in tasks], [t.size for t in tasks], policies, network_seed)
    return sim.run()


def results_to_rows(model: SimModel, tasks: Sequence[Task], res: Results, run: str,
                    policy: str, repetition: int) -> list[dict[str, Any]]:
    """The per-task trace rows of one replay (``docs/traces.md``)."""
    inv_k = 1.0 / model.time_scale
    rows = []
    for i, task in enumerate(tasks):
        p = res.route[i]
        server = model.servers[model.routes[p].server]
        at = task.arrival * inv_k
        row: dict[str, Any] = {
            "run": run, "policy": policy, "repetition": repetition, "kind": "task",
            "task_id": task.task_id, "client": task.client, "target": server.name,
            "tier": server.tier, "size": task.size, "cls": task.cls,
            "arrival_model": task.arrival, "dispatch_model": task.arrival,
            "arrival_wall": at, "dispatch_wall": at,
            "estimate_s": None if math.isnan(res.estimate[i]) else res.estimate[i],
            "state_age_s": res.state_age[i], "decision_us": res.decision_us[i],
        }
        if res.outcome[i] == OK:
            network = res.network[i]
            wait = res.start[i] - res.server_arrival[i]
            service = res.end[i] - res.start[i]
            d_req = (res.server_arrival[i] - task.arrival) * inv_k if model.shift_network \
                else network / 2.0
            server_arrival = at + d_req
            start = server_arrival + wait * inv_k
            end = start + service * inv_k
            latency_wall = network + (wait + service) * inv_k
            row.update(
                response_model=task.arrival + network + wait + service,
                server_arrival_wall=server_arrival, start_wall=start, end_wall=end,
                response_wall=at + latency_wall, latency_s=network + wait + service,
                network_s=network, wait_s=wait, service_s=service,
                latency_wall_s=latency_wall, queue_at_arrival=res.queue_at_arrival[i],
                outcome="ok", error=None)
        else:
            row.update(response_wall=res.seen[i] * inv_k,
                       outcome=OUTCOME_NAMES[res.outcome[i]], error=res.errors[i])
        rows.append(row)
    return rows


def run_sim(scenario: Scenario, run: str, trace_dir: Path, workdir: Path,
            progress: Progress, shift_network: bool = True) -> dict[str, Any]:
    """Run every repetition and policy of ``scenario`` in simulation.

    Returns ``rows`` (every replay's trace rows) and run details: ``executor`` ("sim"),
    ``shift_network``, ``wall_s`` and, per replay, the simulator's speed.
    ``workdir`` receives nothing: the simulator writes no logs.
    """
    del workdir  # same signature as the emulation executor; nothing to keep here
    tasks, _ = read_trace(trace_dir)
    model = build_model(scenario, shift_network)
    started = time.time()
    replays = []

    def replay(policy: str, rep: int) -> list[dict[str, Any]]:
        began = time.perf_counter()
        entry = scenario.policy_entry(policy)
        res = simulate(model, tasks, entry.name, policy_seed(scenario, rep),
                       network_seed=f"sim-network-{scenario.seed}-{rep}",
                       policy_params=entry.params)
        took = time.perf_counter() - began
        ok = sum(1 for o in res.outcome if o == OK)
        replays.append({"policy": policy, "repetition": rep, "tasks": len(tasks),
                        "events": res.events, "sim_s": took,
                        "tasks_per_s": len(tasks) / took if took > 0 else None})
        progress(f"  {policy} (repetition {rep}): {ok}/{len(tasks)} tasks ok "
                 f"(simulated in {took:.2f} s)")
        return results_to_rows(model, tasks, res, run, policy, rep)

    rows, failed = replay_each(scenario.repetitions, scenario.policies, replay, progress)
    return {"executor": "sim", "shift_network": shift_network, "replays": replays,
            "rows": rows, "failed": failed, "wall_s": time.time() - started}
