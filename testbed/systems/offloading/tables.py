"""The offloading report's measurement tables, computed from its metrics.

:func:`measurement_tables` gives what :func:`testbed.systems.offloading.metrics.metrics`
puts under ``tables`` (the generic report shows them under "Measurements"): the two
confounder sweeps and the penalty sweep, each with a reading computed from its numbers;
every policy's metrics per load and edge-capacity point and executor; and the gap between
the executors with and without the emulation's systematic network offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.reports.claim import Table
from testbed.systems.offloading import reading as rd
from testbed.systems.offloading.metrics import ALL_POLICIES


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:+.1f} %"


def confounder_section(metrics: rd.Metrics, experiment: str, setting: str, heading: str
                       ) -> Table | None:
    """The table and the computed reading of one confounder sweep (``poll`` or
    ``window``): per executor and setting, hybrid's mean and each compared policy's
    paired difference; then which verdicts against the strongest baselines change."""
    found = rd.points(metrics, experiment)
    if not found:
        return None
    rows, standing = [], {}
    for p in found:
        for executor in rd.point_executors(metrics, p):
            title = rd.EXECUTOR_TITLES[executor]
            others = [q for q in p["policies"] if q != "hybrid"]
            for other in others:
                d = rd.paired(p, other, executor, "mean_s")
                standing.setdefault((title, other), []).append((p["x"], rd.judge(d)))
                rows.append([title, f"{p['x']:g}", rd.value_cell(p, "hybrid", executor, "mean_s"),
                             other, rd.value_cell(p, other, executor, "mean_s"), rd.cell(d)])
    changes = [f"{other} ({title}: " + ", ".join(f"{j} at {x:g}" for x, j in seq) + ")"
               for (title, other), seq in standing.items() if len({j for _, j in seq}) > 1]
    reading = ("Hybrid's standing changes with the setting against: " + "; ".join(changes)
               + "." if changes else
               "No comparison with hybrid changes its outcome across these settings.")
    return rd.table(["executor", setting, "hybrid mean s", "other", "other mean s",
                  "other - hybrid s"], rows, heading, reading)


def penalty_section(metrics: rd.Metrics) -> Table | None:
    """The penalty sweep: per executor and factor, the mean and p95 across replications
    and the paired difference to the default factor (2), and whether any factor changes
    the outcome."""
    found = rd.points(metrics, "penalty")
    if not found:
        return None
    (p,) = found
    rows, moved = [], []
    for executor in rd.point_executors(metrics, p):
        title = rd.EXECUTOR_TITLES[executor]
        for label in p["policies"]:
            d = None if label == "hybrid" else rd.paired(p, label, executor, "mean_s")
            if rd.judge(d) in ("better", "worse"):
                moved.append(f"{label} in {title} ({d['value']:+.3f} s)")
            rows.append([title, label, rd.value_cell(p, label, executor, "mean_s"),
                         rd.value_cell(p, label, executor, "p95_s"),
                         rd.value_cell(p, label, executor, "large_p95_s"),
                         "-" if d is None else rd.cell(d)])
    reading = (f"At load {p['x']:g}, " + ("the mean moves significantly from P = 2 for "
               + "; ".join(moved) + "." if moved else
               "no factor moves the mean significantly from P = 2."))
    return rd.table(["executor", "policy (penalty)", "mean s", "p95 s", "large p95 s",
                  "mean: it - hybrid (P = 2) s"], rows, "Penalty-factor sensitivity (hybrid)",
                 "The same traces replayed by hybrid under each penalty factor (policy "
                 "entries `{name: hybrid, params: {penalty: P}}`). " + reading)


def _ran_on(metrics: rd.Metrics, experiment: str, executor: str) -> list[Mapping[str, Any]]:
    """The points of ``experiment`` that ``executor`` replayed."""
    return [p for p in rd.points(metrics, experiment) if executor in rd.point_executors(metrics, p)]


def _experiment_table(metrics: rd.Metrics, experiment: str, executor: str, xname: str,
                      title: str) -> Table:
    rows = []
    for p in _ran_on(metrics, experiment, executor):
        for policy in ALL_POLICIES:
            row = rd.m(p, policy, executor)
            shares = ", ".join(f"{t} {v:.2f}" for t, v in row["tier_share"].items())
            rows.append([f"{p['x']:g}", f"{p['offered_load']:.2f}", policy,
                         rd.fmt(row["mean_s"]), rd.fmt(row["p95_s"]), rd.fmt(row["p99_s"]),
                         rd.fmt(row["large_p95_s"]), rd.fmt(row["large_share"]),
                         rd.fmt(row["max_wait_s"], 2), rd.fmt(row["mape"]),
                         f"{row['n_failed']}/{row['n']}", shares])
    return rd.table([xname, "offered load", "policy", "mean s", "p95 s", "p99 s",
                  "large p95 s", "large share", "max wait s", "MAPE", "failed/n",
                  "tier shares"], rows, title, "Pooled over the point's replications "
                 "(descriptive); latencies in model seconds.")


def _gap_table(metrics: rd.Metrics) -> Table:
    rows = []
    for p, policy, s, e, c in rd.gap_rows(metrics):
        rows.append([p["experiment"], f"{p['x']:g}", policy, rd.fmt(s["mean_s"]), rd.fmt(e["mean_s"]),
                     _pct(rd.rel(s["mean_s"], e["mean_s"])), _pct(rd.rel(s["mean_s"], c["mean_s"])),
                     rd.fmt(s["p95_s"]), rd.fmt(e["p95_s"]), _pct(rd.rel(s["p95_s"], e["p95_s"])),
                     _pct(rd.rel(s["p95_s"], c["p95_s"]))])
    return rd.table(["experiment", "x", "policy", "sim mean s", "emu mean s", "mean gap",
                  "mean gap corrected", "sim p95 s", "emu p95 s", "p95 gap",
                  "p95 gap corrected"], rows, "Sim-vs-emulation discrepancy",
                 "Gap = (emulation - simulation) / simulation; *corrected* subtracts each "
                 "task's tier offset (delayer + HTTP, claim 6) from its emulated latency.")




def _as_json(found: Table) -> dict[str, Any]:
    return {"title": found.title, "columns": list(found.columns),
            "rows": [list(r) for r in found.rows], "note": found.note}


def measurement_tables(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every measurement table of the report, as the generic report reads them."""
    found: list[Table | None] = [
        confounder_section(metrics, "poll", "poll interval model s",
                           "Confounder: the state polling interval"),
        confounder_section(metrics, "window", "rate window model s",
                           "Confounder: the arrival-rate window"),
        penalty_section(metrics)]
    for executor in metrics["executors"]:
        for experiment, title, xname in (("load", "Load sweep", "load"),
                                         ("edge", "Edge-capacity sweep", "edge workers")):
            if _ran_on(metrics, experiment, executor):
                found.append(_experiment_table(metrics, experiment, executor, xname,
                                               f"{title}, {rd.EXECUTOR_TITLES[executor]}"))
    if {"sim", "emulation"} <= set(metrics["executors"]):
        found.append(_gap_table(metrics))
    return [_as_json(t) for t in found if t is not None]
