"""Policy comparisons of one run's traces, with intervals that respect autocorrelation.

Every policy of a run replays the same materialised trace, so policies are compared
task by task: a task's latency under a policy against the same task's under the
baseline. A task's value is the mean of its completed repetitions (repetitions replay
the same trace with other policy seeds, so they are averaged, not counted as
replications); a task completed in no repetition is failed, counted and shown, and
left out of the latency statistics.

One run is one replication: its intervals are batch means over the tasks in arrival
order (:mod:`testbed.stats`), and every result names that method and its batches.
Intervals across replications come from studies, which hold several runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from testbed.errors import TestbedError
from testbed.stats import (
    BATCHES,
    CONFIDENCE,
    Interval,
    batch_interval,
    paired_batch_interval,
    parse_statistic,
    statistic,
)
from testbed.traces import validate_frame

STATS = ("mean", "p50", "p95", "p99")


def task_latencies_ms(frame: pd.DataFrame, policy: str) -> pd.Series:
    """``policy``'s completed tasks: latency in ms (mean over the repetitions that
    completed it) indexed by ``task_id``, in arrival order."""
    rows = frame[frame["policy"] == policy]
    ok = rows[rows["outcome"] == "ok"]
    if ok.empty:
        return pd.Series(dtype=float)
    grouped = ok.groupby("task_id").agg(arrival=("arrival_model", "min"),
                                        latency=("latency_s", "mean"))
    grouped = grouped.sort_values(["arrival"], kind="stable")
    return grouped["latency"] * 1000.0


def failures(frame: pd.DataFrame, policy: str) -> dict[str, int]:
    """``policy``'s rows by outcome: ``n_error``, ``n_timeout`` and tasks that never
    completed in any repetition (``failed_tasks``)."""
    rows = frame[frame["policy"] == policy]
    done = set(rows.loc[rows["outcome"] == "ok", "task_id"])
    return {"n_error": int((rows["outcome"] == "error").sum()),
            "n_timeout": int((rows["outcome"] == "timeout").sum()),
            "failed_tasks": len(set(rows["task_id"]) - done)}


def _item(value: float | None, interval: Interval) -> dict[str, Any] | None:
    """``value`` (over every completed task) and the interval of the steady-state
    ``estimate`` (after the warm-up), with what backs it."""
    if value is None:
        return None
    return {"value": value, "estimate": interval.estimate, "ci": interval.bounds,
            "batches": interval.n, "batch_tasks": interval.batch_tasks,
            "warmup_tasks": interval.warmup}


def policy_intervals(frame: pd.DataFrame, policy: str,
                     stats: Sequence[str] = STATS) -> dict[str, dict[str, Any] | None]:
    """Per statistic: its value over every completed task and its batch-means interval."""
    series = task_latencies_ms(frame, policy).to_numpy(dtype=float)
    out: dict[str, dict[str, Any] | None] = {}
    for name in stats:
        if series.size == 0:
            out[name] = None
            continue
        out[name] = _item(statistic(series, name), batch_interval(series, name))
    return out


def summary_intervals(frame: pd.DataFrame, policy: str) -> dict[str, Any]:
    """What ``summary.json`` adds beside a policy's documented keys: the interval of each
    of ``mean_ms``, ``p50_ms``, ``p95_ms``, ``p99_ms`` (``None`` when the run cannot carry
    one), the method, and how many replications and repetitions stand behind them."""
    found = policy_intervals(frame, policy)
    rows = frame[frame["policy"] == policy]
    first = next((v for v in found.values() if v is not None), None)
    out: dict[str, Any] = {
        "replications": 1, "repetitions": int(rows["repetition"].nunique()),
        "confidence": CONFIDENCE, "method": "batch means",
        "batches": first["batches"] if first else 0,
        "batch_tasks": first["batch_tasks"] if first else 0,
        "warmup_tasks": first["warmup_tasks"] if first else 0}
    for name, item in found.items():
        out[f"{name}_ci_ms"] = None if item is None else item["ci"]
    return out


def _check_same_tasks(frame: pd.DataFrame, policies: Sequence[str], baseline: str) -> None:
    def keys(policy: str) -> pd.MultiIndex:
        rows = frame[frame["policy"] == policy]
        found = pd.MultiIndex.from_arrays([rows["repetition"], rows["task_id"]])
        if found.has_duplicates:
            first = found[found.duplicated()][0]
            raise TestbedError(
                f"policy {policy}: (repetition, task_id) {tuple(int(k) for k in first)} "
                "appears more than once; compare traces of one run per policy")
        return found.sort_values()

    reference = keys(baseline)
    for policy in policies:
        mine = keys(policy)
        if not mine.equals(reference):
            missing, extra = len(reference.difference(mine)), len(mine.difference(reference))
            raise TestbedError(
                f"policy {policy} did not run the same tasks as baseline {baseline}: "
                f"{missing} of the baseline's (repetition, task_id) missing, {extra} extra")


def _diff(frame: pd.DataFrame, policy: str, baseline: str,
          stats: Sequence[str]) -> dict[str, Any]:
    mine = task_latencies_ms(frame, policy)
    theirs = task_latencies_ms(frame, baseline)
    shared = theirs.index.intersection(mine.index, sort=False)  # the baseline's order
    x, y = mine.loc[shared].to_numpy(float), theirs.loc[shared].to_numpy(float)
    diff: dict[str, Any] = {"n_pairs": int(shared.size), "stats": dict.fromkeys(stats)}
    if not shared.size:
        return diff
    for name in stats:
        interval = paired_batch_interval(x, y, name)
        item = _item(statistic(x, name) - statistic(y, name), interval)
        assert item is not None
        bounds = interval.bounds
        item["excludes_zero"] = bounds is not None and (bounds[0] > 0.0 or bounds[1] < 0.0)
        diff["stats"][name] = item
    return diff


def compare(df: pd.DataFrame, baseline: str | None = None,
            stats: Sequence[str] = STATS) -> dict[str, Any]:
    """Every policy's statistics and its paired difference to ``baseline``.

    ``baseline`` defaults to the first policy by name, and the result says so. For each
    policy and statistic (``mean`` or ``p<q>``, ms): the value over its completed tasks
    and a batch-means interval; for each other policy the difference ``policy -
    baseline`` over the tasks both completed, with a paired batch-means interval.
    Raises :class:`TestbedError` for an unknown baseline or statistic, or if the
    policies did not run the same (repetition, task_id) set. Returns::

        {"baseline", "baseline_chosen": "given" | "default: first policy by name",
         "unit": "ms", "confidence", "method", "replications": 1, "batches", "stats",
         "policies": {NAME: {"n_ok", "n_error", "n_timeout", "failed_tasks",
                             "stats": {STAT: {"value", "ci", "batches", ...} | None},
                             "diff": None (baseline) | {"n_pairs",
                                      "stats": {STAT: {..., "excludes_zero"} | None}}}}}
    """
    frame = validate_frame(df)
    stats = list(stats)
    for name in stats:
        parse_statistic(name)
    policies = sorted(frame["policy"].unique())
    if not policies:
        raise TestbedError("the traces hold no rows to compare")
    chosen = "given" if baseline is not None else "default: first policy by name"
    baseline = baseline if baseline is not None else policies[0]
    if baseline not in policies:
        raise TestbedError(f"baseline policy {baseline!r} is not in the traces; found {policies}")
    _check_same_tasks(frame, policies, baseline)
    result: dict[str, Any] = {
        "baseline": baseline, "baseline_chosen": chosen, "unit": "ms",
        "confidence": CONFIDENCE, "method": "batch means", "replications": 1,
        "batches": BATCHES, "stats": stats, "policies": {}}
    for policy in policies:
        series = task_latencies_ms(frame, policy)
        entry: dict[str, Any] = {"n_ok": int(series.size), **failures(frame, policy),
                                 "stats": policy_intervals(frame, policy, stats)}
        entry["diff"] = None if policy == baseline else _diff(frame, policy, baseline, stats)
        result["policies"][policy] = entry
    return result


def _with_ci(item: Mapping[str, Any] | None, sign: bool = False) -> str:
    """``value; estimate [low, high]`` (all tasks; after the warm-up, with its interval),
    ``value; no CI`` without an interval, ``-`` when missing."""
    if item is None:
        return "-"
    spec = "+.2f" if sign else ".2f"
    if item["ci"] is None:
        return f"{item['value']:{spec}}; no CI"
    low, high = item["ci"]
    return f"{item['value']:{spec}}; {item['estimate']:{spec}} [{low:{spec}}, {high:{spec}}]"


def format_compare(result: Mapping[str, Any]) -> str:
    """A :func:`compare` result as a fixed-width table: per policy and statistic the
    value with its interval and the paired difference to the baseline (``*`` when its
    interval excludes zero), after two lines naming the baseline and the method."""
    percent = round(result["confidence"] * 100)
    lines = [
        (f"baseline {result['baseline']} ({result['baseline_chosen']}); {result['unit']}; "
         "* = difference excludes 0"),
        (f"value over all completed tasks; then the steady-state estimate after an MSER-5 "
         f"warm-up with its {percent}% batch-means interval ({result['replications']} "
         f"replication, {result['batches']} batches of consecutive tasks; tasks are not "
         "resampled: docs/statistics.md)")]
    header = ("policy", "n_ok", "failed", "stat", "value; estimate [CI]",
              "diff vs baseline; estimate [CI]", "pairs")
    rows = [header]
    for policy, entry in result["policies"].items():
        diff = entry["diff"]
        for name in result["stats"]:
            if diff is None:
                change, pairs = "(baseline)", ""
            else:
                item = diff["stats"][name]
                marker = " *" if item is not None and item["excludes_zero"] else ""
                change, pairs = _with_ci(item, sign=True) + marker, str(diff["n_pairs"])
            rows.append((policy, str(entry["n_ok"]), str(entry["failed_tasks"]), name,
                         _with_ci(entry["stats"][name]), change, pairs))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in
                        zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)

