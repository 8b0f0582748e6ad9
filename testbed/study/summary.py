"""A study's table: per point, executor and policy, statistics across replications.

Each replication is one independent trace (its own seed), so a replication's mean,
p50, p95 and p99 over its tasks are independent draws, and the table gives their mean
with a 95 % t-interval across replications: its estimand is the statistic of *a run as
configured* (started empty, of the configured duration), not the steady state. The
paired difference against the baseline is taken per replication (both policies
replayed the same trace) and gets its own t-interval. With a single replication there
is nothing to spread over: the values and intervals are then the steady-state batch
means of that run (:func:`testbed.analysis.compare.compare`), or the estimate alone where the run
is too short for an interval; the ``method`` and ``estimand`` columns say which.
Latency bounds are at least 0. ``replications`` counts what stands behind every row.

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

import pandas as pd

from testbed.analysis.compare import failures, steady_state, task_latencies_ms
from testbed.analysis.stats import (
    RUN_AS_CONFIGURED,
    STEADY_STATE,
    TOO_SHORT,
    Interval,
    replication_interval,
    statistic,
)

STATS = ("mean", "p50", "p95", "p99")
#: The columns every summary has, after the grid columns.
COLUMNS = ("executor", "policy", "replications", "mean_ms", "mean_ci_low_ms",
           "mean_ci_high_ms", "p50_ms", "p95_ms", "p95_ci_low_ms", "p95_ci_high_ms", "p99_ms",
           "diff_vs_baseline_ms", "diff_ci_low_ms", "diff_ci_high_ms", "failed_tasks",
           "degraded_cells", "failed_cells", "method", "estimand")


def _bounds(interval: Interval | None) -> tuple[float, float]:
    if interval is None or interval.bounds is None:
        return math.nan, math.nan
    return interval.low, interval.high  # type: ignore[return-value]


def _value(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _replicated(per_rep: Sequence[Mapping[str, float]], diffs: Sequence[float]
                ) -> dict[str, Any]:
    """Columns from one value per replication (estimand: a run as configured; latency
    bounds at least 0)."""
    out: dict[str, Any] = {}
    for name in STATS:
        values = [r[name] for r in per_rep]
        interval = replication_interval(values, bounded=True)
        out[f"{name}_ms"] = _value(interval.estimate)
        if name in ("mean", "p95"):
            out[f"{name}_ci_low_ms"], out[f"{name}_ci_high_ms"] = _bounds(interval)
    diff = replication_interval(diffs) if diffs else None
    out["diff_vs_baseline_ms"] = _value(diff.estimate) if diff else math.nan
    out["diff_ci_low_ms"], out["diff_ci_high_ms"] = _bounds(diff)
    out["method"] = f"t across {len(per_rep)} replications"
    out["estimand"] = RUN_AS_CONFIGURED
    return out


def _batched(frame: pd.DataFrame, policy: str, baseline: str) -> dict[str, Any]:
    """Columns from the one replication's tasks by batch means (the rule of
    :func:`testbed.analysis.compare.steady_state`): every value is the steady-state estimate after the warm-up shared
    by the run's policies, the one its interval belongs to, and the difference is the
    difference of two such means."""
    found = steady_state(frame, baseline, STATS)[1][policy]
    out: dict[str, Any] = {}
    for name in STATS:
        item = found["stats"][name]
        out[f"{name}_ms"] = math.nan if item is None else _value(item["estimate"])
        if name in ("mean", "p95"):
            ci = None if item is None else item["ci"]
            out[f"{name}_ci_low_ms"], out[f"{name}_ci_high_ms"] = ci or (math.nan, math.nan)
    diff = None if found["diff"] is None else found["diff"]["stats"]["mean"]
    out["diff_vs_baseline_ms"] = (0.0 if policy == baseline else
                                  math.nan if diff is None else _value(diff["estimate"]))
    out["diff_ci_low_ms"], out["diff_ci_high_ms"] = (diff or {}).get("ci") or (math.nan,
                                                                               math.nan)
    mean = found["stats"]["mean"]
    described = (TOO_SHORT if mean is None or mean["ci"] is None else
                 f"batch means: {mean['batches']} batches of about {mean['batch_tasks']} "
                 f"tasks after {mean['warmup_tasks']} warm-up tasks (MSER-5)")
    out["method"] = f"1 replication; {described}"
    out["estimand"] = STEADY_STATE
    return out


def _policy_row(frames: Sequence[pd.DataFrame], policy: str, baseline: str) -> dict[str, Any]:
    """One row's statistics from the included replications' traces."""
    per_rep: list[dict[str, float]] = []
    diffs: list[float] = []
    failed = 0
    for frame in frames:
        failed += failures(frame, policy)["failed_tasks"]
        mine = task_latencies_ms(frame, policy)
        if mine.empty:
            continue
        per_rep.append({name: statistic(mine.to_numpy(float), name) for name in STATS})
        theirs = task_latencies_ms(frame, baseline)
        shared = theirs.index.intersection(mine.index, sort=False)
        if shared.size:
            diffs.append(float(mine.loc[shared].mean() - theirs.loc[shared].mean()))
    row: dict[str, Any] = {"replications": len(per_rep), "failed_tasks": failed}
    if len(per_rep) >= 2:
        row.update(_replicated(per_rep, diffs))
    elif len(per_rep) == 1:
        row.update(_batched(next(f for f in frames if not task_latencies_ms(f, policy).empty),
                            policy, baseline))
    else:
        row.update({c: math.nan for c in COLUMNS if c.endswith("_ms")})
        row["method"] = "no completed task"
        row["estimand"] = "-"
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
                    row["estimand"] = "-"
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
    estimands = sorted(set(frame["estimand"]) - {"-"}) if len(frame) else []
    lines += [f"estimand: {e}" for e in estimands]
    return "\n".join(lines)
