"""The echo system's simulator: a ping takes twice its path's delay plus the service."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.replays import replay_each
from testbed.scenario.model import Scenario
from tests.testsystem.policies import choose
from workloads.trace import read_trace


def run_sim(scenario: Scenario, run: str, trace_dir: Path, workdir: Path,
            progress: Callable[[str], None]) -> dict[str, Any]:
    """Rows of every repetition and policy, in model time (no queueing: pings are rare)."""
    del workdir
    tasks, _ = read_trace(trace_dir)
    k = 1.0 / scenario.time_scale

    def replay(policy: str, rep: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for client in scenario.clients():
            servers = scenario.servers_for(client)
            mine = [t for t in tasks if t.client == client.name]
            for n, task in enumerate(mine):
                svc = servers[choose(policy, n, len(servers))]
                path = scenario.topology.path(client.name, svc.node)
                network = 2 * sum(link.delay_ms for link in path) / 1000.0
                service = float(svc.params["service_ms"]) / 1000.0
                at = task.arrival * k
                arrive = at + network / 2
                rows.append({
                    "run": run, "policy": policy, "repetition": rep, "kind": "ping",
                    "echo_seq": n, "task_id": task.task_id, "client": client.name,
                    "target": svc.name, "tier": svc.tier, "size": task.size, "cls": task.cls,
                    "arrival_model": task.arrival, "dispatch_model": task.arrival,
                    "arrival_wall": at, "dispatch_wall": at,
                    "response_model": task.arrival + network + service,
                    "server_arrival_wall": arrive, "start_wall": arrive,
                    "end_wall": arrive + service * k,
                    "response_wall": at + network + service * k,
                    "latency_s": network + service, "network_s": network, "wait_s": 0.0,
                    "service_s": service, "latency_wall_s": network + service * k,
                    "queue_at_arrival": 0, "state_age_s": 0.0, "decision_us": 0.0,
                    "outcome": "ok"})
        progress(f"  {policy} (repetition {rep}): simulated")
        return rows

    rows, failed = replay_each(scenario.repetitions, scenario.policies, replay, progress)
    return {"executor": "sim", "rows": rows, "failed": failed}
