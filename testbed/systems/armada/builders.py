"""Armada's scenario builders: parameters in, a partial scenario document out (pure).

A scenario file names one with ``build: {builder: NAME, params: {...}}``
(:mod:`testbed.scenario.loader` calls it and validates what it returns like any file):

* ``armada-fleet`` (:func:`armada_fleet`, from a :class:`Fleet`): a control node with
  the Beacon, Application Manager (auto-scaling on) and Spinner; ``nodes`` edge nodes,
  each on its own site LAN (tier 1: users at that site reach it in one hop) and every
  site behind its own ISP path to a WAN core (tier 2: seeded one-way delays and
  bandwidths, so sites differ); optionally a cloud node far behind the core; ``users``
  users spread over the sites. Each edge node runs a Captain with a seeded CPU limit
  (heterogeneous hardware), typed volunteer or dedicated.
* ``armada-storage`` (:func:`armada_storage`, from a :class:`StorageSites`): a control
  node with the Beacon, Application Manager (TopN = 1, as in the paper's storage runs),
  Spinner and Cargo Manager; ``sites`` edge sites at growing distances, site ``i``
  behind its own ISP path of :data:`SITE_DELAYS_MS` ``[i]`` one way to the WAN core,
  each with a Captain and a Cargo; one user on site 0's LAN.

A bad parameter raises ``ValueError("params.<field>: expected ..., found ...")``, which
the loader reports as ``build.params.<field>``. Paths the services write to (a Cargo's
store, the Cargo Manager's state) are relative: they are meant for the run's work folder
(see :func:`storage_document`). Nothing here does I/O or imports a heavy framework.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from testbed.checks import is_int, is_number, is_text

CENTRE = (40.1106, -88.2073)
CLOUD = (41.6106, -89.7073)  # a data centre about 200 km away
MIN_REPLICAS = 3
#: What this 2-core host can honour as the sum of the nodes' CPU limits (cores).
HOST_CORES = 1.5
MAX_NAMED = 9999  # e01..e99, then e0100..e9999 (names widen past 99)

#: One-way delay (ms) of site i's ISP path to the WAN core; site i sits i x 40 km east.
SITE_DELAYS_MS = (1.0, 4.0, 8.0, 14.0, 22.0, 30.0)
SITE_SPACING_KM = 40.0
NODE_CORES = 0.2
CM_PORT, CARGO_PORT = 8003, 7100
CARGO_RUNTIMES = ("process", "docker")
#: How a fleet's Captains run replicas: processes in the node, or containers in the
#: node's pod (the nodes are then docker nodes, whose engine their Captain gets).
TASK_RUNTIMES = ("process", "docker")
#: where a containerised Cargo keeps its store: the mount point of its node's volume
CARGO_STORE = "/var/lib/armada-cargo"
#: Where a storage scenario's Cargos read file sources from (``--data-root``; relative:
#: the run's work folder).
DATASETS = "datasets"
#: the face-recognition workloads, in the order the storage experiment streams them
WORKLOADS = ("read", "read-write", "write")


# ------------------------------------------------------------------ parameter checks


def _found(params: Mapping[str, Any], key: str) -> str:
    return repr(params[key]) if key in params else "nothing"


def _int(params: Mapping[str, Any], key: str, lo: int, hi: int, default: int | None = None,
         ) -> int:
    value = params.get(key, default)
    if not is_int(value) or not lo <= value <= hi:
        raise ValueError(f"params.{key}: expected an integer in [{lo}, {hi}], "
                         f"found {_found(params, key)}")
    return value


def _number(params: Mapping[str, Any], key: str, default: float, lo: float = 0.0,
            hi: float = math.inf, lo_open: bool = True) -> float:
    value = params.get(key, default)
    ok = is_number(value, finite=True) and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi < math.inf else "")
        raise ValueError(f"params.{key}: expected a finite number {bound}, "
                         f"found {_found(params, key)}")
    return float(value)


def _bool(params: Mapping[str, Any], key: str, default: bool) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(  # noqa: TRY004 - the builder contract: every bad param is a ValueError
            f"params.{key}: expected true or false, found {_found(params, key)}")
    return value


def _choice(params: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = params.get(key, choices[0])
    if value not in choices:
        raise ValueError(f"params.{key}: expected one of {', '.join(choices)}, "
                         f"found {_found(params, key)}")
    return str(value)


def _numbers(params: Mapping[str, Any], key: str, default: tuple[float, ...],
             count: int | None = None, integers: bool = False) -> tuple[float, ...]:
    value = params.get(key, default)
    kind = "integers" if integers else "numbers"
    size = f"{count} " if count is not None else "a non-empty list of "
    ok = isinstance(value, (list, tuple)) and len(value) > 0 and (
        count is None or len(value) == count) and all(
        (is_int(v) if integers else is_number(v, finite=True)) and v > 0 for v in value)
    if not ok:
        raise ValueError(f"params.{key}: expected {size}{kind} > 0, found {_found(params, key)}")
    return tuple(int(v) if integers else float(v) for v in value)


def _optional(params: Mapping[str, Any], key: str,
              check: Callable[[Mapping[str, Any], str], Any]) -> Any:
    return None if params.get(key) is None else check(params, key)


def _known(params: Mapping[str, Any], fields: tuple[str, ...]) -> None:
    if not isinstance(params, Mapping):
        raise ValueError(f"params: expected a mapping, found {params!r}")  # noqa: TRY004 - the builder contract
    for key in params:
        if key not in fields:
            raise ValueError(f"params.{key}: expected one of the fields {', '.join(fields)}, "
                             "found an unknown field")


# ------------------------------------------------------------------ armada-fleet


@dataclasses.dataclass(frozen=True)
class Fleet:
    """What :func:`fleet_document` builds (see the module docstring).

    ``node_cores`` are the CPU limits (cores) edge nodes draw from; ``replica_cpu`` is
    what each replica asks for (default: the smallest node's cores, so one replica per
    node and a replica's utilisation, measured against it, reads as the node's);
    ``users_per_replica`` drives the Application Manager's user-driven scaling;
    ``max_replicas`` defaults to one per node; ``duration`` is the scenario's (model
    seconds each policy streams). ``actions`` are timed changes whose target is only
    known when they fire, which ``events:`` cannot say: ``{"at", "action", "target",
    "params"}`` with ``target`` ``serving:USER`` (the node serving USER's latest frame)
    or ``last:ACTION`` (the node of the latest applied ACTION), e.g. background load
    that follows a user. ``host_cores`` bounds the cores every node may ask for in all
    (default: what this 2-core host can honour in emulation); ``null`` lifts the bound
    for a fleet only the simulator runs (the emulation refuses such a fleet when it is
    larger than the host, before anything is built). Past 99 nodes or users, names
    widen (``e001``...). ``task_runtime`` ``docker`` makes every Captain's node a
    ``docker`` node (a pod with the CPU limit) whose Captain runs replicas as containers
    in the pod; ``process`` keeps nodes as processes in a network namespace.
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
    duration: float = 20.0
    actions: tuple[Mapping[str, Any], ...] = ()
    host_cores: float | None = HOST_CORES
    task_runtime: str = "process"

    def __post_init__(self) -> None:
        if self.nodes < MIN_REPLICAS:
            raise ValueError(f"params.nodes: expected at least {MIN_REPLICAS}, found {self.nodes}")
        if not 1 <= self.users <= MAX_NAMED or self.nodes > MAX_NAMED:
            raise ValueError(f"params.users: expected users and nodes in 1..{MAX_NAMED}, "
                             f"found {self.users} users, {self.nodes} nodes")
        if self.host_cores is not None and self.cores_needed > self.host_cores:
            raise ValueError(f"params.node_cores: expected at most {self.host_cores:g} cores "
                             "over every node (what this 2-core host can honour in "
                             "emulation; host_cores: null for a fleet the simulator runs "
                             f"only), found {self.nodes} nodes of up to "
                             f"{max(self.node_cores):g} cores"
                             + (f" and a {self.cloud_cores:g}-core cloud" if self.cloud else ""))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Fleet:
        """The fleet a builder's ``params`` describe (every field checked)."""
        fields = tuple(f.name for f in dataclasses.fields(cls))
        _known(params, fields)
        for key in ("nodes", "users"):
            if key not in params:
                raise ValueError(f"params.{key}: expected an integer in [1, {MAX_NAMED}], "
                                 "found nothing")
        base = cls.__dataclass_fields__
        return cls(
            nodes=_int(params, "nodes", 1, MAX_NAMED),
            users=_int(params, "users", 1, MAX_NAMED),
            seed=_int(params, "seed", 0, 2**63 - 1, base["seed"].default),
            cloud=_bool(params, "cloud", False),
            volunteer_share=_number(params, "volunteer_share", 0.5, 0.0, 1.0, lo_open=False),
            node_cores=_numbers(params, "node_cores", base["node_cores"].default),
            cloud_cores=_number(params, "cloud_cores", 0.2),
            cloud_delay_ms=_number(params, "cloud_delay_ms", 40.0, lo_open=False),
            replica_cpu=_optional(params, "replica_cpu", lambda p, k: _number(p, k, 0.0)),
            users_per_replica=_int(params, "users_per_replica", 1, 1000, 3),
            max_replicas=_optional(params, "max_replicas", lambda p, k: _int(p, k, 1, 1000)),
            span_km=_number(params, "span_km", 12.0),
            fps=_number(params, "fps", 1.0, hi=30.0),
            frame=tuple(int(v) for v in _numbers(params, "frame", (240, 180), 2, True)),
            duration=_number(params, "duration", 20.0),
            actions=_actions(params),
            host_cores=None if "host_cores" in params and params["host_cores"] is None
            else _number(params, "host_cores", HOST_CORES),
            task_runtime=_choice(params, "task_runtime", TASK_RUNTIMES),
        )

    def to_params(self) -> dict[str, Any]:
        """The builder params of this fleet (``Fleet.from_params`` gives it back)."""
        out = dataclasses.asdict(self)
        out["node_cores"], out["frame"] = list(self.node_cores), list(self.frame)
        out["actions"] = [dict(a) for a in self.actions]
        return out

    @property
    def cores_needed(self) -> float:
        """The most cores the nodes may ask for in all (the cloud's included)."""
        return max(self.node_cores) * self.nodes + self.cloud_cores * self.cloud

    @property
    def edge_names(self) -> list[str]:
        return [f"e{i + 1:0{max(2, len(str(self.nodes)))}d}" for i in range(self.nodes)]

    @property
    def user_names(self) -> list[str]:
        return [f"u{j + 1:0{max(2, len(str(self.users)))}d}" for j in range(self.users)]

    @property
    def cpu_per_replica(self) -> float:
        """What each replica asks for (cores)."""
        return self.replica_cpu or min(self.node_cores)


#: What an action may do (the emulated topology's node actions).
ACTIONS = ("crash", "leave", "join", "load")


def _within(where: str, check: Callable[[], Any]) -> Any:
    """``check()``, its error's field path moved under ``params.<where>``."""
    try:
        return check()
    except ValueError as exc:
        raise ValueError(str(exc).replace("params.", f"params.{where}.", 1)) from None


def _actions(params: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The ``actions`` param (see :class:`Fleet`), each field checked."""
    value = params.get("actions", [])
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"params.actions: expected a list of actions, found {value!r}")  # noqa: TRY004 - the builder contract
    found = []
    for i, item in enumerate(value):
        where = f"actions[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"at", "action", "target", "params"}:
            raise ValueError(f"params.{where}: expected a mapping of at, action, target and "
                             f"params, found {item!r}")
        at = _within(where, partial(_number, item, "at", -1.0, lo=0.0, lo_open=False))
        if item.get("action") == "load":
            _within(f"{where}.params", partial(_number, item.get("params", {}), "cpu", -1.0,
                                               lo=0.0, hi=1.0, lo_open=False))
        action = item.get("action")
        if action not in ACTIONS:
            raise ValueError(f"params.{where}.action: expected one of {', '.join(ACTIONS)}, "
                             f"found {action!r}")
        target = item.get("target")
        kind, _, rest = str(target).partition(":")
        if not is_text(target) or kind not in ("serving", "last") or not rest:
            raise ValueError(f"params.{where}.target: expected serving:USER or last:ACTION "
                             f"(a fixed node is an event), found {target!r}")
        found.append({"at": at, "action": action, "target": target,
                      "params": dict(item.get("params", {}))})
    return tuple(found)


def _offset(lat: float, km_north: float, km_east: float) -> tuple[float, float]:
    """Degrees of latitude and longitude for a displacement in km."""
    return km_north / 111.2, km_east / (111.2 * math.cos(math.radians(lat)))


def fleet_layout(fleet: Fleet) -> dict[str, Any]:
    """The seeded numbers of a fleet: sites, CPU limits, node types, ISP paths, users,
    and the sites the first replicas are asked near (``deploy_at``)."""
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


def volunteer_nodes(fleet: Fleet) -> list[str]:
    """The edge nodes of ``fleet`` typed volunteer (the ones that may leave)."""
    return [fleet.edge_names[i] for i in fleet_layout(fleet)["volunteers"]]


def fleet_document(fleet: Fleet) -> dict[str, Any]:
    """The partial scenario document of ``fleet`` (no name, no policies)."""
    lay = fleet_layout(fleet)
    nodes: list[dict[str, Any]] = [{"name": "ctl", "role": "server", "tier": "control",
                                    "lat": CENTRE[0], "lon": CENTRE[1]}]
    links: list[dict[str, Any]] = [{"a": "ctl", "b": "wan", "delay_ms": 1, "bw_mbit": 100}]
    services: list[dict[str, Any]] = [
        {"name": "beacon", "program": "armada.beacon", "node": "ctl", "port": 8000,
         "params": {"app_manager": "http://127.0.0.1:8001",
                    "spinner": "http://127.0.0.1:8002"}},
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

    docker = fleet.task_runtime == "docker"

    def limit(cores: float) -> dict[str, Any]:
        """A node's CPU limit for emulation (a share of this 2-core host); none for a
        fleet only the simulator runs, whose nodes are larger than the host. A node of
        docker tasks is a docker node."""
        return ({} if fleet.host_cores is None else {"cpu": round(cores / 2, 4)}) | (
            {"runtime": "docker"} if docker else {})

    def captain(node: str, lat: float, lon: float, cores: float, kind: str) -> None:
        # a docker node's Captain keeps task logs in the run folder, which its task
        # containers can write (mounted into the pod), not in the container's /tmp
        services.append({"name": f"cap-{node}", "program": "armada.captain", "node": node,
                         "port": 7000, "params": {
                             "beacon": "http://{ip:ctl}:8000",
                             "node_id": node, "advertise_host": f"{{ip:{node}}}", "lat": lat,
                             "lon": lon, "cpu": cores, "memory_mb": 512, "node_type": kind,
                             **({"workdir": "captains"} if docker else {})}})

    for i, node in enumerate(fleet.edge_names):
        lat, lon = lay["sites"][i]
        cores = lay["cores"][i]
        nodes.append({"name": node, "role": "server", "tier": "edge", "lat": lat, "lon": lon,
                      **limit(cores)})
        nodes.append({"name": f"s{i + 1:02d}", "role": "switch"})
        delay, bw = lay["isp"][i]
        links += [{"a": node, "b": f"s{i + 1:02d}", "delay_ms": 0.5, "bw_mbit": 100},
                  {"a": f"s{i + 1:02d}", "b": "wan", "delay_ms": delay, "bw_mbit": bw}]
        captain(node, lat, lon, cores, "volunteer" if i in lay["volunteers"] else "dedicated")
    if fleet.cloud:
        lat, lon = CLOUD
        nodes.append({"name": "cloud", "role": "server", "tier": "cloud", "lat": lat,
                      "lon": lon, **limit(fleet.cloud_cores)})
        links.append({"a": "cloud", "b": "wan", "delay_ms": fleet.cloud_delay_ms,
                      "bw_mbit": 100})
        captain("cloud", lat, lon, fleet.cloud_cores, "dedicated")
    for j, user in enumerate(fleet.user_names):
        site, lat, lon = lay["users"][j]
        nodes.append({"name": user, "role": "client", "lat": lat, "lon": lon})
        links.append({"a": user, "b": f"s{site + 1:02d}", "delay_ms": 0.5, "bw_mbit": 100})
    nodes.append({"name": "wan", "role": "switch"})
    return {"seed": fleet.seed,
            "description": f"generated Armada fleet: {fleet.nodes} edge nodes, "
                           f"{fleet.users} users" + (", a cloud" if fleet.cloud else "")
                           + (", replicas in containers" if docker else ""),
            "topology": {"nodes": nodes, "links": links}, "services": services,
            # the workload's seed follows the scenario's (``fleet.seed`` unless a file
            # or a study's replication sets another): the fleet stays, the trace varies
            "workload": {"generator": "frame-stream",
                         "params": {"fps": fleet.fps, "demand_s": 0.0054,
                                    "frames": {"width": fleet.frame[0],
                                               "height": fleet.frame[1], "count": 30}}},
            "duration": fleet.duration}


def armada_fleet(params: Mapping[str, Any]) -> dict[str, Any]:
    """Scenario builder ``armada-fleet``: the fields of :class:`Fleet` as ``params``."""
    return fleet_document(Fleet.from_params(params))


# ------------------------------------------------------------------ armada-storage


@dataclasses.dataclass(frozen=True)
class StorageSites:
    """What :func:`storage_document` builds: ``sites`` edge sites, the face-recognition
    workload ``mode`` of ``frames`` frames at ``fps``, the Cargos' ``cargo_runtime``."""

    sites: int = 4
    frames: int = 24
    seed: int = 0
    mode: str = "read-write"
    fps: float = 5.0
    cargo_runtime: str = "process"

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> StorageSites:
        """The sites a builder's ``params`` describe (every field checked)."""
        _known(params, tuple(f.name for f in dataclasses.fields(cls)))
        return cls(sites=_int(params, "sites", 3, len(SITE_DELAYS_MS), 4),
                   frames=_int(params, "frames", 1, 100_000, 24),
                   seed=_int(params, "seed", 0, 2**63 - 1, 0),
                   mode=_choice(params, "mode", ("read-write", "read", "write")),
                   fps=_number(params, "fps", 5.0, hi=30.0),
                   cargo_runtime=_choice(params, "cargo_runtime", CARGO_RUNTIMES))

    @property
    def duration(self) -> float:
        """Model seconds the workload lasts (its frames at ``fps``, and one more)."""
        return self.frames / self.fps + 1


def site_name(i: int) -> str:
    """Host name of edge site ``i`` (0-based)."""
    return f"e{i + 1:02d}"


def cargo_node(i: int) -> str:
    """Host of site ``i``'s Cargo (also its Cargo id): a node of its own (``c01`` ...) on
    the site's LAN, so a Cargo can fail (its node crash) while the site's Captain and
    tasks go on."""
    return f"c{i + 1:02d}"


def site_location(i: int) -> tuple[float, float]:
    """Latitude and longitude of site ``i``: ``i x SITE_SPACING_KM`` east of the centre."""
    km_per_deg = 111.32 * np.cos(np.radians(CENTRE[0]))
    return CENTRE[0], round(CENTRE[1] + i * SITE_SPACING_KM / km_per_deg, 6)


def storage_document(sites: StorageSites) -> dict[str, Any]:
    """The partial scenario document of ``sites`` (no name, no policies).

    A site's Cargo runs on a node of its own (:func:`cargo_node`, on the site's switch,
    at the site's location, a quarter of a Captain's cores: the built-in
    scenario's nodes ask for 0.6 cores in all): with ``cargo_runtime``
    ``process`` as a process in the node's namespace, its store in ``cargo-<node>``
    (relative: the run's work folder); with ``docker`` in a container, its store on the
    node's Docker volume at :data:`CARGO_STORE`. The Cargo Manager keeps its state in
    ``cargo-manager``.
    """
    runtime = sites.cargo_runtime
    lat0, lon0 = site_location(0)
    nodes: list[dict[str, Any]] = [
        {"name": "ctl", "role": "server", "tier": "control", "lat": CENTRE[0], "lon": CENTRE[1]},
        {"name": "wan", "role": "switch"},
        {"name": "u01", "role": "client", "lat": lat0, "lon": lon0}]
    links: list[dict[str, Any]] = [{"a": "ctl", "b": "wan", "delay_ms": 1.0, "bw_mbit": 100}]
    cm = f"http://127.0.0.1:{CM_PORT}"
    services: list[dict[str, Any]] = [
        {"name": "beacon", "program": "armada.beacon", "node": "ctl", "port": 8000,
         "params": {"app_manager": "http://127.0.0.1:8001", "spinner": "http://127.0.0.1:8002",
                    "cargo_manager": cm}},
        {"name": "appmgr", "program": "armada.app_manager", "node": "ctl", "port": 8001,
         "params": {"spinner": "http://127.0.0.1:8002", "cargo_manager": cm, "topn": 1,
                    "users_per_replica": 100, "max_replicas": 3}},
        {"name": "spinner", "program": "armada.spinner", "node": "ctl", "port": 8002,
         "params": {"health_timeout_s": 2.0}},
        {"name": "cargomgr", "program": "armada.cargo_manager", "node": "ctl", "port": CM_PORT,
         "params": {"health_interval_s": 1.0, "health_timeout_s": 1.0, "max_missed": 3,
                    "seed": sites.seed, "state_dir": "cargo-manager"}}]
    for i in range(sites.sites):
        node = site_name(i)
        lat, lon = site_location(i)
        switch = f"s{i + 1:02d}"
        nodes += [{"name": node, "role": "server", "tier": "edge", "lat": lat, "lon": lon,
                   "cpu": NODE_CORES / 2},
                  {"name": switch, "role": "switch"}]
        links += [{"a": node, "b": switch, "delay_ms": 0.5, "bw_mbit": 100},
                  {"a": switch, "b": "wan", "delay_ms": SITE_DELAYS_MS[i], "bw_mbit": 100}]
        if i == 0:
            links.append({"a": "u01", "b": switch, "delay_ms": 0.5, "bw_mbit": 100})
        services.append(
            {"name": f"cap-{node}", "program": "armada.captain", "node": node, "port": 7000,
             "params": {"beacon": "http://{ip:ctl}:8000",
                        "node_id": node, "advertise_host": f"{{ip:{node}}}", "lat": lat,
                        "lon": lon, "cpu": NODE_CORES, "memory_mb": 512,
                        "node_type": "dedicated", "workdir": "captains"}})
        node = cargo_node(i)
        store = f"cargo-{node}"
        host: dict[str, Any] = {"name": node, "role": "server", "tier": "edge", "lat": lat,
                                "lon": lon, "cpu": NODE_CORES / 4}
        if runtime == "docker":
            store = CARGO_STORE
            host.update(memory_mb=512, runtime="docker", volumes={"store": CARGO_STORE})
        nodes.append(host)
        links.append({"a": node, "b": switch, "delay_ms": 0.5, "bw_mbit": 100})
        services.append(
            {"name": f"cargo-{node}", "program": "armada.cargo", "node": node,
             "port": CARGO_PORT,
             "params": {"data_dir": store, "cargo_id": node, "lat": lat, "lon": lon,
                        "beacon": "http://{ip:ctl}:8000",
                        "advertise_host": f"{{ip:{node}}}", "recheck_s": 2.0}})
        services[-1]["params"]["data_root"] = DATASETS  # its file sources: only there
    return {"seed": sites.seed,
            "description": f"Armada storage over {sites.sites} edge sites",
            "topology": {"nodes": nodes, "links": links}, "services": services,
            "workload": {"generator": "face-recognition",  # its seed follows the scenario's
                         "params": {"mode": sites.mode, "frames": sites.frames,
                                    "fps": sites.fps}},
            "duration": sites.duration}


def armada_storage(params: Mapping[str, Any]) -> dict[str, Any]:
    """Scenario builder ``armada-storage``: the fields of :class:`StorageSites`."""
    return storage_document(StorageSites.from_params(params))


#: Service parameters that name a folder the service writes to.
PATH_PARAMS = ("data_dir", "state_dir", "workdir", "data_root")


def anchor_paths(doc: Mapping[str, Any], folder: str) -> dict[str, Any]:
    """``doc`` with every relative folder parameter (:data:`PATH_PARAMS`) of its
    services made absolute under ``folder``: for running a built scenario where the
    services' working directory is not the run's work folder."""
    services = []
    for svc in doc.get("services", []):
        params = dict(svc.get("params", {}))
        for key in PATH_PARAMS:
            if isinstance(params.get(key), str) and not params[key].startswith("/"):
                params[key] = f"{folder.rstrip('/')}/{params[key]}"
        services.append({**svc, "params": params})
    return {**doc, "services": services}
