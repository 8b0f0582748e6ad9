"""Storage SDK of the Armada edge cloud: what a task uses to reach its application's data.

A task locates the data access points of its application through the Cargo Manager
(``POST /query``: the application's ready replicas, nearest first), then reads, matches
and writes on the nearest replica that works:

* any connection error, timeout or 5xx (a Cargo that is down, still syncing, or could
  not get a strong write acknowledged in time), and a 404 saying the replica no longer
  holds the application, mark that replica failed and the **same request** goes at once
  to the next one. Writes are idempotent upserts, so resending one is safe. When every
  replica has failed the client locates them again once, then raises
  :class:`StorageUnavailable`;
* 507 raises :class:`StorageFull` (the quota is exhausted; another replica would refuse
  it too), any other 4xx raises :class:`ValueError` (the request is at fault);
* the replica list is refreshed every ``relocate_s`` seconds (lazily, before a call), so
  a task moves back to a nearer replica once it is restored;
* connections are kept alive and reused by default; with ``keep_alive=False`` every
  request opens a new connection, so its latency includes connecting to the Cargo (as
  the paper's read and write latencies do).

Records are ``(id, vector)``: an 8-byte non-negative integer and a float vector of the
application's dimension. ``match`` asks the Cargo for the nearest record (Euclidean
distance) and whether it lies within ``threshold``. Every locate, switch and error is
appended to ``events``, for experiment reports.

:class:`StorageClient` is the asyncio API (aiohttp); :class:`SyncStorageClient` the same
for scripts (requests). The HTTP contract is ``docs/armada.md`` ("Storage layer").
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import requests

from nodes.armada.sdk.failover import EventLog, describe_error, failover_attempts, refusal
from nodes.armada.sdk.transport import AsyncClient, SyncClient
from nodes.secret import environment_headers

DEFAULT_RELOCATE_S = 30.0


class StorageError(Exception):
    """The storage layer refused a request (the reason is the service's ``error``)."""


class StorageUnavailable(StorageError):
    """No replica could serve a request, even after locating the replicas again."""


class StorageFull(StorageError):
    """The application's quota is exhausted (507)."""


class _Failover(Exception):
    """A replica failed; try the next one."""


@dataclass
class Replica:
    """One data access point of the application."""

    cargo_id: str
    url: str
    distance_km: float | None = None
    failed: bool = False


@dataclass(frozen=True)
class Answer:
    """A replica's answer to one request and how it was obtained."""

    body: Any
    cargo_id: str
    latency_s: float  # of the attempt that succeeded, end to end
    attempts: int


@dataclass(frozen=True)
class Match:
    """The answer of a ``match``: the nearest record and whether it is within threshold."""

    matched: bool
    id: int | None
    distance: float | None
    cargo_id: str
    latency_s: float
    attempts: int


def _vector(vector: Any) -> list[float]:
    array = np.asarray(vector, dtype=np.float64)
    if array.ndim != 1 or not array.size or not np.isfinite(array).all():
        raise ValueError("a vector is a non-empty 1-D array of finite numbers")
    return array.tolist()


def _records(records: Iterable[tuple[int, Any]]) -> list[dict[str, Any]]:
    return [{"id": int(rid), "vector": _vector(vector)} for rid, vector in records]


def _judge(status: int, body: Any, url: str) -> None:
    """Raise for an answer that is not a success (see the module docstring)."""
    if status < 300:
        return
    if status >= 500 and status != 507:
        raise _Failover(refusal(status, body))
    error = body.get("error", "") if isinstance(body, dict) else ""
    if status == 404 and error.startswith("no such application"):
        raise _Failover(refusal(status, body))
    if status == 507:
        raise StorageFull(refusal(status, body))
    raise ValueError(f"{url} refused the request: {refusal(status, body)}")


class _Replicas(EventLog):
    """Settings, replicas, the current choice and the event log: what both clients share.

    Its events (``events``) are of kind ``locate``, ``switch`` or ``error``.
    """

    def __init__(
        self,
        manager_url: str,
        app: str,
        lat: float,
        lon: float,
        *,
        request_timeout_s: float = 5.0,
        relocate_s: float = DEFAULT_RELOCATE_S,
        keep_alive: bool = True,
    ) -> None:
        if relocate_s <= 0 or request_timeout_s <= 0:
            raise ValueError("relocate_s and request_timeout_s must be > 0")
        super().__init__()
        self.manager_url = manager_url.rstrip("/")
        self.app = app
        self.query_body = {"app": app, "lat": lat, "lon": lon}
        self.request_timeout_s = request_timeout_s
        self.relocate_s = relocate_s
        self.keep_alive = keep_alive
        self.replicas: list[Replica] = []
        self.current: Replica | None = None
        self._due = -math.inf

    def adopt(self, answer: Any) -> None:
        """Take a query answer's replicas, nearest first."""
        listed = answer.get("candidates", []) if isinstance(answer, dict) else []
        self.replicas = [
            Replica(c["cargo_id"], c["url"].rstrip("/"), c.get("distance_km"))
            for c in listed if isinstance(c, dict) and c.get("url") and c.get("cargo_id")
        ]
        self._due = time.monotonic() + self.relocate_s
        self.record("locate", replicas=[r.cargo_id for r in self.replicas])
        self.choose("locate")

    def choose(self, reason: str) -> Replica | None:
        """Point ``current`` at the nearest working replica; log a switch when it changes."""
        best = next((r for r in self.replicas if not r.failed), None)
        before = self.current
        if best is not None and (before is None or best.url != before.url):
            self.record("switch", source=before.cargo_id if before else None,
                        target=best.cargo_id, url=best.url, reason=reason)
        self.current = best
        return best

    def failed(self, replica: Replica, error: str, during: str) -> None:
        replica.failed = True
        self.record("error", cargo_id=replica.cargo_id, error=error, during=during)
        self.choose("failover")

    @property
    def due(self) -> bool:
        return time.monotonic() >= self._due

    def attempts(self) -> Iterator[tuple[Replica | None, int]]:
        """The replicas one request tries in turn (:func:`failover_attempts`); None: locate
        the replicas again first."""
        return failover_attempts(
            lambda: self.current or self.choose("failover"),
            lambda: StorageUnavailable(f"no replica of {self.app} answers"),
        )

    def _query_failed(self, status: int, body: Any) -> None:
        if status == 404:
            raise StorageError(f"locate refused: {refusal(status, body)}")
        raise StorageUnavailable(f"locate failed: {refusal(status, body)}")

    @staticmethod
    def _match(answer: Answer) -> Match:
        body = answer.body
        return Match(bool(body.get("match")), body.get("id"), body.get("distance"),
                     answer.cargo_id, answer.latency_s, answer.attempts)


class StorageClient(AsyncClient, _Replicas):
    """The asyncio client (see the module docstring). Use ``async with`` or start/close."""

    _session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The connection pool shared by queries and requests (see ``keep_alive``)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                limit=0, force_close=not self.keep_alive))
        return self._session

    async def start(self) -> None:
        """Locate the replicas."""
        await self.locate()

    async def close(self) -> None:
        """Close every connection."""
        if self._session is not None:
            await self._session.close()

    async def locate(self) -> None:
        """Ask the Cargo Manager for the data access points (nearest first)."""
        try:
            async with self.session.post(f"{self.manager_url}/query", json=self.query_body,
                                         timeout=self.timeout) as resp:
                status, body = resp.status, await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.record("error", cargo_id=None, error=describe_error(exc), during="locate")
            raise StorageUnavailable(f"locate failed: {describe_error(exc)}") from None
        if status != 200:
            self._query_failed(status, body)
        self.adopt(body)

    async def _send(self, replica: Replica, method: str, path: str, body: Any) -> tuple[int, Any]:
        async with self.session.request(method, f"{replica.url}/apps/{self.app}{path}",
                                        json=body, timeout=self.timeout,
                                        headers=environment_headers(method)) as resp:
            return resp.status, await resp.json(content_type=None)

    async def call(self, method: str, path: str, body: Any = None) -> Answer:
        """One request on the nearest working replica, failing over until one answers."""
        if self.due:
            await self.locate()
        for replica, attempt in self.attempts():
            if replica is None:
                await self.locate()
                continue
            began = time.perf_counter()
            try:
                status, answer = await self._send(replica, method, path, body)
                _judge(status, answer, replica.url)
            except (aiohttp.ClientError, TimeoutError, _Failover) as exc:
                self.failed(replica, describe_error(exc), path.split("/")[1] or "request")
                continue
            return Answer(answer, replica.cargo_id, time.perf_counter() - began, attempt)

    async def read(self, record_id: int) -> list[float] | None:
        """The vector of a record, or None when the replica has no such record."""
        try:
            answer = await self.call("GET", f"/records/{int(record_id)}")
        except ValueError as exc:
            if "no such record" in str(exc):
                return None
            raise
        return answer.body["vector"]

    async def match(self, vector: Any, threshold: float | None = None) -> Match:
        """The nearest record to ``vector`` and whether it is within ``threshold``."""
        body: dict[str, Any] = {"vector": _vector(vector)}
        if threshold is not None:
            body["threshold"] = threshold
        return self._match(await self.call("POST", "/match", body))

    async def write(self, record_id: int, vector: Any) -> Answer:
        """Insert or replace one record."""
        return await self.write_many([(record_id, vector)])

    async def write_many(self, records: Sequence[tuple[int, Any]]) -> Answer:
        """Insert or replace records in one request (all or none, per replica)."""
        return await self.call("POST", "/records", {"records": _records(records)})


class SyncStorageClient(SyncClient, _Replicas):
    """The synchronous client on ``requests``; locates on the first call."""

    def locate(self) -> None:
        """Ask the Cargo Manager for the data access points (nearest first)."""
        try:
            resp = self.http.post(f"{self.manager_url}/query", json=self.query_body,
                                  timeout=self.request_timeout_s)
            status, body = resp.status_code, resp.json()
        except (requests.RequestException, ValueError) as exc:
            self.record("error", cargo_id=None, error=describe_error(exc), during="locate")
            raise StorageUnavailable(f"locate failed: {describe_error(exc)}") from None
        if status != 200:
            self._query_failed(status, body)
        self.adopt(body)

    def call(self, method: str, path: str, body: Any = None) -> Answer:
        """Like :meth:`StorageClient.call`."""
        if self.due:
            self.locate()
        for replica, attempt in self.attempts():
            if replica is None:
                self.locate()
                continue
            began = time.perf_counter()
            try:
                resp = self.http.request(method, f"{replica.url}/apps/{self.app}{path}",
                                         json=body, timeout=self.request_timeout_s,
                                         headers={**environment_headers(method), **(
                                             {} if self.keep_alive
                                             else {"Connection": "close"})})
                try:
                    answer = resp.json()
                except ValueError:
                    answer = None
                _judge(resp.status_code, answer, replica.url)
            except (requests.RequestException, _Failover) as exc:
                self.failed(replica, describe_error(exc), path.split("/")[1] or "request")
                continue
            return Answer(answer, replica.cargo_id, time.perf_counter() - began, attempt)

    def read(self, record_id: int) -> list[float] | None:
        """Like :meth:`StorageClient.read`."""
        try:
            answer = self.call("GET", f"/records/{int(record_id)}")
        except ValueError as exc:
            if "no such record" in str(exc):
                return None
            raise
        return answer.body["vector"]

    def match(self, vector: Any, threshold: float | None = None) -> Match:
        """Like :meth:`StorageClient.match`."""
        body: dict[str, Any] = {"vector": _vector(vector)}
        if threshold is not None:
            body["threshold"] = threshold
        return self._match(self.call("POST", "/match", body))

    def write(self, record_id: int, vector: Any) -> Answer:
        """Like :meth:`StorageClient.write`."""
        return self.write_many([(record_id, vector)])

    def write_many(self, records: Sequence[tuple[int, Any]]) -> Answer:
        """Like :meth:`StorageClient.write_many`."""
        return self.call("POST", "/records", {"records": _records(records)})
