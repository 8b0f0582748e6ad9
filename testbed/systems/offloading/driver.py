"""The offloading system's emulation driver: dispatchers replay the trace onto tiers.

For each replay every tier server is reset (its counters and rate windows dated to the
common start instant), one dispatcher (:mod:`nodes.offloading.dispatcher`) per client host is
started through the launcher, each replays its client's tasks in real time placing them
with the policy, the scenario's events are applied on schedule, and the dispatchers'
rows are collected.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.emulation.executor import EmulatedTopology
from testbed.emulation.probe import http_json, in_netns
from testbed.errors import EmulationError
from testbed.poll import wait_until
from testbed.scenario.model import Scenario
from testbed.systems.offloading.sim_replay import policy_seed

Progress = Callable[[str], None]
START_LEAD_S = 1.0  # dispatchers are started this long before the common start instant
RESET_LEAD_S = 0.02  # extra lead per tier server to reset before the start instant
PROGRESS_EVERY_S = 5.0  # wall seconds between progress lines while a policy replays


def reset_tier_servers(topo: EmulatedTopology, since: float, timeout: float = 60.0) -> None:
    """Clear every tier server's counters, dating their rate windows to ``since``
    (the next trace's start, wall epoch); waits while tasks are still in flight."""
    for svc in topo.scenario.task_servers():
        host = topo.net.hosts[svc.node]
        url = f"http://127.0.0.1:{svc.port}/reset"

        def reset_done(url: str = url) -> bool:
            status, body = http_json(url, method="POST", body={"since": since},
                                     headers=topo.secret.header())
            if status not in (200, 409):  # 409: tasks still in flight, ask again
                raise EmulationError(f"reset of {url} failed: {status} {body}")
            return status == 200

        in_netns(host.pid, lambda check=reset_done, url=url: wait_until(
            check, timeout, f"{url} to accept the reset (tasks in flight)", interval=0.05))


class DispatchDriver:
    """Replays a tier-server scenario's trace with one dispatcher per client host."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.run = ""
        self.trace_dir = Path()

    def prepare(self, topo: EmulatedTopology, run: str, trace_dir: Path,
                progress: Progress) -> None:
        """Nothing to set up beyond the services: remember the run and the trace."""
        del topo, progress
        self.run, self.trace_dir = run, trace_dir

    def details(self) -> dict[str, Any]:
        """The dispatchers' configuration files and logs are in ``work/``."""
        return {}

    def replay(self, topo: EmulatedTopology, policy: str, repetition: int,
               progress: Progress) -> list[dict[str, Any]]:
        """Replay the materialised trace once with ``policy``; returns the trace rows."""
        scenario = topo.scenario
        # The lead leaves time to reset every server and start every dispatcher.
        start_at = time.time() + START_LEAD_S + RESET_LEAD_S * len(scenario.task_servers())
        reset_tier_servers(topo, since=start_at)
        poll = scenario.executor.poll_interval_wall_s(scenario.time_scale)
        timeout_model = scenario.task_timeout
        pids: dict[str, int] = {}
        outs: dict[str, Path] = {}
        tag = f"{policy}-r{repetition}"
        entry = scenario.policy_entry(policy)
        for client in scenario.clients():
            targets = [{"name": s.name, "tier": s.tier, "url": topo.url(s, client.name)}
                       for s in scenario.servers_for(client)]
            out = topo.workdir / f"rows-{tag}-{client.name}.jsonl"
            config = {"run": self.run, "client": client.name, "policy": policy,
                      "policy_name": entry.name, "policy_params": dict(entry.params),
                      "policy_seed": policy_seed(scenario, repetition),
                      "repetition": repetition, "trace": str(self.trace_dir),
                      "targets": targets, "poll_interval_s": poll,
                      "time_scale": scenario.time_scale, "start_at": start_at,
                      "out": str(out), "timeout_s": timeout_model}
            config_path = topo.workdir / f"dispatch-{tag}-{client.name}.json"
            config_path.write_text(json.dumps(config, indent=1))
            host = topo.net.hosts[client.name]
            pid = topo.infra.launcher.spawn(host.pid, "nodes.offloading.dispatcher", [str(config_path)],
                                            topo.workdir / f"dispatch-{tag}-{client.name}.log",
                                            env=topo.service_env())
            topo.infra.ledger.record_process(pid, what=f"dispatcher {client.name}")
            pids[client.name], outs[client.name] = pid, out
        events = topo.schedule_events(start_at, policy, repetition)
        budget = START_LEAD_S + (scenario.duration + timeout_model) / scenario.time_scale + 60.0
        deadline = time.monotonic() + budget
        try:
            for client, pid in pids.items():
                while (code := topo.infra.launcher.wait(pid, timeout=PROGRESS_EVERY_S)) is None:
                    if time.monotonic() > deadline:
                        raise EmulationError(f"dispatcher on {client} did not finish within "
                                             f"{budget:.0f} s")
                    model_now = (time.time() - start_at) * scenario.time_scale
                    progress(f"  {policy} (repetition {repetition}): model time "
                             f"{min(model_now, scenario.duration):.0f}/{scenario.duration:g} s")
                if code != 0:
                    log = topo.workdir / f"dispatch-{tag}-{client}.log"
                    raise EmulationError(f"dispatcher on {client} exited with {code}: "
                                         f"{log.read_text()[-1500:]}")
        finally:
            events.stop()
        rows = []
        for out in outs.values():
            with out.open() as fh:
                rows.extend(json.loads(line) for line in fh if line.strip())
        ok = sum(1 for r in rows if r.get("outcome") == "ok")
        progress(f"  {policy} (repetition {repetition}): {ok}/{len(rows)} tasks ok")
        if events.errors:
            progress(f"  events that failed: {'; '.join(events.errors)}")
        return rows


def make_driver(scenario: Scenario) -> DispatchDriver:
    """The driver ``testbed run`` uses for an offloading scenario in emulation."""
    return DispatchDriver(scenario)
