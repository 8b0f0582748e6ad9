"""The compiled data path of the link delayer: ``shaper.c`` loaded with ctypes.

``setup.sh`` builds ``build/libtbshaper.so`` next to the source with the system's C compiler
(``python -m testbed.emulation.shaper.build``); nothing is compiled or downloaded at run
time. :func:`load` opens the library and says why when it cannot, so the delayer falls back
to its Python data path with one log line. :class:`CShaper` owns one instance: its own
thread relays frames between TAP file descriptors the Python side created and hands over.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "shaper.c"
LIBRARY = HERE / "build" / "libtbshaper.so"
ABI_VERSION = 4
#: Buckets of the process-wide lateness histogram (LatenessHistogram's 64 << 5).
HIST_BUCKETS = 64 << 5


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "received", "forwarded", "dropped_loss", "dropped_queue", "dropped_down",
        "dropped_write", "read_errors", "max_frame")] + [
        (name, ctypes.c_int64) for name in ("held", "held_bytes", "late_p99_ns", "late_max_ns", "up")]


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the argument and result types of the library's functions."""
    ptr, i64, u64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64
    signatures = {
        "shaper_abi_version": ([], ctypes.c_int),
        "shaper_new": ([ctypes.c_int, i64, ctypes.c_int], ptr),
        "shaper_threads": ([ptr], ctypes.c_int),
        "shaper_scheduling": ([ptr], ctypes.c_int),
        "shaper_add": ([ptr, ctypes.c_int, ctypes.c_int], i64),
        "shaper_configure": ([ptr, i64, i64, i64, ctypes.c_double, i64, ctypes.c_int, u64],
                             ctypes.c_int),
        "shaper_set_up": ([ptr, i64, ctypes.c_int], ctypes.c_int),
        "shaper_remove": ([ptr, i64], ctypes.c_int),
        "shaper_stats": ([ptr, i64, ctypes.POINTER(_Stats)], ctypes.c_int),
        "shaper_histogram": ([ptr, ctypes.POINTER(u64), ctypes.POINTER(u64),
                              ctypes.POINTER(u64), ctypes.c_int], ctypes.c_int),
        "shaper_free": ([ptr], None),
    }
    for name, (args, result) in signatures.items():
        func = getattr(lib, name)
        func.argtypes, func.restype = args, result
    return lib


def load(path: Path = LIBRARY) -> tuple[ctypes.CDLL | None, str]:
    """The compiled library and ``"loaded <path>"``, or ``None`` and why it cannot be used."""
    if not path.exists():
        return None, (f"{path} is not built (setup.sh builds it: "
                      "python -m testbed.emulation.shaper.build)")
    try:
        lib = _bind(ctypes.CDLL(str(path)))
    except (OSError, AttributeError) as exc:
        return None, f"{path} does not load: {exc}"
    version = lib.shaper_abi_version()
    if version != ABI_VERSION:
        return None, f"{path} has ABI version {version}, expected {ABI_VERSION}; rebuild it"
    return lib, f"loaded {path}"


@dataclass
class HistogramCopy:
    """A copy of the compiled shaper's lateness histogram (LatenessHistogram's layout)."""

    counts: list[int]
    n: int
    max_ns: int


class CShaper:
    """One compiled shaper: loop threads relaying frames between TAP fds.

    Every method is safe to call from the control thread while the loop runs: the library
    serialises them with the loop on one mutex.
    """

    def __init__(self, lib: ctypes.CDLL, fifo_priority: int = 0, spin_ns: int = 0,
                 threads: int = 1) -> None:
        self._lib = lib
        self._ptr = lib.shaper_new(fifo_priority, spin_ns, threads)
        if not self._ptr:
            raise OSError("shaper_new failed (out of memory or file descriptors)")

    def scheduling(self) -> int:
        """The loop thread's SCHED_FIFO priority, 0 for SCHED_OTHER, -errno if refused."""
        return self._lib.shaper_scheduling(self._ptr)

    def threads(self) -> int:
        """How many loop threads relay frames."""
        return self._lib.shaper_threads(self._ptr)

    def add(self, src_fd: int, dst_fd: int) -> int:
        """Relay frames read from ``src_fd`` to ``dst_fd``; returns the direction's id."""
        ret = self._lib.shaper_add(self._ptr, src_fd, dst_fd)
        if ret < 0:
            raise OSError(-ret, f"shaper_add: cannot poll fd {src_fd}")
        return ret

    def configure(self, direction: int, delay_ns: int, jitter_ns: int, loss_pct: float,
                  limit: int, seed: int | None) -> None:
        """Set one direction's shaping; a ``seed`` restarts its loss/jitter draws."""
        self._check(self._lib.shaper_configure(
            self._ptr, direction, delay_ns, jitter_ns, loss_pct, limit, seed is not None,
            (seed or 0) & (2**64 - 1)), "configure", direction)

    def set_up(self, direction: int, up: bool) -> None:
        """Bring one direction up or down (down drops its held frames)."""
        self._check(self._lib.shaper_set_up(self._ptr, direction, up), "set_up", direction)

    def remove(self, direction: int) -> None:
        """Stop relaying one direction (its fds stay open for the caller to close)."""
        self._check(self._lib.shaper_remove(self._ptr, direction), "remove", direction)

    def stats(self, direction: int) -> dict[str, int | None]:
        """Counters, held frames and lateness p99/max (ns, None before any release)."""
        out = _Stats()
        self._check(self._lib.shaper_stats(self._ptr, direction, ctypes.byref(out)),
                    "stats", direction)
        values = {name: getattr(out, name) for name, _ in _Stats._fields_}
        for key in ("late_p99_ns", "late_max_ns"):
            if values[key] < 0:
                values[key] = None
        return values

    def histogram(self, reset: bool) -> HistogramCopy:
        """The process-wide lateness histogram; ``reset`` zeroes it after the copy."""
        counts = (ctypes.c_uint64 * HIST_BUCKETS)()
        n, max_ns = ctypes.c_uint64(), ctypes.c_uint64()
        self._lib.shaper_histogram(self._ptr, counts, ctypes.byref(n), ctypes.byref(max_ns),
                                   reset)
        return HistogramCopy(list(counts), n.value, max_ns.value)

    def close(self) -> None:
        """Stop the loop thread and free the shaper (idempotent)."""
        if self._ptr:
            self._lib.shaper_free(self._ptr)
            self._ptr = None

    @staticmethod
    def _check(ret: int, what: str, direction: int) -> None:
        if ret < 0:
            raise OSError(-ret, f"shaper_{what}: no direction {direction}")
