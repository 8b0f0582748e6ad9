"""Reading the offloading experiment's metrics: points, a policy's numbers, paired
differences to ``hybrid`` and their judgement, and table cells.

Shared by the claim rules (:mod:`testbed.systems.offloading.claim_checks`) and the
measurement tables (:mod:`testbed.systems.offloading.tables`); pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from testbed.reports.claim import Table
from testbed.systems.offloading.metrics import FAMILIES

Metrics = Mapping[str, Any]
EXECUTOR_TITLES = {"sim": "simulation", "emulation": "emulation"}


def fmt(value: float | None, digits: int = 3) -> str:
    """A table cell: ``-`` for missing, else ``digits`` decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], title: str = "",
          note: str = "") -> Table:
    """A table of text cells for the report."""
    return Table(title, tuple(header), tuple(tuple(r) for r in rows), note)


def points(metrics: Metrics, experiment: str) -> list[Mapping[str, Any]]:
    """The points of one experiment, by x."""
    return sorted((p for p in metrics["points"] if p["experiment"] == experiment),
                  key=lambda p: p["x"])


def point_executors(metrics: Metrics, point: Mapping[str, Any]) -> list[str]:
    """The executors a point ran on."""
    return list(point.get("executors") or metrics["executors"])


def m(point: Mapping[str, Any], policy: str, executor: str) -> Mapping[str, Any]:
    """A policy's metrics at a point on one executor."""
    return point["policies"][policy][executor]


def judge(diff: Mapping[str, Any] | None) -> str:
    """Hybrid's standing from a difference *other minus hybrid* of a lower-is-better
    metric with its interval: ``better`` (the interval is above zero), ``worse`` (below),
    ``tie`` (it holds zero) or ``n/a`` (no interval)."""
    if diff is None or diff.get("ci") is None:
        return "n/a"
    low, high = diff["ci"]
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "tie"


def paired(point: Mapping[str, Any], other: str, executor: str, key: str
           ) -> dict[str, Any] | None:
    """``other`` minus ``hybrid`` on ``key`` as ``{value, ci, n, method}``: for the mean
    and p95 the experiment's ``vs_hybrid`` (t across replications, or batch means of one
    replication); for the other metrics the per-replication pairs."""
    row = m(point, other, executor)
    if key in ("mean_s", "p95_s"):
        found = (row.get("vs_hybrid") or {}).get(key[:-2])
        if found is None or found["value_s"] is None:  # no task left after the warm-up
            return None
        method = (f"t across {found['replications']} replications"
                  if "replications" in found else "batch means")
        return {"value": found["value_s"], "ci": found["ci_s"], "method": method}
    found = (row.get("paired") or {}).get(key)
    if found is None:
        return None
    return {**found, "method": f"t across {found['n']} replications"}


def cell(diff: Mapping[str, Any] | None, digits: int = 3) -> str:
    """``+v [lo, hi] (judgement)`` for a table."""
    if diff is None:
        return "-"
    if diff.get("ci") is None:
        return f"{diff['value']:+.{digits}f} (no interval)"
    low, high = diff["ci"]
    return (f"{diff['value']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}] "
            f"({judge(diff)})")


def value_cell(point: Mapping[str, Any], policy: str, executor: str, key: str,
               digits: int = 3) -> str:
    """A policy's value across replications with its interval, or the pooled value."""
    found = (m(point, policy, executor).get("replicated") or {}).get(key)
    if found is None or found.get("ci") is None:
        return fmt(m(point, policy, executor).get(key), digits)
    low, high = found["ci"]
    return f"{found['value']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def mean_of(point: Mapping[str, Any], policy: str, executor: str) -> float:
    """The mean latency across replications (pooled when absent); ``inf`` when none."""
    row = m(point, policy, executor)
    found = (row.get("replicated") or {}).get("mean_s")
    value = found["value"] if found else row.get("mean_s")
    return math.inf if value is None else value


def strongest(point: Mapping[str, Any], family: str, executor: str) -> str:
    """The member of baseline ``family`` with the lowest mean latency at ``point``."""
    members = [p for p in FAMILIES[family] if p in point["policies"]]
    return min(members, key=lambda p: (mean_of(point, p, executor), p))


def replications_text(metrics: Metrics) -> str:
    """What stands behind the sweeps' intervals, for the rules."""
    n = metrics["size"].get("replications", 1)
    return (f"t-intervals across {n} independent replications (one trace each)" if n > 1
            else "1 replication, so batch means over its tasks instead (docs/statistics.md)")


def span_text(values: Sequence[float]) -> str:
    """``a`` or ``a to b`` (s)."""
    lo, hi = min(values), max(values)
    return f"{lo:.3f} s" if math.isclose(lo, hi) else f"{lo:.3f} to {hi:.3f} s"


def xs_text(items: Sequence[float]) -> str:
    return ", ".join(f"{x:g}" for x in items) if items else "none"


def rel(a: float | None, b: float | None) -> float | None:
    """``(b - a) / a``; ``None`` when undefined."""
    return None if a is None or b is None or a == 0 else (b - a) / a


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2.0


def gap_rows(metrics: Metrics) -> list[tuple[Mapping[str, Any], str, Any, Any, Any]]:
    """Per point that ran on both executors and policy: sim, emulation, corrected."""
    out = []
    for p in metrics["points"]:
        if not {"sim", "emulation"} <= set(point_executors(metrics, p)):
            continue
        for policy, per in p["policies"].items():
            out.append((p, policy, per["sim"], per["emulation"], per["emulation_corrected"]))
    return out


