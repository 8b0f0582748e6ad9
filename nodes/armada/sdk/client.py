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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import requests

from nodes.armada.sdk.choice import (
    ArmadaError,
    Candidate,
    Selection,
)
from nodes.armada.sdk.failover import describe_error, refusal
from nodes.armada.sdk.streaming import Delivery, Frame, Sender, SendError
from nodes.armada.sdk.transport import AsyncClient, SyncClient


@dataclass(frozen=True)
class Reply:
    """The answer to one frame and how it was obtained."""

    body: Any  # the task's JSON answer
    task_id: str
    url: str
    latency_s: float  # end to end, of the attempt that succeeded
    attempts: int  # 1 unless it failed over


class ArmadaClient(AsyncClient, Selection):
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


class SyncArmadaClient(SyncClient, Selection):
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
