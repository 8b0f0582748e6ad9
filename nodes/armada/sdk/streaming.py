"""The streaming client: sends one client's frames at their due instants and records them.

It runs inside a client host. Its input is the client's share of a ``frame-stream``
trace (:mod:`workloads.armada_frame_stream`: one task per frame, due at ``arrival``) and a set
of JPEG frames (:mod:`workloads.armada_frames`); the ``k``-th task of the client is frame
``k`` of the stream and carries source frame ``k mod len(frames)``. Every frame is sent
at ``start_at + arrival / time_scale`` on the event loop's clock, in its own asyncio
task, whether or not earlier frames have been answered (a camera does not wait), and
gives exactly one trace row of kind ``"frame"`` (schema: ``docs/traces.md``).

Where a frame goes is the *sender*'s business: an async callable taking a
:class:`Frame` and returning a :class:`Delivery` (the target that answered and its
``/infer`` reply). :func:`url_sender` posts to one fixed task; the Armada SDK provides a
sender that selects among candidates and fails over. Before each attempt a sender
appends ``(target, tier)`` to ``frame.tried``, so a frame that fails is attributed to
the last target tried; a sender signals failure by raising (preferably
:class:`SendError` with the reason).

Nothing is dropped silently. A frame is recorded with ``outcome``:

* ``ok``: answered; latency is split with the task's timestamps exactly as the
  dispatcher does (``network_s = latency_wall_s - (end - server_arrival)``, wait and
  service scaled by ``time_scale``). Time a failing-over sender spent on a dead
  candidate is part of ``network_s``.
* ``error``: the sender raised, the reply was malformed, or the frame was not sent
  because ``max_in_flight`` frames were already outstanding (reason ``skipped: ...``).
* ``timeout``: no answer within ``timeout_s`` (model seconds).

A late frame is still ``ok``: a deadline miss is ``latency_s > frame_deadline_s``
(``deadline_s``, model seconds; null when not configured), left to the analysis.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import aiohttp

from nodes.common import sleep_until
from nodes.http import error_text
from testbed.latency import completed_columns
from workloads.trace import Task

#: Target and tier recorded on a failed row when the sender tried nothing.
UNKNOWN = "unknown"
REPLY_FIELDS = ("server_arrival", "start", "end", "queue_at_arrival", "detections")


class SendError(Exception):
    """A sender could not deliver a frame; ``str(exc)`` is the reason."""


@dataclass
class Frame:
    """One frame to deliver: its number in the stream, its task and its JPEG bytes.

    ``tried`` collects ``(target, tier)`` of every attempt, appended by the sender.
    """

    index: int
    task_id: int
    data: bytes
    tried: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Delivery:
    """A frame's answer: who served it, its ``/infer`` reply and the decision's figures.

    ``estimate_s`` (the sender's predicted latency, model seconds, if any),
    ``state_age_s`` (age of the information the choice used, wall seconds) and
    ``decision_us`` (time spent choosing) go into the row as they are.
    """

    target: str
    tier: str
    reply: Mapping[str, Any]
    estimate_s: float | None = None
    state_age_s: float = 0.0
    decision_us: float = 0.0


Sender = Callable[[Frame], Awaitable[Delivery]]


@dataclass(frozen=True)
class StreamConfig:
    """Who is streaming and how the rows are labelled and timed.

    ``timeout_s`` and ``deadline_s`` are model seconds; ``start_at`` is a wall epoch
    (None or a past instant: now); ``max_in_flight`` bounds frames sent but not answered.
    """

    run: str
    policy: str
    client: str
    stream: str
    repetition: int = 0
    time_scale: float = 1.0
    timeout_s: float = 10.0
    deadline_s: float | None = None
    start_at: float | None = None
    max_in_flight: int = 64

    def __post_init__(self) -> None:
        for name in ("run", "policy", "client", "stream"):
            if not getattr(self, name):
                raise ValueError(f"{name}: expected a non-empty string")
        if not (math.isfinite(self.time_scale) and self.time_scale >= 1):
            raise ValueError(f"time_scale: expected a number >= 1, found {self.time_scale!r}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout_s: expected a number > 0, found {self.timeout_s!r}")
        if self.deadline_s is not None and not (
            math.isfinite(self.deadline_s) and self.deadline_s > 0
        ):
            raise ValueError(f"deadline_s: expected a number > 0 or None, found {self.deadline_s!r}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight: expected >= 1, found {self.max_in_flight!r}")


def url_sender(session: aiohttp.ClientSession, url: str, target: str, tier: str) -> Sender:
    """A sender posting every frame to ``{url}/infer`` of one detection task."""

    async def send(frame: Frame) -> Delivery:
        frame.tried.append((target, tier))
        headers = {"Content-Type": "image/jpeg"}
        try:
            async with session.post(f"{url}/infer", data=frame.data, headers=headers) as resp:
                status, text = resp.status, await resp.text()
        except (aiohttp.ClientError, OSError) as exc:
            raise SendError(f"{target}: {type(exc).__name__}: {exc}") from exc
        if status != 200:
            raise SendError(f"{target}: HTTP {status}: {error_text(text)}")
        try:
            reply = json.loads(text)
        except ValueError as exc:
            raise SendError(f"{target}: reply is not JSON: {text[:80]!r}") from exc
        return Delivery(target, tier, reply)

    return send


def _check_reply(reply: Any) -> str | None:
    """Why ``reply`` is not a usable ``/infer`` answer, or None if it is."""
    if not isinstance(reply, Mapping):
        return f"reply is not a JSON object: {reply!r:.80}"
    missing = [name for name in REPLY_FIELDS if name not in reply]
    if missing:
        return f"reply lacks {', '.join(missing)}"
    for name in ("server_arrival", "start", "end"):
        value = reply[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"reply {name} is not a number: {value!r}"
    if not reply["server_arrival"] <= reply["start"] <= reply["end"]:
        return "reply timestamps are out of order"
    queue = reply["queue_at_arrival"]
    if isinstance(queue, bool) or not isinstance(queue, int) or queue < 0:
        return f"reply queue_at_arrival is not a count: {queue!r}"
    return None


class FrameClient:
    """One client's stream: scheduling, sending and recording of its frames."""

    def __init__(
        self,
        config: StreamConfig,
        sender: Sender,
        frames: Sequence[bytes],
        out: IO[str] | None = None,
    ) -> None:
        if not frames:
            raise ValueError("frames: expected at least one JPEG frame")
        self.config = config
        self.sender = sender
        self.frames = frames
        self.out = out
        self.rows: list[dict[str, Any]] = []
        self.start_wall = 0.0
        self._in_flight = 0

    def _model(self, wall: float) -> float:
        """Model time of a wall instant."""
        return (wall - self.start_wall) * self.config.time_scale

    async def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        """Send this client's ``tasks`` (others are ignored); return rows in frame order."""
        cfg = self.config
        mine = sorted((t for t in tasks if t.client == cfg.client), key=lambda t: t.arrival)
        loop = asyncio.get_running_loop()
        now_wall = time.time()
        wall_to_loop = loop.time() - now_wall
        wanted = cfg.start_at
        self.start_wall = now_wall if wanted is None or wanted < now_wall else wanted
        async with asyncio.TaskGroup() as group:
            for index, task in enumerate(mine):
                arrival_wall = self.start_wall + task.arrival / cfg.time_scale
                await sleep_until(arrival_wall + wall_to_loop)
                frame = Frame(index, task.task_id, self.frames[index % len(self.frames)])
                if self._in_flight >= cfg.max_in_flight:
                    row = self._row(task, frame, arrival_wall, time.time())
                    reason = f"skipped: max_in_flight={cfg.max_in_flight} frames outstanding"
                    self._record(self._failed(row, frame, "error", reason))
                    continue
                self._in_flight += 1
                group.create_task(self._deliver(task, frame, arrival_wall))
        return sorted(self.rows, key=lambda r: r["frame_index"])

    def _row(
        self, task: Task, frame: Frame, arrival_wall: float, dispatch_wall: float
    ) -> dict[str, Any]:
        """The columns every row of ``frame`` has, whatever its outcome."""
        cfg = self.config
        return {
            "run": cfg.run,
            "policy": cfg.policy,
            "repetition": cfg.repetition,
            "kind": "frame",
            "task_id": task.task_id,
            "client": cfg.client,
            "target": UNKNOWN,
            "tier": UNKNOWN,
            "size": task.size,
            "cls": task.cls,
            "arrival_model": task.arrival,
            "dispatch_model": self._model(dispatch_wall),
            "arrival_wall": arrival_wall,
            "dispatch_wall": dispatch_wall,
            "estimate_s": None,
            "state_age_s": 0.0,
            "decision_us": 0.0,
            "outcome": "ok",
            "error": None,
            "frame_stream": cfg.stream,
            "frame_index": frame.index,
            "frame_deadline_s": cfg.deadline_s,
        }

    def _failed(
        self, row: dict[str, Any], frame: Frame, outcome: str, reason: str
    ) -> dict[str, Any]:
        """Complete ``row`` as a failure attributed to the last target tried."""
        if frame.tried:
            row["target"], row["tier"] = frame.tried[-1]
            if len(frame.tried) > 1:
                reason += f" (tried {', '.join(t for t, _ in frame.tried)})"
        row.update(outcome=outcome, error=reason, response_wall=time.time())
        return row

    async def _deliver(self, task: Task, frame: Frame, arrival_wall: float) -> None:
        """Send one frame through the sender and record its row."""
        cfg = self.config
        timeout_wall = cfg.timeout_s / cfg.time_scale
        dispatch_wall = time.time()
        row = self._row(task, frame, arrival_wall, dispatch_wall)
        try:
            async with asyncio.timeout(timeout_wall):
                delivery = await self.sender(frame)
            response_wall = time.time()
        except TimeoutError:
            reason = f"no answer within {timeout_wall:g} s wall (timeout_s={cfg.timeout_s:g})"
            self._record(self._failed(row, frame, "timeout", reason))
            return
        except Exception as exc:  # noqa: BLE001 - any sender failure is a failed frame
            self._record(self._failed(row, frame, "error", f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self._in_flight -= 1
        row.update(
            target=delivery.target,
            tier=delivery.tier,
            estimate_s=delivery.estimate_s,
            state_age_s=delivery.state_age_s,
            decision_us=delivery.decision_us,
        )
        problem = _check_reply(delivery.reply)
        if problem is not None:
            row.update(outcome="error", error=f"{delivery.target}: {problem}",
                       response_wall=response_wall)
            self._record(row)
            return
        reply = delivery.reply
        row.update(
            completed_columns(row["dispatch_model"], dispatch_wall, response_wall,
                              *(float(reply[k]) for k in ("server_arrival", "start", "end")),
                              cfg.time_scale),
            queue_at_arrival=int(reply["queue_at_arrival"]),
        )
        self._record(row)

    def _record(self, row: dict[str, Any]) -> None:
        """Keep ``row`` and, with an output file, append it as one JSON line at once."""
        self.rows.append(row)
        if self.out is not None:
            self.out.write(json.dumps(row, allow_nan=False) + "\n")
            self.out.flush()


async def stream_frames(
    config: StreamConfig,
    tasks: Sequence[Task],
    frames: Sequence[bytes],
    sender: Sender,
    out: IO[str] | None = None,
) -> list[dict[str, Any]]:
    """Stream ``config.client``'s frames of ``tasks`` through ``sender``; return the rows."""
    return await FrameClient(config, sender, frames, out).run(tasks)
