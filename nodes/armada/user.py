"""One Armada user inside its emulated host: measures replicas, selects, streams.

Started by an Armada driver (:mod:`testbed.systems.armada`) through the run's launcher
inside the user's host, so every request leaves from the user's place in the emulated
network: ``python -m nodes.armada.user CONFIG.json``. The config
(JSON) names the ``mode``:

* ``matrix``: send real frames straight to every replica (``replicas``: ``[{task_id,
  node_id, url}]``), one at a time, round-robin over the replicas so a passing load burst
  hits every column alike: one warm-up frame each, then ``samples`` timed ones. Writes
  ``{"user", "samples": {node: [{"latency_ms", "processing_ms", "queue_ms"}]}}`` to ``out``.
* ``stream``: at ``probe_at`` (wall epoch) start the SDK (probing with the first frame,
  or with a small JPEG when ``probe`` is ``small``; rows labelled ``policy``, default
  ``armada``; ``near_equal`` is the SDK's, default 0) (query through the Beacon, probe
  every candidate), record what it picked, then stream this user's frames of the trace
  (``trace``) from ``start_at`` through the SDK's sender, one row per frame appended to
  ``rows``. Writes ``{"user", "pick", "probe_ms", "candidates", "events"}`` to ``out``.
* ``baseline``: like ``stream`` through a :class:`BaselineClient` (``policy``
  ``geo-nearest``, ``random`` or ``edge-to-cloud``; ``cloud_nodes`` names the cloud).
* ``reconnect``: the server-reconnect baseline of ``armada-failover``
  (:class:`ReconnectClient`): same start as ``stream`` (query, one probe round, the best
  node), but the client then keeps a connection to that one node only; on a send error
  the frame is lost, the client queries the Beacon again and reconnects to the first
  candidate that is not the failed one. Writes the same result as ``stream``.

``timeout_s`` bounds a frame in the streaming client (a frame without an answer by then
is a ``timeout`` row); ``request_timeout_s`` (default ``timeout_s``) bounds each request
of the SDK, which fails over to its next candidate when it passes.

Frames are the JPEG files of ``frames_dir`` (written by the driver, so no encoding here).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import aiohttp

from nodes.armada.baselines import reconnect_order
from nodes.armada.sdk.choice import BaselineSelection, Candidate
from nodes.armada.sdk.client import ArmadaClient, frame_sender
from nodes.armada.sdk.streaming import Delivery, Frame, SendError, StreamConfig, stream_frames
from nodes.common import sleep_until
from workloads.trace import read_trace

JPEG = {"Content-Type": "image/jpeg"}


#: The small probe of ``probe: small``: written by the driver next to the frames (not a
#: ``.jpg``, so it is not one of the stream's frames).
SMALL_PROBE = "probe-small.jpeg"


def probe_payload(config: dict[str, Any], frames: list[bytes]) -> bytes:
    """What the SDK probes with: the stream's first frame (``probe: frame``, default) or
    the small JPEG ``SMALL_PROBE`` of ``frames_dir`` (``probe: small``)."""
    if config.get("probe", "frame") == "small":
        return (Path(config["frames_dir"]) / SMALL_PROBE).read_bytes()
    return frames[0]


def read_frames(folder: Path) -> list[bytes]:
    """The driver's frames, in file-name order."""
    return [path.read_bytes() for path in sorted(folder.glob("*.jpg"))]


async def _timed(session: aiohttp.ClientSession, url: str, frame: bytes) -> dict[str, float]:
    """One frame to one replica: end-to-end latency and the replica's own timings."""
    began = time.perf_counter()
    async with session.post(f"{url}/infer", data=frame, headers=JPEG) as resp:
        body = await resp.json(content_type=None)
        if resp.status != 200:
            raise RuntimeError(f"{url}/infer answered {resp.status}: {body}")
    latency = time.perf_counter() - began
    return {"latency_ms": latency * 1e3, "processing_ms": float(body["processing_ms"]),
            "queue_ms": float(body["queue_ms"])}


async def measure_matrix(config: dict[str, Any], frames: list[bytes]) -> dict[str, Any]:
    """Latency samples of every replica from this user (see the module docstring)."""
    replicas = config["replicas"]
    samples: dict[str, list[dict[str, float]]] = {r["node_id"]: [] for r in replicas}
    timeout = aiohttp.ClientTimeout(total=config.get("timeout_s", 10.0))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for replica in replicas:
            await _timed(session, replica["url"], frames[0])  # warm connection and replica
        for k in range(config["samples"]):
            for replica in replicas:
                sample = await _timed(session, replica["url"], frames[(k + 1) % len(frames)])
                samples[replica["node_id"]].append(sample)
    return {"user": config["user"], "samples": samples}


async def select_and_stream(config: dict[str, Any], frames: list[bytes],
                            out: IO[str]) -> dict[str, Any]:
    """Start the client at ``probe_at``, record its pick, stream from ``start_at`` (rows to
    ``out``): the SDK (mode ``stream``) or a :class:`BaselineClient` (mode ``baseline``)."""
    await sleep_until(config["probe_at"] + asyncio.get_running_loop().time() - time.time())
    common = {"probe_payload": probe_payload(config, frames), "user": config["user"],
              "content_type": "image/jpeg", "reprobe_s": tuple(config["reprobe_s"]),
              "request_timeout_s": config.get("request_timeout_s", config["timeout_s"]),
              "seed": config["seed"], "near_equal": float(config.get("near_equal", 0.0))}
    where = (config["beacon"], config["app"], config["lat"], config["lon"])
    if config["mode"] == "baseline":
        client: ArmadaClient = BaselineClient(*where, policy=config["policy"],
                                              cloud_nodes=config.get("cloud_nodes", ()),
                                              **common)
    else:
        client = ArmadaClient(*where, **common)
    async with client:
        probes = [e for e in client.events if e.kind == "probe"]  # none for a baseline
        pick = client.current
        result: dict[str, Any] = {
            "user": config["user"],
            "pick": None if pick is None else {"task_id": pick.task_id, "node_id": pick.node_id},
            "candidates": [{"task_id": c.task_id, "node_id": c.node_id, "reason": c.reason}
                           for c in client.candidates],
            "probe_ms": probes[0].detail["latency_ms"] if probes else {},
        }
        tasks, _ = read_trace(Path(config["trace"]))
        stream = StreamConfig(run=config["run"], policy=config.get("policy", "armada"),
                              client=config["user"], stream=f"cam-{config['user']}",
                              timeout_s=config["timeout_s"], start_at=config["start_at"],
                              repetition=int(config.get("repetition", 0)))
        await stream_frames(stream, tasks, frames, frame_sender(client, config["tiers"]),
                            out=out)
    result["events"] = [asdict(e) for e in client.events]
    return result


class ReconnectClient:
    """The server-reconnect baseline: one server at a time, found again through the Beacon.

    It knows one node and keeps one connection (its own session). A frame whose send
    fails (error, timeout, 5xx) is lost: the client does not resend it elsewhere, it has
    nowhere else to send. The failure starts one reconnection: query the Beacon, take the
    candidates in the Application Manager's order, skip every url that failed, open a new
    session to the first one that answers ``GET /health``; until one answers, query again
    every ``retry_s``. Frames due meanwhile wait for the reconnection (a camera buffers).
    ``events`` records ``connect`` (``node``, ``url``, ``reason``) and ``error`` events
    like the SDK's, as ``{"t", "kind", "detail"}``.
    """

    def __init__(self, sdk: ArmadaClient, timeout_s: float, retry_s: float = 0.2) -> None:
        self.sdk = sdk  # used only for its first query and probe round and its query body
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retry_s = retry_s
        self.current: Candidate | None = None
        self.session: aiohttp.ClientSession | None = None
        self.failed: set[str] = set()
        self.events: list[dict[str, Any]] = []
        self._reconnecting: asyncio.Task[None] | None = None

    def _event(self, kind: str, **detail: Any) -> None:
        self.events.append({"t": time.time(), "kind": kind, "detail": detail})

    async def _open(self, candidate: Candidate, reason: str) -> None:
        """Drop the old connection and keep a new one to ``candidate`` only."""
        if self.session is not None:
            await self.session.close()
        self.session = aiohttp.ClientSession(timeout=self.timeout)
        self.current = candidate
        self._event("connect", node=candidate.node_id, url=candidate.url, reason=reason)

    async def start(self) -> None:
        """Pick the best node of the SDK's first round, then forget the alternates."""
        await self.sdk.reprobe()
        if self.sdk.current is None:
            raise RuntimeError("no candidate answered the first probe round")
        await self._open(self.sdk.current, "probe")
        await self.sdk.session.close()  # no kept connections to the alternates

    async def _healthy(self, url: str) -> bool:
        assert self.session is not None
        try:
            async with self.session.get(f"{url}/health") as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._event("error", url=url, error=f"{type(exc).__name__}: {exc}", during="connect")
            return False

    async def _query(self) -> list[dict[str, Any]]:
        try:
            async with aiohttp.ClientSession(timeout=self.timeout) as beacon, beacon.post(
                    f"{self.sdk.beacon_url}/query", json=self.sdk.query_body) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._event("error", url=None, error=f"{type(exc).__name__}: {exc}", during="query")
            return []
        return list(body.get("candidates", [])) if resp.status == 200 else []

    async def _reconnect(self) -> None:
        """Query until a candidate other than the failed ones answers; connect to it."""
        while True:
            candidates = await self._query()
            self._event("query", candidates=[c["node_id"] for c in candidates])
            for found in reconnect_order(candidates, self.failed):
                candidate = Candidate(task_id=found["task_id"], url=found["url"],
                                      node_id=found.get("node_id"))
                await self._open(candidate, "reconnect")
                if await self._healthy(candidate.url):
                    return
                self.failed.add(candidate.url)
            await asyncio.sleep(self.retry_s)

    async def send(self, frame: Frame) -> Delivery:
        """The frame client's sender: one attempt on the current node, no failover."""
        if self._reconnecting is not None:
            await asyncio.shield(self._reconnecting)
        candidate, session = self.current, self.session
        assert candidate is not None and session is not None
        node = candidate.node_id or candidate.task_id
        frame.tried.append((node, "edge"))
        try:
            async with session.post(f"{candidate.url}/infer", data=frame.data,
                                    headers=JPEG) as resp:
                body = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._lost(candidate, f"{type(exc).__name__}: {exc}")
            raise SendError(f"{node}: lost ({type(exc).__name__}: {exc})") from exc
        if status != 200:
            self._lost(candidate, f"HTTP {status}")
            raise SendError(f"{node}: lost (HTTP {status})")
        return Delivery(node, "edge", body)

    def _lost(self, candidate: Candidate, why: str) -> None:
        """Record the failure and start the one reconnection it calls for."""
        self._event("error", url=candidate.url, error=why, during="request")
        self.failed.add(candidate.url)
        if self.current is candidate and (self._reconnecting is None
                                          or self._reconnecting.done()):
            self._reconnecting = asyncio.create_task(self._reconnect())

    async def close(self) -> None:
        """Stop reconnecting and close the connection."""
        if self._reconnecting is not None and not self._reconnecting.done():
            self._reconnecting.cancel()
        if self.session is not None:
            await self.session.close()
        await self.sdk.session.close()


async def reconnect_and_stream(config: dict[str, Any], frames: list[bytes],
                               out: IO[str]) -> dict[str, Any]:
    """The baseline: start like ``stream``, then stream through :class:`ReconnectClient`."""
    await sleep_until(config["probe_at"] + asyncio.get_running_loop().time() - time.time())
    sdk = ArmadaClient(
        config["beacon"], config["app"], config["lat"], config["lon"],
        probe_payload=frames[0], user=config["user"], content_type="image/jpeg",
        request_timeout_s=config.get("request_timeout_s", config["timeout_s"]), seed=config["seed"])
    client = ReconnectClient(sdk, config["timeout_s"])
    try:
        await client.start()
        pick = client.current
        result: dict[str, Any] = {
            "user": config["user"],
            "pick": None if pick is None else {"task_id": pick.task_id, "node_id": pick.node_id},
            "candidates": [{"task_id": c.task_id, "node_id": c.node_id, "reason": c.reason}
                           for c in sdk.candidates],
            "probe_ms": next(e for e in sdk.events if e.kind == "probe").detail["latency_ms"],
        }
        tasks, _ = read_trace(Path(config["trace"]))
        stream = StreamConfig(run=config["run"], policy=config.get("policy", "server-reconnect"),
                              client=config["user"], stream=f"cam-{config['user']}",
                              timeout_s=config["timeout_s"], start_at=config["start_at"])
        await stream_frames(stream, tasks, frames, client.send, out=out)
    finally:
        await client.close()
    result["events"] = client.events
    return result


class BaselineClient(BaselineSelection, ArmadaClient):
    """A user that selects without probing: the baselines the Armada SDK is compared with.

    Every round (at start and every ``reprobe_s``, like the SDK) it still queries the
    Beacon, so the Application Manager sees the user and scales alike, then lists every
    running replica of the application (``GET /apps/{app}``) and chooses by ``policy``
    (:class:`~nodes.armada.sdk.choice.BaselineSelection`: the rules of
    :mod:`nodes.armada.baselines`).

    No probe frames are sent. A failed frame goes at once to the policy's next choice,
    so the baselines differ from the SDK only in how they choose.
    """

    async def reprobe(self) -> None:
        """Query (to be counted as a user), list the running replicas, choose."""
        await self.query()
        url = f"{self.beacon_url}/apps/{self.query_body['app']}"
        try:
            async with self.session.get(url, timeout=self.timeout) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.record("error", task_id=None, error=f"{type(exc).__name__}: {exc}",
                        during="query")
            self.choose("probe")
            return
        self.listed([r for r in body.get("replicas", []) if r.get("status") == "running"]
                    if isinstance(body, dict) else [])


def main(argv: list[str] | None = None) -> int:
    """Run the mode of the config file given as the only argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m nodes.armada.user CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    frames = read_frames(Path(config["frames_dir"]))
    if config["mode"] == "matrix":
        result = asyncio.run(measure_matrix(config, frames))
    elif config["mode"] == "reconnect":
        with Path(config["rows"]).open("a") as out:
            result = asyncio.run(reconnect_and_stream(config, frames, out))
    else:
        with Path(config["rows"]).open("a") as out:
            result = asyncio.run(select_and_stream(config, frames, out))
    Path(config["out"]).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
