"""Armada streaming on a brought-up topology: every user streams the trace's frames
through one policy's client while timed actions hit the nodes. The shared core of
``testbed run`` on Armada frame scenarios (:mod:`testbed.systems.armada.driver`) and of
the fleet experiments (:func:`run_fleet`).

The scenario is an ``armada-fleet`` one (:mod:`testbed.systems.armada.builders`) or any
Armada scenario with Captains and frame-streaming users. The steps:

1. :func:`deploy_fleet` waits for every Captain, deploys the detector through the Beacon
   (3 replicas near the fleet's seeded sites, plus one on the cloud when there is one;
   the Application Manager's auto-scaling on) and records the deployment start-up time;
   :func:`settle` then registers every user with a query and waits until the replica set
   has settled (no replica added, removed or pending for ``SETTLE_QUIET_S``), so
   auto-scaling has reacted to the users before any measurement;
2. :func:`stream` runs one :class:`StreamPlan`: every user streams the same materialised
   frame trace through the plan's client (the Armada SDK, a
   :class:`~nodes.armada.user.BaselineClient` or the server-reconnect client) while the
   plan's timed actions (crash, leave, join, load) are applied through the harness;
3. :func:`run_fleet`, the fleet experiments' run: a list of policies on one bring-up
   through ``testbed run`` (its driver, :mod:`testbed.systems.armada.driver`, runs steps
   1 and 2), then ``fleet.json`` beside the standard results folder.

Actions are applied in the driver's own thread, between the users' start and the wait
for their end: the run's launcher serves one request at a time, and a user's wait holds
it, so no second thread may use it meanwhile.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import EmulationError
from testbed.scenario import Scenario, scenario_from_dict
from testbed.systems.armada.builders import CLOUD, MIN_REPLICAS, Fleet, fleet_layout
from testbed.systems.armada.control import (
    APP,
    CAPTAIN,
    REPLICA_MEMORY_MB,
    Progress,
    beacon_service,
    replica_program,
    start_user,
    wait,
    wait_for_captains,
    wait_users,
)
from testbed.systems.armada.model import (
    FRAME_TIMEOUT_S,
    POLICIES,
    RECONNECT,
    REGISTER_EVERY_S,
    REPROBE_S,
    REQUEST_TIMEOUT_S,
    SDK_POLICIES,
    SETTLE_QUIET_S,
    probe_kind,
    user_seed,
)

USER_TIMEOUT_S = 90.0
#: How long before an action the harness asks the Beacon for the replica view (a local
#: request of a few milliseconds), so the action itself is not delayed.
SNAPSHOT_LEAD_S = 0.2
DEPLOY_TIMEOUT_S = 240.0  # a replica on a 0.05-core node starts in about a minute
SETTLE_TIMEOUT_S = 240.0
#: Edge nodes of the small sizes (CI): a replica starts in 10-20 s on them. On 0.05 cores
#: it takes about a minute here, so the tiny nodes are kept for the full sizes.
SMALL_NODES = (0.1, 0.12, 0.15)
TINY_NODES = (0.05, 0.06, 0.07)


def fleet_scenario(fleet: Fleet, name: str = "armada-fleet", policies: Sequence[str] = (),
                   events: Sequence[Action] = ()) -> Scenario:
    """The scenario of ``fleet`` with ``policies`` and ``events``: the ``armada-fleet``
    builder called through the scenario loader, as a file naming it would."""
    return scenario_from_dict({"name": name, "policies": list(policies),
                               "events": [e.to_event() for e in events],
                               "build": {"builder": "armada-fleet",
                                         "params": fleet.to_params()}},
                              source=f"<{name}>")


def fleet_of(scenario: Scenario) -> Fleet | None:
    """The :class:`Fleet` an ``armada-fleet`` scenario was built from (its ``build``
    params), or None for a scenario written out by hand."""
    build = scenario.raw.get("build")
    if not isinstance(build, Mapping) or build.get("builder") != "armada-fleet":
        return None
    return Fleet.from_params(build.get("params", {}))


# ------------------------------------------------------------------ plans and metrics


@dataclasses.dataclass(frozen=True)
class Action:
    """A harness event ``offset_s`` after a stream's start (``action``: crash, leave,
    join or load; ``params`` e.g. ``{"cpu": 0.1}`` for load)."""

    offset_s: float
    action: str
    target: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_event(self) -> dict[str, Any]:
        """The action as a scenario event (or a fleet's ``actions`` entry): ``at`` in
        model seconds, which are wall seconds at a time scale of 1 (every fleet's)."""
        return {"at": self.offset_s, "action": self.action, "target": self.target,
                "params": dict(self.params)}


@dataclasses.dataclass(frozen=True)
class StreamPlan:
    """Every user streams ``duration_s`` through a policy's client; ``actions`` meanwhile.

    ``policy`` is the label the rows carry; ``name`` the registered policy it runs
    (default: the label) with its entry's ``params`` (an SDK policy's ``near_equal``)."""

    policy: str
    duration_s: float
    actions: tuple[Action, ...] = ()
    name: str = ""
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.policy)
        if self.name not in POLICIES:
            raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, "
                             f"found {self.name!r}")

    @classmethod
    def of_scenario(cls, scenario: Scenario, policy: str) -> StreamPlan:
        """``policy`` streaming for the scenario's duration; its ``events`` and, for a
        fleet, the fleet's ``actions`` are the stream's actions (model seconds divided by
        the time scale: wall seconds after the stream's start)."""
        fleet = fleet_of(scenario)
        try:
            entry = scenario.policy_entry(policy)
            name, params = entry.name, entry.params
        except KeyError:  # a policy the scenario does not list: plain, by its name
            name, params = policy, {}
        timed = [(e.at, e.action, e.target, e.params) for e in scenario.events]
        timed += [(a["at"], a["action"], a["target"], a["params"])
                  for a in (fleet.actions if fleet is not None else ())]
        return cls(policy, scenario.duration / scenario.time_scale, tuple(
            Action(at / scenario.time_scale, action, target, dict(params))
            for at, action, target, params in sorted(timed, key=lambda t: t[0])),
            name, dict(params))


def latency_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Frames, ok, lost, and mean / p50 / p95 end-to-end latency (ms) of ok frames."""
    ok = np.array([r["latency_s"] for r in rows if r["outcome"] == "ok"], dtype=float) * 1e3
    stats: dict[str, Any] = {"frames": len(rows), "ok": int(ok.size),
                             "lost": len(rows) - int(ok.size)}
    for key, value in (("mean_ms", ok.mean() if ok.size else None),
                       ("p50_ms", np.percentile(ok, 50) if ok.size else None),
                       ("p95_ms", np.percentile(ok, 95) if ok.size else None)):
        stats[key] = None if value is None else float(value)
    return stats


def served_where(rows: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """Per user, the tier that served most of its ok frames (None: none served); a tie
    between the edge and another tier does not count as the edge."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r["client"], {})
        if r["outcome"] == "ok":
            tier = r.get("tier") or "edge"
            counts[r["client"]][tier] = counts[r["client"]].get(tier, 0) + 1
    return {u: (max(c, key=lambda t: (c[t], t != "edge", t)) if c else None)
            for u, c in counts.items()}


def intervals(rows: Sequence[Mapping[str, Any]], cuts: Sequence[float],
              users: Sequence[str]) -> list[dict[str, Any]]:
    """Split frames at the wall instants ``cuts`` (by dispatch time); per interval the
    latency statistics and how many of ``users`` were served mostly at the edge, mostly
    elsewhere, or not at all."""
    bounds = [-math.inf, *cuts, math.inf]
    out = []
    for k in range(len(bounds) - 1):
        part = [r for r in rows if bounds[k] <= r["dispatch_wall"] < bounds[k + 1]]
        where = served_where(part)
        at_edge = sum(where.get(u) == "edge" for u in users)
        unserved = sum(where.get(u) is None for u in users)
        out.append({"interval": k, **latency_stats(part), "users_at_edge": at_edge,
                    "users_elsewhere": len(users) - at_edge - unserved,
                    "users_unserved": unserved})
    return out


def largest_gaps(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Per user, the largest gap (s) between consecutive ok completions."""
    done: dict[str, list[float]] = {}
    for r in rows:
        if r["outcome"] == "ok":
            done.setdefault(r["client"], []).append(r["response_wall"])
    return {u: (float(np.diff(sorted(t)).max()) if len(t) > 1 else None)
            for u, t in done.items()}


# ------------------------------------------------------------------ the run


def replica_view(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What a report keeps of an application's replicas (with the utilisation the
    Application Manager last measured, which a report uses to explain latency)."""
    return [{k: r.get(k) for k in ("task_id", "node_id", "status", "ready_at", "utilisation")}
            for r in status.get("replicas", [])]


def user_positions(scenario: Scenario) -> dict[str, tuple[float, float]]:
    """Every client node's location (a user queries with it)."""
    return {n.name: (float(n.lat or 0.0), float(n.lon or 0.0)) for n in scenario.clients()}


def deploy_fleet(topo: Any, fleet: Fleet, runtime: str | None = None) -> dict[str, Any]:
    """Step 1 of the module docstring, the replicas run by the Captains' ``runtime``
    (default: the fleet's ``task_runtime``); returns what it measured."""
    from nodes.armada.sdk.client import app_status, deploy
    from testbed.emulation.probe import in_netns

    beacon = beacon_service(topo.scenario)

    token = topo.secret.value
    servers = [s.node for s in topo.scenario.services if s.program == CAPTAIN]
    ctl = topo.net.hosts[beacon.node]
    local = f"http://127.0.0.1:{beacon.port}"
    wait_for_captains(topo, beacon, servers)
    lay = fleet_layout(fleet)
    spec = {"name": APP, **replica_program(runtime or fleet.task_runtime),
            "args": {"workers": 1},
            "cpu": fleet.cpu_per_replica, "memory_mb": REPLICA_MEMORY_MB,
            "need_storage": False, "min_replicas": MIN_REPLICAS + fleet.cloud,
            "locations": [{"lat": lay["sites"][i][0], "lon": lay["sites"][i][1]}
                          for i in lay["deploy_at"]]
            + ([{"lat": CLOUD[0], "lon": CLOUD[1]}] if fleet.cloud else [])}
    asked = time.time()
    in_netns(ctl.pid, lambda: deploy(local, token, spec))

    def ready() -> dict[str, Any] | None:
        status = app_status(local, APP)
        running = [r for r in status["replicas"] if r["status"] == "running"]
        return status if len(running) >= MIN_REPLICAS + fleet.cloud else None

    status = in_netns(ctl.pid, lambda: wait(ready, DEPLOY_TIMEOUT_S,
                                            "the first replicas to run"))
    deployed = {"asked": asked, "created_at": status["created_at"],
                "first_running_at": status["first_running_at"],
                "startup_s": status["first_running_at"] - status["created_at"],
                "all_min_running_s": time.time() - asked,
                "replicas": replica_view(status)}
    began = time.time()
    status = settle(topo)
    deployed.update(settle_s=time.time() - began, settled=replica_view(status),
                    scaling=status.get("scaling", []))
    return deployed


def settle(topo: Any) -> dict[str, Any]:
    """Register every user (again every ``REGISTER_EVERY_S``: the Application Manager
    forgets a user after its TTL) and wait until the replica set is quiet: no replica added, removed or pending
    and no scaling decision for ``SETTLE_QUIET_S``. Returns the settled app status."""
    from nodes.armada.app_manager import ACTIVE
    from nodes.armada.sdk.client import app_status
    from testbed.emulation.probe import http_json, in_netns

    beacon = beacon_service(topo.scenario)
    local = f"http://127.0.0.1:{beacon.port}"
    users = [{"user": u, "lat": lat, "lon": lon, "app": APP}
             for u, (lat, lon) in user_positions(topo.scenario).items()]

    def register() -> None:
        for body in users:
            code, answer = http_json(f"{local}/query", "POST", body)
            if code != 200:
                raise EmulationError(f"query for {body['user']} refused: {answer}")

    history: list[tuple[float, int, int]] = []
    registered = [-math.inf]

    def settled() -> dict[str, Any] | None:
        now = time.time()
        if now - registered[0] >= REGISTER_EVERY_S:
            register()
            registered[0] = now
        status = app_status(local, APP)
        active = [r for r in status["replicas"] if r["status"] in ACTIVE]
        running = sum(r["status"] == "running" for r in active)
        history.append((now, len(active), running))
        quiet = [h for h in history if h[0] >= now - SETTLE_QUIET_S]
        last_scaled = max((e["t"] for e in status.get("scaling", [])), default=-math.inf)
        stable = (history[0][0] <= now - SETTLE_QUIET_S and last_scaled <= now - SETTLE_QUIET_S
                  and all(h[1] == len(active) and h[2] == running == len(active)
                          for h in quiet))
        return status if stable else None

    return in_netns(topo.net.hosts[beacon.node].pid,
                    lambda: wait(settled, SETTLE_TIMEOUT_S, "the replica set to settle"))


def _serving(rows_file: Path) -> str | None:
    """The node that served the latest ok frame appended to a user's rows file."""
    latest: tuple[float, str] | None = None
    if rows_file.exists():
        for line in rows_file.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line being written
            if row.get("outcome") == "ok" and (latest is None or row["response_wall"] > latest[0]):
                latest = (row["response_wall"], row["target"])
    return None if latest is None else latest[1]


def _snapshot(replicas: Callable[[], list[dict[str, Any]]] | None) -> dict[str, Any]:
    """The replica set just before an action (``replicas``: None when not asked for, an
    ``replicas_error`` when the Beacon did not answer: the action is applied anyway)."""
    if replicas is None:
        return {}
    try:
        return {"replicas": replicas()}
    except Exception as exc:  # noqa: BLE001 - a missing view must not stop the stream
        return {"replicas": None, "replicas_error": f"{type(exc).__name__}: {exc}"}


def apply_actions(topo: Any, actions: Sequence[Action], start_at: float,
                  rows_of: Mapping[str, Path],
                  replicas: Callable[[], list[dict[str, Any]]] | None = None
                  ) -> list[dict[str, Any]]:
    """Apply ``actions`` at their instants after ``start_at`` (see the module docstring).

    A target ``serving:USER`` means the node that served USER's latest frame at that
    instant; ``last:ACTION`` the node of the latest applied ACTION (e.g. unload what was
    loaded). Returns what was applied, with wall instants and errors, and, when
    ``replicas`` is given, the replica view it returned ``SNAPSHOT_LEAD_S`` before each
    action (the set at the end of the interval the action closes: one Beacon request,
    so a report can say which replicas served and which were still starting)."""
    from testbed.scenario.model import Event

    applied: list[dict[str, Any]] = []
    for act in sorted(actions, key=lambda a: a.offset_s):
        due = start_at + act.offset_s
        time.sleep(max(0.0, due - SNAPSHOT_LEAD_S - time.time()))
        view = _snapshot(replicas)  # taken just ahead, so the action keeps its instant
        time.sleep(max(0.0, due - time.time()))
        at = time.time()
        target: str | None = act.target
        error = None
        if target.startswith("serving:"):
            target = _serving(rows_of[target.split(":", 1)[1]])
        elif target.startswith("last:"):
            target = next((a["target"] for a in reversed(applied)
                           if a["action"] == target.split(":", 1)[1]), None)
        done: float | None = None
        if target is None:
            error = f"{act.target} names no node at {act.offset_s:g} s"
        else:
            try:
                settle = topo.event_effect(Event(at=act.offset_s, action=act.action,
                                                 target=target, params=dict(act.params)))
                done = time.time()
                if settle is not None:
                    settle()
            except Exception as exc:  # noqa: BLE001 - recorded and raised by the driver
                error = f"{type(exc).__name__}: {exc}"
        applied.append({"offset_s": act.offset_s, "action": act.action, "target": target,
                        "asked": act.target, "params": dict(act.params), "at": at,
                        "done": done, "error": error, **view})
    return applied


def event_lines(applied: Sequence[Mapping[str, Any]], policy: str, repetition: int,
                start_at: float, time_scale: float) -> list[dict[str, Any]]:
    """The event log's lines (:func:`testbed.event_log.log_line`) of one stream's
    applied actions: due at ``start_at + offset_s``, in effect once the topology's
    ``event_effect`` returned (``done``), so the fidelity guard judges these actions as
    it judges the scheduler's."""
    from testbed.event_log import APPLIED, FAILED, log_line
    from testbed.scenario.model import Event

    return [log_line(policy, repetition,
                     Event(at=a["offset_s"] * time_scale, action=a["action"],
                           target=a["target"] or a["asked"], params=dict(a["params"])),
                     start_at, time_scale, a["done"],
                     APPLIED if a["error"] is None else f"{FAILED}{a['error']}")
            for a in applied]


def client_mode(policy: str) -> str:
    """The ``mode`` of :mod:`nodes.armada.user` that runs ``policy``'s client."""
    if policy in SDK_POLICIES:
        return "stream"
    return "reconnect" if policy == RECONNECT else "baseline"


def replicas_now(topo: Any) -> list[dict[str, Any]]:
    """The application's replica view, asked of the Beacon from its own node."""
    from nodes.armada.sdk.client import app_status
    from testbed.emulation.probe import in_netns

    beacon = beacon_service(topo.scenario)
    local = f"http://127.0.0.1:{beacon.port}"
    return replica_view(in_netns(topo.net.hosts[beacon.node].pid,
                                 lambda: app_status(local, APP)))


def stream(topo: Any, plan: StreamPlan, k: int, run: str, frames_dir: Path, trace_dir: Path,
           repetition: int | None = None) -> dict[str, Any]:
    """Step 2 of the module docstring for plan ``k`` (its rows carry ``repetition``,
    ``k`` by default, which also seeds the clients); returns its rows, applied actions
    and user results."""
    scenario = topo.scenario
    beacon = beacon_service(scenario)
    beacon_url = f"http://{topo.net.ip(beacon.node)}:{beacon.port}"
    tiers = {n.name: n.tier for n in scenario.topology.nodes if n.role == "server"}
    cloud = [n for n, tier in tiers.items() if tier == "cloud"]
    users = user_positions(scenario)
    lead = 2.0 + 0.1 * len(users)  # every user process imports and sleeps until probe_at
    probe_at = time.time() + lead
    stagger = min(0.3, 3.0 / len(users))  # first probe rounds spread over up to 3 s
    start_at = probe_at + stagger * len(users) + 2.0
    pids, rows_of = {}, {}
    tag = f"{k}-{plan.policy}"
    for i, (user, (lat, lon)) in enumerate(users.items()):
        rows_of[user] = topo.workdir / f"rows-{tag}-{user}.jsonl"
        config = {"run": run, "app": APP, "frames_dir": str(frames_dir), "beacon": beacon_url,
                  "timeout_s": FRAME_TIMEOUT_S, "request_timeout_s": REQUEST_TIMEOUT_S,
                  "tiers": tiers, "trace": str(trace_dir),
                  "reprobe_s": list(REPROBE_S), "user": user, "lat": lat,
                  "lon": lon, "probe_at": probe_at + stagger * i,
                  "start_at": start_at, "rows": str(rows_of[user]),
                  "repetition": k if repetition is None else repetition,
                  "seed": user_seed(scenario, k if repetition is None else repetition, i),
                  "policy": plan.policy,
                  "cloud_nodes": cloud, "out": str(topo.workdir / f"result-{tag}-{user}.json"),
                  "mode": client_mode(plan.name),
                  "probe": probe_kind(plan.name),
                  "near_equal": float(plan.params.get("near_equal", 0.0))}
        pids[user] = start_user(topo, user, config, tag)
    applied = apply_actions(topo, plan.actions, start_at, rows_of,
                            lambda: replicas_now(topo))
    topo.log_event_lines(event_lines(applied, plan.policy, k if repetition is None
                                     else repetition, start_at, scenario.time_scale))
    wait_users(topo, pids, tag, start_at - time.time() + plan.duration_s + USER_TIMEOUT_S)
    failed = [a for a in applied if a["error"]]
    if failed:
        raise EmulationError(f"stream {tag}: actions failed: {failed}")
    rows = [json.loads(line) for u in users for line in rows_of[u].read_text().splitlines()
            if line.strip()]
    results = {u: json.loads((topo.workdir / f"result-{tag}-{u}.json").read_text())
               for u in users}
    return {"rows": rows, "applied": applied, "start_at": start_at,
            "picks": {u: (r["pick"] or {}).get("node_id") for u, r in results.items()},
            "first_probes": {u: {"candidates": r.get("candidates", []),
                                 "probe_ms": r.get("probe_ms", {})}
                             for u, r in results.items()},
            "switches": {u: sum(e["kind"] in ("switch", "connect") for e in r["events"])
                         for u, r in results.items()},
            "switch_events": sorted(
                ({"t": e["t"], "user": u, **e["detail"]} for u, r in results.items()
                 for e in r["events"] if e["kind"] == "switch" and e["t"] >= start_at),
                key=lambda e: (e["t"], e["user"]))}


def stream_record(topo: Any, plan: StreamPlan, done: Mapping[str, Any],
                  before: list[dict[str, Any]]) -> dict[str, Any]:
    """What a report keeps of one stream: the plan, what was applied, the users' first
    picks with the candidates and first-round probe latencies behind them, switch
    counts and switches during the stream (what herding is measured from), the replica
    set before and after, the scaling decisions made during the stream, and the latency
    statistics."""
    from nodes.armada.sdk.client import app_status
    from testbed.emulation.probe import in_netns

    beacon = beacon_service(topo.scenario)
    local = f"http://127.0.0.1:{beacon.port}"
    after = in_netns(topo.net.hosts[beacon.node].pid, lambda: app_status(local, APP))
    return {"policy": plan.policy, "duration_s": plan.duration_s,
            "start_at": done["start_at"], "applied": done["applied"],
            "picks": done["picks"], "first_probes": done["first_probes"],
            "switches": done["switches"],
            "switch_events": done["switch_events"],
            "replicas_before": before, "replicas_after": replica_view(after),
            "scaling_during": [e for e in after.get("scaling", [])
                               if e["t"] >= done["start_at"] - 1.0],
            "scaling_after": after.get("scaling", []), **latency_stats(done["rows"])}


def write_small_probe(frames_dir: Path) -> Path:
    """The ``armada-light`` probe: a 64x128 crop (one HOG window) of the first frame."""
    import cv2

    from nodes.armada.user import SMALL_PROBE

    first = min(frames_dir.glob("*.jpg"))
    image = cv2.imdecode(np.frombuffer(first.read_bytes(), dtype=np.uint8), cv2.IMREAD_COLOR)
    ok, data = cv2.imencode(".jpg", image[:128, :64])
    if not ok:
        raise EmulationError(f"could not encode the small probe from {first}")
    path = frames_dir / SMALL_PROBE
    path.write_bytes(data.tobytes())
    return path


def run_fleet(fleet: Fleet, policies: Sequence[str], out: Path, name: str, size: str,
              progress: Progress = print, ledger_root: Path | None = None,
              events: Sequence[Action] = ()) -> Path:
    """Run ``policies`` in turn on ``fleet`` with ``events`` through ``testbed run``
    (:func:`testbed.runner.run_scenario`) into ``out``, and add ``fleet.json``.

    ``fleet.json`` holds the fleet and its layout, the (first) deployment with its
    settling measurements, per stream its :func:`stream_record` with the host's CPU idle
    share during it (overall, and per 0.5 s sample as ``host_samples``: wall instant,
    idle share) and the replica view before each applied action, and the host's over
    the whole run; ``metadata.json`` also records
    the experiment ``name`` and ``size``.
    """
    from testbed.runner import run_scenario

    scenario = fleet_scenario(fleet, name, policies, events)
    run_scenario(scenario, out=out, progress=progress, ledger_root=ledger_root)
    meta = json.loads((out / "metadata.json").read_text())
    meta.update(experiment=name, size=size)
    (out / "metadata.json").write_text(json.dumps(meta, indent=2, default=str))
    driver = meta["driver"]
    result = {"fleet": dataclasses.asdict(fleet), "layout": fleet_layout(fleet),
              "deployment": driver["deployments"][0], "streams": driver["streams"],
              "host": driver["host"],
              "servers": [s.node for s in scenario.services if s.program == CAPTAIN],
              "tiers": {n.name: n.tier for n in scenario.topology.nodes if n.role == "server"}}
    (out / "fleet.json").write_text(json.dumps(result, indent=1, default=str))
    host = result["host"]
    progress(f"host CPU idle {host['idle_share']:.0%}"
             + (" - SATURATED" if host["saturated"] else ""))
    return out
