"""A run's ``summary.json``: per policy, its whole-run statistics beside the steady-state
estimates with their intervals (:func:`testbed.analysis.compare.summary_intervals`).

Kept apart from :mod:`testbed.analysis.traces` (the schema and files, which every other
analysis module reads) so that the trace layer never imports the comparison built on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis.compare import failures, summary_intervals
from testbed.analysis.traces import SUMMARY_NAME, validate_frame


def _ms(value: float) -> float:
    """Seconds to milliseconds as a plain float."""
    return float(value) * 1000.0


_STAT_KEYS = (
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "mean_wait_ms",
    "mean_network_ms",
    "mean_service_ms",
)


def summarize(df: pd.DataFrame) -> dict[str, Any]:
    """Condense a trace frame into per-policy statistics (JSON-ready).

    Returns ``{"policies": {NAME: {...}}}`` with policies in name order. ``n`` counts all
    rows, ``n_ok`` the completed ones and ``n_failed`` the rest. Latency statistics
    (model-time ``latency_s`` in milliseconds; percentiles with numpy's default linear
    interpolation) and the mean wait, network and service times use the ok rows only and
    are ``None`` when there are none. ``share_by_target`` is the fraction of *all* rows
    (placement decisions, failed ones included) sent to each target.

    Beside those keys: ``n_error`` and ``n_timeout`` (the failed rows by outcome),
    ``failed_tasks`` (tasks completed in no repetition) and ``intervals``
    (:func:`testbed.analysis.compare.summary_intervals`: the steady-state estimates of the mean
    and percentiles, each beside its batch-means interval, the estimand, the method,
    the replications and repetitions behind them).
    """
    frame = validate_frame(df)
    intervals = summary_intervals(frame)
    policies: dict[str, Any] = {}
    for policy in sorted(frame["policy"].unique()):
        rows = frame[frame["policy"] == policy]
        ok = rows[rows["outcome"] == "ok"]
        latency = ok["latency_s"].to_numpy(dtype=float)
        entry: dict[str, Any] = {"n": len(rows), "n_ok": len(ok), "n_failed": len(rows) - len(ok)}
        if len(ok):
            p50, p95, p99 = np.percentile(latency, [50, 95, 99])
            stats = (latency.mean(), p50, p95, p99, latency.max())
            stats += tuple(ok[c].mean() for c in ("wait_s", "network_s", "service_s"))
            entry.update({key: _ms(v) for key, v in zip(_STAT_KEYS, stats, strict=True)})
        else:
            entry.update(dict.fromkeys(_STAT_KEYS))
        counts = rows["target"].value_counts()
        entry["share_by_target"] = {
            str(t): int(counts[t]) / len(rows) for t in sorted(counts.index)
        }
        entry.update(failures(frame, policy))
        entry["intervals"] = intervals[policy]
        policies[str(policy)] = entry
    return {"policies": policies}


def write_summary(summary: Mapping[str, Any], folder: str | Path) -> Path:
    """Write ``summary`` as ``summary.json`` in ``folder`` and return its path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SUMMARY_NAME
    path.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path
