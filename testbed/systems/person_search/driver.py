"""``testbed run`` of a person-search scenario in emulation: the system's driver.

The generic executor (:func:`testbed.emulation.executor.run_emulation`) brings the
scenario up (the coordinator and the edge data servers of ``nodes/person_search/``
running in their hosts) and hands the topology to the driver :func:`make_driver`
returns:

* :meth:`SearchDriver.prepare` reads the materialised trace's ground truth (written by
  the ``person-search`` generator's side files) and gives every edge server its own
  part of it (``PUT /world``, :func:`load_world`): which targets each of its items
  shows. The truth stays on the edge servers; the coordinator sees item metadata only.
* :meth:`SearchDriver.replay` asks the coordinator to run every search of the trace at
  once under one policy (``POST /runs``, from the coordinator's own host) and turns its
  answer into trace rows (:func:`run_rows`, one row of kind ``search`` per search),
  with the policies seeded per repetition exactly as the simulator's replay
  (:func:`testbed.systems.person_search.sim.run_sim`) seeds them.
* :meth:`SearchDriver.details` reports, per replay, the totals, whether every search
  ended on the item that really holds its target, where wall time went beyond the model
  (:func:`overheads`) and the host's CPU idle share while it ran.

``docs/person_search.md`` is the HTTP contract of the two services.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nodes.person_search.model import RUN_OPTIONS, split_run_options
from testbed.errors import EmulationError, TestbedError
from testbed.scenario.model import Scenario
from testbed.systems.person_search.deployment import Deployment, deployment
from testbed.systems.person_search.sim import replay_reading, scenario_policy_seed
from workloads.person_search import SearchWorld, read_ground_truth

if TYPE_CHECKING:
    from testbed.emulation.executor import EmulatedTopology

Progress = Callable[[str], None]
RUN_TIMEOUT_S = 600.0  # one coordinator run, wall


def world_truths(holder: np.ndarray, servers: int) -> list[dict[str, list[int]]]:
    """Per server, per slot ``"j"`` (1..slots), the targets its item of ``T_j`` shows."""
    slots = holder.shape[1] - 1
    out: list[dict[str, list[int]]] = [{str(j): [] for j in range(1, slots + 1)}
                                       for _ in range(servers)]
    for j in range(1, slots + 1):
        for k, s in enumerate(holder[:, j]):
            out[int(s)][str(j)].append(k)
    return out


def load_world(urls: Sequence[str], names: Sequence[str],
               truths: Sequence[Mapping[str, list[int]]], slots: int, epoch: str,
               headers: Mapping[str, str]) -> None:
    """Give every edge server its data (``PUT /world``, with the run secret's
    ``headers``); raise naming a refusing server."""
    from testbed.emulation.probe import http_json

    for s, present in enumerate(truths):
        code, answer = http_json(f"{urls[s]}/world", "PUT",
                                 {"slots": slots, "present": present, "epoch": epoch},
                                 headers=dict(headers))
        if code != 200:
            raise EmulationError(f"{names[s]}: PUT /world refused ({code}): {answer}")


def run_rows(result: Mapping[str, Any], run: str, policy: str, repetition: int,
             started_wall: float, time_scale: float, tc: float, client: str,
             names: Sequence[str]) -> list[dict[str, Any]]:
    """One trace row (kind ``search``) per request of a coordinator run.

    Model columns are wall seconds since the run's start times ``time_scale``.
    ``latency_s`` is the search's response time; ``network_s`` the sum over its analyses
    of what each round trip took beyond the server's own time (network, HTTP, event
    loops); ``service_s`` the rest; ``wait_s`` 0 (an analysis starts when it arrives).
    Wall columns: ``dispatch`` the first request sent, ``server_arrival``/``start`` its
    admission, ``end`` the last analysis's end, ``response`` its answer. ``client`` is
    the coordinator's node, ``target`` the node (``names[server]``) that held the ``T_R``
    item, ``step`` the number of analyses minus one, ``queue_at_arrival`` what the first
    analysis found running, ``decision_us`` the sum of the request's choices."""
    by_search: dict[int, list[Mapping[str, Any]]] = {}
    for a in result["analyses"]:
        by_search.setdefault(int(a["search"]), []).append(a)
    rows = []
    for req in result["requests"]:
        k = int(req["search"])
        mine = sorted(by_search[k], key=lambda a: a["step"])
        first, last = mine[0], mine[-1]
        latency = float(req["response_model_s"])
        network = time_scale * sum(
            a["answered_wall"] - a["sent_wall"] - (a["ended_wall"] - a["admitted_wall"])
            for a in mine)
        rows.append({
            "run": run, "policy": policy, "repetition": repetition, "kind": "search",
            "task_id": k, "client": client, "target": names[int(last["server"])],
            "tier": "edge", "size": tc, "cls": "search", "arrival_model": 0.0,
            "arrival_wall": started_wall,
            "dispatch_model": (first["sent_wall"] - started_wall) * time_scale,
            "response_model": latency, "dispatch_wall": first["sent_wall"],
            "server_arrival_wall": first["admitted_wall"], "start_wall": first["admitted_wall"],
            "end_wall": last["ended_wall"], "response_wall": last["answered_wall"],
            "latency_s": latency, "network_s": network, "wait_s": 0.0,
            "service_s": latency - network, "latency_wall_s": float(req["response_wall_s"]),
            "queue_at_arrival": int(first["running_at_admission"]), "estimate_s": None,
            "state_age_s": 0.0, "decision_us": float(sum(a["decision_us"] for a in mine)),
            "outcome": "ok", "error": None, "step": int(req["analyses"]) - 1,
            "item": str(req["found_item"])})
    return rows


def overheads(result: Mapping[str, Any], tc_wall: float, sharing: str = "paper"
              ) -> dict[str, float | None]:
    """Where wall time went besides the model, per analysis: the round trip minus the
    server's own time (network, HTTP, event loops), the server's lateness against the
    paper rule's duration ``tc_wall x factor x (k + 1)`` (only for ``sharing="paper"``)
    and the coordinator's choices."""
    analyses = result["analyses"]
    if not analyses:
        return {"analyses": 0, "round_trip_overhead_ms_mean": None, "analysis_ms_mean": None,
                "round_trip_overhead_ms_p95": None, "timer_lateness_ms_mean": None,
                "decision_us_mean": None}
    trips = np.array([a["answered_wall"] - a["sent_wall"] - (a["ended_wall"] - a["admitted_wall"])
                      for a in analyses]) * 1e3
    late = None
    if sharing == "paper":
        late = float(np.mean([(a["ended_wall"] - a["admitted_wall"])
                              - tc_wall * a["factor"] * (a["running_at_admission"] + 1)
                              for a in analyses])) * 1e3
    served = [a["ended_wall"] - a["admitted_wall"] for a in analyses]
    return {"analyses": len(analyses), "round_trip_overhead_ms_mean": float(trips.mean()),
            "analysis_ms_mean": float(np.mean(served)) * 1e3,
            "round_trip_overhead_ms_p95": float(np.percentile(trips, 95)),
            "timer_lateness_ms_mean": late,
            "decision_us_mean": float(np.mean([a["decision_us"] for a in analyses]))}


def combined_host(hosts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One host summary over several monitored replays: the idle share weighted by each
    replay's duration, the lowest sampled share, saturated if any replay was."""
    if not hosts:
        return None
    total = sum(h["duration_s"] for h in hosts) or 1.0
    return {"idle_share": sum(h["idle_share"] * h["duration_s"] for h in hosts) / total,
            "min_idle_share": min(h["min_idle_share"] for h in hosts),
            "duration_s": sum(h["duration_s"] for h in hosts),
            "cores": hosts[0]["cores"], "threshold": hosts[0]["threshold"],
            "saturated": any(h["saturated"] for h in hosts)}


def run_body(urls: Sequence[str], world: SearchWorld, policy: str,
             params: Mapping[str, Any], policy_seed: int, dep: Deployment) -> dict[str, Any]:
    """The coordinator's ``POST /runs`` body for every search of ``world`` under the
    registered ``policy`` with a scenario entry's ``params`` (sent as ``policy_params``
    when there are any: the priority policy's candidate-set rule, ``w``, ...), the
    servers' ``Tc`` and time scale, and the coordinator's accounting."""
    params = split_run_options(params)[0]
    body: dict[str, Any] = {
        "servers": list(urls), "layout": world.layout.kind, "slots": world.slots,
        "starts": [int(s) for s in world.holder[:, 0]], "policy": policy,
        "policy_seed": policy_seed, "tc": dep.tc, "time_scale": dep.time_scale,
        "accounting": dep.accounting}
    if params:
        body["policy_params"] = dict(params)
    return body


class SearchDriver:
    """The emulation driver of one person-search scenario (see the module docstring)."""

    def __init__(self, scenario: Scenario) -> None:
        """Check the scenario's deployment and policy entries now, before anything is
        brought up: the coordinator runs only the default run options."""
        self.scenario = scenario
        self.deployment: Deployment = deployment(scenario)
        for label in scenario.policies:
            options = split_run_options(scenario.policy_entry(label).params)[1]
            for key, value in options.items():
                if value != RUN_OPTIONS[key]:
                    raise TestbedError(
                        f"{scenario.name}: policy {label}: params.{key}: expected "
                        f"{str(RUN_OPTIONS[key]).lower()} in emulation (the coordinator runs "
                        f"no other; the simulator does), found {value!r}")
        self.world: SearchWorld | None = None
        self.run = ""
        self.urls: list[str] = []
        self.coordinator_url = ""
        self.replays: list[dict[str, Any]] = []

    def prepare(self, topo: EmulatedTopology, run: str, trace_dir: Path,
                progress: Progress) -> None:
        """Load each edge server with its part of the trace's ground truth."""
        from testbed.emulation.probe import in_netns

        dep = self.deployment
        world = read_ground_truth(trace_dir)
        if world.items.n_servers != len(dep.edges):
            raise EmulationError(f"{self.scenario.name}: the workload has "
                                 f"{world.items.n_servers} servers, the scenario "
                                 f"{len(dep.edges)} edge servers")
        self.world, self.run = world, run
        self.urls = [topo.url(svc, dep.client) for svc in dep.edges]
        self.coordinator_url = topo.url(dep.coordinator, dep.client)
        truths = world_truths(world.holder, len(dep.edges))
        in_netns(topo.net.hosts[dep.client].pid,
                 lambda: load_world(self.urls, dep.names, truths, world.slots, run,
                                    topo.secret.header()))
        progress(f"run {run}: {world.targets} searches' ground truth loaded into "
                 f"{len(dep.edges)} edge servers")

    def replay(self, topo: EmulatedTopology, policy: str, repetition: int,
               progress: Progress) -> list[dict[str, Any]]:
        """One coordinator run of every search under the policy entry labelled
        ``policy`` (its registered policy and parameters); its trace rows."""
        from testbed.emulation.probe import http_json, in_netns
        from testbed.host_monitor import HostMonitor

        dep, world = self.deployment, self.world
        if world is None:
            raise EmulationError("replay before prepare: no world is loaded")
        entry = self.scenario.policy_entry(policy)
        pseed = scenario_policy_seed(self.scenario, repetition)
        body = run_body(self.urls, world, entry.name, entry.params, pseed, dep)
        with HostMonitor(interval_s=0.5) as monitor:
            code, answer = in_netns(topo.net.hosts[dep.client].pid, lambda: http_json(
                f"{self.coordinator_url}/runs", "POST", body, timeout=RUN_TIMEOUT_S,
                headers=topo.secret.header()))
        if code != 200:
            raise EmulationError(f"coordinator run {policy} #{repetition} refused ({code}): "
                                 f"{answer.get('error', answer)}")
        total = float(sum(r["response_model_s"] for r in answer["requests"]))
        found = all(int(r["found_item"]) == world.required_item(int(r["search"]))
                    for r in answer["requests"])
        self.replays.append({
            **replay_reading(policy, entry.name, entry.params, dep.accounting),
            "repetition": repetition, "policy_seed": pseed,
            "targets": len(answer["requests"]), "total_response_s": total,
            "total_analyses": len(answer["analyses"]),
            "model_makespan_s": float(answer["model_makespan_s"]),
            "batches": int(answer["batches"]), "wall_s": float(answer["wall_s"]),
            "all_found": found, "host": monitor.summary().to_dict(),
            **overheads(answer, dep.tc / dep.time_scale, dep.sharing)})
        progress(f"  {policy} #{repetition}: total {total:.0f} model s, "
                 f"{len(answer['analyses']) / max(len(answer['requests']), 1):.1f} analyses "
                 f"per search, {answer['wall_s']:.1f} s wall"
                 + ("" if found else " - SOME SEARCHES ENDED ON A WRONG ITEM"))
        return run_rows(answer, self.run, policy, repetition, answer["started_wall"],
                        dep.time_scale, dep.tc, dep.client, dep.names)

    def details(self) -> dict[str, Any]:
        """Every replay's summary, the servers' model and the host over all replays."""
        dep = self.deployment
        return {"replays": self.replays, "servers": len(dep.edges), "tc": dep.tc,
                "sharing": dep.sharing, "time_scale": dep.time_scale, "accounting": dep.accounting,
                "targets": self.world.targets if self.world is not None else None,
                "host": combined_host([r["host"] for r in self.replays])}


def make_driver(scenario: Scenario) -> SearchDriver:
    """``System.emulate``: the driver of a person-search scenario."""
    return SearchDriver(scenario)
