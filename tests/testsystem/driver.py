"""The echo system's emulation driver: the client host pings the chosen echo server."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.emulation.executor import EmulatedTopology
from testbed.emulation.probe import http_json, in_netns
from testbed.latency import completed_columns
from testbed.scenario.model import Scenario
from tests.testsystem.policies import choose
from workloads.trace import read_trace


class EchoDriver:
    """Replays the trace from each client host in real time, one ping after another."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.run = ""
        self.tasks: list[Any] = []

    def prepare(self, topo: EmulatedTopology, run: str, trace_dir: Path,
                progress: Callable[[str], None]) -> None:
        """Read the materialised trace once."""
        del topo
        self.run = run
        self.tasks, _ = read_trace(trace_dir)
        progress(f"  echo: {len(self.tasks)} pings to replay")

    def details(self) -> dict[str, Any]:
        """How many pings each replay sent."""
        return {"pings": len(self.tasks)}

    def replay(self, topo: EmulatedTopology, policy: str, repetition: int,
               progress: Callable[[str], None]) -> list[dict[str, Any]]:
        """Every ping at ``start + arrival / time_scale``, to the server ``policy`` picks."""
        scenario = topo.scenario
        rows: list[dict[str, Any]] = []
        start_at = time.time() + 0.2
        for client in scenario.clients():
            servers = scenario.servers_for(client)
            mine = [t for t in self.tasks if t.client == client.name]

            def send(mine: list[Any] = mine, client: str = client.name,
                     servers: tuple[Any, ...] = servers) -> None:
                for k, task in enumerate(mine):
                    due = start_at + task.arrival / scenario.time_scale
                    time.sleep(max(0.0, due - time.time()))
                    svc = servers[choose(policy, k, len(servers))]
                    sent = time.time()
                    status, body = http_json(topo.url(svc, client, "/echo"), "POST",
                                             {"task_id": task.task_id})
                    row = {"run": self.run, "policy": policy, "repetition": repetition,
                           "kind": "ping", "echo_seq": k, "task_id": task.task_id,
                           "client": client,
                           "target": svc.name, "tier": svc.tier, "size": task.size,
                           "cls": task.cls, "arrival_model": task.arrival,
                           "dispatch_model": task.arrival, "arrival_wall": due,
                           "dispatch_wall": sent, "state_age_s": 0.0, "decision_us": 0.0}
                    if status == 200:
                        row.update(completed_columns(task.arrival, sent, time.time(),
                                                     body["server_arrival"], body["start"],
                                                     body["end"], scenario.time_scale),
                                   queue_at_arrival=0, outcome="ok")
                    else:
                        row.update(outcome="error", error=f"{status} {body}")
                    rows.append(row)

            in_netns(topo.net.hosts[client.name].pid, send)
        progress(f"  {policy} (repetition {repetition}): {len(rows)} pings")
        return rows


def make_driver(scenario: Scenario) -> EchoDriver:
    """The echo system's ``emulate`` hook."""
    return EchoDriver(scenario)
