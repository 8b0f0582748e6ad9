"""The delayer's clock: a timerfd armed at absolute nanosecond deadlines, and the process's
timing set-up.

The Python data path releases every held frame at its due time on CLOCK_MONOTONIC. The
delayer's loop waits with ``epoll`` for the TAPs and the control socket plus one
:class:`TimerFd` armed at the next release, so waiting neither rounds to milliseconds nor
has ``select``'s 1024-fd limit. :func:`tune_process` asks for 1 ns timer slack, room for a
file descriptor per TAP and (when the Python loop relays) SCHED_FIFO priority 50.
"""

from __future__ import annotations

import ctypes
import os
import resource

_libc = ctypes.CDLL(None, use_errno=True)

PR_SET_TIMERSLACK = 29
CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


class TimerFd:
    """A CLOCK_MONOTONIC timerfd armed at absolute nanosecond deadlines.

    Python 3.11 has no ``os.timerfd_*``; ctypes reaches the libc calls.
    """

    def __init__(self) -> None:
        self.fd = _check(_libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC),
                         "timerfd_create")
        self.armed_at: int | None = None

    def arm(self, deadline_ns: int) -> None:
        """Fire at ``deadline_ns`` (time.monotonic_ns() scale); a past deadline fires now."""
        if deadline_ns == self.armed_at:
            return
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(max(deadline_ns, 1), 1_000_000_000)
        _check(_libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None),
               "timerfd_settime")
        self.armed_at = deadline_ns

    def clear(self) -> None:
        """Consume the expiration count so level-triggered epoll stops reporting it."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.armed_at = None


def tune_process(realtime: bool) -> str:
    """Ask for precise timers, room for many TAP fds and (``realtime``) SCHED_FIFO 50.

    Returns the scheduling class obtained (``fifo50`` or ``other``).
    """
    _libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not realtime:
        return "other"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        return "fifo50"
    except (PermissionError, OSError):
        return "other"
