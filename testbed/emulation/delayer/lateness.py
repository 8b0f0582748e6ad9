"""Release lateness (written minus due, ns) of the frames the delayer forwards.

Both data paths count every forwarded frame's lateness in one process-wide
:class:`LatenessHistogram` (the compiled shaper keeps the same buckets in C and hands them
over with :meth:`LatenessHistogram.from_counts`). The ``lateness`` control request reads
it, and a run's fidelity guard judges it: a shaper that releases late adds delay the
scenario did not ask for.
"""

from __future__ import annotations

import math
from typing import Any

#: Sub-buckets per power of two in :class:`LatenessHistogram` (relative error <= 1/16).
LATE_SUB_BITS = 5


class LatenessHistogram:
    """Counts of release lateness (ns) in log-spaced buckets: constant memory, O(1) adds.

    Values below ``2**LATE_SUB_BITS`` ns are exact; above, each power of two is split in
    ``2**(LATE_SUB_BITS - 1)`` buckets, so a quantile read as its bucket's upper edge
    overstates the true value by at most 1/16 (it never understates it).
    """

    def __init__(self) -> None:
        self.counts = [0] * (64 << LATE_SUB_BITS)  # every shift a 64-bit value can need
        self.n = 0
        self.max_ns = 0

    @classmethod
    def from_counts(cls, counts: list[int], n: int, max_ns: int) -> LatenessHistogram:
        """A histogram holding counts taken elsewhere (the compiled shaper's, same layout)."""
        hist = cls()
        if len(counts) != len(hist.counts):
            raise ValueError(f"expected {len(hist.counts)} buckets, got {len(counts)}")
        hist.counts, hist.n, hist.max_ns = list(counts), n, max_ns
        return hist

    def add(self, ns: int) -> None:
        """Count one lateness; negatives (a clock oddity) count as 0."""
        ns = max(ns, 0)
        shift = max(ns.bit_length() - LATE_SUB_BITS, 0)
        self.counts[(shift << LATE_SUB_BITS) | (ns >> shift)] += 1
        self.n += 1
        self.max_ns = max(self.max_ns, ns)

    @staticmethod
    def _upper(key: int) -> int:
        shift, mantissa = key >> LATE_SUB_BITS, key & ((1 << LATE_SUB_BITS) - 1)
        return ((mantissa + 1) << shift) - 1

    def quantile(self, q: float) -> int | None:
        """The ``q`` quantile in ns (bucket upper edge, capped at the maximum seen)."""
        if not self.n:
            return None
        rank = max(1, math.ceil(q * self.n))
        seen = 0
        for key, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(self._upper(key), self.max_ns)
        return self.max_ns

    def summary(self) -> dict[str, Any]:
        """``count`` frames and their lateness ``p50_us``, ``p99_us``, ``max_us`` (None
        when no frame was released)."""
        def us(ns: int | None) -> float | None:
            return None if ns is None else ns / 1000

        return {"count": self.n, "p50_us": us(self.quantile(0.5)),
                "p99_us": us(self.quantile(0.99)), "max_us": us(self.max_ns if self.n else None)}
