"""Armada over a generated fleet of edge nodes and users: the shared driver of the
scalability, edge-failure, churn and background-load experiments.

:func:`fleet_scenario` builds a scenario from a :class:`Fleet` (seeded, pure): a control
node with the Beacon, Application Manager and Spinner; ``nodes`` edge nodes, each on its
own site LAN (tier 1: users at that site reach it in one hop) and every site behind its
own ISP path to a WAN core (tier 2: seeded one-way delays and bandwidths, so sites differ);
optionally a cloud node far behind the core; ``users`` users spread over the sites. Each
edge node runs a Captain with a seeded CPU limit (heterogeneous hardware), typed
volunteer or dedicated.

:func:`run_fleet` brings that scenario up once and runs a list of :class:`StreamPlan`:

1. waits for every Captain, deploys the detector through the Beacon (3 replicas, with
   the Application Manager's auto-scaling on) and records the deployment start-up time;
2. registers every user with a query and waits until the replica set has settled (no
   replica added, removed or pending for ``SETTLE_QUIET_S``): auto-scaling reacts to the
   users before any measurement;
3. for each plan in turn, every user streams the same materialised frame trace through
   the plan's client (the Armada SDK, or a :class:`~nodes.armada.user.
   BaselineClient`) while the plan's timed actions (crash, leave, join, load) are applied
   through the harness; the rows of plan ``k`` carry ``repetition = k``;
4. writes the results folder (traces, ``fleet.json``, metadata) like every experiment.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nodes.armada.app_manager import ACTIVE
from testbed.errors import EmulationError
from testbed.scenario import Scenario
from testbed.scenario.loader import scenario_from_dict
from testbed.systems.armada.control import (
    APP,
    DETECT_MODULE,
    REPLICA_MEMORY_MB,
    Progress,
    beacon_service,
    poll,
    run_frames_experiment,
    start_user,
    wait_for_captains,
    wait_users,
)

CENTRE = (40.1106, -88.2073)
CLOUD = (41.6106, -89.7073)  # a data centre about 200 km away
FRAME_TIMEOUT_S = 5.0  # a frame not answered by then is a timeout row
#: Each request of a client: past it the SDK (and a baseline) sends the frame to its next
#: choice, so a user herded onto an overloaded replica moves before its frames expire.
REQUEST_TIMEOUT_S = 2.0
REPROBE_S = (5.0, 7.0)
USER_TIMEOUT_S = 90.0
DEPLOY_TIMEOUT_S = 240.0  # a replica on a 0.05-core node starts in about a minute
SETTLE_QUIET_S = 6.0
SETTLE_TIMEOUT_S = 240.0
MIN_REPLICAS = 3
TOKEN = "armada-fleet"
POLICIES = ("armada", "armada-light", "geo-nearest", "random", "edge-to-cloud")
#: ``armada-light`` is the SDK probing with a small request (one 64x128 HOG window as a
#: JPEG of about 2 KB) instead of a whole frame.
SDK_POLICIES = ("armada", "armada-light")
#: Edge nodes of the small sizes (CI): a replica starts in 10-20 s on them. On 0.05 cores
#: it takes about a minute here, so the tiny nodes are kept for the full sizes.
SMALL_NODES = (0.1, 0.12, 0.15)
TINY_NODES = (0.05, 0.06, 0.07)


@dataclasses.dataclass(frozen=True)
class Fleet:
    """What :func:`fleet_scenario` builds (see the module docstring).

    ``node_cores`` are the CPU limits (cores) edge nodes draw from; ``replica_cpu`` is
    what each replica asks for (default: the smallest node's cores, so one replica per
    node and a replica's utilisation, measured against it, reads as the node's);
    ``users_per_replica`` drives the Application Manager's user-driven
    scaling; ``max_replicas`` defaults to one per node.
    """

    nodes: int
    users: int
    seed: int = 1
    cloud: bool = False
    volunteer_share: float = 0.5
    node_cores: tuple[float, ...] = (0.05, 0.06, 0.07)
    cloud_cores: float = 0.2
    cloud_delay_ms: float = 40.0
    replica_cpu: float | None = None
    users_per_replica: int = 3
    max_replicas: int | None = None
    span_km: float = 12.0
    fps: float = 1.0
    frame: tuple[int, int] = (240, 180)  # HOG takes about 5.4 ms of a full core on one

    def __post_init__(self) -> None:
        if self.nodes < MIN_REPLICAS:
            raise ValueError(f"nodes: expected at least {MIN_REPLICAS}, found {self.nodes}")
        if not 1 <= self.users <= 99 or self.nodes > 99:
            raise ValueError(f"users and nodes: expected 1..99, found {self.users}, {self.nodes}")
        if max(self.node_cores) * self.nodes + self.cloud_cores * self.cloud > 1.5:
            raise ValueError(f"{self.nodes} nodes of up to {max(self.node_cores)} cores"
                             + (f" and a {self.cloud_cores}-core cloud" if self.cloud else "")
                             + " exceed the 1.5 cores this 2-core host can honour")

    @property
    def edge_names(self) -> list[str]:
        return [f"e{i + 1:02d}" for i in range(self.nodes)]

    @property
    def user_names(self) -> list[str]:
        return [f"u{j + 1:02d}" for j in range(self.users)]


def _offset(lat: float, km_north: float, km_east: float) -> tuple[float, float]:
    """Degrees of latitude and longitude for a displacement in km."""
    return km_north / 111.2, km_east / (111.2 * math.cos(math.radians(lat)))


def fleet_layout(fleet: Fleet) -> dict[str, Any]:
    """The seeded numbers of a fleet: sites, CPU limits, node types, ISP paths, users."""
    rng = np.random.default_rng([fleet.seed, fleet.nodes, fleet.users])
    side = math.ceil(math.sqrt(fleet.nodes))
    step = fleet.span_km / max(side - 1, 1)
    sites = []
    for i in range(fleet.nodes):
        north = (i // side) * step + rng.uniform(-0.2, 0.2) * step - fleet.span_km / 2
        east = (i % side) * step + rng.uniform(-0.2, 0.2) * step - fleet.span_km / 2
        dlat, dlon = _offset(CENTRE[0], north, east)
        sites.append((round(CENTRE[0] + dlat, 5), round(CENTRE[1] + dlon, 5)))
    cores = [float(rng.choice(fleet.node_cores)) for _ in range(fleet.nodes)]
    volunteers = set(rng.permutation(fleet.nodes)[:round(fleet.volunteer_share * fleet.nodes)]
                     .tolist())
    isp = [(float(rng.choice([2.0, 3.0, 4.0, 5.0, 6.0, 8.0])), int(rng.choice([20, 50, 100])))
           for _ in range(fleet.nodes)]
    order = rng.permutation(fleet.nodes).tolist()
    user_sites = [order[j % fleet.nodes] for j in range(fleet.users)]
    users = []
    for site in user_sites:
        dlat, dlon = _offset(CENTRE[0], rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1))
        users.append((site, round(sites[site][0] + dlat, 5), round(sites[site][1] + dlon, 5)))
    deploy_at = order[:MIN_REPLICAS]
    return {"sites": sites, "cores": cores, "volunteers": sorted(volunteers), "isp": isp,
            "users": users, "deploy_at": deploy_at}


def fleet_scenario(fleet: Fleet, name: str = "armada-fleet", duration_s: float = 20.0) -> Scenario:
    """The scenario of ``fleet`` (validated by the scenario loader like any file)."""
    lay = fleet_layout(fleet)
    nodes: list[dict[str, Any]] = [{"name": "ctl", "role": "server", "tier": "control",
                                    "lat": CENTRE[0], "lon": CENTRE[1]}]
    links: list[dict[str, Any]] = [{"a": "ctl", "b": "wan", "delay_ms": 1, "bw_mbit": 100}]
    services: list[dict[str, Any]] = [
        {"name": "beacon", "program": "armada.beacon", "node": "ctl", "port": 8000,
         "params": {"app_manager": "http://127.0.0.1:8001",
                    "spinner": "http://127.0.0.1:8002", "token": TOKEN}},
        {"name": "appmgr", "program": "armada.app_manager", "node": "ctl", "port": 8001,
         "params": {"spinner": "http://127.0.0.1:8002",
                    "users_per_replica": fleet.users_per_replica, "cooldown_s": 2.0,
                    "user_ttl_s": 30.0,
                    "max_replicas": fleet.max_replicas or fleet.nodes + fleet.cloud}},
        # A Captain sharing a few hundredths of a core with a busy detector answers
        # slowly: 2 s health timeout, and three misses before a node is declared dead.
        {"name": "spinner", "program": "armada.spinner", "node": "ctl", "port": 8002,
         "params": {"health_timeout_s": 2.0}},
    ]

    def captain(node: str, lat: float, lon: float, cores: float, kind: str) -> None:
        services.append({"name": f"cap-{node}", "program": "armada.captain", "node": node,
                         "port": 7000, "params": {
                             "beacon": "http://{ip:ctl}:8000", "token": TOKEN, "node_id": node,
                             "advertise_host": f"{{ip:{node}}}", "lat": lat, "lon": lon,
                             "cpu": cores, "memory_mb": 512, "node_type": kind}})

    for i, node in enumerate(fleet.edge_names):
        lat, lon = lay["sites"][i]
        cores = lay["cores"][i]
        nodes.append({"name": node, "role": "server", "tier": "edge", "lat": lat, "lon": lon,
                      "cpu": round(cores / 2, 4)})
        nodes.append({"name": f"s{i + 1:02d}", "role": "switch"})
        delay, bw = lay["isp"][i]
        links += [{"a": node, "b": f"s{i + 1:02d}", "delay_ms": 0.5, "bw_mbit": 100},
                  {"a": f"s{i + 1:02d}", "b": "wan", "delay_ms": delay, "bw_mbit": bw}]
        captain(node, lat, lon, cores, "volunteer" if i in lay["volunteers"] else "dedicated")
    if fleet.cloud:
        lat, lon = CLOUD
        nodes.append({"name": "cloud", "role": "server", "tier": "cloud", "lat": lat,
                      "lon": lon, "cpu": fleet.cloud_cores / 2})
        links.append({"a": "cloud", "b": "wan", "delay_ms": fleet.cloud_delay_ms,
                      "bw_mbit": 100})
        captain("cloud", lat, lon, fleet.cloud_cores, "dedicated")
    for j, user in enumerate(fleet.user_names):
        site, lat, lon = lay["users"][j]
        nodes.append({"name": user, "role": "client", "lat": lat, "lon": lon})
        links.append({"a": user, "b": f"s{site + 1:02d}", "delay_ms": 0.5, "bw_mbit": 100})
    nodes.append({"name": "wan", "role": "switch"})
    doc = {"name": name, "seed": fleet.seed,
           "description": f"generated Armada fleet: {fleet.nodes} edge nodes, {fleet.users} users"
                          + (", a cloud" if fleet.cloud else ""),
           "topology": {"nodes": nodes, "links": links}, "services": services,
           "workload": {"generator": "frame-stream", "seed": fleet.seed,
                        "params": {"fps": fleet.fps, "demand_s": 0.0054,
                                   "frames": {"width": fleet.frame[0],
                                              "height": fleet.frame[1], "count": 30}}},
           "policies": [], "duration": duration_s}
    return scenario_from_dict(doc, source=f"<{name}>")


# ------------------------------------------------------------------ plans and metrics


@dataclasses.dataclass(frozen=True)
class Action:
    """A harness event ``offset_s`` after a stream's start (``action``: crash, leave,
    join or load; ``params`` e.g. ``{"cpu": 0.1}`` for load)."""

    offset_s: float
    action: str
    target: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class StreamPlan:
    """Every user streams ``duration_s`` through ``policy``'s client; ``actions`` meanwhile."""

    policy: str
    duration_s: float
    actions: tuple[Action, ...] = ()

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, "
                             f"found {self.policy!r}")


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


def _replica_view(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{k: r.get(k) for k in ("task_id", "node_id", "status", "ready_at")}
            for r in status.get("replicas", [])]


def _deploy(topo: Any, fleet: Fleet, beacon: Any, token: str,
            servers: list[str]) -> dict[str, Any]:
    """Steps 1 and 2 of the module docstring; returns what they measured."""
    from nodes.armada.sdk.client import app_status, deploy
    from testbed.emulation.probe import in_netns

    ctl = topo.net.hosts[beacon.node]
    local = f"http://127.0.0.1:{beacon.port}"
    wait_for_captains(topo, beacon, servers)
    lay = fleet_layout(fleet)
    spec = {"name": APP, "runtime": "process", "module": DETECT_MODULE, "args": {"workers": 1},
            "cpu": fleet.replica_cpu or min(fleet.node_cores), "memory_mb": REPLICA_MEMORY_MB, "need_storage": False,
            "min_replicas": MIN_REPLICAS + fleet.cloud,
            "locations": [{"lat": lay["sites"][i][0], "lon": lay["sites"][i][1]}
                          for i in lay["deploy_at"]]
            + ([{"lat": CLOUD[0], "lon": CLOUD[1]}] if fleet.cloud else [])}
    asked = time.time()
    in_netns(ctl.pid, lambda: deploy(local, token, spec))

    def ready() -> dict[str, Any] | None:
        status = app_status(local, APP)
        running = [r for r in status["replicas"] if r["status"] == "running"]
        return status if len(running) >= MIN_REPLICAS + fleet.cloud else None

    status = in_netns(ctl.pid, lambda: poll("the first replicas were not running",
                                             DEPLOY_TIMEOUT_S, ready))
    deployed = {"asked": asked, "created_at": status["created_at"],
                "first_running_at": status["first_running_at"],
                "startup_s": status["first_running_at"] - status["created_at"],
                "all_min_running_s": time.time() - asked,
                "replicas": _replica_view(status)}
    began = time.time()
    status = settle(ctl, local, fleet)
    deployed.update(settle_s=time.time() - began, settled=_replica_view(status),
                    scaling=status.get("scaling", []))
    return deployed


def settle(ctl: Any, local: str, fleet: Fleet) -> dict[str, Any]:
    """Register every user (again every 5 s: the Application Manager forgets a user after
    its TTL) and wait until the replica set is quiet: no replica added, removed or pending
    and no scaling decision for ``SETTLE_QUIET_S``. Returns the settled app status."""
    from nodes.armada.sdk.client import app_status
    from testbed.emulation.probe import http_json, in_netns

    lay = fleet_layout(fleet)
    users = [{"user": u, "lat": lat, "lon": lon, "app": APP}
             for u, (_, lat, lon) in zip(fleet.user_names, lay["users"], strict=True)]

    def register() -> None:
        for body in users:
            code, answer = http_json(f"{local}/query", "POST", body)
            if code != 200:
                raise EmulationError(f"query for {body['user']} refused: {answer}")

    history: list[tuple[float, int, int]] = []
    registered = [-math.inf]

    def settled() -> dict[str, Any] | None:
        now = time.time()
        if now - registered[0] >= 5.0:
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

    return in_netns(ctl.pid, lambda: poll("the replica set did not settle",
                                           SETTLE_TIMEOUT_S, settled))


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


def _apply_actions(topo: Any, plan: StreamPlan, start_at: float,
                   rows_of: Mapping[str, Path]) -> list[dict[str, Any]]:
    """Apply the plan's actions at their instants, in the driver's thread (the run's
    launcher serves one request at a time, so no second thread may use it meanwhile).

    A target ``serving:USER`` means the node that served USER's latest frame at that
    instant; ``last:ACTION`` the node of the latest applied ACTION (e.g. unload what was
    loaded). Returns what was applied, with wall instants and errors."""
    from testbed.scenario.model import Event

    applied: list[dict[str, Any]] = []
    for act in sorted(plan.actions, key=lambda a: a.offset_s):
        time.sleep(max(0.0, start_at + act.offset_s - time.time()))
        at = time.time()
        target: str | None = act.target
        error = None
        if target.startswith("serving:"):
            target = _serving(rows_of[target.split(":", 1)[1]])
        elif target.startswith("last:"):
            target = next((a["target"] for a in reversed(applied)
                           if a["action"] == target.split(":", 1)[1]), None)
        if target is None:
            error = f"{act.target} names no node at {act.offset_s:g} s"
        else:
            try:
                topo.apply_event(Event(at=act.offset_s, action=act.action, target=target,
                                       params=dict(act.params)))
            except Exception as exc:  # noqa: BLE001 - recorded and raised by the driver
                error = f"{type(exc).__name__}: {exc}"
        applied.append({"offset_s": act.offset_s, "action": act.action, "target": target,
                        "asked": act.target, "params": dict(act.params), "at": at,
                        "error": error})
    return applied


def _stream(topo: Any, fleet: Fleet, plan: StreamPlan, k: int, run: str, beacon_url: str,
            frames_dir: Path, out: Path, seed: int) -> dict[str, Any]:
    """Step 3 for plan ``k``; returns its rows, applied actions and user results."""
    scenario = topo.scenario
    nodes = {n.name: n for n in scenario.topology.nodes}
    tiers = {n.name: n.tier for n in scenario.topology.nodes if n.role == "server"}
    users = fleet.user_names
    lead = 2.0 + 0.1 * len(users)  # every user process imports and sleeps until probe_at
    probe_at = time.time() + lead
    stagger = min(0.3, 3.0 / len(users))  # first probe rounds spread over up to 3 s
    start_at = probe_at + stagger * len(users) + 2.0
    pids, rows_of = {}, {}
    tag = f"{k}-{plan.policy}"
    for i, user in enumerate(users):
        rows_of[user] = topo.workdir / f"rows-{tag}-{user}.jsonl"
        config = {"run": run, "app": APP, "frames_dir": str(frames_dir), "beacon": beacon_url,
                  "timeout_s": FRAME_TIMEOUT_S, "request_timeout_s": REQUEST_TIMEOUT_S,
                  "tiers": tiers, "trace": str(out / "trace"),
                  "reprobe_s": list(REPROBE_S), "user": user, "lat": nodes[user].lat,
                  "lon": nodes[user].lon, "probe_at": probe_at + stagger * i,
                  "start_at": start_at, "rows": str(rows_of[user]), "repetition": k,
                  "seed": seed * 1000 + k * 100 + i, "policy": plan.policy,
                  "cloud_nodes": ["cloud"] if fleet.cloud else [],
                  "out": str(topo.workdir / f"result-{tag}-{user}.json"),
                  "mode": "stream" if plan.policy in SDK_POLICIES else "baseline",
                  "probe": "small" if plan.policy == "armada-light" else "frame"}
        pids[user] = start_user(topo, user, config, tag)
    applied = _apply_actions(topo, plan, start_at, rows_of)
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
            "switches": {u: sum(e["kind"] == "switch" for e in r["events"])
                         for u, r in results.items()}}


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


def run_fleet(fleet: Fleet, plans: Sequence[StreamPlan], out: Path, name: str,
              size: str, progress: Progress = print,
              ledger_root: Path | None = None) -> Path:
    """Run ``plans`` on ``fleet`` (module docstring) and write the results folder ``out``.

    ``fleet.json`` holds the deployment and settling measurements and, per plan, its
    policy, the actions applied (wall instants), the stream's start, the users' first
    picks and switch counts, the replica set afterwards and the latency statistics.
    """
    from nodes.armada.sdk.client import app_status
    from testbed.emulation.probe import in_netns
    from testbed.host_monitor import HostMonitor

    duration = max(p.duration_s for p in plans)
    scenario = fleet_scenario(fleet, name, duration)

    @dataclasses.dataclass(frozen=True)
    class Plan:
        duration_s: float
        fps: float
        nodes: int
        users: int
        policies: tuple[str, ...]

    plan_record = Plan(duration, fleet.fps, fleet.nodes, fleet.users,
                       tuple(p.policy for p in plans))

    def measure(topo: Any, run: str, scen: Scenario, frames_dir: Path) -> dict[str, Any]:
        beacon, token = beacon_service(scen)
        servers = [s.node for s in scen.services if s.program == "armada.captain"]
        ctl = topo.net.hosts[beacon.node]
        local = f"http://127.0.0.1:{beacon.port}"
        beacon_url = f"http://{topo.net.ip(beacon.node)}:{beacon.port}"
        write_small_probe(frames_dir)
        with HostMonitor(interval_s=0.5) as monitor:
            deployed = _deploy(topo, fleet, beacon, token, servers)
            progress(f"{APP}: {MIN_REPLICAS} replicas serving {deployed['all_min_running_s']:.1f}"
                     f" s after the deployment request (first after "
                     f"{deployed['startup_s']:.1f} s); settled at "
                     f"{len(deployed['settled'])} replicas for {fleet.users} users")
            streams, rows = [], []
            for k, plan in enumerate(plans):
                # every policy starts from a quiet replica set (the previous stream's load
                # may have scaled it up)
                before = (deployed["settled"] if k == 0 else
                          _replica_view(settle(ctl, local, fleet)))
                done = _stream(topo, fleet, plan, k, run, beacon_url, frames_dir, out,
                               scen.seed)
                after = in_netns(ctl.pid, lambda: app_status(local, APP))
                stats = latency_stats(done["rows"])
                rows += done["rows"]
                streams.append({"policy": plan.policy, "duration_s": plan.duration_s,
                                "start_at": done["start_at"], "applied": done["applied"],
                                "picks": done["picks"], "switches": done["switches"],
                                "replicas_before": before,
                                "replicas_after": _replica_view(after),
                                "scaling_during": [
                                    e for e in after.get("scaling", [])
                                    if e["t"] >= done["start_at"] - 1.0],
                                "scaling_after": after.get("scaling", []), **stats})
                mean = "-" if stats["mean_ms"] is None else f"{stats['mean_ms']:.0f}"
                progress(f"  {plan.policy}: {stats['ok']}/{stats['frames']} frames ok, mean "
                         f"{mean} ms")
        host = monitor.summary().to_dict()
        progress(f"host CPU idle {host['idle_share']:.0%}"
                 + (" - SATURATED" if host["saturated"] else ""))
        result = {"fleet": dataclasses.asdict(fleet), "layout": fleet_layout(fleet),
                  "deployment": deployed, "streams": streams, "host": host,
                  "servers": servers,
                  "tiers": {n.name: n.tier for n in scen.topology.nodes if n.role == "server"}}
        return {"rows": rows, "fleet": result, "shaping_backend": topo.net.backend}

    return run_frames_experiment(scenario, plan_record, size, out, {}, measure, "fleet",
                                 progress, ledger_root)
