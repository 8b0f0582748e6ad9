"""Client SDK of the Armada edge cloud: discover, probe, select and fail over.

A user application calls :meth:`ArmadaClient.infer` for every frame; the SDK decides
where the frame goes. It implements the user side of Armada's two-step selection:

1. ask the Beacon (``POST /query``) for the candidate list (TopN replicas chosen by the
   Application Manager from geo-proximity, utilisation and network affiliation);
2. probe every candidate with a real request (``POST /infer`` of ``probe_payload``) timed
   end to end, so network, queueing and processing all count, and send to the fastest.
   A periodic re-probe moves a user off a working node only when another candidate is
   faster by more than ``switch_margin`` (a fraction of the current node's probe, default
   0.2), so one noisy probe does not make users flap between nodes of similar latency.

Connections to every candidate stay open in one keep-alive pool (probes keep them
warm), the query and probes are repeated every ``reprobe_s`` seconds (uniformly drawn
from the range: jitter, so users do not probe in lockstep), and a frame whose send or
receive fails (connection error, timeout, 5xx) is sent again at once to the next-best
candidate, without waiting for the failed node: no frame is lost while any candidate
answers. When every candidate has failed, the client queries and probes again before
giving up with :class:`ArmadaUnavailable`. The servers keep no state about the user.

Every query, probe round, switch and error is appended to ``events`` with its wall time,
for experiment reports. :class:`ArmadaClient` is the asyncio API (aiohttp);
:class:`SyncArmadaClient` the same for scripts (requests; re-probing happens lazily on
the first call after a round is due). :func:`deploy` and :func:`app_status` drive
deployments. The HTTP contract is ``docs/armada.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import requests

from nodes.armada.sdk.streaming import Delivery, Frame, Sender, SendError
from nodes.armada.sdk.transport import (
    AsyncClient,
    Event,
    EventLog,
    SyncClient,
    describe_error,
    failover_attempts,
    refusal,
)

DEFAULT_REPROBE_S = (5.0, 7.0)
DEFAULT_SWITCH_MARGIN = 0.2
CONTENT_TYPE = "application/octet-stream"


class ArmadaError(Exception):
    """A request to Armada was refused (the reason is the service's ``error``)."""


class ArmadaUnavailable(ArmadaError):
    """No candidate could serve a request, even after a new query and probe round."""


@dataclass
class Candidate:
    """One replica the client may use, with its last probe result."""

    task_id: str
    url: str
    node_id: str | None = None
    reason: str = ""
    latency_s: float | None = None  # last probe, None until probed or when it failed
    failed: bool = False  # failed since its last successful probe

    @property
    def rank_key(self) -> tuple[bool, float]:
        """Working candidates first, fastest probe first, unprobed last."""
        return (self.failed, math.inf if self.latency_s is None else self.latency_s)


@dataclass(frozen=True)
class Reply:
    """The answer to one frame and how it was obtained."""

    body: Any  # the task's JSON answer
    task_id: str
    url: str
    latency_s: float  # end to end, of the attempt that succeeded
    attempts: int  # 1 unless it failed over


class _Selection(EventLog):
    """Settings, candidates, the current choice and the event log: what both clients share.

    Its events (``events``) are of kind ``query``, ``probe``, ``switch`` or ``error``.

    ``reprobe_s`` is the (low, high) range of seconds between probe rounds;
    ``request_timeout_s`` bounds every query, probe and frame; ``seed`` makes the jitter
    reproducible; ``switch_margin`` is how much faster (fraction of the current node's
    probe latency) another candidate must probe before a re-probe switches to it.
    """

    def __init__(
        self,
        beacon_url: str,
        app: str,
        lat: float,
        lon: float,
        *,
        probe_payload: bytes,
        tags: Iterable[str] = (),
        user: str | None = None,
        reprobe_s: tuple[float, float] = DEFAULT_REPROBE_S,
        request_timeout_s: float = 5.0,
        content_type: str = CONTENT_TYPE,
        seed: int | None = None,
        switch_margin: float = DEFAULT_SWITCH_MARGIN,
    ) -> None:
        if not 0 < reprobe_s[0] <= reprobe_s[1]:
            raise ValueError(f"reprobe_s must be (low, high) with 0 < low <= high: {reprobe_s}")
        if not 0 <= switch_margin < 1:
            raise ValueError(f"switch_margin must be in [0, 1), found {switch_margin}")
        super().__init__()
        self.switch_margin = switch_margin
        self.beacon_url = beacon_url.rstrip("/")
        self.query_body: dict[str, Any] = {"app": app, "lat": lat, "lon": lon,
                                           "tags": list(tags)}
        if user is not None:
            self.query_body["user"] = user
        self.probe_payload = probe_payload
        self.reprobe_s = reprobe_s
        self.request_timeout_s = request_timeout_s
        self.content_type = content_type
        self.rng = random.Random(seed)
        self.candidates: list[Candidate] = []
        self.current: Candidate | None = None

    def next_delay(self) -> float:
        """Seconds until the next probe round (jittered)."""
        return self.rng.uniform(*self.reprobe_s)

    def adopt(self, answer: Any) -> None:
        """Take a query answer's candidates (keeping nothing of replicas that left)."""
        listed = answer.get("candidates", []) if isinstance(answer, dict) else []
        self.candidates = [
            Candidate(c["task_id"], c["url"].rstrip("/"), c.get("node_id"), c.get("reason", ""))
            for c in listed
            if isinstance(c, dict) and c.get("url") and c.get("task_id")
        ]
        self.record("query", candidates=[c.task_id for c in self.candidates])

    def probed(self, results: Iterable[tuple[Candidate, float | None, str | None]]) -> None:
        """Store a probe round's latencies (None: failed, with the error) and re-choose."""
        latencies = {}
        for candidate, latency, error in results:
            candidate.latency_s, candidate.failed = latency, latency is None
            latencies[candidate.task_id] = None if latency is None else round(latency * 1e3, 3)
            if error is not None:
                self.record("error", task_id=candidate.task_id, error=error, during="probe")
        self.record("probe", latency_ms=latencies)
        self.choose("probe")

    def choose(self, reason: str) -> Candidate | None:
        """Point ``current`` at the best working candidate; log a switch when it changes.

        After a probe round a current node that still works (and is still a candidate) is
        kept unless the best is faster by more than ``switch_margin`` of its latency.
        """
        working = sorted((c for c in self.candidates if not c.failed), key=lambda c: c.rank_key)
        best = working[0] if working else None
        before = self.current
        if reason == "probe" and best is not None and before is not None:
            kept = next((c for c in working if c.task_id == before.task_id
                         and c.url == before.url), None)
            if (kept is not None and kept.latency_s is not None and best.latency_s is not None
                    and best.latency_s >= kept.latency_s * (1.0 - self.switch_margin)):
                best = kept
        if best is not None and (before is None or best.task_id != before.task_id
                                 or best.url != before.url):
            self.record("switch", source=before.task_id if before else None,
                        target=best.task_id, url=best.url, reason=reason)
        self.current = best
        return best

    def failed(self, candidate: Candidate, error: str) -> Candidate | None:
        """A request to ``candidate`` failed: log it and move to the next-best."""
        candidate.failed = True
        self.record("error", task_id=candidate.task_id, error=error, during="request")
        return self.choose("failover")

    @property
    def switches(self) -> list[Event]:
        """The ``switch`` events so far."""
        return [e for e in self.events if e.kind == "switch"]

    def attempts(self) -> Iterator[tuple[Candidate | None, int]]:
        """The candidates one frame tries in turn (:func:`failover_attempts`); None: query
        and probe again first."""
        return failover_attempts(lambda: self.current or self.choose("failover"),
                                 lambda: ArmadaUnavailable("no candidate answers"))


class ArmadaClient(AsyncClient, _Selection):
    """The asyncio client (see the module docstring). Use ``async with`` or start/close."""

    _session: aiohttp.ClientSession | None = None
    _loop_task: asyncio.Task[None] | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The keep-alive pool shared by queries, probes and frames."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def start(self) -> None:
        """First query and probe round, then periodic re-probing in the background."""
        await self.reprobe()
        self._loop_task = asyncio.create_task(self._reprobe_loop())

    async def close(self) -> None:
        """Stop re-probing and close every connection."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        if self._session is not None:
            await self._session.close()

    async def _reprobe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.next_delay())
            await self.reprobe()

    async def query(self) -> None:
        """Ask the Beacon for the candidate list; on failure keep the current one."""
        try:
            async with self.session.post(f"{self.beacon_url}/query", json=self.query_body,
                                         timeout=self.timeout) as resp:
                body = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.record("error", task_id=None, error=describe_error(exc), during="query")
            return
        if status != 200:
            raise ArmadaError(f"query refused: {refusal(status, body)}")
        self.adopt(body)

    async def _probe(self, candidate: Candidate) -> tuple[Candidate, float | None, str | None]:
        try:
            _, latency = await self._send(candidate, self.probe_payload)
        except (aiohttp.ClientError, TimeoutError, ArmadaError, ValueError) as exc:
            return candidate, None, describe_error(exc)
        return candidate, latency, None

    async def reprobe(self) -> None:
        """One round now: query, probe every candidate concurrently, choose the best."""
        await self.query()
        self.probed(await asyncio.gather(*(self._probe(c) for c in self.candidates)))

    async def _send(self, candidate: Candidate, frame: bytes) -> tuple[Any, float]:
        """POST one frame to ``candidate``; 5xx counts as a failure of the node."""
        began = time.perf_counter()
        async with self.session.post(f"{candidate.url}/infer", data=frame, timeout=self.timeout,
                                     headers={"Content-Type": self.content_type}) as resp:
            body = await resp.json(content_type=None)
            if resp.status >= 500:
                raise ArmadaError(refusal(resp.status, body))
            if resp.status != 200:
                raise ValueError(f"{candidate.url} refused the frame: {refusal(resp.status, body)}")
        return body, time.perf_counter() - began

    async def infer(self, frame: bytes,
                    on_attempt: Callable[[Candidate], None] | None = None) -> Reply:
        """Send ``frame`` to the best candidate, failing over until one answers.

        ``on_attempt`` is called with the candidate before each attempt (a streaming
        client records where a frame was tried). Raises :class:`ArmadaUnavailable` when
        no candidate answers even after a fresh query and probe round, and
        :class:`ValueError` when a task refuses the frame itself (4xx: the frame is at
        fault, not the node).
        """
        for candidate, attempt in self.attempts():
            if candidate is None:
                await self.reprobe()
                continue
            if on_attempt is not None:
                on_attempt(candidate)
            try:
                body, latency = await self._send(candidate, frame)
            except (aiohttp.ClientError, TimeoutError, ArmadaError) as exc:
                self.failed(candidate, describe_error(exc))
                continue
            return Reply(body, candidate.task_id, candidate.url, latency, attempt)


class SyncArmadaClient(SyncClient, _Selection):
    """The synchronous client on ``requests``; re-probes when a round is due."""

    _due = -math.inf

    def reprobe(self) -> None:
        """One round now: query, probe every candidate in turn, choose the best."""
        try:
            resp = self.http.post(f"{self.beacon_url}/query", json=self.query_body,
                                  timeout=self.request_timeout_s)
            status, body = resp.status_code, resp.json()
        except (requests.RequestException, ValueError) as exc:
            self.record("error", task_id=None, error=describe_error(exc), during="query")
        else:
            if status != 200:
                raise ArmadaError(f"query refused: {refusal(status, body)}")
            self.adopt(body)
        results = []
        for candidate in self.candidates:
            try:
                _, latency = self._send(candidate, self.probe_payload)
                results.append((candidate, latency, None))
            except (requests.RequestException, ArmadaError, ValueError) as exc:
                results.append((candidate, None, describe_error(exc)))
        self.probed(results)
        self._due = time.monotonic() + self.next_delay()

    def _send(self, candidate: Candidate, frame: bytes) -> tuple[Any, float]:
        began = time.perf_counter()
        resp = self.http.post(f"{candidate.url}/infer", data=frame,
                              timeout=self.request_timeout_s,
                              headers={"Content-Type": self.content_type})
        latency = time.perf_counter() - began
        if resp.status_code >= 500:
            raise ArmadaError(f"status {resp.status_code}")
        if resp.status_code != 200:
            raise ValueError(f"{candidate.url} refused the frame: status {resp.status_code}")
        return resp.json(), latency

    def infer(self, frame: bytes) -> Reply:
        """Like :meth:`ArmadaClient.infer`; runs a probe round first when one is due."""
        if time.monotonic() >= self._due:
            self.reprobe()
        for candidate, attempt in self.attempts():
            if candidate is None:
                self.reprobe()
                continue
            try:
                body, latency = self._send(candidate, frame)
            except (requests.RequestException, ArmadaError) as exc:
                self.failed(candidate, describe_error(exc))
                continue
            return Reply(body, candidate.task_id, candidate.url, latency, attempt)


# ------------------------------------------------------------------ deployments


def _call(method: str, url: str, token: str | None = None, body: Any = None,
          ok: int = 200, timeout: float = 30.0) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = requests.request(method, url, json=body, headers=headers, timeout=timeout)
    try:
        answer = resp.json()
    except ValueError:
        answer = None
    if resp.status_code != ok:
        raise ArmadaError(f"{method} {url}: {refusal(resp.status_code, answer)}")
    return answer


def deploy(beacon_url: str, token: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Deploy an application (``POST /apps``); returns its status."""
    return _call("POST", f"{beacon_url.rstrip('/')}/apps", token, spec, ok=201)


def app_status(beacon_url: str, name: str) -> dict[str, Any]:
    """An application's status (``GET /apps/{name}``)."""
    return _call("GET", f"{beacon_url.rstrip('/')}/apps/{name}")


# ------------------------------------------------------------------ streaming


def frame_sender(client: ArmadaClient, tiers: Mapping[str, str] | None = None) -> Sender:
    """A :mod:`nodes.armada.sdk.streaming` sender that lets the SDK choose and fail over.

    Each attempt is recorded in ``frame.tried`` as ``(node, tier)``: the replica's node id
    (its task id when the candidate list gave none) and ``tiers[node]`` (default
    ``"edge"``). The delivery's ``estimate_s`` is the serving replica's last probe.
    """

    def where(candidate: Candidate) -> tuple[str, str]:
        node = candidate.node_id or candidate.task_id
        return node, (tiers or {}).get(node, "edge")

    async def send(frame: Frame) -> Delivery:
        served: list[Candidate] = []

        def attempt(candidate: Candidate) -> None:
            served.append(candidate)
            frame.tried.append(where(candidate))

        try:
            reply = await client.infer(frame.data, on_attempt=attempt)
        except (ArmadaError, ValueError) as exc:
            raise SendError(str(exc)) from exc
        target, tier = where(served[-1])
        return Delivery(target, tier, reply.body, estimate_s=served[-1].latency_s)

    return send
