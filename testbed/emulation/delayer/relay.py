"""The delayer's Python data path (``delayer-py``): frames held per direction and released on
time by the delayer's epoll loop.

Used when the compiled shaper (:mod:`testbed.emulation.delayer.compiled`) cannot load or
``python`` is asked for. Each direction of a link is a :class:`Direction` with its own
delay, jitter, loss draws and queue cap (the semantics of :mod:`testbed.emulation.delayer`).
Because every direction is FIFO with monotone release times, a deque per direction plus
one heap of the directions' head release times (:class:`PythonRelay`) is enough; the loop
sleeps on the :class:`~testbed.emulation.delayer.timer.TimerFd` armed at the heap's head.
Every forwarded frame's lateness goes into the direction's bounded sample (``stats``: p99
and max of its last :data:`LATE_SAMPLES` frames) and the process-wide histogram.
"""

from __future__ import annotations

import collections
import errno
import heapq
import math
import os
import random
import select
import time
from dataclasses import dataclass, field
from typing import Any

from testbed.emulation.delayer.lateness import LatenessHistogram
from testbed.emulation.delayer.timer import TimerFd

MAX_FRAME = 65535
LATE_SAMPLES = 4096
DEFAULT_QUEUE = 1000
STAT_COUNTERS = ("received", "forwarded", "dropped_loss", "dropped_queue", "dropped_down",
                 "dropped_write", "read_errors")
#: Read errors meaning the TAP is gone: its direction stops; any other error is counted.
DEVICE_GONE = (errno.EBADFD, errno.ENODEV, errno.EIO, errno.EBADF)


def seed_text(params: dict[str, Any], name: str) -> str:
    """What a direction's loss/jitter draws are seeded from: the link's seed and the
    direction's side (``a>b`` or ``b>a`` of ``name``), so the two sides draw apart."""
    return f"{params['seed']}/{name.rsplit(':', 1)[1]}"


@dataclass
class Direction:
    """One direction of a link: frames read from ``src_fd`` are written to ``dst_fd``."""

    key: int
    name: str
    src_fd: int
    dst_fd: int
    delay_ns: int = 0
    jitter_ns: int = 0
    loss: float = 0.0
    limit: int = DEFAULT_QUEUE
    rng: random.Random = field(default_factory=random.Random)
    up: bool = True
    queue: collections.deque = field(default_factory=collections.deque)
    last_release: int = 0
    scheduled: int | None = None
    late_ns: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=LATE_SAMPLES))
    counters: collections.Counter = field(default_factory=collections.Counter)
    max_frame: int = 0

    def configure(self, params: dict[str, Any], reseed: bool) -> None:
        """Apply validated link parameters; ``reseed`` restarts the loss/jitter draws."""
        self.delay_ns = round(params["delay_ms"] * 1e6)
        self.jitter_ns = round(params["jitter_ms"] * 1e6)
        self.loss = float(params["loss_pct"])
        self.limit = int(params["queue"])
        if reseed:
            self.rng = random.Random(seed_text(params, self.name))

    def set_up(self, up: bool) -> None:
        """Bring the direction up or down (down drops its held frames)."""
        self.up = up
        if not up:
            self.clear("down")

    def clear(self, reason: str) -> None:
        """Drop every held frame (counted under ``dropped_<reason>``)."""
        self.counters[f"dropped_{reason}"] += len(self.queue)
        self.queue.clear()
        self.scheduled = None

    def stats(self) -> dict[str, Any]:
        late = sorted(self.late_ns)
        p99 = late[min(len(late) - 1, math.ceil(0.99 * len(late)) - 1)] / 1000 if late else None
        out: dict[str, Any] = {k: self.counters.get(k, 0) for k in STAT_COUNTERS}
        out.update(held=len(self.queue), held_bytes=sum(len(f) for _, f in self.queue),
                   max_frame=self.max_frame, late_p99_us=p99,
                   late_max_us=late[-1] / 1000 if late else None)
        return out


class PythonRelay:
    """Every :class:`Direction` of the delayer: reads their TAPs when the delayer's loop
    finds them readable, holds the frames and writes them when due.

    The loop owns ``epoll`` and ``timer``: the relay registers each source TAP with the
    first (:attr:`readers` maps its fd to its direction) and arms the second at the next
    release; the loop calls :meth:`read` for a readable TAP and :meth:`release` while
    :attr:`heap` holds a direction.
    """

    def __init__(self, epoll: select.epoll, timer: TimerFd) -> None:
        self.epoll = epoll
        self.timer = timer
        self.readers: dict[int, Direction] = {}
        self.heap: list[tuple[int, int, Direction]] = []
        self.lateness = LatenessHistogram()
        self._keys = 0

    def add(self, name: str, src: int, dst: int) -> Direction:
        """A new direction relaying ``src`` to ``dst``, watched from now on."""
        self._keys += 1
        d = Direction(self._keys, name, src, dst)
        self.readers[src] = d
        self.epoll.register(src, select.EPOLLIN)
        return d

    def detach(self, d: Direction) -> None:
        """Drop ``d``'s held frames and stop watching its TAP (safe to repeat)."""
        d.clear("down")
        self.unwatch(d)

    def lateness_summary(self, reset: bool) -> dict[str, Any]:
        """The process-wide lateness summary; ``reset`` starts a new count after it."""
        summary = self.lateness.summary()
        if reset:
            self.lateness = LatenessHistogram()
        return summary

    def read(self, d: Direction) -> None:
        """Read every frame waiting on ``d``'s TAP: drop, write now or hold each."""
        now = time.monotonic_ns()
        counters, queue = d.counters, d.queue
        while True:
            try:
                frame = os.read(d.src_fd, MAX_FRAME)
            except BlockingIOError:
                return
            except OSError as exc:
                counters["read_errors"] += 1
                if exc.errno in DEVICE_GONE:  # deleted under us (`ip link del`): stop polling
                    self.unwatch(d)
                return  # any other error lost one frame at most: go on at the next event
            counters["received"] += 1
            d.max_frame = max(d.max_frame, len(frame))
            if not d.up:
                counters["dropped_down"] += 1
                continue
            if d.loss and d.rng.random() * 100.0 < d.loss:
                counters["dropped_loss"] += 1
                continue
            if len(queue) >= d.limit:
                counters["dropped_queue"] += 1
                continue
            delay = d.delay_ns
            if d.jitter_ns:
                delay = max(0, delay + round(d.rng.uniform(-d.jitter_ns, d.jitter_ns)))
            release = max(now + delay, d.last_release)
            d.last_release = release
            if release <= now and not queue:
                self.write(d, frame, release)
                continue
            queue.append((release, frame))
            if d.scheduled is None:
                d.scheduled = release
                heapq.heappush(self.heap, (release, d.key, d))

    def unwatch(self, d: Direction) -> None:
        """Stop polling ``d``'s source TAP."""
        if self.readers.pop(d.src_fd, None) is not None:
            self.epoll.unregister(d.src_fd)

    def write(self, d: Direction, frame: bytes, due: int) -> None:
        """Forward one frame due at ``due`` and count its lateness."""
        try:
            os.write(d.dst_fd, frame)
        except OSError:
            d.counters["dropped_write"] += 1
            return
        d.counters["forwarded"] += 1
        late = time.monotonic_ns() - due
        d.late_ns.append(late)
        self.lateness.add(late)

    def release(self) -> None:
        """Write every held frame now due and arm the timer at the next release."""
        heap = self.heap
        now = time.monotonic_ns()
        while heap and heap[0][0] <= now:
            due, _, d = heapq.heappop(heap)
            if d.scheduled != due:
                continue  # stale: the direction was cleared or rescheduled
            queue = d.queue
            while queue and queue[0][0] <= now:
                release, frame = queue.popleft()
                self.write(d, frame, release)
            if queue:
                d.scheduled = queue[0][0]
                heapq.heappush(heap, (d.scheduled, d.key, d))
            else:
                d.scheduled = None
            now = time.monotonic_ns()
        if heap:
            self.timer.arm(heap[0][0])
