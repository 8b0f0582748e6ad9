"""A study's table: per point, executor and policy, statistics across replications.

Each replication is one independent trace (its own seed), so a replication's mean,
p50, p95 and p99 over its tasks are independent draws, and the table gives their mean
with a 95 % t-interval across replications; the paired difference against the
baseline is taken per replication (both policies replayed the same trace) and gets
its own t-interval. With a single replication there is nothing to spread over: the
intervals are then batch means over that run's tasks (:mod:`testbed.stats`), and the
``method`` column says so. ``replications`` counts what stands behind every row.

Failed and timed-out tasks are counted (``failed_tasks``: tasks no repetition
completed), never silently dropped. Degraded emulation cells (see
``docs/fidelity.md``), and a policy the guard marked degraded inside an otherwise sound
cell, are counted in the row's ``degraded_cells`` and left out of its statistics unless
``include_degraded`` is set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.compare import failures, task_latencies_ms
from testbed.stats import (
    BATCHES,
    Interval,
    batch_interval,
    paired_batch_interval,
    replication_interval,
    statistic,
)

STATS = ("mean", "p50", "p95", "p99")
#: The columns every summary has, after the grid columns.
COLUMNS = ("executor", "policy", "replications", "mean_ms", "mean_ci_low_ms",
           "mean_ci_high_ms", "p50_ms", "p95_ms", "p95_ci_low_ms", "p95_ci_high_ms", "p99_ms",
           "diff_vs_baseline_ms", "diff_ci_low_ms", "diff_ci_high_ms", "failed_tasks",
           "degraded_cells", "failed_cells", "method")


def _bounds(interval: Interval | None) -> tuple[float, float]:
    if interval is None or interval.bounds is None:
        return math.nan, math.nan
    return interval.low, interval.high  # type: ignore[return-value]


def _value(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _replicated(per_rep: Sequence[Mapping[str, float]], diffs: Sequence[float]
                ) -> dict[str, Any]:
    """Columns from one value per replication."""
    out: dict[str, Any] = {}
    for name in STATS:
        values = [r[name] for r in per_rep]
        interval = replication_interval(values)
        out[f"{name}_ms"] = _value(interval.estimate)
        if name in ("mean", "p95"):
            out[f"{name}_ci_low_ms"], out[f"{name}_ci_high_ms"] = _bounds(interval)
    diff = replication_interval(diffs) if diffs else None
    out["diff_vs_baseline_ms"] = _value(diff.estimate) if diff else math.nan
    out["diff_ci_low_ms"], out["diff_ci_high_ms"] = _bounds(diff)
    out["method"] = f"t across {len(per_rep)} replications"
    return out


def _batched(series: np.ndarray, baseline: np.ndarray | None) -> dict[str, Any]:
    """Columns from the one replication's tasks, by batch means. Where an interval exists
    the value is its centre, the steady-state estimate after the warm-up (so the value
    lies inside its interval); without one, the value over every completed task."""
    out: dict[str, Any] = {}
    described = ""
    for name in STATS:
        out[f"{name}_ms"] = statistic(series, name) if series.size else math.nan
        if name in ("mean", "p95"):
            interval = batch_interval(series, name) if series.size else None
            out[f"{name}_ci_low_ms"], out[f"{name}_ci_high_ms"] = _bounds(interval)
            if interval is not None and interval.bounds is not None:
                out[f"{name}_ms"] = interval.estimate
                described = described or interval.describe()
    diff = None
    if baseline is not None and series.size and baseline.size == series.size:
        diff = paired_batch_interval(series, baseline, "mean")
        out["diff_vs_baseline_ms"] = (diff.estimate if diff.bounds is not None else
                                      statistic(series, "mean") - statistic(baseline, "mean"))
    else:
        out["diff_vs_baseline_ms"] = math.nan
    out["diff_ci_low_ms"], out["diff_ci_high_ms"] = _bounds(diff)
    out["method"] = f"1 replication; {described or f'no interval (< {BATCHES} tasks)'}"
    return out


def _policy_row(frames: Sequence[pd.DataFrame], policy: str, baseline: str) -> dict[str, Any]:
    """One row's statistics from the included replications' traces."""
    per_rep: list[dict[str, float]] = []
    diffs: list[float] = []
    failed = 0
    series_one = baseline_one = None
    for frame in frames:
        failed += failures(frame, policy)["failed_tasks"]
        mine = task_latencies_ms(frame, policy)
        if mine.empty:
            continue
        x = mine.to_numpy(float)
        per_rep.append({name: statistic(x, name) for name in STATS})
        theirs = task_latencies_ms(frame, baseline)
        shared = theirs.index.intersection(mine.index, sort=False)
        if shared.size:
            diffs.append(float(mine.loc[shared].mean() - theirs.loc[shared].mean()))
        series_one = mine.loc[shared].to_numpy(float) if policy != baseline else x
        baseline_one = theirs.loc[shared].to_numpy(float)
    row: dict[str, Any] = {"replications": len(per_rep), "failed_tasks": failed}
    if len(per_rep) >= 2:
        row.update(_replicated(per_rep, diffs))
    elif len(per_rep) == 1:
        assert series_one is not None
        row.update(_batched(series_one, baseline_one))
        if policy == baseline:
            row["diff_vs_baseline_ms"] = 0.0
    else:
        row.update({c: math.nan for c in COLUMNS if c.endswith("_ms")})
        row["method"] = "no completed task"
    return row


def _degraded_for(record: Mapping[str, Any], policy: str) -> bool:
    """Whether the fidelity guard put ``policy``'s numbers in ``record``'s cell in doubt:
    the whole cell, or that policy alone (its own client fell behind)."""
    return bool(record.get("degraded")) or policy in (record.get("degraded_policies") or {})


def summarize(study: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
              traces_dir: Path, include_degraded: bool = False) -> pd.DataFrame:
    """The summary table of a study from its cell records and ``traces/`` folder.

    ``study`` is what ``study.json`` holds (grid paths, policies, baseline, points).
    """
    grid: list[str] = list(study["grid"])
    rows = []
    for point_index, values in enumerate(study["points"]):
        for executor in study["executors"]:
            mine = [r for r in records if r["point"] == point_index
                    and r["executor"] == executor]
            failed_cells = sum(1 for r in mine if r.get("status") not in ("ok", "incomplete"))
            done = [r for r in mine if r.get("status") in ("ok", "incomplete")]
            frames = {r["key"]: pd.read_parquet(traces_dir / f"{r['key']}.parquet")
                      for r in done}
            for policy in study["policies"]:
                doubtful = [r for r in done if _degraded_for(r, policy)]
                used = [frames[r["key"]] for r in done
                        if include_degraded or not _degraded_for(r, policy)]
                row: dict[str, Any] = {path: values.get(path) for path in grid}
                row.update(executor=executor, policy=policy)
                row.update(_policy_row(used, policy, study["baseline"]))
                if not used:
                    row["method"] = (f"no replication to use: {len(doubtful)} degraded "
                                     f"(left out), {failed_cells} failed")
                row.update(degraded_cells=len(doubtful), failed_cells=failed_cells)
                rows.append(row)
    frame = pd.DataFrame(rows)
    return frame[[*grid, *COLUMNS]] if rows else pd.DataFrame(columns=[*grid, *COLUMNS])


def write_summary(frame: pd.DataFrame, folder: Path) -> list[Path]:
    """``summary.csv`` and ``summary.parquet`` in ``folder``."""
    csv, parquet = folder / "summary.csv", folder / "summary.parquet"
    frame.to_csv(csv, index=False)
    table = frame.copy()
    for column in table.columns:  # a grid path may mix numbers and text across points
        if table[column].dtype == object:
            table[column] = table[column].map(lambda v: v if v is None else str(v))
    table.to_parquet(parquet, index=False)
    return [csv, parquet]


def _num(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"


def format_summary(frame: pd.DataFrame, grid: Sequence[str], baseline: str) -> str:
    """A terminal table: per row mean and p95 with intervals, difference to baseline."""
    lines = [f"baseline: {baseline}; intervals 95 %; 'reps' = replications behind each row"]
    head = [*grid, "executor", "policy", "reps", "mean ms [95 % CI]", "p95 ms [95 % CI]",
            f"vs {baseline} ms [95 % CI]", "failed", "degraded"]
    body = []

    def with_ci(row: Mapping[str, Any], value: str, low: str, high: str) -> str:
        return f"{_num(row[value])} [{_num(row[low])}, {_num(row[high])}]"

    for row in frame.to_dict("records"):
        body.append([*(str(row[g]) for g in grid), row["executor"], row["policy"],
                     str(row["replications"]),
                     with_ci(row, "mean_ms", "mean_ci_low_ms", "mean_ci_high_ms"),
                     with_ci(row, "p95_ms", "p95_ci_low_ms", "p95_ci_high_ms"),
                     with_ci(row, "diff_vs_baseline_ms", "diff_ci_low_ms", "diff_ci_high_ms"),
                     str(row["failed_tasks"]), str(row["degraded_cells"])])
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(head)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    methods = sorted({m.split(":")[0] for m in frame["method"]}) if len(frame) else []
    lines += [f"method: {m} (each row's in summary.csv)" for m in methods]
    return "\n".join(lines)
