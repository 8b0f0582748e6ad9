"""Waiting for processes to end the instant they do, without being their parent.

A scheduled crash takes effect when the node's programs are dead, and the event log
records that instant: polling ``/proc`` every 10 ms would add up to 10 ms (0.2 model
seconds at ``time_scale`` 20) to every crash, and asking the service launcher (their
parent) would queue behind the driver's own requests. A pidfd (``pidfd_open``, Linux
5.3) becomes readable when its process has ended, whoever its parent is, so
:func:`wait_exits` sleeps in one ``poll`` until the last of them has.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterable

from testbed.emulation.ledger import is_running


def open_pidfd(pid: int, start: int | None) -> int | None:
    """A pidfd of the process ``pid`` that started at ``start``; ``None`` when that
    process has already ended (its pid gone, recycled, or a zombie)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if not is_running(pid, start):  # checked after opening: the fd is of that process
        os.close(fd)
        return None
    return fd


def wait_exits(processes: Iterable[tuple[int, int | None]], timeout: float) -> bool:
    """Wait until every ``(pid, start time)`` has ended; ``False`` if one still runs
    after ``timeout`` seconds."""
    fds = [fd for pid, start in processes if (fd := open_pidfd(pid, start)) is not None]
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        pending = set(fds)
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                pending.discard(fd)
        return True
    finally:
        for fd in fds:
            os.close(fd)
