"""``testbed run --executor sim`` on an Armada fleet: every policy replayed in model time.

:func:`run_sim` (registered as the ``armada`` system's ``simulate``) reads what the
emulation driver reads: the ``armada-fleet`` build params (:class:`~testbed.systems.
armada.builders.Fleet` and its seeded layout), the scenario's topology (nodes, their
locations, tiers and links), its services' parameters (the Application Manager's
and Spinner's, the Captains' cores) and the materialised frame trace; it then runs one
:class:`~testbed.systems.armada.sim.FleetSim` per policy and repetition, each from a fresh
deployment, with the emulated users' seeds. The rows are the emulation's frame rows
(same columns, model seconds where the emulation has wall seconds); ``driver`` holds per
replay what the emulation's driver keeps of a stream (first picks, switches, replica
sets, scaling decisions, applied actions). Pure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodes.armada.configs import AppManagerParams, SpinnerParams
from testbed.errors import TestbedError
from testbed.replays import replay_each
from testbed.scenario.model import Scenario
from testbed.systems.armada.builders import CLOUD, MIN_REPLICAS, Fleet, fleet_layout
from testbed.systems.armada.model import POLICIES, RECONNECT, REPLICA_MEMORY_MB, user_seed
from testbed.systems.armada.sim import FleetSim, Link, Node
from testbed.systems.armada.sim_calibration import Calibration, load_calibration
from workloads.trace import read_trace

APP_MANAGER = "armada.app_manager"
SPINNER = "armada.spinner"
CAPTAIN = "armada.captain"
SIMULATED_ACTIONS = ("crash", "leave", "join", "load")


def fleet_params(scenario: Scenario) -> Fleet:
    """The fleet an ``armada-fleet`` scenario was built from; other Armada scenarios are
    not simulated (a :class:`TestbedError` says so)."""
    build = scenario.raw.get("build")
    if not isinstance(build, Mapping) or build.get("builder") != "armada-fleet":
        raise TestbedError(f"{scenario.name}: the Armada simulator replays scenarios built "
                           "by armada-fleet only (build.builder: armada-fleet)")
    return Fleet.from_params(build.get("params", {}))


def check_simulable(scenario: Scenario) -> None:
    """Refuse, before a run writes anything, what the simulator does not replay: a
    scenario not built by ``armada-fleet``, the ``server-reconnect`` policy, an event
    other than crash, leave, join and load."""
    fleet_params(scenario)
    for label in scenario.policies:
        _check_policy(scenario.policy_entry(label).name)
    for event in scenario.events:
        if event.action not in SIMULATED_ACTIONS:
            raise TestbedError(f"{scenario.name}: event action {event.action!r} is not "
                               f"simulated for Armada ({', '.join(SIMULATED_ACTIONS)} are)")


def _check_policy(policy: str) -> None:
    if policy not in POLICIES or policy == RECONNECT:
        raise TestbedError(f"policy {policy!r}: the Armada simulator replays "
                           f"{', '.join(p for p in POLICIES if p != RECONNECT)}")


def _service_params(scenario: Scenario, program: str) -> dict[str, Any]:
    found = [s for s in scenario.services if s.program == program]
    if len(found) != 1:
        raise TestbedError(f"{scenario.name}: expected one {program} service, found "
                           f"{len(found)}")
    return dict(found[0].params)


def sim_nodes(scenario: Scenario) -> list[Node]:
    """Every Captain's node, with its cores and location as the Captain registers them."""
    tiers = {n.name: n.tier for n in scenario.topology.nodes}
    nodes = []
    for svc in scenario.services:
        if svc.program != CAPTAIN:
            continue
        p = svc.params
        tags = frozenset(t for t in str(p.get("tags", "")).split(",") if t)
        nodes.append(Node(svc.node, float(p["lat"]), float(p["lon"]), float(p["cpu"]),
                          int(p["memory_mb"]), tiers.get(svc.node) or "edge", tags))
    return nodes


def sim_links(scenario: Scenario) -> list[Link]:
    """The scenario's links: one-way delay (s) and bandwidth (bit/s)."""
    return [Link(link.a, link.b, float(link.delay_ms) / 1e3,
                 float(link.bw_mbit) * 1e6 if link.bw_mbit else None)
            for link in scenario.topology.links]


def _frames(trace_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each client's frames of the materialised trace, in arrival order."""
    tasks, _ = read_trace(trace_dir)
    out: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        out.setdefault(task.client, []).append(
            {"task_id": task.task_id, "arrival": task.arrival, "size": task.size,
             "cls": task.cls})
    for frames in out.values():
        frames.sort(key=lambda f: f["arrival"])
    return out


def replay_one(scenario: Scenario, policy: str, repetition: int, calibration: Calibration,
               frames: Mapping[str, list[dict[str, Any]]], run: str = "") -> dict[str, Any]:
    """One policy entry (by its label) and repetition of a fleet scenario: rows and
    details."""
    entry = scenario.policy_entry(policy)
    _check_policy(entry.name)
    fleet = fleet_params(scenario)
    lay = fleet_layout(fleet)
    locations = [tuple(lay["sites"][i]) for i in lay["deploy_at"]]
    if fleet.cloud:
        locations.append(CLOUD)
    app = AppManagerParams(**_service_params(scenario, APP_MANAGER))
    spinner = SpinnerParams(**_service_params(scenario, SPINNER))
    clients = [(n.name, float(n.lat or 0.0), float(n.lon or 0.0))
               for n in scenario.clients()]
    actions = sorted([{"at": e.at / scenario.time_scale, "action": e.action,
                       "target": e.target, "params": dict(e.params)} for e in scenario.events]
                     + [{**a, "at": a["at"] / scenario.time_scale} for a in fleet.actions],
                     key=lambda a: a["at"])
    sim = FleetSim(
        calibration=calibration, nodes=sim_nodes(scenario), links=sim_links(scenario),
        users=clients, frames=frames, policy=policy, policy_name=entry.name,
        policy_params=dict(entry.params),
        seeds=[user_seed(scenario, repetition, i) for i in range(len(clients))],
        app_params=app, spinner_params=spinner, min_replicas=MIN_REPLICAS + fleet.cloud,
        locations=locations, task_cpu=fleet.cpu_per_replica,
        task_memory_mb=REPLICA_MEMORY_MB, duration_s=scenario.duration / scenario.time_scale,
        actions=actions, run=run, repetition=repetition,
        machine_cpus=int(calibration.machine.get("cpus") or 2),
        startup_seed=user_seed(scenario, repetition, len(clients)))
    return sim.run()


def run_sim(scenario: Scenario, run: str, trace_dir: Path, workdir: Path,
            progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Replay every policy and repetition of an Armada fleet ``scenario`` (module doc).
    ``workdir`` is unused: nothing runs outside this process."""
    del workdir
    calibration = load_calibration()
    frames = _frames(trace_dir)
    streams: list[dict[str, Any]] = []

    def replay(policy: str, repetition: int) -> list[dict[str, Any]]:
        began = time.perf_counter()
        done = replay_one(scenario, policy, repetition, calibration, frames, run)
        rows = done["rows"]
        ok = [r["latency_s"] for r in rows if r["outcome"] == "ok"]
        streams.append({"policy": policy, "repetition": repetition, **done["details"],
                        "frames": len(rows), "ok": len(ok),
                        "mean_ms": 1e3 * sum(ok) / len(ok) if ok else None,
                        "sim_wall_s": time.perf_counter() - began})
        mean = "-" if not ok else f"{1e3 * sum(ok) / len(ok):.0f} ms"
        progress(f"  {policy} (repetition {repetition}): {len(ok)}/{len(rows)} frames ok, "
                 f"mean {mean} ({time.perf_counter() - began:.1f} s simulated)")
        return rows

    rows, failed = replay_each(scenario.repetitions, scenario.policies, replay, progress)
    return {"rows": rows, "failed": failed,
            "driver": {"calibration": calibration.path, "streams": streams}}
