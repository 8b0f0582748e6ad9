"""The Cargo Manager: Armada's storage resource manager.

It registers Cargos (through the Beacon: location, declared capacity, type, tags),
health-checks them every ``health_interval_s`` and declares one dead after
``max_missed`` consecutive failed checks, and keeps the metadata of the storage layer:
which application's data lives on which Cargos. The HTTP contract is ``docs/armada.md``
("Storage layer"). Decisions:

* **Allocation.** ``POST /storage`` (the Application Manager's call for a ``need_storage``
  deployment) reserves ``quota_bytes`` on ``replication`` (3) Cargos with that much
  unreserved capacity, chosen by the application's strategy (:func:`pick_cargo`):
  ``nearest`` serves the expected location farthest from the replicas chosen so far with
  the Cargo nearest to it (one location: its three nearest Cargos; three locations: one
  near each), ``random`` draws uniformly (the baseline; seeded). The chosen Cargos are
  asked in parallel to create the application and pull its initial data set; one that
  refuses is replaced by the next pick. The answer comes once the data is loaded. An
  allocation that exists is answered again (200) when the fields given match it (fields
  left out match anything), so storage outlives a compute deployment, a re-deployment
  finds its data, and a deployer can allocate with every parameter before deploying
  (the Application Manager only sends ``app`` and ``locations``).
* **Re-replication.** When a Cargo is declared dead (or leaves, or reports that it lost an
  application's data), it is removed from the application's replicas and the others'
  peer lists at once (strong writes stop waiting for it). The manager then picks a new
  Cargo with the application's strategy (for ``nearest``, the location the loss left
  farthest from a replica), adds it to the live replicas' peer lists, and allocates the
  application on it with the live replicas as source: it copies and merges every
  replica's records while new writes already reach it. Each restoration is recorded with
  the time from the loss being declared and from the last good health check of the lost
  Cargo. A Cargo that comes back is told to drop the applications restored elsewhere;
  its copy is taken back instead (re-adopted) when the application has no replica left,
  or is ``eventual`` and still short of replicas.
* **Discovery.** ``POST /query`` answers a task's candidate list of data access points:
  the application's ready replicas on live Cargos, nearest first.

Metadata lives in memory: a restarted manager relearns Cargos as they register again
(their data stays; re-allocation with the same parameters is not yet reconciled with it).

Run it as ``python -m nodes.armada.cargo_manager --host H --port P [--health-interval-s 1]
[--health-timeout-s 0.5] [--max-missed 3] [--quota-mb 64] [--seed N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from nodes.armada.cargo import DEFAULT_DIM, record_bytes
from nodes.armada.client import PeerError, call_json, error_of
from nodes.armada.fields import (
    CONSISTENCIES,
    MAX_DIM,
    NAME_RE,
    NODE_TYPES,
    STRATEGIES,
    enum_field,
    lat_field,
    locations_field,
    lon_field,
    pattern_field,
    source_field,
    tags_field,
    url_field,
)
from nodes.armada.geo import haversine_km
from nodes.armada.openapi import add_openapi, cargo_manager_spec
from nodes.armada.registry import (
    HealthCheckedRegistry,
    add_health_arguments,
    check_health_arguments,
)
from nodes.common import (
    Field,
    client_error,
    configure_logging,
    int_field,
    make_base_app,
    read_json_object,
    serve,
    str_field,
)

_log = logging.getLogger("nodes.armada.cargo_manager")

REPLICATION = 3
DEFAULT_QUOTA_BYTES = 64 * 1024**2
ALLOCATE_TIMEOUT_S = 120.0  # a Cargo answers an allocation once its data set is loaded
CALL_TIMEOUT_S = 5.0

REGISTER_FIELDS = {
    "cargo_id": str_field(),
    "url": url_field(),
    "lat": lat_field(),
    "lon": lon_field(),
    "capacity_bytes": int_field(1),
    "node_type": enum_field(NODE_TYPES, required=False),
    "tags": tags_field(),
    "apps": Field("array of application names",
                  lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                  required=False),
}
STORAGE_FIELDS = {
    "app": pattern_field(NAME_RE, "name of 1-40 characters a-z, 0-9, '-'"),
    "locations": locations_field(),
    "replication": int_field(1, 10, required=False),
    "consistency": enum_field(CONSISTENCIES, required=False),
    "strategy": enum_field(STRATEGIES, required=False),
    "quota_bytes": int_field(1, required=False),
    "dim": int_field(1, MAX_DIM, required=False),
    "source": source_field(("inline", "url", "file")),
}
QUERY_FIELDS = {
    "app": str_field(),
    "lat": lat_field(),
    "lon": lon_field(),
    "topn": int_field(1, 10, required=False),
}


# ------------------------------------------------------------------- selection


@dataclass(frozen=True)
class CargoView:
    """What Cargo selection needs to know about one candidate."""

    cargo_id: str
    lat: float
    lon: float
    free_bytes: int


def pick_cargo(
    candidates: Sequence[CargoView],
    locations: Sequence[tuple[float, float]],
    holding: Sequence[tuple[float, float]],
    strategy: str,
    rng: random.Random,
) -> CargoView | None:
    """The next Cargo for an application's data, or None without candidates. Pure.

    ``candidates`` can all take the data; ``holding`` are where the application's other
    replicas are (or will be). ``random`` draws one uniformly. ``nearest`` takes the
    expected location farthest from every holding replica (the first on ties) and returns
    the candidate nearest to it (more free space, then the id, on ties).
    """
    if not candidates:
        return None
    ordered = sorted(candidates, key=lambda c: c.cargo_id)
    if strategy == "random":
        return rng.choice(ordered)

    def gap(location: tuple[float, float]) -> float:
        return min((haversine_km(*location, *h) for h in holding), default=math.inf)

    target = max(locations, key=gap)
    return min(ordered, key=lambda c: (haversine_km(*target, c.lat, c.lon), -c.free_bytes,
                                       c.cargo_id))


# --------------------------------------------------------------------- state


@dataclass
class CargoNode:
    """A registered Cargo."""

    cargo_id: str
    url: str
    lat: float
    lon: float
    capacity_bytes: int
    node_type: str = "volunteer"
    tags: list[str] = field(default_factory=list)
    state: str = "alive"  # alive | dead | left
    registered_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)
    missed: int = 0
    used_bytes: int = 0  # as last reported
    disk_bytes: int = 0


@dataclass
class Allocation:
    """An application's storage: its parameters and where its replicas are."""

    app: str
    locations: list[dict[str, float]]
    replication: int
    consistency: str
    strategy: str
    quota_bytes: int
    dim: int
    source: dict[str, Any] | None
    replicas: dict[str, str] = field(default_factory=dict)  # cargo id -> allocating | ready
    created_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    restores: list[dict[str, Any]] = field(default_factory=list)
    losses: list[dict[str, Any]] = field(default_factory=list)  # not yet restored
    peers_dirty: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    restoring: asyncio.Task[None] | None = None

    def request(self) -> dict[str, Any]:
        """The parameters as asked (defaults applied): what a repeated request must match."""
        return {"app": self.app, "locations": self.locations, "replication": self.replication,
                "consistency": self.consistency, "strategy": self.strategy,
                "quota_bytes": self.quota_bytes, "dim": self.dim, "source": self.source}

    def ready(self) -> list[str]:
        return [c for c, s in self.replicas.items() if s == "ready"]

    @property
    def state(self) -> str:
        ready = len(self.ready())
        if ready >= self.replication:
            return "ready"
        return "degraded" if ready else "lost"

    def event(self, kind: str, **detail: Any) -> None:
        self.events.append({"t": time.time(), "event": kind, **detail})


class CargoManager(HealthCheckedRegistry[CargoNode]):
    """State, health checks, allocation, re-replication and HTTP handlers.

    Registration, health checks and leaves of Cargos are
    :class:`~nodes.armada.registry.HealthCheckedRegistry`'s; the Cargos are ``cargos``.
    """

    kind = "cargo"
    id_field = "cargo_id"
    node_class = CargoNode
    title = "Cargo Manager"
    log = _log

    def __init__(
        self,
        health_interval_s: float = 1.0,
        health_timeout_s: float = 0.5,
        max_missed: int = 3,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        seed: int | None = None,
    ) -> None:
        super().__init__(health_interval_s, health_timeout_s, max_missed)
        self.quota_bytes = quota_bytes
        self.rng = random.Random(seed)
        self.allocations: dict[str, Allocation] = {}

    @property
    def cargos(self) -> dict[str, CargoNode]:
        """The registered Cargos by id (the registry's ``nodes``)."""
        return self.nodes

    # ---------------------------------------------------------------- capacity

    def reserved(self, cargo_id: str) -> int:
        """Bytes reserved on a Cargo by the allocations placed there."""
        return sum(a.quota_bytes for a in self.allocations.values() if cargo_id in a.replicas)

    def cargo_json(self, node: CargoNode) -> dict[str, Any]:
        """A Cargo as the API shows it."""
        reserved = self.reserved(node.cargo_id)
        return {
            **asdict(node), "reserved_bytes": reserved,
            "free_bytes": node.capacity_bytes - reserved,
            "apps": sorted(a.app for a in self.allocations.values()
                           if node.cargo_id in a.replicas),
        }

    def allocation_json(self, alloc: Allocation) -> dict[str, Any]:
        """An allocation as the API shows it."""
        replicas = []
        for cargo_id, state in alloc.replicas.items():
            node = self.cargos[cargo_id]
            replicas.append({"cargo_id": cargo_id, "url": node.url, "lat": node.lat,
                             "lon": node.lon, "state": state})
        return {
            **{k: v for k, v in alloc.request().items() if k != "source"},
            "source": alloc.source["kind"] if alloc.source else None,
            "record_bytes": record_bytes(alloc.dim), "state": alloc.state,
            "replicas": replicas, "created_at": alloc.created_at, "ready_at": alloc.ready_at,
            "events": alloc.events, "restores": alloc.restores,
        }

    # --------------------------------------------------------------- placement

    def pick(self, alloc: Allocation, exclude: set[str]) -> CargoNode | None:
        """The next Cargo for ``alloc`` by its strategy, not in ``exclude``."""
        holding = [(self.cargos[c].lat, self.cargos[c].lon) for c in alloc.replicas]
        candidates = [
            CargoView(n.cargo_id, n.lat, n.lon, n.capacity_bytes - self.reserved(n.cargo_id))
            for n in self.cargos.values()
            if n.state == "alive" and n.cargo_id not in exclude
            and n.cargo_id not in alloc.replicas
            and n.capacity_bytes - self.reserved(n.cargo_id) >= alloc.quota_bytes
        ]
        locations = [(loc["lat"], loc["lon"]) for loc in alloc.locations]
        chosen = pick_cargo(candidates, locations, holding, alloc.strategy, self.rng)
        return None if chosen is None else self.cargos[chosen.cargo_id]

    async def create_on(self, alloc: Allocation, node: CargoNode, peers: list[str],
                        source: dict[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
        """Ask ``node`` to allocate the application; (refusal or None, its answer)."""
        body: dict[str, Any] = {"app": alloc.app, "quota_bytes": alloc.quota_bytes,
                                "dim": alloc.dim, "consistency": alloc.consistency,
                                "peers": peers}
        if source is not None:
            body["source"] = source
        try:
            status, answer = await call_json(self.session, "POST", f"{node.url}/apps", body,
                                             timeout_s=ALLOCATE_TIMEOUT_S)
        except PeerError as exc:
            return str(exc), {}
        if status != 201 or not isinstance(answer, dict):
            return error_of(status, answer), {}
        return None, answer

    async def push_peers(self, alloc: Allocation, extra: Sequence[CargoNode] = ()) -> None:
        """Tell every ready replica (and ``extra``) who the others are; best effort."""
        members = [self.cargos[c] for c in alloc.ready()] + list(extra)
        urls = [m.url for m in members]

        async def tell(node: CargoNode) -> None:
            body = {"peers": [u for u in urls if u != node.url]}
            with contextlib.suppress(PeerError):
                await call_json(self.session, "PUT", f"{node.url}/apps/{alloc.app}/peers",
                                body, timeout_s=CALL_TIMEOUT_S)

        await asyncio.gather(*(tell(m) for m in members))

    async def allocate(self, alloc: Allocation) -> list[str]:
        """Place the initial replicas; the refusals met on the way."""
        refusals: list[str] = []
        tried: set[str] = set()
        while len(alloc.replicas) < alloc.replication:
            picks: list[CargoNode] = []
            while len(alloc.replicas) < alloc.replication:
                node = self.pick(alloc, tried)
                if node is None:
                    break
                tried.add(node.cargo_id)
                alloc.replicas[node.cargo_id] = "allocating"
                picks.append(node)
            if not picks:
                break
            urls = [p.url for p in picks]
            results = await asyncio.gather(*(
                self.create_on(alloc, p, [u for u in urls if u != p.url], alloc.source)
                for p in picks
            ))
            for node, (refusal, answer) in zip(picks, results, strict=True):
                if refusal is None and node.cargo_id in alloc.replicas:
                    alloc.replicas[node.cargo_id] = "ready"
                    alloc.event("allocated", cargo_id=node.cargo_id,
                                loaded=answer.get("loaded"), load_s=answer.get("load_s"))
                else:
                    alloc.replicas.pop(node.cargo_id, None)
                    refusals.append(f"{node.cargo_id}: {refusal or 'declared dead meanwhile'}")
        return refusals

    async def restore(self, alloc: Allocation) -> None:
        """Bring ``alloc`` back to its replication factor, one new replica at a time."""
        async with alloc.lock:
            if self.allocations.get(alloc.app) is not alloc:
                return
            if alloc.peers_dirty:
                alloc.peers_dirty = False
                await self.push_peers(alloc)
            tried: set[str] = set()
            while len(alloc.replicas) < alloc.replication and alloc.ready():
                node = self.pick(alloc, tried)
                if node is None:
                    return
                tried.add(node.cargo_id)
                sources = [self.cargos[c].url for c in alloc.ready()]
                began = time.monotonic()
                alloc.replicas[node.cargo_id] = "allocating"
                # Peers first: writes committed from now on are shipped to the new replica,
                # everything committed before is in the copy.
                await self.push_peers(alloc, [node])
                refusal, answer = await self.create_on(
                    alloc, node, sources, {"kind": "replicas", "urls": sources})
                if refusal is not None or node.cargo_id not in alloc.replicas:
                    alloc.replicas.pop(node.cargo_id, None)
                    alloc.event("restore-failed", cargo_id=node.cargo_id, reason=refusal)
                    await self.push_peers(alloc)
                    continue
                alloc.replicas[node.cargo_id] = "ready"
                now = time.time()
                loss = alloc.losses.pop(0) if alloc.losses else None
                record = {
                    "t": now, "cargo_id": node.cargo_id,
                    "lost": loss["cargo_id"] if loss else None,
                    "since_lost_s": round(now - loss["t"], 6) if loss else None,
                    "since_last_seen_s": round(now - loss["last_seen"], 6) if loss else None,
                    "copy_s": round(time.monotonic() - began, 6),
                    "records": answer.get("records"),
                }
                alloc.restores.append(record)
                alloc.event("restored", **{k: v for k, v in record.items() if k != "t"})
                _log.info("%s restored on %s (%s s after the loss)", alloc.app, node.cargo_id,
                          record["since_lost_s"])

    def lose(self, alloc: Allocation, node: CargoNode, reason: str) -> None:
        """``node`` no longer holds ``alloc``'s data: forget that replica."""
        if alloc.replicas.pop(node.cargo_id, None) is None:
            return
        loss = {"t": time.time(), "cargo_id": node.cargo_id, "last_seen": node.last_seen,
                "reason": reason}
        alloc.losses.append(loss)
        alloc.peers_dirty = True
        alloc.event("lost", cargo_id=node.cargo_id, reason=reason)
        _log.info("%s lost its replica on %s: %s", alloc.app, node.cargo_id, reason)

    def readopt(self, alloc: Allocation, node: CargoNode) -> None:
        """Take back the copy of a Cargo that returns, when the application has no replica
        left (the best data there is) or is eventual and short of replicas (its peers
        resume shipping where they stopped, so it converges); otherwise it is dropped and
        the replica restored by a fresh copy, which is complete before it serves."""
        alloc.replicas[node.cargo_id] = "ready"
        alloc.losses = [loss for loss in alloc.losses if loss["cargo_id"] != node.cargo_id]
        alloc.peers_dirty = True
        alloc.event("readopted", cargo_id=node.cargo_id)
        _log.info("%s readopted its replica on %s", alloc.app, node.cargo_id)

    def maintain(self) -> None:
        """Start a restoration for every allocation short of replicas or with stale peers."""
        for alloc in self.allocations.values():
            if alloc.restoring is not None and not alloc.restoring.done():
                continue
            if alloc.peers_dirty or len(alloc.replicas) < alloc.replication:
                alloc.restoring = asyncio.create_task(self.restore(alloc))

    # ------------------------------------------------------------- health checks

    def healthy(self, answer: dict[str, Any]) -> bool:
        """A Cargo's status lists its applications."""
        return isinstance(answer.get("apps"), list)

    def reported(self, node: CargoNode, answer: dict[str, Any], asked: float) -> None:
        """Record the Cargo's usage; a ready replica whose data it no longer holds is
        lost."""
        node.used_bytes = answer.get("used_bytes", 0)
        node.disk_bytes = answer.get("disk_bytes", 0)
        held = {a.get("app") for a in answer["apps"] if isinstance(a, dict)}
        for alloc in self.allocations.values():
            if alloc.replicas.get(node.cargo_id) == "ready" and alloc.app not in held:
                self.lose(alloc, node, f"cargo {node.cargo_id} no longer holds the data")

    def node_lost(self, node: CargoNode, reason: str) -> None:
        """The Cargo died or left: every replica it held is lost."""
        for alloc in self.allocations.values():
            self.lose(alloc, node, reason)

    async def after_round(self) -> None:
        """Restore what was lost."""
        self.maintain()

    def background(self) -> list[asyncio.Task[Any]]:
        """The restorations in progress."""
        return [a.restoring for a in self.allocations.values() if a.restoring is not None]

    # ------------------------------------------------------------------ handlers

    def _allocation(self, name: str) -> Allocation:
        alloc = self.allocations.get(name)
        if alloc is None:
            raise client_error(web.HTTPNotFound, f"no storage for application: {name}")
        return alloc

    async def handle_register(self, request: web.Request) -> web.Response:
        """``POST /cargos``: register a Cargo or refresh one that registers again."""
        body = await read_json_object(request, REGISTER_FIELDS)
        held = body.pop("apps", [])
        body.setdefault("tags", [])
        node = self.enrol(body)
        drop = []
        for name in sorted(held):
            alloc = self.allocations.get(name)
            if alloc is None or node.cargo_id in alloc.replicas:
                continue
            short = len(alloc.replicas) < alloc.replication
            if not alloc.ready() or (short and alloc.consistency == "eventual"):
                self.readopt(alloc, node)
            else:
                drop.append(name)
        return web.json_response({**self.cargo_json(node), "drop": drop})

    async def handle_cargos(self, request: web.Request) -> web.Response:
        """``GET /cargos``."""
        return web.json_response({"cargos": [self.cargo_json(n) for n in self.cargos.values()]})

    async def handle_cargo(self, request: web.Request) -> web.Response:
        """``GET /cargos/{cargo_id}``."""
        return web.json_response(self.cargo_json(self.lookup(request)))

    async def handle_leave(self, request: web.Request) -> web.Response:
        """``DELETE /cargos/{cargo_id}``: a graceful leave; its data is re-replicated now."""
        return web.json_response(self.cargo_json(await self.leave(request)))

    async def handle_allocate(self, request: web.Request) -> web.Response:
        """``POST /storage``: allocate storage for an application (201; 200 if it exists)."""
        body = await read_json_object(request, STORAGE_FIELDS)
        quota = body.get("quota_bytes", self.quota_bytes)
        dim = body.get("dim", DEFAULT_DIM)
        if quota < record_bytes(dim):
            raise client_error(web.HTTPBadRequest, f"quota_bytes: expected at least one record "
                               f"({record_bytes(dim)} bytes at dim {dim}), found {quota}")
        alloc = Allocation(
            body["app"], body["locations"], body.get("replication", REPLICATION),
            body.get("consistency", "strong"), body.get("strategy", "nearest"), quota, dim,
            body.get("source"),
        )
        existing = self.allocations.get(alloc.app)
        if existing is not None:
            held = existing.request()
            differ = sorted(k for k in body if alloc.request()[k] != held[k])
            if differ:
                raise client_error(web.HTTPConflict, f"{', '.join(differ)}: storage for "
                                   f"{alloc.app} exists with other values")
            async with existing.lock:  # an allocation in progress finishes first
                pass
            if self.allocations.get(alloc.app) is not existing:
                raise client_error(web.HTTPBadGateway,
                                   f"the allocation of {alloc.app} in progress failed")
            return web.json_response(self.allocation_json(existing))
        eligible = [n for n in self.cargos.values() if n.state == "alive"
                    and n.capacity_bytes - self.reserved(n.cargo_id) >= quota]
        if len(eligible) < alloc.replication:
            raise client_error(
                web.HTTPInsufficientStorage,
                f"insufficient storage: {len(eligible)} live Cargos have {quota} bytes "
                f"unreserved, {alloc.replication} needed",
            )
        self.allocations[alloc.app] = alloc  # taken now: a concurrent request waits on it
        async with alloc.lock:
            refusals = await self.allocate(alloc)
            if not alloc.replicas:
                del self.allocations[alloc.app]
                raise client_error(web.HTTPBadGateway, "no Cargo could allocate the storage: "
                                   + "; ".join(refusals))
            await self.push_peers(alloc)
            alloc.ready_at = time.time()
            alloc.event("ready" if alloc.state == "ready" else "degraded",
                        replicas=len(alloc.ready()), refusals=refusals)
        return web.json_response(self.allocation_json(alloc), status=201)

    async def handle_allocations(self, request: web.Request) -> web.Response:
        """``GET /storage``."""
        return web.json_response({"storage": [self.allocation_json(a)
                                              for a in self.allocations.values()]})

    async def handle_allocation(self, request: web.Request) -> web.Response:
        """``GET /storage/{app}``."""
        return web.json_response(self.allocation_json(self._allocation(
            request.match_info["app"])))

    async def handle_release(self, request: web.Request) -> web.Response:
        """``DELETE /storage/{app}``: delete the data on every replica, forget it."""
        alloc = self._allocation(request.match_info["app"])
        del self.allocations[alloc.app]
        if alloc.restoring is not None:
            alloc.restoring.cancel()
        view = self.allocation_json(alloc)

        async def drop(cargo_id: str) -> None:
            with contextlib.suppress(PeerError):
                await call_json(self.session, "DELETE",
                                f"{self.cargos[cargo_id].url}/apps/{alloc.app}",
                                timeout_s=CALL_TIMEOUT_S)

        await asyncio.gather(*(drop(c) for c in alloc.replicas))
        return web.json_response({**view, "state": "released"})

    async def handle_query(self, request: web.Request) -> web.Response:
        """``POST /query``: a task's data access points, nearest first."""
        body = await read_json_object(request, QUERY_FIELDS)
        alloc = self._allocation(body["app"])
        candidates = []
        for cargo_id in alloc.ready():
            node = self.cargos[cargo_id]
            if node.state != "alive":
                continue
            distance = haversine_km(body["lat"], body["lon"], node.lat, node.lon)
            candidates.append({"cargo_id": cargo_id, "url": node.url, "lat": node.lat,
                               "lon": node.lon, "distance_km": round(distance, 3)})
        candidates.sort(key=lambda c: (c["distance_km"], c["cargo_id"]))
        topn = body.get("topn", alloc.replication)
        return web.json_response({"app": alloc.app, "consistency": alloc.consistency,
                                  "dim": alloc.dim, "candidates": candidates[:topn]})

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        alive = sum(n.state == "alive" for n in self.cargos.values())
        return web.json_response({"ok": True, "cargos": alive,
                                  "allocations": len(self.allocations)})


CARGO_MANAGER_KEY = web.AppKey("cargo_manager", CargoManager)


def make_app(
    health_interval_s: float = 1.0,
    health_timeout_s: float = 0.5,
    max_missed: int = 3,
    quota_bytes: int = DEFAULT_QUOTA_BYTES,
    seed: int | None = None,
) -> web.Application:
    """Build the Cargo Manager application (its state is ``app[CARGO_MANAGER_KEY]``)."""
    manager = CargoManager(health_interval_s, health_timeout_s, max_missed, quota_bytes, seed)
    app = make_base_app()
    app[CARGO_MANAGER_KEY] = manager
    app.router.add_post("/cargos", manager.handle_register)
    app.router.add_get("/cargos", manager.handle_cargos)
    app.router.add_get("/cargos/{cargo_id}", manager.handle_cargo)
    app.router.add_delete("/cargos/{cargo_id}", manager.handle_leave)
    app.router.add_post("/storage", manager.handle_allocate)
    app.router.add_get("/storage", manager.handle_allocations)
    app.router.add_get("/storage/{app}", manager.handle_allocation)
    app.router.add_delete("/storage/{app}", manager.handle_release)
    app.router.add_post("/query", manager.handle_query)
    app.router.add_get("/health", manager.handle_health)
    add_openapi(app, cargo_manager_spec())
    app.on_startup.append(manager.start)
    app.on_cleanup.append(manager.stop)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m nodes.armada.cargo_manager", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8003)
    add_health_arguments(parser)
    parser.add_argument("--quota-mb", type=float, default=DEFAULT_QUOTA_BYTES / 1024**2,
                        help="default quota of an allocation, MiB")
    parser.add_argument("--seed", type=int, help="seed of the random strategy")
    args = parser.parse_args(argv)
    check_health_arguments(parser, args)
    if args.quota_mb <= 0:
        parser.error("--quota-mb must be > 0")
    configure_logging()
    app = make_app(args.health_interval_s, args.health_timeout_s, args.max_missed,
                   round(args.quota_mb * 1024**2), args.seed)
    serve(app, args.host, args.port, logger=_log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
