"""The Cargo: Armada's storage node, one per storage-contributing edge node.

This module is the Cargo's service: its HTTP handlers, replication to its peers,
allocations and their initial data sets, registration with the Cargo Manager, and the
command line. It keeps the data of the applications the Cargo Manager allocated here,
serves their tasks' reads and writes, and replicates writes to the application's other
replicas. The records are kept in :mod:`nodes.armada.cargo.store` (durable) and
:mod:`nodes.armada.cargo.index` (in memory, for reads and matches); their format is
:mod:`nodes.armada.cargo.codec`. The HTTP contract is ``docs/armada.md`` ("Storage
layer"). Decisions:

* **Data model.** Per application a key/record store: a record is an ``id`` (8-byte
  integer, non-negative) and a float64 ``vector`` of the application's dimension ``dim``
  (128 for face descriptors). A write inserts or replaces records; ``match`` returns the
  record nearest to a query vector (Euclidean distance, computed here with numpy) and
  whether it is within ``threshold``. There is no delete of single records.
* **Durability.** One SQLite file per Cargo (``<data dir>/cargo.sqlite3``) in WAL mode with
  ``synchronous=FULL``: a commit returns once the write-ahead log is fsynced, and a write
  is acknowledged only after its commit returned. A process killed at any point (even by
  SIGKILL) loses no acknowledged write; an application whose initial load or copy had not
  finished (state ``syncing``) is dropped at restart, as the Cargo Manager has not
  counted that copy. All SQLite calls run in one dedicated thread, in submission order.
* **Capacity.** A record counts ``8 + 8 * dim`` bytes (the paper's ``<ID, vector>``; the
  store's own overhead, such as the version columns and index pages, is not counted,
  ``GET /status`` shows the real file sizes as ``disk_bytes``). An allocation reserves
  ``quota_bytes`` of the Cargo's declared capacity (2 GiB by default, the paper's 2 GB);
  the sum of quotas never exceeds it (**507** otherwise). A client write that would take
  an application past its quota is refused whole with **507**. Writes arriving from peers
  are applied without the quota check (their origin checked it), so concurrent writes to
  different replicas can exceed a quota by the records in flight.
* **Replication** is primary-less. The Cargo that receives a client write commits it with
  a version ``(ts, origin)`` (its wall clock in ns, kept increasing, and its id) and a
  local sequence number; for every peer (the other replicas, as the manager last set
  them) a sender ships the records this Cargo originated in sequence order and remembers
  (durably) the last sequence the peer applied, so a peer that was down, or this Cargo
  after a restart, catches up. Peers apply records last-writer-wins on the version, so
  replicas converge whatever the order of delivery.
* **Consistency** per application. ``strong``: a write is acknowledged after every
  replica in the current peer list applied it (all live replicas: the manager removes a
  dead Cargo from the peer lists as soon as it declares it dead, so a failure delays
  strong writes by the detection time; after ``write_timeout_s`` the write is answered
  **503**, and it may then still be applied on some replicas: writes are idempotent, a
  retry is safe). ``eventual``: acknowledged after the local commit, shipped in the
  background; per write the lag from the acknowledgement to the last peer's answer is
  recorded (``GET /stats``). The lag is bounded: while the oldest write not yet on every
  peer is older than ``max_lag_s``, new writes wait (and get **503** after
  ``write_timeout_s``).
* **Initial data set.** An allocation may name a source, pulled before the Cargo answers:
  records inline, a URL or a file (JSON ``{"records": [...]}`` or the binary format of
  :func:`~nodes.armada.cargo.codec.pack_records`), or the application's live replicas
  (the manager's copy when it restores the replication factor; every listed replica is
  copied and merged). Files are read only below ``--data-root`` and every URL or file
  read is streamed with a size limit (the quota, at most ``--max-source-mb``):
  :mod:`nodes.armada.sources`.
* **Versions are bounded by the clock.** A replicated version more than
  ``max_clock_skew_s`` ahead of this Cargo's clock is refused (400): one far in the future
  would win every later write of its record for good. The write clock is a hybrid
  logical clock (above every version held or received), so a client write supersedes
  what its replica holds; one that still stores nothing is 409, never 200.

Run it as ``python -m nodes.armada.cargo --host H --port P --data-dir DIR --cargo-id ID
--lat LAT --lon LON [--capacity-gb 2] [--beacon URL] [...]`` with the run secret in
``$TESTBED_SECRET_FILE`` (or ``--secret-file``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import socket
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiohttp import web

from nodes.armada import openapi as doc
from nodes.armada.agent import BeaconAgent
from nodes.armada.cargo.codec import DEFAULT_DIM, record_bytes, source_limit, unpack_records
from nodes.armada.cargo.index import VectorIndex
from nodes.armada.cargo.store import QuotaExceededError, Row, Store
from nodes.armada.configs import (
    DEFAULT_CAPACITY_BYTES,
    DEFAULT_MAX_CLOCK_SKEW_S,
    DEFAULT_MAX_SOURCE_BYTES,
    CargoParams,
)
from nodes.armada.fields import (
    CONSISTENCIES,
    MAX_DIM,
    MAX_RECORD_ID,
    NAME_RE,
    enum_field,
    pattern_field,
    records_field,
    source_field,
    str_field,
    urls_field,
    vector_field,
)
from nodes.armada.sources import SourceError, read_file, read_url
from nodes.common import (
    PUBLIC,
    Address,
    Field,
    Route,
    client_error,
    int_field,
    json_errors,
    read_json_object,
    run_service,
)
from nodes.http import PeerError, call_json, error_of
from nodes.openapi import add_api
from nodes.secret import peer_headers

_log = logging.getLogger("nodes.armada.cargo")

#: Request bodies a Cargo accepts (batches of records, replication, inline sources).
MAX_BODY_BYTES = 16 * 1024 * 1024
PAGE_LIMIT = 1000
REPLICATE_BATCH = 256
SOURCE_TIMEOUT_S = 60.0
BACKOFF_S = (0.02, 0.5)  # retry delays of a failing peer, doubling
LAG_SAMPLES = 100_000

ALLOCATE_FIELDS = {
    "app": pattern_field(NAME_RE, "name of 1-40 characters a-z, 0-9, '-'"),
    "quota_bytes": int_field(1),
    "dim": int_field(1, MAX_DIM, required=False),
    "consistency": enum_field(CONSISTENCIES, required=False),
    "peers": urls_field(required=False),
    "source": source_field(),
}
PEERS_FIELDS = {"peers": urls_field()}
WRITE_FIELDS = {"records": records_field()}
REPLICATE_FIELDS = {"origin": str_field(), "records": records_field(versioned=True)}
MATCH_FIELDS = {
    "vector": vector_field(),
    "threshold": Field("finite number >= 0",
                       lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                       and math.isfinite(v) and v >= 0, required=False),
}


def query_int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    """Query parameter ``name`` as an integer in ``[lo, hi]``; 400 naming it otherwise."""
    raw = request.query.get(name)
    if raw is None:
        return default
    value: int | None = None
    if 0 < len(raw) <= 20 and raw.lstrip("-").isdigit() and raw.isascii():
        value = int(raw)
    if value is None or not lo <= value <= hi:
        raise client_error(web.HTTPBadRequest, f"{name}: expected integer in [{lo}, {hi}], "
                           f"found {raw[:40]!r}")
    return value


@dataclass
class AppData:
    """One application allocated on this Cargo."""

    name: str
    quota_bytes: int
    dim: int
    consistency: str
    peers: list[str]
    created_at: float
    state: str = "syncing"  # syncing | ready | dropped
    index: VectorIndex = field(init=False)
    acked: dict[str, int] = field(default_factory=dict)
    #: Sequence number -> wall time of the acknowledgement, eventual writes not yet on
    #: every peer, oldest first.
    unreplicated: collections.OrderedDict[int, float] = field(
        default_factory=collections.OrderedDict)
    lags: collections.deque[tuple[float, float]] = field(
        default_factory=lambda: collections.deque(maxlen=LAG_SAMPLES))
    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    wake: dict[str, asyncio.Event] = field(default_factory=dict)
    senders: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = VectorIndex(self.dim)

    @property
    def record_bytes(self) -> int:
        return record_bytes(self.dim)

    @property
    def quota_records(self) -> int:
        return self.quota_bytes // self.record_bytes

    def lag_age(self, now: float) -> float:
        """Seconds since the oldest eventual write still missing on some peer was acked."""
        if not self.unreplicated:
            return 0.0
        return now - next(iter(self.unreplicated.values()))


@dataclass
class CargoConfig:
    """Who this Cargo is and how it behaves (the command-line options)."""

    cargo_id: str
    url: str  # how others reach this Cargo
    data_dir: Path
    lat: float
    lon: float
    capacity_bytes: int = DEFAULT_CAPACITY_BYTES
    node_type: str = "volunteer"
    tags: list[str] = field(default_factory=list)
    beacon: str | None = None  # register through it (with the run secret) when set
    recheck_s: float = 5.0
    write_timeout_s: float = 10.0
    max_lag_s: float = 5.0
    peer_timeout_s: float = 5.0
    data_root: Path | None = None  # file sources only below it; none: refused
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    max_clock_skew_s: float = DEFAULT_MAX_CLOCK_SKEW_S


def _summary(values: Sequence[float]) -> dict[str, Any]:
    """Count, mean and percentiles in milliseconds."""
    if not values:
        return {"count": 0, "mean_ms": None, "p50_ms": None, "p95_ms": None, "p99_ms": None,
                "max_ms": None}
    ms = np.asarray(values) * 1e3
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"count": len(ms), "mean_ms": round(float(ms.mean()), 3),
            "p50_ms": round(float(p50), 3), "p95_ms": round(float(p95), 3),
            "p99_ms": round(float(p99), 3), "max_ms": round(float(ms.max()), 3)}


class Cargo(BeaconAgent):
    """Store, replication, registration agent and HTTP handlers of a Cargo.

    Registration with the Cargo Manager (and ``GET /status``) is
    :class:`~nodes.armada.agent.BeaconAgent`'s.
    """

    collection = "cargos"
    log = _log

    def __init__(self, config: CargoConfig) -> None:
        self.config = config
        self.url = config.url.rstrip("/")
        self.apps: dict[str, AppData] = {}
        self.store: Store | None = None
        self.registrations = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cargo-db")
        self._session: aiohttp.ClientSession | None = None
        self.auth_headers: dict[str, str] = {}
        self._checked = asyncio.Event()
        self._agent: asyncio.Task[None] | None = None
        self._last_ts = 0

    # ------------------------------------------------------------------- plumbing

    async def db(self, fn: Any, *args: Any) -> Any:
        """Run a :class:`Store` call in the store's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def session(self) -> aiohttp.ClientSession:
        """Client session for peers, data sources and the Beacon (while the app runs)."""
        assert self._session is not None, "the Cargo app is not running"
        return self._session

    def _clock(self, n: int = 1) -> int:
        """The first of ``n`` write versions: wall-clock nanoseconds, strictly increasing
        on this Cargo across writes (a batch takes ``n`` consecutive values)."""
        first = max(time.time_ns(), self._last_ts + 1)
        self._last_ts = first + n - 1
        return first

    def _observe(self, rows: Iterable[Row]) -> None:
        """Move this Cargo's clock past every version it holds (a hybrid logical clock): a
        client write here then supersedes what this replica has seen, even when a peer's
        clock runs ahead (by at most ``max_clock_skew_s``, :meth:`_check_versions`)."""
        self._last_ts = max([self._last_ts, *(row[2] for row in rows)])

    def _check_versions(self, records: list[dict[str, Any]], where: str) -> None:
        """400 for a version too far ahead of this Cargo's clock: one far in the future
        would win every later write of that record for good."""
        bound = time.time_ns() + round(self.config.max_clock_skew_s * 1e9)
        for i, record in enumerate(records):
            if record["ts"] > bound:
                raise client_error(
                    web.HTTPBadRequest, f"{where}[{i}].ts: expected at most {bound} (this "
                    f"Cargo's clock + {self.config.max_clock_skew_s:g} s), found {record['ts']}")

    @property
    def reserved_bytes(self) -> int:
        return sum(a.quota_bytes for a in self.apps.values())

    def used_bytes(self, app: AppData) -> int:
        assert self.store is not None
        return self.store.counts.get(app.name, 0) * app.record_bytes

    # ------------------------------------------------------------------ lifecycle

    async def start(self, app: web.Application) -> None:
        """Startup hook: open the store, rebuild indexes, resume senders, register."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = await self.db(Store, self.config.data_dir / "cargo.sqlite3")
        # a plain session: it also fetches data sources, which must never see the secret
        self._session = aiohttp.ClientSession()
        self.auth_headers = peer_headers(app)
        for meta in await self.db(self.store.apps):
            if meta["state"] != "ready":
                _log.info("dropping %s: its initial load or copy did not finish", meta["app"])
                await self.db(self.store.drop, meta["app"])
                continue
            data = AppData(meta["app"], meta["quota_bytes"], meta["dim"], meta["consistency"],
                           meta["peers"], meta["created_at"], state="ready")
            rows = await self.db(self.store.scan, data.name)
            for row in rows:
                data.index.put(*row)
            self._observe(rows)
            acked = await self.db(self.store.acked, data.name)
            data.acked = {**acked, **{p: acked.get(p, 0) for p in data.peers}}
            self.apps[data.name] = data
            for peer in data.peers:
                self._start_sender(data, peer)
        if self.config.beacon:
            self._agent = asyncio.create_task(self.agent_loop())

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook (SIGTERM): deregister, stop senders, close the store."""
        if self._agent is not None:
            self._agent.cancel()
            await asyncio.gather(self._agent, return_exceptions=True)
        if self.config.beacon:
            await self.deregister()
        for data in self.apps.values():
            await self._stop_senders(data, list(data.senders))
        if self._session is not None:
            await self._session.close()
        if self.store is not None:
            await self.db(self.store.close)
        self._executor.shutdown(wait=False)

    # ---------------------------------------------------------------- replication

    def _start_sender(self, data: AppData, peer: str) -> None:
        data.wake[peer] = asyncio.Event()
        data.wake[peer].set()
        data.senders[peer] = asyncio.create_task(self.sender(data, peer))

    async def _stop_senders(self, data: AppData, peers: Iterable[str]) -> None:
        tasks = [data.senders.pop(p) for p in list(peers) if p in data.senders]
        for peer in peers:
            data.wake.pop(peer, None)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def sender(self, data: AppData, peer: str) -> None:
        """Ship the records this Cargo originated to ``peer``, in sequence order, forever."""
        assert self.store is not None
        wake = data.wake[peer]
        backoff = BACKOFF_S[0]
        failing = False
        url = f"{peer}/apps/{data.name}/replicate"
        while True:
            wake.clear()
            rows = await self.db(self.store.outbox, data.name, self.config.cargo_id,
                                 data.acked.get(peer, 0), REPLICATE_BATCH)
            if not rows:
                await wake.wait()
                continue
            body = {"origin": self.config.cargo_id,
                    "records": [{"id": r[0], "vector": np.frombuffer(r[1], "<f8").tolist(),
                                 "ts": r[2], "origin": r[3]} for r in rows]}
            try:
                status, answer = await call_json(self.session, "POST", url, body,
                                                 timeout_s=self.config.peer_timeout_s,
                                                 headers=self.auth_headers)
            except PeerError as exc:
                status, answer = 0, {"error": str(exc)}
            if status != 200:
                if not failing:
                    _log.info("replication of %s to %s failing: %s", data.name, peer,
                              error_of(status, answer))
                failing = True
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, BACKOFF_S[1])
                continue
            failing, backoff = False, BACKOFF_S[0]
            seq = rows[-1][4]
            data.acked[peer] = max(seq, data.acked.get(peer, 0))
            await self.db(self.store.set_acked, data.name, peer, seq)
            await self._progress(data)

    async def _progress(self, data: AppData) -> None:
        """Peers moved on (or changed): record finished lags and wake waiting writes."""
        floor = min((data.acked.get(p, 0) for p in data.peers), default=math.inf)
        now = time.time()
        while data.unreplicated:
            seq, acked_at = next(iter(data.unreplicated.items()))
            if seq > floor:
                break
            data.unreplicated.popitem(last=False)
            data.lags.append((acked_at, max(0.0, now - acked_at)))
        async with data.changed:
            data.changed.notify_all()

    async def _wait(self, data: AppData, done: Any, what: str) -> None:
        """Wait until ``done()`` (re-checked at every replication progress); 503 on timeout."""
        try:
            async with data.changed:
                await asyncio.wait_for(data.changed.wait_for(done),
                                       self.config.write_timeout_s)
        except TimeoutError:
            raise client_error(web.HTTPServiceUnavailable, what()) from None
        if data.state == "dropped":
            raise client_error(web.HTTPNotFound, f"no such application here: {data.name}")

    async def _replicated(self, data: AppData, seq: int) -> None:
        """Strong writes: wait until every current peer applied ``seq``."""

        def done() -> bool:
            return data.state == "dropped" or all(data.acked.get(p, 0) >= seq
                                                  for p in data.peers)

        def what() -> str:
            missing = [p for p in data.peers if data.acked.get(p, 0) < seq]
            return (f"not acknowledged by every replica within "
                    f"{self.config.write_timeout_s:g} s (missing: {', '.join(missing)}); "
                    "it may be applied on some replicas, retrying is safe")

        await self._wait(data, done, what)

    async def _within_lag(self, data: AppData) -> None:
        """Eventual writes: wait while the replicas lag more than ``max_lag_s`` behind."""

        def done() -> bool:
            return data.state == "dropped" or data.lag_age(time.time()) <= self.config.max_lag_s

        def what() -> str:
            return (f"replicas lag {data.lag_age(time.time()):.1f} s behind, more than the "
                    f"bound of {self.config.max_lag_s:g} s, for {self.config.write_timeout_s:g} s")

        if not done():
            await self._wait(data, done, what)

    async def set_peers(self, data: AppData, peers: list[str]) -> None:
        """Replace the peer list.

        A new peer is assumed to copy what is committed now; a peer that was one before
        resumes where it stopped (a replica the manager re-adopts gets what it missed).
        """
        assert self.store is not None
        peers = list(dict.fromkeys(p.rstrip("/") for p in peers if p.rstrip("/") != self.url))
        removed = [p for p in data.peers if p not in peers]
        acked = dict(data.acked)
        for peer in peers:
            acked.setdefault(peer, self.store.seq)
        await self.db(self.store.set_peers, data.name, peers, acked)
        await self._stop_senders(data, removed)
        data.peers, data.acked = peers, acked
        for peer in peers:
            if peer not in data.senders:
                self._start_sender(data, peer)
        await self._progress(data)

    # -------------------------------------------------------------- applications

    async def allocate(self, body: dict[str, Any]) -> tuple[AppData, int, float]:
        """Create an application here and load its initial data set; the new app, the
        records loaded and the seconds loading took. Raises client errors."""
        assert self.store is not None
        name = body["app"]
        if name in self.apps:
            raise client_error(web.HTTPConflict, f"app: {name} is already allocated here")
        dim = body.get("dim", DEFAULT_DIM)
        quota = body["quota_bytes"]
        if quota < record_bytes(dim):
            raise client_error(web.HTTPBadRequest, f"quota_bytes: expected at least one record "
                               f"({record_bytes(dim)} bytes at dim {dim}), found {quota}")
        free = self.config.capacity_bytes - self.reserved_bytes
        if quota > free:
            raise client_error(web.HTTPInsufficientStorage,
                               f"insufficient storage: {free} of {self.config.capacity_bytes} "
                               f"bytes unreserved, {quota} asked")
        peers = list(dict.fromkeys(p.rstrip("/") for p in body.get("peers", [])
                                   if p.rstrip("/") != self.url))
        data = AppData(name, quota, dim, body.get("consistency", "strong"), peers, time.time())
        self.apps[name] = data  # reserved from now on
        began = time.monotonic()
        try:
            await self.db(self.store.create, name, quota, dim, data.consistency, peers,
                          data.created_at)
            data.acked = await self.db(self.store.acked, name)
            for peer in peers:
                self._start_sender(data, peer)
            loaded = await self._load(data, body.get("source"))
            await self.db(self.store.set_state, name, "ready")
        except KeyError:  # the store no longer has it
            await self.drop(data)
            raise client_error(web.HTTPConflict,
                               f"app: {name} was released while loading") from None
        except BaseException:
            await self.drop(data)
            raise
        data.state = "ready"
        return data, loaded, time.monotonic() - began

    async def drop(self, data: AppData) -> None:
        """Forget an application and its data."""
        assert self.store is not None
        self.apps.pop(data.name, None)
        data.state = "dropped"
        await self._stop_senders(data, list(data.senders))
        await self.db(self.store.drop, data.name)
        async with data.changed:
            data.changed.notify_all()

    async def _load(self, data: AppData, source: dict[str, Any] | None) -> int:
        """Pull the initial data set; the number of records loaded."""
        if source is None:
            return 0
        kind = source["kind"]
        if kind == "replicas":
            return await self._copy(data, source["urls"])
        if kind == "inline":
            rows = self._rows(data, source["records"], "source.records")
        else:
            try:
                raw, content_type = await self._fetch(data, source)
            except SourceError as exc:
                raise _source_failure(exc) from None
            try:
                if content_type == "application/json":
                    rows = self._json_rows(data, raw)
                else:
                    rows = [(rid, blob, 0, "") for rid, blob in unpack_records(raw, data.dim)]
            except ValueError as exc:
                raise client_error(web.HTTPUnprocessableEntity, f"source: {exc}") from None
        try:
            applied, _ = await self.db(self.store.write, data.name, rows, data.quota_records)
        except QuotaExceededError as exc:
            raise client_error(web.HTTPInsufficientStorage, f"source: {exc}") from None
        for row in applied:
            data.index.put(*row)
        return len(applied)

    async def _fetch(self, data: AppData, source: dict[str, Any]) -> tuple[bytes, str]:
        """The bytes of a URL or file source and their content type, read by
        :mod:`nodes.armada.sources` (confined to the data root, bounded by the quota and
        ``max_source_bytes``); raises :class:`SourceError`."""
        most = self.config.max_source_bytes
        if source["kind"] == "file":
            path = source["path"]
            is_json = path.endswith(".json")
            limit = source_limit(data.quota_records, data.dim, is_json, most)
            raw = await read_file(self.config.data_root, path, limit)
            return raw, "application/json" if is_json else "application/octet-stream"
        # The format is known from the answer's headers only: the JSON bound first, the
        # binary one once the content type says so.
        limit = source_limit(data.quota_records, data.dim, True, most)
        raw, content_type = await read_url(self.session, source["url"], limit,
                                           SOURCE_TIMEOUT_S)
        binary = source_limit(data.quota_records, data.dim, False, most)
        if content_type != "application/json" and len(raw) > binary:
            raise SourceError(413, f"source: {source['url']} holds more than {binary} bytes, "
                                   "the limit of this data set (its quota, or the Cargo's "
                                   "--max-source-mb)")
        return raw, content_type

    def _json_rows(self, data: AppData, raw: bytes) -> list[Row]:
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"invalid JSON ({exc})") from None
        records = decoded.get("records") if isinstance(decoded, dict) else decoded
        if not records_field().accepts(records):
            raise ValueError('expected {"records": [{"id", "vector"}, ...]} or an array of '
                             "records")
        return self._rows(data, records, "source.records")

    def _rows(self, data: AppData, records: list[dict[str, Any]], where: str,
              version: tuple[int, str] = (0, "")) -> list[Row]:
        """Validated rows of decoded records (dimension checked); client 400 otherwise.

        A record keeps its own version (``ts``, ``origin``) when it has one (from a peer);
        otherwise record ``i`` gets ``(ts + i, origin)`` of ``version``, except for data
        sets, whose records all get ``(0, "")``: every replica then holds identical
        versions, older than any write.
        """
        ts, origin = version
        rows = []
        for i, record in enumerate(records):
            vector = record["vector"]
            if len(vector) != data.dim:
                raise client_error(web.HTTPBadRequest, f"{where}[{i}].vector: expected "
                                   f"{data.dim} numbers, found {len(vector)}")
            blob = np.asarray(vector, dtype="<f8").tobytes()
            if "ts" in record:
                rows.append((record["id"], blob, record["ts"], record["origin"]))
            else:
                rows.append((record["id"], blob, ts + i if ts else 0, origin))
        return rows

    async def _copy(self, data: AppData, urls: list[str]) -> int:
        """Copy and merge every record of the application from each replica in ``urls``."""
        assert self.store is not None
        copied, failures = 0, []
        for base in urls:
            after = -1
            try:
                while True:
                    status, answer = await call_json(
                        self.session, "GET",
                        f"{base.rstrip('/')}/apps/{data.name}/records?after={after}"
                        f"&limit={PAGE_LIMIT}", timeout_s=SOURCE_TIMEOUT_S,
                    )
                    if status != 200 or not isinstance(answer, dict):
                        raise PeerError(f"{base}: {error_of(status, answer)}")
                    records = answer.get("records", [])
                    if records:
                        if not records_field(versioned=True).accepts(records):
                            raise PeerError(f"{base}: malformed records")
                        try:
                            self._check_versions(records, "records")
                        except web.HTTPBadRequest as exc:
                            raise PeerError(f"{base}: {exc.text}") from None
                        rows = self._rows(data, records, "records")
                        self._observe(rows)
                        applied, _ = await self.db(self.store.write, data.name, rows, None)
                        for row in applied:
                            data.index.put(*row)
                        copied += len(applied)
                    if answer.get("next") is None:
                        break
                    after = answer["next"]
            except PeerError as exc:
                failures.append(str(exc))
        if len(failures) == len(urls):
            raise client_error(web.HTTPBadGateway,
                               "source: no replica could be copied: " + "; ".join(failures))
        return copied

    # ------------------------------------------------------------------- writes

    async def write(self, data: AppData, records: list[dict[str, Any]]) -> dict[str, Any]:
        """A client write, acknowledged as the application's consistency policy says."""
        assert self.store is not None
        version = (self._clock(len(records)), self.config.cargo_id)
        rows = self._rows(data, records, "records", version)
        if data.consistency == "eventual" and data.peers:
            await self._within_lag(data)
        try:
            applied, seq = await self.db(self.store.write, data.name, rows, data.quota_records)
        except QuotaExceededError as exc:
            data.counters["refused"] += 1
            raise client_error(web.HTTPInsufficientStorage, str(exc)) from None
        except KeyError:
            raise client_error(web.HTTPNotFound,
                               f"no such application here: {data.name}") from None
        if not applied:
            # A peer's newer version of every id committed between this write's clock
            # reading and its commit: nothing stored, so no 200.
            data.counters["refused"] += 1
            raise client_error(web.HTTPConflict, "records: nothing stored: this replica "
                               "holds a newer version of every record of the write (a "
                               "concurrent write won); retry to supersede it")
        for row in applied:
            data.index.put(*row)
        data.counters["writes"] += 1
        data.counters["records_written"] += len(applied)
        peers = list(data.peers)
        if seq and peers:
            if data.consistency == "eventual":
                data.unreplicated[seq] = time.time()
            for peer in peers:
                if peer in data.wake:
                    data.wake[peer].set()
            if data.consistency == "strong":
                await self._replicated(data, seq)
        # Strong: every current peer has it (peers added meanwhile copy it).
        acked_by = 1 + (len(data.peers) if data.consistency == "strong" else 0)
        return {"app": data.name, "written": len(applied), "seq": seq,
                "consistency": data.consistency, "replicas": acked_by}

    # ------------------------------------------------------------------ views

    def app_json(self, data: AppData) -> dict[str, Any]:
        """An application as this Cargo shows it."""
        assert self.store is not None
        return {
            "app": data.name, "state": data.state, "quota_bytes": data.quota_bytes,
            "dim": data.dim, "record_bytes": data.record_bytes,
            "records": self.store.counts.get(data.name, 0), "used_bytes": self.used_bytes(data),
            "consistency": data.consistency, "peers": data.peers,
            "acked": {p: data.acked.get(p, 0) for p in data.peers},
            "unreplicated": len(data.unreplicated),
            "lag_age_s": round(data.lag_age(time.time()), 6), "created_at": data.created_at,
        }

    def status(self) -> dict[str, Any]:
        """The node, its capacity and its applications (the manager's health check)."""
        assert self.store is not None
        cfg = self.config
        return {
            "cargo_id": cfg.cargo_id, "url": self.url, "lat": cfg.lat, "lon": cfg.lon,
            "node_type": cfg.node_type, "tags": cfg.tags, "capacity_bytes": cfg.capacity_bytes,
            "reserved_bytes": self.reserved_bytes,
            "used_bytes": sum(self.used_bytes(a) for a in self.apps.values()),
            "disk_bytes": self.store.disk_bytes(), "registrations": self.registrations,
            "time": time.time(), "apps": [self.app_json(a) for a in self.apps.values()],
        }

    # -------------------------------------------------------------- registration

    @property
    def agent_id(self) -> str:
        """The Cargo id."""
        return self.config.cargo_id

    def registration(self) -> dict[str, Any]:
        """The Cargo as the manager registers it, with the applications it holds."""
        cfg = self.config
        return {"cargo_id": cfg.cargo_id, "url": self.url, "lat": cfg.lat, "lon": cfg.lon,
                "capacity_bytes": cfg.capacity_bytes, "node_type": cfg.node_type,
                "tags": cfg.tags, "apps": sorted(self.apps)}

    async def registered(self, answer: dict[str, Any], sent: float) -> None:
        """Drop the applications the manager re-replicated elsewhere."""
        for name in answer.get("drop", []):
            data = self.apps.get(name)
            if data is not None:
                _log.info("dropping %s: the manager placed its replica elsewhere", name)
                await self.drop(data)

    # ------------------------------------------------------------------ handlers

    def _app(self, request: web.Request, ready: bool = False) -> AppData:
        name = request.match_info["app"]
        data = self.apps.get(name)
        if data is None:
            raise client_error(web.HTTPNotFound, f"no such application here: {name}")
        if ready and data.state != "ready":
            raise client_error(web.HTTPServiceUnavailable,
                               f"application {name} is still {data.state}")
        return data

    @staticmethod
    async def _body(request: web.Request, fields: dict[str, Field]) -> dict[str, Any]:
        try:
            return await read_json_object(request, fields)
        except web.HTTPRequestEntityTooLarge:
            reason = f"body: expected at most {MAX_BODY_BYTES} bytes, found more"
            raise web.HTTPRequestEntityTooLarge(
                MAX_BODY_BYTES, request.content_length or 0,
                text=json.dumps({"error": reason}), content_type="application/json",
            ) from None

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"ok": True, "cargo_id": self.config.cargo_id})

    async def handle_stats(self, request: web.Request) -> web.Response:
        """``GET /stats[?samples=1]``: counters and replication lag per application."""
        samples = request.query.get("samples") in ("1", "true")
        apps = {}
        for data in self.apps.values():
            stats: dict[str, Any] = {
                "consistency": data.consistency, **{k: data.counters[k] for k in (
                    "writes", "records_written", "refused", "reads", "matches",
                    "replicated_in")},
                "unreplicated": len(data.unreplicated),
                "lag": _summary([lag for _, lag in data.lags]),
            }
            if samples:
                stats["lag_samples"] = [[t, round(lag, 6)] for t, lag in data.lags]
            apps[data.name] = stats
        return web.json_response({"cargo_id": self.config.cargo_id, "time": time.time(),
                                  "apps": apps})

    async def handle_allocate(self, request: web.Request) -> web.Response:
        """``POST /apps``: allocate an application here and load its data set (201)."""
        body = await self._body(request, ALLOCATE_FIELDS)
        data, loaded, seconds = await self.allocate(body)
        return web.json_response({**self.app_json(data), "loaded": loaded,
                                  "load_s": round(seconds, 6)}, status=201)

    async def handle_apps(self, request: web.Request) -> web.Response:
        """``GET /apps``."""
        return web.json_response({"apps": [self.app_json(a) for a in self.apps.values()]})

    async def handle_app(self, request: web.Request) -> web.Response:
        """``GET /apps/{app}``."""
        return web.json_response(self.app_json(self._app(request)))

    async def handle_drop(self, request: web.Request) -> web.Response:
        """``DELETE /apps/{app}``: release the allocation and delete its data."""
        data = self._app(request)
        view = self.app_json(data)
        await self.drop(data)
        return web.json_response({**view, "state": "dropped"})

    async def handle_peers(self, request: web.Request) -> web.Response:
        """``PUT /apps/{app}/peers``: the other replicas, as the manager decides them."""
        data = self._app(request)
        body = await self._body(request, PEERS_FIELDS)
        await self.set_peers(data, body["peers"])
        return web.json_response(self.app_json(data))

    async def handle_write(self, request: web.Request) -> web.Response:
        """``POST /apps/{app}/records``: insert or replace records."""
        data = self._app(request, ready=True)
        body = await self._body(request, WRITE_FIELDS)
        return web.json_response(await self.write(data, body["records"]))

    async def handle_replicate(self, request: web.Request) -> web.Response:
        """``POST /apps/{app}/replicate``: records a peer originated (last writer wins)."""
        assert self.store is not None
        data = self._app(request)
        body = await self._body(request, REPLICATE_FIELDS)
        self._check_versions(body["records"], "records")
        rows = self._rows(data, body["records"], "records")
        self._observe(rows)
        try:
            applied, _ = await self.db(self.store.write, data.name, rows, None)
        except KeyError:
            raise client_error(web.HTTPNotFound,
                               f"no such application here: {data.name}") from None
        for row in applied:
            data.index.put(*row)
        data.counters["replicated_in"] += len(applied)
        return web.json_response({"app": data.name, "applied": len(applied),
                                  "received": len(rows)})

    async def handle_read(self, request: web.Request) -> web.Response:
        """``GET /apps/{app}/records/{id}``."""
        data = self._app(request, ready=True)
        raw = request.match_info["id"]
        try:
            rid = int(raw)
        except ValueError:
            raise client_error(web.HTTPBadRequest,
                               f"id: expected an integer, found {raw!r}") from None
        data.counters["reads"] += 1
        vector = data.index.get(rid)
        if vector is None:
            raise client_error(web.HTTPNotFound, f"no such record: {rid}")
        return web.json_response({"app": data.name, "id": rid, "vector": vector.tolist()})

    async def handle_list(self, request: web.Request) -> web.Response:
        """``GET /apps/{app}/records?after=ID&limit=N``: records with versions, by id."""
        assert self.store is not None
        data = self._app(request)
        after = query_int(request, "after", -1, -1, MAX_RECORD_ID)
        limit = query_int(request, "limit", PAGE_LIMIT, 1, PAGE_LIMIT)
        rows = await self.db(self.store.page, data.name, after, limit)
        records = [{"id": r[0], "vector": np.frombuffer(r[1], "<f8").tolist(), "ts": r[2],
                    "origin": r[3]} for r in rows]
        following = rows[-1][0] if len(rows) == limit else None
        return web.json_response({"app": data.name, "records": records, "next": following})

    async def handle_match(self, request: web.Request) -> web.Response:
        """``POST /apps/{app}/match``: the nearest record to a vector, within a threshold."""
        data = self._app(request, ready=True)
        body = await self._body(request, MATCH_FIELDS)
        if len(body["vector"]) != data.dim:
            raise client_error(web.HTTPBadRequest, f"vector: expected {data.dim} numbers, "
                               f"found {len(body['vector'])}")
        data.counters["matches"] += 1
        best = data.index.match(np.asarray(body["vector"], dtype=np.float64))
        threshold = body.get("threshold")
        if best is None:
            return web.json_response({"app": data.name, "match": False, "id": None,
                                      "distance": None, "records": 0})
        rid, distance = best
        matched = threshold is None or distance <= threshold
        return web.json_response({"app": data.name, "match": matched, "id": rid,
                                  "distance": distance, "records": data.index.size})


CARGO_KEY = web.AppKey("cargo", Cargo)


def _source_failure(exc: SourceError) -> web.HTTPException:
    """The JSON client error of a source that cannot be read."""
    body = {"text": json.dumps({"error": exc.reason}), "content_type": "application/json"}
    if exc.status == 413:
        return web.HTTPRequestEntityTooLarge(0, 0, **body)
    kinds = {400: web.HTTPBadRequest, 422: web.HTTPUnprocessableEntity}
    return kinds.get(exc.status, web.HTTPBadGateway)(**body)


def make_app(config: CargoConfig) -> web.Application:
    """Build the Cargo application (its state is ``app[CARGO_KEY]``)."""
    cargo = Cargo(config)
    one_app = (404,)
    routes = [
        Route("GET", "/status", cargo.handle_status,
              "node, capacity and applications (the health check)", doc.op()),
        Route("GET", "/stats", cargo.handle_stats, "counters and replication lag per "
              "application (?samples=1 adds every lag sample)", doc.op()),
        Route("POST", "/apps", cargo.handle_allocate,
              "allocate an application and load its data set",
              doc.op(201, doc.CARGO_ALLOCATE, (400, 409, 413, 422, 502, 507))),
        Route("GET", "/apps", cargo.handle_apps, "list applications", doc.op()),
        Route("GET", "/apps/{app}", cargo.handle_app, "one application", doc.op(errors=one_app)),
        Route("DELETE", "/apps/{app}", cargo.handle_drop, "release it and delete its data",
              doc.op(errors=one_app)),
        Route("PUT", "/apps/{app}/peers", cargo.handle_peers, "set the other replicas",
              doc.op(200, doc.PEERS, (400, 404))),
        Route("POST", "/apps/{app}/records", cargo.handle_write, "insert or replace records",
              doc.op(200, doc.WRITE, (400, 404, 409, 413, 503, 507))),
        Route("GET", "/apps/{app}/records", cargo.handle_list,
              "records with versions by id (?after=ID&limit=N)", doc.op(errors=(400, 404))),
        Route("GET", "/apps/{app}/records/{id}", cargo.handle_read, "one record",
              doc.op(errors=(400, 404, 503))),
        Route("POST", "/apps/{app}/match", cargo.handle_match,
              "nearest record to a vector, within a threshold",
              doc.op(200, doc.MATCH, (400, 404, 503)), auth=PUBLIC),
        Route("POST", "/apps/{app}/replicate", cargo.handle_replicate,
              "records a peer originated (last writer wins)",
              doc.op(200, doc.REPLICATE, (400, 404, 413))),
        Route("GET", "/health", cargo.handle_health, "liveness", doc.op()),
    ]
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)
    app[CARGO_KEY] = cargo
    add_api(app, "Armada Cargo", "Storage node: durable per-application record stores, "
                "replication, matching.", routes)
    app.on_startup.append(cargo.start)
    app.on_cleanup.append(cargo.stop)
    return app


def app_from_params(params: CargoParams, address: Address) -> web.Application:
    """The Cargo of a command line, reachable at ``address`` (its real port)."""
    config = CargoConfig(
        cargo_id=params.cargo_id or socket.gethostname(),
        url=address.url(params.advertise_host), data_dir=Path(params.data_dir),
        lat=params.lat, lon=params.lon, capacity_bytes=round(params.capacity_gb * 1024**3),
        node_type=params.node_type, tags=[t for t in params.tags.split(",") if t],
        beacon=params.beacon.rstrip("/") if params.beacon else None,
        recheck_s=params.recheck_s, write_timeout_s=params.write_timeout_s,
        max_lag_s=params.max_lag_s, peer_timeout_s=params.peer_timeout_s,
        data_root=Path(params.data_root) if params.data_root else None,
        max_source_bytes=round(params.max_source_mb * 1024**2),
        max_clock_skew_s=params.max_clock_skew_s,
    )
    return make_app(config)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the Cargo of the command line until SIGTERM/SIGINT."""
    return run_service(CargoParams, app_from_params, argv, prog="python -m nodes.armada.cargo",
                       description=__doc__.splitlines()[0], port=0, logger=_log,
                       pick_free_port=True)

