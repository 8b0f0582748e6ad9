"""Fidelity monitor: how idle the host's CPUs stayed during a run.

An emulation is only faithful while the host has spare CPU: emulated nodes' CPU limits,
the delayer, clients and the harness all share its cores, and once they are saturated
every measured latency includes contention that the scenario did not ask for.
:class:`HostMonitor` samples the aggregate ``cpu`` line of ``/proc/stat`` (host-wide,
also from inside a network namespace) every ``interval_s`` in a background thread and
summarises the run: the idle share of all CPU time (idle + iowait over all jiffies,
so 1.0 is fully idle and 0.0 is every core busy), the lowest idle share of any interval,
and how many intervals were below ``threshold``. The run is flagged ``saturated`` when
its overall idle share is below ``threshold``; a report should say so.

Use it around a run::

    with HostMonitor(interval_s=0.5) as monitor:
        ...  # the run
    summary = monitor.summary()
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from testbed.errors import TestbedError

PROC_STAT = Path("/proc/stat")
DEFAULT_INTERVAL_S = 1.0
#: Idle share below which the host counts as saturated (10 % of all cores idle).
DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative jiffies of all CPUs: total and idle (idle + iowait)."""

    total: int
    idle: int


def parse_cpu_times(text: str) -> CpuTimes:
    """Read the aggregate ``cpu`` line of ``/proc/stat`` text.

    Guest time is already counted in user/nice, so only the first eight fields (user,
    nice, system, idle, iowait, irq, softirq, steal) are summed.
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            try:
                values = [int(v) for v in parts[1:9]]
            except ValueError:
                break
            if len(values) < 5:
                break
            return CpuTimes(total=sum(values), idle=values[3] + values[4])
    raise TestbedError("/proc/stat: no aggregate 'cpu' line with at least five counters")


def idle_share(before: CpuTimes, after: CpuTimes) -> float:
    """Idle fraction of all CPU time between two readings (1.0 when no time passed)."""
    total = after.total - before.total
    if total <= 0:
        return 1.0
    return min(1.0, max(0.0, (after.idle - before.idle) / total))


@dataclass(frozen=True)
class Sample:
    """One interval: when it ended (wall epoch) and its idle share."""

    wall: float
    idle_share: float


@dataclass(frozen=True)
class HostSummary:
    """What a run's report says about the host's CPU."""

    started_wall: float
    duration_s: float
    cores: int
    interval_s: float
    threshold: float
    idle_share: float
    min_idle_share: float
    intervals: int
    saturated_intervals: int
    saturated: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``metadata.json`` or a report."""
        return asdict(self)


class HostMonitor:
    """Samples ``/proc/stat`` every ``interval_s`` between :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        threshold: float = DEFAULT_THRESHOLD,
        stat_path: Path = PROC_STAT,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, found {interval_s!r}")
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1], found {threshold!r}")
        self.interval_s = interval_s
        self.threshold = threshold
        self.stat_path = stat_path
        self.samples: list[Sample] = []
        self._readings: list[CpuTimes] = []  # the first reading and the latest one
        self._started_wall = 0.0
        self._stopped_wall: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> CpuTimes:
        return parse_cpu_times(self.stat_path.read_text(encoding="ascii"))

    def start(self) -> Self:
        """Take the first reading and start sampling in a daemon thread."""
        if self._thread is not None:
            raise TestbedError("host monitor already started")
        self._readings = [self._read()]
        self._started_wall = time.time()
        self._thread = threading.Thread(target=self._loop, name="host-monitor", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        """Close the current interval with a new reading."""
        now = self._read()
        self.samples.append(Sample(time.time(), idle_share(self._readings[-1], now)))
        self._readings[1:] = [now]

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> HostSummary:
        """Stop sampling, close the last (partial) interval and return the summary."""
        if self._thread is None:
            raise TestbedError("host monitor was never started")
        if self._stopped_wall is None:
            self._stop.set()
            self._thread.join()
            self._sample()
            self._stopped_wall = time.time()
        return self.summary()

    def summary(self) -> HostSummary:
        """The summary so far (up to the last sample)."""
        if not self._readings:
            raise TestbedError("host monitor was never started")
        overall = idle_share(self._readings[0], self._readings[-1])
        shares = [s.idle_share for s in self.samples]
        end = self._stopped_wall if self._stopped_wall is not None else time.time()
        below = sum(share < self.threshold for share in shares)
        return HostSummary(
            started_wall=self._started_wall,
            duration_s=end - self._started_wall,
            cores=os.cpu_count() or 1,
            interval_s=self.interval_s,
            threshold=self.threshold,
            idle_share=overall,
            min_idle_share=min(shares, default=overall),
            intervals=len(shares),
            saturated_intervals=below,
            saturated=overall < self.threshold,
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
