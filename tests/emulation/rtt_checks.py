"""The round-trip check the shaped-link tests share: what a delay adds, net of the path.

A ping through a shaped link costs the path itself (namespaces, bridge, the shaper's relay;
measured unshaped as ``base``) plus the delay each direction adds, plus how late the shaper
released each frame after its due time. On a busy machine the last term grows (timer
wake-ups), which a fixed tolerance around ``2 * delay`` would either hide (too wide) or
flag as wrong delays (too narrow). So the check takes the shaper's own lateness report for
the same frames as a one-sided allowance: the added RTT may not fall short of the expected
delay, and may exceed it by at most the two releases' lateness per round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Tolerance on the added RTT: 5 % of the expected value, at least this many ms.
FLOOR_MS = 0.5


def p50(rtts: Sequence[float]) -> float:
    """The median RTT (ms)."""
    return float(np.percentile(rtts, 50))


def assert_adds(rtts: Sequence[float], base_ms: float, expected_ms: float,
                late: Mapping[str, Any] | None = None) -> None:
    """The median of ``rtts`` minus ``base_ms`` is ``expected_ms`` within tolerance, plus at
    most twice the median release lateness in ``late`` (a ``lateness`` report covering
    these echoes; None when the backend has no userspace shaper)."""
    tol = max(0.05 * expected_ms, FLOOR_MS)
    allowance = 0.0
    if late is not None:
        assert late["count"] >= 2 * len(rtts), late  # the report covers these echoes
        allowance = 2 * late["p50_us"] / 1000
    added = p50(rtts) - base_ms
    assert -tol <= added - expected_ms <= tol + allowance, {
        "added_ms": added, "expected_ms": expected_ms, "base_ms": base_ms,
        "late_allowance_ms": allowance}
