"""Two results folders side by side: per policy, B minus A with its interval.

``testbed compare A B`` takes two run folders or two study folders (the simulator
against the emulation, two days, two code versions). The difference is always ``B -
A`` in milliseconds of mean latency, printed beside the two numbers it is the
difference of (``a_ms``, ``b_ms``: the same estimator's), with its estimand: the steady
state for runs, the mean of a run as configured for studies. How its interval was
formed depends on what the folders share:

* **Two runs** of the same trace (equal trace hashes): the tasks pair one to one, and
  the interval is paired batch means over them (:mod:`testbed.analysis.stats`). Other traces:
  the two runs' batch-means intervals combined as independent (half-widths added in
  quadrature).
* **Two studies**: rows are matched on grid values and policy (and executor when both
  studies ran the same executors). Replications that used the same seed in both
  (the same study seed and grid) replayed the same trace and pair, giving a paired
  t-interval across replications; otherwise Welch's t-interval compares the two sets
  of replication means. A row with one replication on each side falls back to the
  runs' rule above.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from testbed.analysis.compare import steady_cutoff, task_latencies_ms, task_table
from testbed.analysis.fidelity import warning_line
from testbed.analysis.stats import (
    CONFIDENCE,
    RUN_AS_CONFIGURED,
    STEADY_STATE,
    TOO_SHORT,
    batch_interval,
    interval_half,
    paired_batch_interval,
    replication_interval,
    statistic,
)
from testbed.analysis.traces import read_traces
from testbed.errors import TestbedError


def kind_of(folder: Path) -> str:
    """``run`` or ``study``; a TestbedError names a folder that is neither."""
    if (folder / "study.json").is_file():
        return "study"
    if (folder / "traces.parquet").is_file() or (folder / "traces.csv").is_file():
        return "run"
    raise TestbedError(f"{folder}: expected a run folder (traces.parquet) or a study folder "
                       "(study.json), found neither")


def _trace_hash(folder: Path) -> str | None:
    try:
        return json.loads((folder / "metadata.json").read_text())["trace"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _entry(diff: float | None, low: float | None, high: float | None, method: str,
           a_ms: float | None, b_ms: float | None, n: int, estimand: str
           ) -> dict[str, Any]:
    rel = None if diff is None or not a_ms else 100.0 * diff / a_ms
    return {"a_ms": a_ms, "b_ms": b_ms, "diff_ms": diff,
            "ci_ms": None if low is None or high is None else [low, high],
            "diff_pct": rel, "n": n, "method": method, "estimand": estimand}


def _runs_diff(a: pd.DataFrame, b: pd.DataFrame, policy: str, same_trace: bool
               ) -> dict[str, Any]:
    """B - A of one policy's steady-state mean latency from two runs' task series; the
    ``a_ms`` and ``b_ms`` shown are the two steady-state means it is the difference of."""
    ta, tb = task_table(a, policy), task_table(b, policy)
    if ta.empty or tb.empty:
        return _entry(None, None, None, "no completed task on one side", None, None, 0,
                      STEADY_STATE)
    if same_trace:
        shared = ta.index.intersection(tb.index, sort=False)
        ta, tb = ta.loc[shared], tb.loc[shared]
        cutoff = steady_cutoff([ta, tb])
        warmup = int((ta["arrival"] < cutoff).sum())
        xa, xb = ta["latency"].to_numpy(float), tb["latency"].to_numpy(float)
        interval = paired_batch_interval(xb, xa, "mean", warmup=warmup)
        return _entry(interval.estimate, interval.low, interval.high,
                      f"paired batch means over {shared.size - warmup} shared tasks after "
                      f"a warm-up of {warmup}" + ("" if interval.bounds else f"; {TOO_SHORT}"),
                      statistic(xa[warmup:], "mean"), statistic(xb[warmup:], "mean"), 1,
                      STEADY_STATE)
    ia = batch_interval(ta["latency"].to_numpy(float), "mean")
    ib = batch_interval(tb["latency"].to_numpy(float), "mean")
    assert ia.estimate is not None and ib.estimate is not None
    diff = ib.estimate - ia.estimate
    if ia.bounds is None or ib.bounds is None:
        return _entry(diff, None, None, f"different traces; {TOO_SHORT} on one side",
                      ia.estimate, ib.estimate, 1, STEADY_STATE)
    half = math.hypot(interval_half(ia), interval_half(ib))  # type: ignore[arg-type]
    return _entry(diff, diff - half, diff + half,
                  "different traces; independent batch-means intervals", ia.estimate,
                  ib.estimate, 1, STEADY_STATE)


def degraded_line(folder: Path) -> str | None:
    """What the fidelity guard said of a run folder's emulation, as one line naming the
    folder (``None`` when it was sound, or is a simulator run)."""
    try:
        verdict = json.loads((folder / "metadata.json").read_text()).get("fidelity")
    except (OSError, ValueError, AttributeError):
        return None
    line = warning_line(verdict) if isinstance(verdict, dict) else None
    return None if line is None else f"{folder}: {line}"


def compare_runs(a: Path, b: Path) -> dict[str, Any]:
    """Per policy present in both runs: B - A of the steady-state mean latency."""
    fa, fb = read_traces(a), read_traces(b)
    policies = sorted(set(fa["policy"]) & set(fb["policy"]))
    if not policies:
        raise TestbedError(f"{a} and {b} share no policy")
    same = _trace_hash(a) is not None and _trace_hash(a) == _trace_hash(b)
    rows = [{"policy": p, **_runs_diff(fa, fb, p, same)} for p in policies]
    return {"kind": "run", "a": str(a), "b": str(b), "same_trace": same, "grid": [],
            "confidence": CONFIDENCE, "rows": rows,
            "degraded": [line for line in (degraded_line(a), degraded_line(b)) if line]}


def _study(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """``study.json``, the usable cells' records, each with its traces (read once), and
    how many finished cells the fidelity guard called degraded (left out)."""
    about = json.loads((folder / "study.json").read_text())
    records, degraded = [], 0
    for path in sorted((folder / "cells").glob("*/cell.json")):
        record = json.loads(path.read_text())
        if record.get("status") not in ("ok", "incomplete"):
            continue
        if record.get("degraded"):
            degraded += 1
            continue
        record["frame"] = pd.read_parquet(folder / "traces" / f"{record['key']}.parquet")
        records.append(record)
    return about, records, degraded


def _replication_means(records: Sequence[Mapping[str, Any]], policy: str
                       ) -> dict[Any, tuple[float, pd.DataFrame]]:
    """seed -> (the replication's mean latency of ``policy``, its traces), leaving out
    cells where the guard marked ``policy`` degraded; a record without a seed gets a key
    of its own, so it pairs with nothing."""
    out = {}
    for record in records:
        if policy in (record.get("degraded_policies") or {}):
            continue
        frame = record["frame"]
        series = task_latencies_ms(frame, policy)
        if not series.empty:
            seed = record.get("seed")
            out[seed if seed is not None else f"cell {record['key']}"] = (
                float(series.mean()), frame)
    return out


def _studies_diff(a: Mapping[Any, tuple[float, pd.DataFrame]],
                  b: Mapping[Any, tuple[float, pd.DataFrame]], policy: str
                  ) -> dict[str, Any]:
    """B - A across replications of the mean of a run as configured; paired on shared
    seeds (``a_ms``, ``b_ms`` then over those seeds, so the difference is theirs)."""
    if not a or not b:
        return _entry(None, None, None, "no completed replication on one side", None, None,
                      0, RUN_AS_CONFIGURED)
    shared = sorted(set(a) & set(b), key=str)
    if len(shared) >= 2:
        interval = replication_interval([b[s][0] - a[s][0] for s in shared])
        return _entry(interval.estimate, interval.low, interval.high,
                      f"paired t across {len(shared)} replications (same seeds)",
                      float(np.mean([a[s][0] for s in shared])),
                      float(np.mean([b[s][0] for s in shared])), len(shared),
                      RUN_AS_CONFIGURED)
    a_ms = float(np.mean([v for v, _ in a.values()]))
    b_ms = float(np.mean([v for v, _ in b.values()]))
    if len(a) >= 2 and len(b) >= 2:
        test = scipy_stats.ttest_ind([v for v, _ in b.values()], [v for v, _ in a.values()],
                                     equal_var=False)
        ci = test.confidence_interval(CONFIDENCE)
        return _entry(b_ms - a_ms, float(ci.low), float(ci.high),
                      f"Welch t, {len(a)} and {len(b)} replications", a_ms, b_ms,
                      min(len(a), len(b)), RUN_AS_CONFIGURED)
    (_, fa), (_, fb) = next(iter(a.values())), next(iter(b.values()))
    return _runs_diff(fa, fb, policy, same_trace=len(shared) == 1)


def compare_studies(a: Path, b: Path) -> dict[str, Any]:
    """Per matching (grid values, executor, policy): B - A of the mean latency."""
    about_a, rec_a, degraded_a = _study(a)
    about_b, rec_b, degraded_b = _study(b)
    if about_a["grid"] != about_b["grid"]:
        raise TestbedError(f"{a} varies {about_a['grid']} and {b} varies {about_b['grid']}: "
                           "compare studies over the same grid paths")
    by_executor = set(about_a["executors"]) == set(about_b["executors"])
    rows = []
    for values in about_a["points"]:
        if values not in about_b["points"]:
            continue
        for policy in about_a["policies"]:
            if policy not in about_b["policies"]:
                continue
            pairs = ([(e, e) for e in about_a["executors"]] if by_executor else
                     [(ea, eb) for ea in about_a["executors"] for eb in about_b["executors"]])
            for ea, eb in pairs:
                mine = [r for r in rec_a if r["values"] == values and r["executor"] == ea]
                theirs = [r for r in rec_b if r["values"] == values and r["executor"] == eb]
                entry = _studies_diff(_replication_means(mine, policy),
                                      _replication_means(theirs, policy), policy)
                rows.append({**values, "executor": ea if by_executor else f"{ea} -> {eb}",
                             "policy": policy, **entry})
    if not rows:
        raise TestbedError(f"{a} and {b} share no grid point and policy")
    degraded = [f"{folder}: {count} degraded emulation cell(s) left out"
                for folder, count in ((a, degraded_a), (b, degraded_b)) if count]
    return {"kind": "study", "a": str(a), "b": str(b), "grid": about_a["grid"],
            "confidence": CONFIDENCE, "rows": rows, "degraded": degraded}


def compare_folders(a: str | Path, b: str | Path) -> dict[str, Any]:
    """B - A per policy (and grid point) of two run folders or two study folders."""
    a, b = Path(a), Path(b)
    kinds = kind_of(a), kind_of(b)
    if kinds[0] != kinds[1]:
        raise TestbedError(f"{a} is a {kinds[0]} folder and {b} a {kinds[1]} folder: "
                           "compare two runs or two studies")
    return compare_runs(a, b) if kinds[0] == "run" else compare_studies(a, b)


def _num(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:{spec}}"


def format_folders(result: Mapping[str, Any]) -> str:
    """The comparison as a table, after lines naming A, B, what the difference is and
    its estimand, and whatever the fidelity guard said of either side."""
    percent = round(result["confidence"] * 100)
    estimands = sorted({row["estimand"] for row in result["rows"]})
    lines = [f"A: {result['a']}", f"B: {result['b']}",
             (f"difference B - A of the mean latency, ms, with its {percent}% interval; "
              "A ms and B ms are the two numbers it is the difference of; "
              "* = interval excludes 0"),
             "estimand: " + "; ".join(estimands) + " (each row's in --json)"]
    lines += [f"degraded: {line}" for line in result.get("degraded", [])]
    head = [*result["grid"], *(["executor"] if result["kind"] == "study" else []), "policy",
            "A ms", "B ms", "B - A ms [CI]", "B - A %", "method"]
    body = []
    for row in result["rows"]:
        ci = row["ci_ms"]
        star = " *" if ci is not None and (ci[0] > 0 or ci[1] < 0) else ""
        shown = f"{_num(row['diff_ms'], '+.1f')} " + (
            f"[{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "[no CI]") + star
        body.append([*(str(row[g]) for g in result["grid"]),
                     *([row["executor"]] if result["kind"] == "study" else []), row["policy"],
                     _num(row["a_ms"]), _num(row["b_ms"]), shown,
                     _num(row["diff_pct"], "+.1f"), row["method"]])
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in body]
    return "\n".join(lines)
