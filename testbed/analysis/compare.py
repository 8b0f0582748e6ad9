"""Policy comparisons of one run's traces, with intervals that respect autocorrelation.

Every policy of a run replays the same materialised trace, so policies are compared
task by task: a task's latency under a policy against the same task's under the
baseline. A task's value is the mean of its completed repetitions (repetitions replay
the same trace with other policy seeds, so they are averaged, not counted as
replications); a task completed in no repetition is failed, counted and shown, and
left out of the latency statistics.

One run is one replication: its intervals are batch means over the tasks in arrival
order (:mod:`testbed.analysis.stats`), and their estimand is the **steady state**. One warm-up
cut is used for every policy of the run (:func:`steady_cutoff`: the latest of the
policies' MSER-5 warm-ups, as an arrival time), so each policy's steady-state estimate
is its statistic over the tasks that arrived after it, and a paired difference is
exactly the difference of the two estimates printed beside it (over the tasks both
completed). The whole-run values (every completed task, no interval) are shown apart
and named so. Intervals across replications come from studies, which hold several runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from testbed.analysis.stats import (
    CONFIDENCE,
    STEADY_STATE,
    TOO_SHORT,
    Interval,
    batch_interval,
    mser5_warmup,
    paired_batch_interval,
    parse_statistic,
    statistic,
)
from testbed.analysis.traces import validate_frame
from testbed.errors import TestbedError

STATS = ("mean", "p50", "p95", "p99")


def task_table(frame: pd.DataFrame, policy: str) -> pd.DataFrame:
    """``policy``'s completed tasks in arrival order, indexed by ``task_id``: ``arrival``
    (model s) and ``latency`` (ms, the mean over the repetitions that completed it)."""
    # only the columns read: a boolean take of all the trace's columns cost ten times more
    ok = frame.loc[(frame["policy"] == policy) & (frame["outcome"] == "ok"),
                   ["task_id", "arrival_model", "latency_s"]]
    if ok.empty:
        return pd.DataFrame({"arrival": pd.Series(dtype=float),
                             "latency": pd.Series(dtype=float)})
    by_task = ok.groupby("task_id")  # two plain reductions: a third of named agg's time
    grouped = pd.DataFrame({"arrival": by_task["arrival_model"].min(),
                            "latency": by_task["latency_s"].mean()})
    grouped = grouped.sort_values(["arrival"], kind="stable")
    grouped["latency"] *= 1000.0
    return grouped


def task_latencies_ms(frame: pd.DataFrame, policy: str) -> pd.Series:
    """``policy``'s completed tasks: latency in ms (mean over the repetitions that
    completed it) indexed by ``task_id``, in arrival order."""
    return task_table(frame, policy)["latency"]


def steady_cutoff(tables: Sequence[pd.DataFrame]) -> float:
    """The arrival time (model s) from which the tasks of every table count as steady
    state: the latest of the tables' MSER-5 warm-ups (``-inf`` when none cuts any)."""
    cut = -math.inf
    for table in tables:
        warmup = mser5_warmup(table["latency"].to_numpy(float))
        if 0 < warmup < len(table):
            cut = max(cut, float(table["arrival"].iloc[warmup]))
    return cut


def failures(frame: pd.DataFrame, policy: str) -> dict[str, int]:
    """``policy``'s rows by outcome: ``n_error``, ``n_timeout`` and tasks that never
    completed in any repetition (``failed_tasks``)."""
    rows = frame.loc[frame["policy"] == policy, ["outcome", "task_id"]]
    done = set(rows.loc[rows["outcome"] == "ok", "task_id"])
    return {"n_error": int((rows["outcome"] == "error").sum()),
            "n_timeout": int((rows["outcome"] == "timeout").sum()),
            "failed_tasks": len(set(rows["task_id"]) - done)}


def _item(value: float, interval: Interval) -> dict[str, Any]:
    """``value`` (the whole run: every completed task, no interval) beside the
    steady-state ``estimate`` and its interval, with what backs it."""
    return {"value": value, "estimate": interval.estimate, "ci": interval.bounds,
            "batches": interval.n, "batch_tasks": interval.batch_tasks,
            "warmup_tasks": interval.warmup, "bounded_at_zero": interval.bounded_at_zero}


def policy_intervals(table: pd.DataFrame, cutoff: float,
                     stats: Sequence[str] = STATS) -> dict[str, dict[str, Any] | None]:
    """Per statistic of one policy's :func:`task_table`: its whole-run value and its
    steady-state estimate over the tasks arriving from ``cutoff`` on, with the
    batch-means interval (``None`` for a policy without completed tasks)."""
    series = table["latency"].to_numpy(float)
    warmup = int((table["arrival"] < cutoff).sum())
    return {name: None if series.size == 0 else
            _item(statistic(series, name), batch_interval(series, name, warmup=warmup))
            for name in stats}


def summary_intervals(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per policy, what ``summary.json`` keeps under ``intervals``: the steady-state
    point of each of ``mean_ms``, ``p50_ms``, ``p95_ms``, ``p99_ms`` beside its interval
    (``*_ci_ms``; ``None`` where the run is too short for one, with the reason in
    ``notes``), the estimand, the method, the warm-up shared by every policy and how
    many replications and repetitions stand behind them."""
    cutoff, entries = steady_state(frame, None)
    out: dict[str, dict[str, Any]] = {}
    for policy, found in entries.items():
        rows = frame[frame["policy"] == policy]
        entry: dict[str, Any] = {
            "estimand": STEADY_STATE, "method": "batch means", "replications": 1,
            "repetitions": int(rows["repetition"].nunique()), "confidence": CONFIDENCE,
            "warmup_until_model_s": None if math.isinf(cutoff) else cutoff,
            "warmup_tasks": found["warmup_tasks"],
            "batches": {}, "batch_tasks": {}, "bounded_at_zero": [], "notes": {}}
        for name, item in found["stats"].items():
            entry[f"{name}_ms"] = None if item is None else item["estimate"]
            entry[f"{name}_ci_ms"] = None if item is None else item["ci"]
            entry["batches"][name] = 0 if item is None else item["batches"]
            entry["batch_tasks"][name] = 0 if item is None else item["batch_tasks"]
            if item is not None and item["bounded_at_zero"]:
                entry["bounded_at_zero"].append(name)
            if item is None or item["ci"] is None:
                entry["notes"][name] = ("no completed task" if item is None else TOO_SHORT)
        out[policy] = entry
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


def _diff(mine: pd.DataFrame, theirs: pd.DataFrame, cutoff: float,
          stats: Sequence[str]) -> dict[str, Any]:
    """``mine - theirs`` per statistic over the tasks both completed: the whole-run value
    and the steady-state estimate (tasks arriving from ``cutoff`` on) with its paired
    batch-means interval."""
    shared = theirs.index.intersection(mine.index, sort=False)  # the baseline's order
    x = mine.loc[shared, "latency"].to_numpy(float)
    y = theirs.loc[shared, "latency"].to_numpy(float)
    warmup = int((theirs.loc[shared, "arrival"] < cutoff).sum())
    diff: dict[str, Any] = {"n_pairs": int(shared.size), "steady_pairs": int(shared.size) - warmup,
                            "stats": dict.fromkeys(stats)}
    if not shared.size:
        return diff
    for name in stats:
        interval = paired_batch_interval(x, y, name, warmup=warmup)
        item = _item(statistic(x, name) - statistic(y, name), interval)
        bounds = interval.bounds
        item["excludes_zero"] = bounds is not None and (bounds[0] > 0.0 or bounds[1] < 0.0)
        diff["stats"][name] = item
    return diff


def compare(df: pd.DataFrame, baseline: str | None = None,
            stats: Sequence[str] = STATS) -> dict[str, Any]:
    """Every policy's statistics and its paired difference to ``baseline``.

    ``baseline`` defaults to the first policy by name, and the result says so. For each
    policy and statistic (``mean`` or ``p<q>``, ms): the whole-run value over its
    completed tasks, and the steady-state estimate (after the warm-up shared by every
    policy, :func:`steady_cutoff`) with its batch-means interval; for each other policy
    the difference ``policy - baseline`` over the tasks both completed, the same two
    ways, the steady-state one with a paired batch-means interval. Raises
    :class:`TestbedError` for an unknown baseline or statistic, or if the policies did
    not run the same (repetition, task_id) set. Returns::

        {"baseline", "baseline_chosen": "given" | "default: first policy by name",
         "unit": "ms", "confidence", "method", "estimand", "replications": 1,
         "warmup_until_model_s", "stats",
         "policies": {NAME: {"n_ok", "n_error", "n_timeout", "failed_tasks",
                             "stats": {STAT: {"value", "estimate", "ci", ...} | None},
                             "diff": None (baseline) | {"n_pairs", "steady_pairs",
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
    cutoff, entries = steady_state(frame, baseline, stats)
    return {"baseline": baseline, "baseline_chosen": chosen, "unit": "ms",
            "confidence": CONFIDENCE, "method": "batch means", "estimand": STEADY_STATE,
            "replications": 1,
            "warmup_until_model_s": None if math.isinf(cutoff) else cutoff,
            "stats": stats, "policies": entries}


def steady_state(frame: pd.DataFrame, baseline: str | None, stats: Sequence[str] = STATS
                 ) -> tuple[float, dict[str, dict[str, Any]]]:
    """The warm-up cut shared by every policy of one run's ``frame`` and, per policy,
    its counts, the tasks it cut (``warmup_tasks``), statistics (:func:`policy_intervals`)
    and paired difference to ``baseline`` (``None`` for the baseline itself, when it is
    absent or not asked for)."""
    policies = sorted(frame["policy"].unique())
    tables = {policy: task_table(frame, policy) for policy in policies}
    cutoff = steady_cutoff(list(tables.values()))
    entries: dict[str, dict[str, Any]] = {}
    for policy in policies:
        table = tables[policy]
        entry: dict[str, Any] = {"n_ok": len(table), **failures(frame, policy),
                                 "warmup_tasks": int((table["arrival"] < cutoff).sum()),
                                 "stats": policy_intervals(table, cutoff, stats)}
        entry["diff"] = None if policy == baseline or baseline not in tables else \
            _diff(table, tables[baseline], cutoff, stats)
        entries[policy] = entry
    return cutoff, entries


def _estimate(item: Mapping[str, Any] | None, sign: bool = False) -> str:
    """``estimate [low, high]``, ``estimate (too short for an interval)`` or ``-``."""
    if item is None or item["estimate"] is None:
        return "-"
    spec = "+.2f" if sign else ".2f"
    if item["ci"] is None:
        return f"{item['estimate']:{spec}} ({TOO_SHORT})"
    low, high = item["ci"]
    return f"{item['estimate']:{spec}} [{low:{spec}}, {high:{spec}}]"


def _whole(item: Mapping[str, Any] | None, sign: bool = False) -> str:
    return "-" if item is None else f"{item['value']:{'+.2f' if sign else '.2f'}}"


def format_compare(result: Mapping[str, Any], degraded: str | None = None) -> str:
    """A :func:`compare` result as a fixed-width table: per policy and statistic the
    whole-run value, then the steady-state estimate with its interval and its paired
    difference to the baseline (``*`` when that interval excludes zero), after lines
    naming the baseline, the estimand and the method, and ``degraded`` (the fidelity
    guard's line for this run) when given."""
    percent = round(result["confidence"] * 100)
    cut = result.get("warmup_until_model_s")
    lines = [
        (f"baseline {result['baseline']} ({result['baseline_chosen']}); {result['unit']}; "
         "* = difference excludes 0"),
        (f"whole run: every completed task, no interval. steady state: the tasks arriving "
         f"after the warm-up ({'none cut' if cut is None else f'{cut:.3f} model s'}, MSER-5, "
         f"the same for every policy), with its {percent}% batch-means interval "
         f"({result['replications']} replication; batch size chosen by a test of "
         "independence; latency bounds at least 0; docs/statistics.md). The difference is "
         "the difference of the steady-state estimates over the tasks both completed.")]
    if degraded:
        lines.append(degraded)
    header = ("policy", "n_ok", "failed", "stat", "whole run", "steady state [CI]",
              "diff vs baseline, steady state [CI]", "pairs")
    rows = [header]
    for policy, entry in result["policies"].items():
        diff = entry["diff"]
        for name in result["stats"]:
            if diff is None:
                change, pairs = "(baseline)", ""
            else:
                item = diff["stats"][name]
                marker = " *" if item is not None and item["excludes_zero"] else ""
                change, pairs = _estimate(item, sign=True) + marker, str(diff["n_pairs"])
            rows.append((policy, str(entry["n_ok"]), str(entry["failed_tasks"]), name,
                         _whole(entry["stats"][name]), _estimate(entry["stats"][name]),
                         change, pairs))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in
                        zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)
