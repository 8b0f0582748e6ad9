"""Benchmarks of the harness, run by ``python -m tests.bench.run`` (not pytest tests).

Each benchmark measures the harness and a simpler peer in the same run and prints the
ratio; nothing here asserts anything about timing. This module holds what they share:
a :class:`Sandbox` (one run ledger, one scratch folder, one interface prefix reserved
like a run's) that checks after teardown that nothing it created is left, memory
accounting by PSS, and percentiles.

The module is imported inside emulated hosts too (the launcher runs the peer client of
``bench_dispatch`` as ``__main__``), so it imports nothing heavy at the top.
"""

from __future__ import annotations

import math
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

from testbed.emulation.ledger import is_running, process_start_time

SYS_NET = Path("/sys/class/net")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ratio(a: float | None, b: float | None) -> float:
    """``a / b`` of a harness figure and its peer's; NaN when either is missing or zero."""
    return a / b if a is not None and b else math.nan


def load1() -> float:
    """The machine's 1-minute load average now (printed beside timed figures: other
    work on the machine moves them)."""
    return os.getloadavg()[0]


def cell(value: Any, digits: int = 2) -> str:
    """A table cell: floats rounded to ``digits``, NaN and None as ``-``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _proc_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def process_group(pgid: int) -> list[int]:
    """Every live process whose process group is ``pgid``."""
    found = []
    for pid in _proc_pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(pid)
    return found


def memory_kb(pids: Iterable[int]) -> dict[str, int]:
    """Summed ``Pss`` and ``Rss`` (kB) of ``pids`` from ``/proc/PID/smaps_rollup``.

    PSS divides each shared page among the processes that map it, so forked services
    sharing the launcher's pages are counted once in total; RSS counts them each time.
    """
    total = {"pss_kb": 0, "rss_kb": 0, "processes": 0}
    for pid in set(pids):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total["processes"] += 1
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("Pss", "Rss"):
                total[f"{key.lower()}_kb"] += int(rest.split()[0])
    return total


def cpu_ms(pid: int) -> float:
    """CPU time ``pid`` has used so far, in milliseconds (``/proc/PID/schedstat``, ns
    resolution); NaN if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6
    except OSError:
        return math.nan


class Sandbox:
    """One benchmark run's ledger, scratch folder and interface prefix.

    Everything the run creates goes into :attr:`ledger` (the harness's own code records
    what it makes; a peer records what it makes by hand). :meth:`snapshot` notes, while
    the run is up, which processes and network namespaces exist; :meth:`teardown` removes
    every resource through the ledger; :meth:`verify` then reports anything left: an
    interface with the prefix, a recorded or launcher-group process, a process inside one
    of the run's namespaces, the ledger file, the prefix's reservation, a firewall rule
    naming the run.

    A namespace's inode is reused once the namespace is freed, so after this run's hosts
    stopped another run's host may hold a namespace with one of this run's inodes. A
    namespace counts as the run's own only while a process that already existed at the
    last :meth:`snapshot` (when the run's namespaces were alive) holds it: a process born
    later cannot have entered one of them unless an older process kept it, and that one
    is reported.
    """

    def __init__(self, label: str) -> None:
        from testbed.emulation.ledger import Ledger
        from testbed.emulation.names import reserve_prefix

        self.run_id = f"bench-{label}-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"
        self.ledger = Ledger(self.run_id)
        self.prefix = reserve_prefix(self.ledger)  # given back when the ledger is removed
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.run_id}-"))
        self.ledger.record("dir", path=str(self.workdir))
        self._processes: dict[int, int | None] = {}
        self._namespaces: set[int] = set()
        self._seen: dict[int, int | None] | None = None  # pid -> start time at snapshot
        self.torn_down = False
        self.verified = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.torn_down:
            self.snapshot()
            errors = self.teardown()
            if errors:
                print(f"  teardown errors: {errors}")
        if not self.verified:
            problems = self.verify()
            if problems:
                print(f"  LEFT BEHIND: {problems}")

    def recorded_pids(self) -> list[int]:
        """The pids of every process entry still open in the ledger."""
        return [e.data["pid"] for e in self.ledger.open_entries() if e.kind == "process"]

    def snapshot(self, extra_pids: Iterable[int] = ()) -> None:
        """Remember the run's processes (recorded ones, the members of recorded process
        groups, ``extra_pids``) and the network namespaces they live in."""
        root_ns = _netns_inode(os.getpid())
        self._seen = {pid: process_start_time(pid) for pid in _proc_pids()}
        pids = set(self.recorded_pids()) | set(extra_pids)
        for entry in self.ledger.open_entries():
            if entry.kind == "process" and entry.data.get("group"):
                pids.update(process_group(entry.data["pid"]))
        for pid in pids:
            start = process_start_time(pid)
            if start is None:
                continue
            self._processes[pid] = start
            inode = _netns_inode(pid)
            if inode is not None and inode != root_ns:
                self._namespaces.add(inode)

    def teardown(self) -> list[str]:
        """Remove every resource the ledger still holds; returns the errors met."""
        self.torn_down = True
        return self.ledger.teardown()

    def _seen_at_snapshot(self, pid: int) -> bool:
        """Whether ``pid`` existed at the last snapshot (so it may hold the run's own
        namespace rather than a later one that reuses its inode)."""
        if self._seen is None:
            return True
        start = process_start_time(pid)
        return start is not None and self._seen.get(pid) == start

    def verify(self) -> list[str]:
        """What the run left behind (an empty list when it left nothing)."""
        self.verified = True
        problems = []
        names = [n for n in os.listdir(SYS_NET) if n.startswith(self.prefix)]
        if names:
            problems.append(f"interfaces {names}")
        alive = [pid for pid, start in self._processes.items() if is_running(pid, start)]
        if alive:
            problems.append(f"processes {alive}")
        if self._namespaces:
            held = [pid for pid in _proc_pids() if _netns_inode(pid) in self._namespaces
                    and self._seen_at_snapshot(pid)]
            if held:
                problems.append(f"processes {held} still hold the run's network namespaces")
        if self.ledger.path.exists():
            problems.append(f"ledger file {self.ledger.path}")
        from testbed.emulation.names import reserved_by

        if reserved_by(self.prefix) is not None:
            problems.append(f"prefix {self.prefix} still reserved")
        if self.workdir.exists():
            problems.append(f"scratch folder {self.workdir}")
        rules = subprocess.run(["iptables", "-w", "5", "-S", "FORWARD"], capture_output=True,
                               text=True, check=False).stdout
        if self.run_id in rules:
            problems.append("iptables FORWARD rules naming the run")
        return problems

