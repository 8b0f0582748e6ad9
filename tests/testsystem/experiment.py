"""The echo system's experiment, as data: two study files per size (``studies/``), one
metric function and one claim function.

The metric is, per study, point and executor, round-robin's mean latency minus first's
in each replication (both replayed the same pings), with its t-interval across
replications; the claim is that the nearest-first rule answers faster everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.analysis.stats import replication_interval
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim, Condition, Table

EXECUTOR_TITLES = {"sim": "simulation", "emulation": "emulation"}


def _mean_ms(frame: Any, policy: str) -> float:
    rows = frame[(frame["policy"] == policy) & (frame["outcome"] == "ok")]
    return float(rows["latency_s"].mean()) * 1000.0


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per study, point and executor: round-robin minus first, mean latency (ms), per
    replication and across them."""
    rows, table = [], []
    for name, result in results.items():
        for point in result.points:
            for executor in result.study.executors:
                frames = result.frames(point.index, executor)
                diffs = [_mean_ms(f, "round-robin") - _mean_ms(f, "first") for f in frames]
                if not diffs:  # no replication finished: nothing to judge there
                    continue
                interval = replication_interval(diffs)
                entry = {"study": name, "point": point.label(), "executor": executor,
                         "replications": len(diffs), "diff_ms": interval.estimate,
                         "ci_ms": interval.bounds}
                rows.append(entry)
                bounds = ("-" if interval.bounds is None else
                          f"[{interval.bounds[0]:+.2f}, {interval.bounds[1]:+.2f}]")
                table.append([name, point.label(), EXECUTOR_TITLES[executor],
                              str(len(diffs)), "-" if interval.estimate is None
                              else f"{interval.estimate:+.2f}", bounds])
    return {"size": size, "differences": rows,
            "tables": [{"title": "round-robin minus first", "columns": [
                "study", "point", "executor", "replications", "mean ms", "95 % CI"],
                "rows": table, "note": "Paired per replication (the same pings)."}]}


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """One claim: first (the nearest server) answers faster than round-robin."""
    conditions, fewest = [], None
    for entry in found["differences"]:
        low = None if entry["ci_ms"] is None else entry["ci_ms"][0]
        passed = entry["diff_ms"] is not None and (
            low > 0 if low is not None else entry["diff_ms"] > 0)
        conditions.append(Condition(f"{entry['study']} {entry['point']}", passed,
                                    EXECUTOR_TITLES[entry["executor"]]))
        n = entry["replications"]
        fewest = n if fewest is None else min(fewest, n)
    passed = sum(c.passed for c in conditions)
    return [Claim("E1", "first answers faster than round-robin",
                  rule="at every study point and executor, round-robin's mean latency minus "
                       "first's is above zero (its 95 % interval across replications above "
                       "zero when it has one)",
                  conditions=tuple(conditions), replications=fewest,
                  why=f"first is faster at {passed} of {len(conditions)} points: it always "
                      "uses the nearest server, round-robin also the farther ones.",
                  tables=(Table("", ("condition", "passed"), tuple(
                      (f"{c.executor}: {c.what}", "yes" if c.passed else "no")
                      for c in conditions)),))]
