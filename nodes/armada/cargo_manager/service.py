"""The Cargo Manager: Armada's storage resource manager.

This module is its service: the :class:`CargoManager` (registration and health checks of
Cargos, allocation, re-replication, the intent log, when the state file is written, and
the HTTP handlers) and the command line. Its metadata and state file are
:mod:`nodes.armada.cargo_manager.state`, the placement rule
:mod:`nodes.armada.cargo_manager.placement`, its request bodies
:mod:`nodes.armada.cargo_manager.bodies`.

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
* **Trust.** Only Cargos registered with the run secret hold data: a Cargo registered
  through the Beacon with a user token is listed and health-checked but never picked
  (nor re-adopted), as its peers, the manager and the tasks writing to it would all
  hand its URL the run secret (:mod:`nodes.armada.registry`). It is not kept in the
  state file either (it holds nothing; it registers again).
* **Metadata.** Without ``--state-dir`` it lives in memory: a restarted manager relearns
  Cargos as they register again (their data stays, the allocations are forgotten). With
  ``--state-dir DIR`` it is kept in ``DIR/cargo-manager.json`` (:data:`STATE_VERSION`):
  the registered Cargos and every allocation whose initial allocation finished (its
  parameters and source, ready replicas, events, restorations and losses not yet
  restored). After every change that matters (an allocation made or released, a replica
  lost, added or re-adopted, a restoration, a Cargo registered, dead or left) the whole
  file is rewritten atomically (a temporary file in the same directory, fsynced, renamed
  over it, the directory fsynced; one writer thread, in order, concurrent changes
  coalesced into one write), and a change is acknowledged over HTTP only once the file
  holding it is on disk (**500** if it cannot be written). Replicas still being copied
  are not recorded: a restart restores them afresh. At start the file is loaded:
  allocations answer at once; the Cargos come back ``unconfirmed`` (health-checked, but
  not picked for placement nor listed by ``/query``) until a health check succeeds
  (``alive``) or ``max_missed`` fail (``dead``: re-replication as usual), or they
  register again. A file that cannot be read, is not valid JSON, is malformed or has
  another version stops the manager at start with an error naming it; it is never
  overwritten with an empty state.
* **Intent log** (:mod:`nodes.armada.intents`, ``DIR/cargo-manager.intents.json``, also
  kept in memory without a state directory). Before a Cargo is asked to create or delete
  a copy, the intent is on disk; when the operation ends, and at the next start for what
  a crash interrupted, each intent is settled against the state file: a copy it counts
  stays, any other is deleted on its Cargo (retried every health round while the Cargo
  is unreachable, which is not picked for that application meanwhile). No copy is left
  on a Cargo uncounted, and no name unusable.

Run it as ``python -m nodes.armada.cargo_manager --host H --port P [--health-interval-s 1]
[--health-timeout-s 0.5] [--max-missed 3] [--quota-mb 64] [--seed N] [--state-dir DIR]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from nodes.armada import openapi as doc
from nodes.armada.cargo.codec import DEFAULT_DIM, record_bytes
from nodes.armada.cargo_manager.bodies import QUERY_FIELDS, REGISTER_FIELDS, STORAGE_FIELDS
from nodes.armada.cargo_manager.placement import CargoView, pick_cargo
from nodes.armada.cargo_manager.state import (
    CARGO_STATE_FIELDS,
    STATE_FORMAT,
    STATE_VERSION,
    UNCONFIRMED,
    Allocation,
    CargoNode,
    StateFileError,
    load_state,
    write_state_file,
)
from nodes.armada.configs import DEFAULT_QUOTA_BYTES, STATE_FILE, CargoManagerParams
from nodes.armada.geo import haversine_km
from nodes.armada.intents import (
    INTENTS_FILE,
    MalformedIntentsError,
    intent,
    intents_text,
    load_intents,
    new_op,
)
from nodes.armada.registry import HealthCheckedRegistry
from nodes.common import (
    PUBLIC,
    Address,
    Route,
    client_error,
    make_base_app,
    read_json_object,
    run_service,
)
from nodes.http import PeerError, call_json, error_of
from nodes.openapi import add_api

_log = logging.getLogger("nodes.armada.cargo_manager")

REPLICATION = 3
ALLOCATE_TIMEOUT_S = 120.0  # a Cargo answers an allocation once its data set is loaded
CALL_TIMEOUT_S = 5.0


class CargoManager(HealthCheckedRegistry[CargoNode]):
    """State, health checks, allocation, re-replication and HTTP handlers.

    Registration, health checks and leaves of Cargos are
    :class:`~nodes.armada.registry.HealthCheckedRegistry`'s; the Cargos are ``cargos``.
    """

    kind = "cargo"
    id_field = "cargo_id"
    node_class = CargoNode
    checked_states = ("alive", UNCONFIRMED)
    title = "Cargo Manager"
    log = _log

    def __init__(
        self,
        health_interval_s: float = 1.0,
        health_timeout_s: float = 0.5,
        max_missed: int = 3,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        seed: int | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(health_interval_s, health_timeout_s, max_missed)
        self.quota_bytes = quota_bytes
        self.rng = random.Random(seed)
        self.allocations: dict[str, Allocation] = {}
        self.state_path = None if state_dir is None else Path(state_dir) / STATE_FILE
        #: The intent log (:mod:`nodes.armada.intents`), kept in memory without a state
        #: directory; the operations in progress, whose intents are not settled yet.
        self.intents: list[dict[str, Any]] = []
        self.intents_path = None if state_dir is None else Path(state_dir) / INTENTS_FILE
        self._active_ops: set[str] = set()
        self._settling: asyncio.Task[None] | None = None
        self._changes = 0  # counts the changes the state file must show
        self._saved = 0  # the changes the state file on disk shows
        self._save_lock = asyncio.Lock()
        self._writer: ThreadPoolExecutor | None = None
        if self.state_path is not None:
            self.open_state(self.state_path)

    @property
    def cargos(self) -> dict[str, CargoNode]:
        """The registered Cargos by id (the registry's ``nodes``)."""
        return self.nodes

    # -------------------------------------------------------------- state file

    def open_state(self, path: Path) -> None:
        """Load the state file if there is one, and write it back (the directory is
        writable, or the manager does not start); :class:`StateFileError` otherwise."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateFileError(f"state file {path}: cannot create its directory ({exc})"
                                 ) from None
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a write cut short
            with contextlib.suppress(OSError):
                stale.unlink()
        loaded = load_state(path)
        assert self.intents_path is not None
        try:
            self.intents = load_intents(self.intents_path)
        except (OSError, MalformedIntentsError) as exc:
            raise StateFileError(f"intent log {self.intents_path}: {exc}") from None
        if loaded is not None:
            self.nodes, self.allocations = loaded
            _log.info("state file %s: %d Cargos (unconfirmed until checked), %d allocations",
                      path, len(self.nodes), len(self.allocations))
        try:
            write_state_file(path, self.state_text())
        except OSError as exc:
            raise StateFileError(f"state file {path}: cannot write it ({exc})") from None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cm-state")

    def state_document(self) -> dict[str, Any]:
        """What the state file holds: the Cargos, and the allocations whose initial
        allocation finished with their ready replicas."""
        return {
            "format": STATE_FORMAT, "version": STATE_VERSION, "saved_at": time.time(),
            "cargos": [{k: getattr(n, k) for k in CARGO_STATE_FIELDS}
                       for n in self.cargos.values() if n.trusted],
            "allocations": [
                {**a.request(), "replicas": a.ready(), "created_at": a.created_at,
                 "ready_at": a.ready_at, "events": a.events, "restores": a.restores,
                 "losses": a.losses}
                for a in self.allocations.values() if a.ready_at is not None
            ],
        }

    def state_text(self) -> str:
        return json.dumps(self.state_document(), indent=1)

    def changed(self) -> None:
        """Note a change the state file must show (written by the next :meth:`save`)."""
        self._changes += 1

    def _written(self, changes: int, job: asyncio.Future[None]) -> None:
        if not job.cancelled() and job.exception() is None:
            self._saved = max(self._saved, changes)

    async def save(self) -> None:
        """Return once the state file on disk shows every change so far (at once without
        a state directory or when it does already). Writes run in one thread, in order;
        callers that arrive during a write share the next one. Raises OSError."""
        if self.state_path is None or self._saved >= self._changes:
            return
        assert self._writer is not None
        wanted = self._changes
        async with self._save_lock:
            if self._saved >= wanted:
                return  # written meanwhile, with this change
            changes, text = self._changes, self.state_text()
            job = asyncio.get_running_loop().run_in_executor(
                self._writer, write_state_file, self.state_path, text)
            job.add_done_callback(partial(self._written, changes))
            await asyncio.shield(job)  # a cancelled caller does not cancel the write

    async def commit(self) -> None:
        """:meth:`save` before a handler acknowledges a change: a JSON **500** when the
        state file cannot be written."""
        try:
            await self.save()
        except OSError as exc:
            _log.error("cannot write the state file %s: %s", self.state_path, exc)
            raise client_error(web.HTTPInternalServerError,
                               f"state: cannot write {self.state_path}: {exc}") from None

    async def save_quietly(self) -> None:
        """:meth:`save` from background work: a failure is logged, and the write is
        tried again at the next save (every health round)."""
        try:
            await self.save()
        except OSError as exc:
            _log.error("cannot write the state file %s: %s", self.state_path, exc)

    # ------------------------------------------------------------- intent log

    async def intend(self, op: str, kind: str, app: str, nodes: Sequence[CargoNode]) -> None:
        """Record (durably, before acting) that operation ``op`` is about to create or
        delete ``app``'s copy on ``nodes``; a JSON **500** if the log cannot be written
        (nothing was asked of the Cargos then)."""
        self._active_ops.add(op)
        self.intents += [intent(op, kind, app, n.cargo_id, n.url) for n in nodes]
        try:
            await self._write_intents()
        except OSError as exc:
            _log.error("cannot write the intent log %s: %s", self.intents_path, exc)
            raise client_error(web.HTTPInternalServerError,
                               f"state: cannot write {self.intents_path}: {exc}") from None

    async def _write_intents(self) -> None:
        if self.intents_path is None:
            return
        assert self._writer is not None
        job = asyncio.get_running_loop().run_in_executor(
            self._writer, write_state_file, self.intents_path, intents_text(self.intents))
        await asyncio.shield(job)

    def _intended_copy(self, record: dict[str, Any]) -> bool:
        """The state file on disk counts this intent's Cargo as a ready replica."""
        alloc = self.allocations.get(record["app"])
        return (alloc is not None and alloc.ready_at is not None
                and alloc.replicas.get(record["cargo_id"]) == "ready")

    async def settle(self, ops: set[str] | None = None, alive_only: bool = False) -> None:
        """Settle the intents of ``ops`` (``None``: of every operation not in progress;
        ``alive_only``: only those on Cargos that answer health checks): keep the copies
        the state file counts, delete the others on their Cargos
        (:mod:`nodes.armada.intents`). Intents whose Cargo cannot be reached stay for the
        next round. Waits while the state file misses a change (it decides)."""
        if ops is not None:
            self._active_ops -= ops
        due = [r for r in self.intents
               if (r["op"] in ops if ops is not None else r["op"] not in self._active_ops)
               and not (alive_only and getattr(self.cargos.get(r["cargo_id"]), "state",
                                               None) != "alive")]
        if not due:
            return
        decided = self._changes  # the state file must show at least this much
        await self.save_quietly()
        if self.state_path is not None and self._saved < decided:
            return  # not on disk yet: decided at a later round

        async def settled(record: dict[str, Any]) -> bool:
            if self._intended_copy(record):
                return True
            try:
                status, answer = await call_json(
                    self.session, "DELETE", f"{record['url']}/apps/{record['app']}",
                    timeout_s=CALL_TIMEOUT_S)
            except PeerError as exc:
                _log.info("cannot delete %s on %s yet: %s", record["app"], record["cargo_id"],
                          exc)
                return False
            if status in (200, 404):
                if status == 200:
                    _log.info("deleted %s on %s (%s: the state file does not count it)",
                              record["app"], record["cargo_id"], record["kind"])
                return True
            _log.info("cannot delete %s on %s yet: %s", record["app"], record["cargo_id"],
                      error_of(status, answer))
            return False

        results = await asyncio.gather(*(settled(r) for r in due))
        done = {id(r) for r, ok in zip(due, results, strict=True) if ok}
        if done:
            self.intents = [r for r in self.intents if id(r) not in done]
            try:
                await self._write_intents()
            except OSError as exc:  # settled again later: deleting twice is harmless
                _log.error("cannot write the intent log %s: %s", self.intents_path, exc)

    def unsettled(self, app: str, op: str) -> set[str]:
        """The Cargos that may hold a copy of ``app`` from another operation than ``op``
        (not picked for ``app`` until that copy is deleted)."""
        return {r["cargo_id"] for r in self.intents if r["app"] == app and r["op"] != op}

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
            if n.state == "alive" and n.trusted and n.cargo_id not in exclude
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

    async def allocate(self, alloc: Allocation, op: str) -> list[str]:
        """Place the initial replicas (each pick recorded as an intent of ``op`` first);
        the refusals met on the way."""
        refusals: list[str] = []
        tried: set[str] = self.unsettled(alloc.app, op)
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
            await self.intend(op, "allocate", alloc.app, picks)
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
            op = new_op()
            try:
                await self._restore(alloc, op)
            except web.HTTPException:
                pass  # the intent log cannot be written: tried again next round
            finally:
                await self.settle({op})

    async def _restore(self, alloc: Allocation, op: str) -> None:
        """:meth:`restore`'s work, each new replica recorded as an intent of ``op``."""
        tried: set[str] = self.unsettled(alloc.app, op)
        while len(alloc.replicas) < alloc.replication and self.sources(alloc):
            node = self.pick(alloc, tried)
            if node is None:
                return
            tried.add(node.cargo_id)
            await self.intend(op, "restore", alloc.app, [node])
            sources = self.sources(alloc)
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
                self.changed()
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
            self.changed()
            await self.save_quietly()

    def sources(self, alloc: Allocation) -> list[str]:
        """The URLs of ``alloc``'s ready replicas on alive Cargos (not on ``unconfirmed``
        ones): what a new replica copies."""
        return [self.cargos[c].url for c in alloc.ready() if self.cargos[c].state == "alive"]

    def lose(self, alloc: Allocation, node: CargoNode, reason: str) -> None:
        """``node`` no longer holds ``alloc``'s data: forget that replica."""
        if alloc.replicas.pop(node.cargo_id, None) is None:
            return
        loss = {"t": time.time(), "cargo_id": node.cargo_id, "last_seen": node.last_seen,
                "reason": reason}
        alloc.losses.append(loss)
        alloc.peers_dirty = True
        alloc.event("lost", cargo_id=node.cargo_id, reason=reason)
        self.changed()
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
        self.changed()
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
        self.changed()
        for alloc in self.allocations.values():
            self.lose(alloc, node, reason)

    async def after_round(self) -> None:
        """Restore what was lost; write the state file if it misses a change; settle
        the intents left (a Cargo that could not be told to delete a copy)."""
        self.maintain()
        await self.save_quietly()
        if self.intents and (self._settling is None or self._settling.done()):
            self._settling = asyncio.create_task(self.settle(alive_only=True))

    async def start(self, app: web.Application) -> None:
        """The registry's startup, then the intents a previous process left settled
        before the manager serves (what a crash interrupted is finished or undone)."""
        await super().start(app)
        if self.intents:
            _log.info("intent log %s: settling %d intents", self.intents_path,
                      len(self.intents))
            await self.settle()

    def confirmed(self, node: CargoNode) -> None:
        """A Cargo known from the state file answered its first health check."""
        _log.info("cargo %s (from the state file) answered: alive", node.cargo_id)
        self.changed()

    async def stop(self, app: web.Application) -> None:
        """The registry's cleanup, then a last write of the state file (last health
        checks included)."""
        await super().stop(app)
        if self._writer is not None:
            self.changed()
            await self.save_quietly()
            self._writer.shutdown(wait=False)

    def background(self) -> list[asyncio.Task[Any]]:
        """The restorations in progress and the settling of left intents."""
        tasks = [a.restoring for a in self.allocations.values() if a.restoring is not None]
        return tasks + ([self._settling] if self._settling is not None else [])

    # ------------------------------------------------------------------ handlers

    def _allocation(self, name: str) -> Allocation:
        alloc = self.allocations.get(name)
        if alloc is None:
            raise client_error(web.HTTPNotFound, f"no storage for application: {name}")
        return alloc

    async def handle_register(self, request: web.Request) -> web.Response:
        """``POST /cargos``: register a Cargo or refresh one that registers again. A Cargo
        registered with a user token re-adopts nothing: it is told to drop every
        application it says it holds."""
        body = await read_json_object(request, REGISTER_FIELDS)
        held = body.pop("apps", [])
        body.setdefault("tags", [])
        node = self.enrol(body, self.registrant_trusted(request, body["cargo_id"]))
        drop = []
        for name in sorted(held):
            alloc = self.allocations.get(name)
            if alloc is None or node.cargo_id in alloc.replicas:
                continue
            if not node.trusted:
                drop.append(name)
                continue
            short = len(alloc.replicas) < alloc.replication
            if not alloc.ready() or (short and alloc.consistency == "eventual"):
                self.readopt(alloc, node)
            else:
                drop.append(name)
        self.changed()
        await self.commit()
        return web.json_response({**self.cargo_json(node), "drop": drop})

    async def handle_cargos(self, request: web.Request) -> web.Response:
        """``GET /cargos``."""
        return web.json_response({"cargos": [self.cargo_json(n) for n in self.cargos.values()]})

    async def handle_cargo(self, request: web.Request) -> web.Response:
        """``GET /cargos/{cargo_id}``."""
        return web.json_response(self.cargo_json(self.lookup(request)))

    async def handle_leave(self, request: web.Request) -> web.Response:
        """``DELETE /cargos/{cargo_id}``: a graceful leave; its data is re-replicated now."""
        node = await self.leave(request)
        await self.commit()
        return web.json_response(self.cargo_json(node))

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
            await self.commit()
            return web.json_response(self.allocation_json(existing))
        eligible = [n for n in self.cargos.values() if n.state == "alive" and n.trusted
                    and n.capacity_bytes - self.reserved(n.cargo_id) >= quota]
        if len(eligible) < alloc.replication:
            raise client_error(
                web.HTTPInsufficientStorage,
                f"insufficient storage: {len(eligible)} live Cargos have {quota} bytes "
                f"unreserved, {alloc.replication} needed",
            )
        self.allocations[alloc.app] = alloc  # taken now: a concurrent request waits on it
        op = new_op()
        async with alloc.lock:
            try:
                refusals = await self.allocate(alloc, op)
            except BaseException:
                del self.allocations[alloc.app]
                await self.settle({op})  # undo the copies made so far
                raise
            if not alloc.replicas:
                del self.allocations[alloc.app]
                await self.settle({op})
                raise client_error(web.HTTPBadGateway, "no Cargo could allocate the storage: "
                                   + "; ".join(refusals))
            await self.push_peers(alloc)
            alloc.ready_at = time.time()
            alloc.event("ready" if alloc.state == "ready" else "degraded",
                        replicas=len(alloc.ready()), refusals=refusals)
            self.changed()
            try:
                await self.commit()  # in the lock: a concurrent request answers after it too
            finally:
                await self.settle({op})  # keeps the replicas, deletes refused copies
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
        if alloc.ready_at is None:
            raise client_error(web.HTTPConflict, f"app: the allocation of {alloc.app} is "
                               "in progress; release it once it is answered")
        op = new_op()
        await self.intend(op, "release", alloc.app,
                          [self.cargos[c] for c in alloc.replicas])
        if self.allocations.get(alloc.app) is not alloc:  # released meanwhile
            await self.settle({op})
            raise client_error(web.HTTPNotFound, f"no storage for application: {alloc.app}")
        del self.allocations[alloc.app]
        if alloc.restoring is not None:
            alloc.restoring.cancel()
        view = self.allocation_json(alloc)
        self.changed()
        try:
            await self.commit()
        except web.HTTPException:
            self.allocations.setdefault(alloc.app, alloc)  # the state file still holds it
            self.changed()
            raise
        finally:
            # Deletes the copies once the state file no longer counts them; a Cargo that
            # cannot be reached is told at a later round.
            await self.settle({op})
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
    state_dir: str | os.PathLike[str] | None = None,
) -> web.Application:
    """Build the Cargo Manager application (its state is ``app[CARGO_MANAGER_KEY]``).

    With ``state_dir`` the metadata is kept in its state file, loaded here:
    :class:`StateFileError` if that file cannot be used.
    """
    manager = CargoManager(health_interval_s, health_timeout_s, max_missed, quota_bytes, seed,
                           state_dir)
    routes = [
        *doc.registry_routes("cargos", "cargo_id", "Cargo", doc.CARGO_REGISTER,
                             "its data is re-replicated", manager.handle_register,
                             manager.handle_cargos, manager.handle_cargo, manager.handle_leave),
        Route("POST", "/storage", manager.handle_allocate,
              "allocate storage for an application (200 if it exists)",
              doc.op(201, doc.STORAGE_REQUEST, (400, 409, 502, 507))),
        Route("GET", "/storage", manager.handle_allocations, "list allocations", doc.op()),
        Route("GET", "/storage/{app}", manager.handle_allocation, "one allocation",
              doc.op(errors=(404,))),
        Route("DELETE", "/storage/{app}", manager.handle_release,
              "release an allocation and delete its data", doc.op(errors=(404, 409))),
        Route("POST", "/query", manager.handle_query,
              "data access points for a task, nearest first",
              doc.op(200, doc.STORAGE_QUERY, (400, 404)), auth=PUBLIC),
        Route("GET", "/health", manager.handle_health, "liveness", doc.op()),
    ]
    app = make_base_app()
    app[CARGO_MANAGER_KEY] = manager
    add_api(app, "Armada Cargo Manager", "Storage nodes (registration, health checks), "
                "allocation of replicated storage, re-replication and data access point "
                "queries.", routes)
    app.on_startup.append(manager.start)
    app.on_cleanup.append(manager.stop)
    return app


def app_from_params(params: CargoManagerParams, address: Address) -> web.Application:
    """The Cargo Manager of a command line (:class:`StateFileError` for a state file it
    cannot use: the runner refuses to start)."""
    return make_app(params.health_interval_s, params.health_timeout_s, params.max_missed,
                    round(params.quota_mb * 1024**2), params.seed, params.state_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the Cargo Manager of the command line until SIGTERM/SIGINT."""
    return run_service(CargoManagerParams, app_from_params, argv,
                       prog="python -m nodes.armada.cargo_manager",
                       description=__doc__.splitlines()[0], port=8003, logger=_log)

