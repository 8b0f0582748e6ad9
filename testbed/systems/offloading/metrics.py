"""The offloading experiment's metrics: the studies' traces turned into numbers.

The experiment is data (``docs/experiments.md``): its study files
(``testbed/systems/offloading/studies/<size>/``) run the ``continuum`` scenario family
with every policy entry on both executors on identical traces, and each names its sweep
in ``analysis.sweep``:

* **load** (and **load-sim**, the loads only the simulator replays): the Poisson rate of
  each *offered load* ``rho = sum_clients rate * E[size] / sum_tiers workers * speed``
  (work arriving per model second over the work all tiers can do per model second;
  ``E[size] = 1 / mu``);
* **edge**: the edge's worker count at the arrival rate of a fixed reference load;
* **poll** and **window**: the two confounders of every comparison, the state polling
  interval and the tier servers' arrival-rate window (model seconds), at a high load;
* **penalty**: ``hybrid`` under each penalty factor (policy entries);
* **burst**: known burst windows, for tier shares over time and the recovery of the
  rolling p95 after each burst (``analysis``: ``window_s``, ``bin_s``, ``pre_s``).

:func:`point_metrics` gives, per point, executor and policy, the pooled metrics, one value per independent
replication summarised as a t-interval across them, and the paired difference to
``hybrid`` per replication with its interval; :func:`network_offsets` the systematic
network offsets of the emulation (from its own RTT probes and a low-load run). The
experiment's metric function that reads the studies is
:func:`testbed.systems.offloading.experiment.metrics`.

Every policy is compared with the strong reading of each baseline as well as the weak
one (``docs/policies.md``): ``edge-first-spill`` and ``random-capacity`` beside
``edge-first`` and ``random``, ``jsq-s`` (``jsq`` normalised by capacity) beside ``jsq``.
The metric functions take per-task trace frames (``docs/traces.md``) and are pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nodes.offloading.policies.queue_aware import PENALTY_SWEEP
from testbed.errors import TestbedError
from testbed.scenario import Scenario

#: Every policy entry (``docs/policies.md``), by label, in the order tables list them: the
#: registered policies plus the strong readings of the static baselines.
POLICY_ENTRIES: dict[str, Any] = {
    "edge-first": "edge-first",
    "edge-first-spill": {"name": "edge-first", "label": "edge-first-spill",
                         "params": {"spill": "queue-threshold"}},
    "random": "random",
    "random-capacity": {"name": "random", "label": "random-capacity",
                        "params": {"weights": "capacity"}},
    "jsq": "jsq", "jsq-s": "jsq-s", "model-only": "model-only", "queue-only": "queue-only",
    "hybrid": "hybrid", "oracle": "oracle", "hybrid-global-rate": "hybrid-global-rate",
    "hybrid-fixed-beta": "hybrid-fixed-beta",
}
ALL_POLICIES = tuple(POLICY_ENTRIES)
#: Baseline families: a claim against a family is judged against its strongest member
#: (the lowest mean latency at that point and executor).
FAMILIES: dict[str, tuple[str, ...]] = {
    "static": ("edge-first", "edge-first-spill", "random", "random-capacity"),
    "queue length": ("jsq", "jsq-s"),
}
#: What the confounder sweeps compare: hybrid, its model-only ablation and the strongest
#: reading of each baseline family.
CONFOUNDER_POLICIES = ("hybrid", "model-only", "edge-first-spill", "random-capacity", "jsq",
                       "jsq-s")
#: Metrics summarised per replication (t-interval across replications) and paired with
#: hybrid's in the same replication.
INTERVAL_KEYS = ("mean_s", "p95_s", "large_p95_s", "mape", "max_wait_s", "decision_p50_us",
                 "decision_p99_us")


def penalty_label(factor: float) -> str:
    """The label of ``hybrid`` with penalty ``factor`` (its default, 2, is ``hybrid``)."""
    return "hybrid" if factor == 2.0 else f"hybrid-p{factor:g}"


#: ``hybrid`` once per factor of :data:`PENALTY_SWEEP`, as policy entries.
PENALTY_ENTRIES: dict[str, Any] = {
    penalty_label(f): "hybrid" if f == 2.0 else
    {"name": "hybrid", "label": penalty_label(f), "params": {"penalty": f}}
    for f in PENALTY_SWEEP}
#: Policies that predict their latency (``estimate_s``), for the MAPE.
ESTIMATORS = ("model-only", "queue-only", "hybrid", "hybrid-global-rate", "hybrid-fixed-beta")
#: The static policies the burst claim compares with.
STATIC = FAMILIES["static"]
#: Fewest tasks a rolling window needs for its p95 to count.
MIN_WINDOW_TASKS = 20
#: Relative band around the pre-burst p95 that counts as recovered.
RECOVERY_TOLERANCE = 0.10

# --- the points of the studies ----------------------------------------------------------


def capacity(scenario: Scenario) -> float:
    """Work all tier servers can do per model second (speed-1 seconds): ``sum c * speed``."""
    return sum(int(s.params["workers"]) * scenario.node(s.node).speed
               for s in scenario.task_servers())


def offered_load(scenario: Scenario) -> float:
    """Mean offered load: ``clients * rate * E[size] / capacity`` (bursts not counted)."""
    params = scenario.workload.params
    work = len(scenario.clients()) * float(params["rate"]) / float(params["mu"])
    return work / capacity(scenario)


def rate_for_load(scenario: Scenario, load: float) -> float:
    """The per-client Poisson rate that gives ``scenario`` the offered load ``load``."""
    mean_size = 1.0 / float(scenario.workload.params["mu"])
    return load * capacity(scenario) / (len(scenario.clients()) * mean_size)


def _edge_workers(scenario: Scenario) -> int:
    """Total workers of the scenario's edge tier."""
    return sum(int(s.params["workers"]) for s in scenario.task_servers() if s.tier == "edge")


@dataclass(frozen=True)
class Point:
    """One point of a study: its sweep (the study's ``analysis.sweep``), its x value, the
    scenario of its first replication, the name its runs go by, the executors it ran on
    and the study's analysis parameters."""

    experiment: str
    x: float
    scenario: Scenario
    name: str
    executors: tuple[str, ...]
    analysis: Mapping[str, Any]


def sweep_x(sweep: str, scenario: Scenario) -> tuple[float, str]:
    """A point's x value in its sweep and the name its runs go by: the offered load
    (load, penalty and burst), the edge's workers, the polling interval or the tier
    servers' rate window (model seconds)."""
    if sweep == "edge":
        x: float = _edge_workers(scenario)
    elif sweep == "poll":
        x = float(scenario.executor.poll_interval_model_s)
    elif sweep == "window":
        x = float(next(s.params["window_model_s"] for s in scenario.task_servers()))
    else:
        x = round(offered_load(scenario), 6)
    return x, f"continuum-{sweep}" if sweep == "burst" else f"continuum-{sweep}{x:g}"


# --- metrics -----------------------------------------------------------------------------


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of completed tasks."""
    return df[df["outcome"] == "ok"]


def percentile(values: Any, q: float) -> float | None:
    """The ``q``-th percentile (numpy's linear interpolation); ``None`` when empty."""
    array = np.asarray(values, dtype=float)
    return float(np.percentile(array, q)) if array.size else None


def mape(df: pd.DataFrame) -> float | None:
    """Mean ``|estimate_s - latency_s| / latency_s`` over completed rows with an estimate."""
    rows = ok_rows(df)
    rows = rows[rows["estimate_s"].notna() & (rows["latency_s"] > 0)]
    if rows.empty:
        return None
    error = (rows["estimate_s"] - rows["latency_s"]).abs() / rows["latency_s"]
    return float(error.mean())


def large_p95(df: pd.DataFrame) -> float | None:
    """p95 latency of completed large tasks (``cls == "large"``: top decile by size)."""
    rows = ok_rows(df)
    return percentile(rows.loc[rows["cls"] == "large", "latency_s"], 95)


def large_latency_share(df: pd.DataFrame) -> float | None:
    """Large tasks' share of the total latency of completed tasks."""
    rows = ok_rows(df)
    total = float(rows["latency_s"].sum())
    if total <= 0:
        return None
    return float(rows.loc[rows["cls"] == "large", "latency_s"].sum()) / total


def worst_wait(df: pd.DataFrame) -> float | None:
    """The longest queueing wait of a completed task (model s): the starvation measure."""
    rows = ok_rows(df)
    return float(rows["wait_s"].max()) if not rows.empty else None


def tier_shares_over_time(df: pd.DataFrame, bin_s: float, end_s: float) -> pd.DataFrame:
    """Share of tasks placed on each tier per arrival-time bin ``[k bin_s, (k+1) bin_s)``.

    Index: bin start (model s) for every bin up to ``end_s``; columns: tiers; rows sum to
    1 (0 everywhere for a bin without tasks). Failed tasks count: it describes placement.
    """
    bins = np.arange(0.0, end_s, bin_s)
    k = np.minimum((df["arrival_model"].to_numpy() // bin_s).astype(int), bins.size - 1)
    counts = pd.crosstab(k, df["tier"].to_numpy()).reindex(range(bins.size), fill_value=0)
    totals = counts.sum(axis=1).replace(0, 1)
    shares = counts.div(totals, axis=0)
    shares.index = bins
    shares.columns.name = None
    return shares


def rolling_p95(df: pd.DataFrame, window_s: float, step_s: float, end_s: float) -> pd.Series:
    """p95 latency of the completed tasks that arrived in ``(t - window_s, t]``, per ``t``.

    ``t`` runs over ``step_s, 2 step_s, ...`` up to ``end_s``; a window with fewer than
    :data:`MIN_WINDOW_TASKS` completed tasks gives NaN.
    """
    rows = ok_rows(df).sort_values("arrival_model")
    arrivals = rows["arrival_model"].to_numpy()
    latency = rows["latency_s"].to_numpy()
    times = np.arange(step_s, end_s + step_s / 2, step_s)
    values = []
    for t in times:
        lo, hi = np.searchsorted(arrivals, [t - window_s, t], side="right")
        chunk = latency[lo:hi]
        values.append(float(np.percentile(chunk, 95)) if chunk.size >= MIN_WINDOW_TASKS
                      else np.nan)
    return pd.Series(values, index=times, dtype=float)


def recovery_time(series: pd.Series, pre_value: float, burst_end: float,
                  horizon: float, tolerance: float = RECOVERY_TOLERANCE) -> float | None:
    """Model seconds after ``burst_end`` until ``series`` is within ``tolerance`` of before.

    The first ``t >= burst_end`` (up to ``horizon``) with ``series[t] <= (1 + tolerance)
    * pre_value``, minus ``burst_end``; ``None`` if it does not happen by ``horizon``.
    """
    after = series[(series.index >= burst_end) & (series.index <= horizon)].dropna()
    back = after[after <= (1.0 + tolerance) * pre_value]
    return float(back.index[0] - burst_end) if not back.empty else None


def decision_us(df: pd.DataFrame) -> tuple[float | None, float | None, float | None]:
    """Mean, median and p99 of the policy's decision time, microseconds, over every row
    (the median is the claim's measure: a pre-empted decision can push the mean above
    the p99); ``None`` each without rows."""
    values = df["decision_us"].to_numpy(dtype=float)
    if values.size == 0:
        return None, None, None
    return (float(values.mean()), float(np.percentile(values, 50)),
            float(np.percentile(values, 99)))


def policy_metrics(df: pd.DataFrame) -> dict[str, Any]:
    """Every scalar metric of one policy's rows."""
    rows = ok_rows(df)
    latency = rows["latency_s"]
    mean_us, p50_us, p99_us = decision_us(df)
    return {
        "n": len(df), "n_failed": int((df["outcome"] != "ok").sum()),
        "mean_s": float(latency.mean()) if not rows.empty else None,
        "p95_s": percentile(latency, 95), "p99_s": percentile(latency, 99),
        "large_p95_s": large_p95(df), "large_share": large_latency_share(df),
        "large_task_share": float((df["cls"] == "large").mean()),
        "max_wait_s": worst_wait(df), "mape": mape(df),
        "decision_mean_us": mean_us, "decision_p50_us": p50_us, "decision_p99_us": p99_us,
        "state_fetch_s": _mean_column(rows, "state_fetch_s"),
        "mean_wait_s": _mean_column(rows, "wait_s"),
        "mean_service_s": _mean_column(rows, "service_s"),
        "mean_network_s": float(rows["network_s"].mean()) if not rows.empty else None,
        "tier_share": {str(k): float(v) for k, v in
                       df["tier"].value_counts(normalize=True).sort_index().items()},
    }


def _mean_column(rows: pd.DataFrame, column: str) -> float | None:
    """Mean of ``column`` over ``rows`` (``None`` when absent or all missing)."""
    if column not in rows or rows[column].isna().all():
        return None
    return float(rows[column].mean())


def across_replications(values: Sequence[float | None]) -> dict[str, Any] | None:
    """One value per independent replication as ``{value, ci, n}``: the mean and its 95 %
    t-interval across them (``ci`` is ``None`` with fewer than two); missing values are
    left out, ``None`` when none is left."""
    from testbed.analysis.stats import replication_interval

    kept = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not kept:
        return None
    interval = replication_interval(kept)
    return {"value": interval.estimate, "ci": interval.bounds, "n": len(kept)}


def per_replication(frames: Sequence[pd.DataFrame], policies: Sequence[str]
                    ) -> list[dict[str, dict[str, Any]]]:
    """One ``{policy: metrics}`` mapping per replication (what :func:`replicated_metrics`
    takes); a policy without rows in a replication (left out there as degraded) is absent
    from that replication's mapping, so it counts one replication fewer."""
    return [{policy: policy_metrics(rows) for policy in policies
             if len(rows := frame[frame["policy"] == policy])} for frame in frames]


def replicated_metrics(per_rep: Sequence[Mapping[str, Any]], policy: str,
                       baseline: str = "hybrid") -> dict[str, Any]:
    """Per :data:`INTERVAL_KEYS` metric: ``policy``'s value across replications
    (``replicated``) and its paired difference to ``baseline`` in the same replication
    (``paired``: policy minus baseline). ``per_rep`` holds one ``{policy: metrics}``
    mapping per replication."""
    out: dict[str, Any] = {"replicated": {}, "paired": {}}
    for key in INTERVAL_KEYS:
        mine = [rep[policy].get(key) for rep in per_rep if policy in rep]
        out["replicated"][key] = across_replications(mine)
        if policy == baseline:
            continue
        diffs = [rep[policy][key] - rep[baseline][key] for rep in per_rep
                 if policy in rep and baseline in rep and rep[policy].get(key) is not None
                 and rep[baseline].get(key) is not None]
        out["paired"][key] = across_replications(diffs)
    return out


def burst_metrics(df: pd.DataFrame, scenario: Scenario, analysis: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """Per-burst recovery, tier shares before and during bursts, and the plotted series:
    the bursts are the scenario's windows, ``analysis`` gives the rolling window
    (``window_s``), the bin (``bin_s``) and the pre-burst span (``pre_s``)."""
    end = scenario.duration
    window_s, bin_s, pre_s = (float(analysis[k]) for k in ("window_s", "bin_s", "pre_s"))
    series = rolling_p95(df, window_s, bin_s, end)
    windows = sorted((float(b["start_s"]), float(b["duration_s"]), float(b["factor"]))
                     for b in scenario.workload.params["bursts"])
    recoveries = []
    for k, (start, length, _) in enumerate(windows):
        before = ok_rows(df)
        before = before[(before["arrival_model"] >= start - pre_s)
                        & (before["arrival_model"] < start)]
        pre = percentile(before["latency_s"], 95)
        horizon = windows[k + 1][0] if k + 1 < len(windows) else end
        recoveries.append({"start_s": start, "end_s": start + length, "pre_p95_s": pre,
                           "recovery_s": None if pre is None else
                           recovery_time(series, pre, start + length, horizon)})
    during = np.zeros(len(df), dtype=bool)
    for start, length, _ in windows:
        during |= (df["arrival_model"] >= start).to_numpy() & \
                  (df["arrival_model"] < start + length).to_numpy()
    shares = tier_shares_over_time(df, bin_s, end)
    return {
        "recoveries": recoveries,
        "cloud_share_before": _share(df[~during], "cloud"),
        "cloud_share_during": _share(df[during], "cloud"),
        "series": {"t": series.index.tolist(),
                   "p95_s": [None if np.isnan(v) else v for v in series.to_numpy()],
                   "bins": shares.index.tolist(),
                   "shares": {tier: shares[tier].tolist() for tier in shares.columns}},
    }


def _share(df: pd.DataFrame, tier: str) -> float | None:
    return float((df["tier"] == tier).mean()) if len(df) else None


def paired_vs_hybrid(df: pd.DataFrame) -> dict[str, Any]:
    """Per policy: its paired difference to ``hybrid`` (policy minus hybrid, seconds).

    Mean and p95 over tasks completed under both, with a 95 % paired batch-means
    interval of the run (:func:`testbed.analysis.compare.compare`; ``None`` when the run is too
    short to carry one); ``excludes_zero`` marks a significant difference. ``value_s``
    is the steady-state estimate after the warm-up, the point its interval belongs to
    (``None`` when no shared task arrived after the warm-up); ``all_tasks_s`` is over every shared task (the whole run, what
    :func:`replicated_vs_hybrid` averages across replications). An overloaded policy
    whose queue only grows has no steady state: its estimate then describes the end of
    the run and it gets no interval.
    """
    from testbed.analysis.compare import compare

    result = compare(df, baseline="hybrid", stats=("mean", "p95"))
    out = {}
    for policy, entry in result["policies"].items():
        if entry["diff"] is None:
            continue
        out[policy] = {
            stat: None if item is None else {
                "value_s": None if item["estimate"] is None else item["estimate"] / 1000.0,
                "all_tasks_s": item["value"] / 1000.0,
                "ci_s": None if item["ci"] is None else [v / 1000.0 for v in item["ci"]],
                "excludes_zero": item["excludes_zero"]}
            for stat, item in entry["diff"]["stats"].items()}
    return out


def replicated_vs_hybrid(frames: Sequence[pd.DataFrame]) -> dict[str, Any]:
    """:func:`paired_vs_hybrid` over independent replications: per policy and statistic
    the mean over replications of (policy - hybrid) over the whole run (every task both
    completed: the estimand is a run as configured, the same as the whole-run means
    reported beside it), with the 95 % t-interval across them. One replication: the
    steady-state batch means of that run."""
    from testbed.analysis.stats import replication_interval

    if len(frames) == 1:
        return paired_vs_hybrid(frames[0])
    per_rep = [paired_vs_hybrid(frame) for frame in frames]
    out: dict[str, Any] = {}
    for policy in dict.fromkeys(p for rep in per_rep for p in rep):
        out[policy] = {}
        for stat in ("mean", "p95"):
            values = [rep[policy][stat]["all_tasks_s"] for rep in per_rep
                      if rep.get(policy) and rep[policy].get(stat)]
            interval = replication_interval(values)
            bounds = interval.bounds
            out[policy][stat] = None if interval.estimate is None else {
                "value_s": interval.estimate, "ci_s": bounds,
                "excludes_zero": bounds is not None and (bounds[0] > 0 or bounds[1] < 0),
                "replications": len(values)}
    return out


def pooled(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Replications' traces as one frame for pooled metrics: task ids are renumbered so
    that tasks of different replications stay distinct."""
    parts, offset = [], 0
    for frame in frames:
        part = frame.copy()
        part["task_id"] = part["task_id"] + offset
        offset = int(part["task_id"].max()) + 1 if len(part) else offset
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


# --- systematic network offsets (claim 6) ------------------------------------------------


def path_rtts(scenario: Scenario) -> dict[str, tuple[str, float]]:
    """Per tier, from the first client: the node serving it and the configured round
    trip (s)."""
    client = scenario.clients()[0].name
    out = {}
    for svc in scenario.task_servers():
        if svc.node == client or scenario.node(svc.node).role != "client":
            delays = [lk.delay_ms for lk in scenario.topology.path(client, svc.node)]
            out[svc.tier or svc.name] = (svc.node, 2.0 * sum(delays) / 1000.0)
    return out


def network_offsets(scenario: Scenario, probes: Sequence[Mapping[str, Any]],
                    low_load: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per tier: the delayer's share and the HTTP share of the emulation's network excess.

    ``delayer_s`` is the run's own RTT probe of the path (the fidelity guard's TCP
    connects from the first client, ``probes``) minus its configured round trip;
    ``http_s`` is the median of ``network_s - configured RTT - delayer_s`` over the
    completed emulated tasks of that low-load run (``low_load``), the HTTP and loopback
    cost the simulator does not model. Their sum, the tier's whole offset, is the median
    network excess itself.
    """
    client = scenario.clients()[0].name
    measured = {p["target"]: p for p in probes
                if p.get("client") == client and p.get("measured_ms") is not None}
    rows = ok_rows(low_load)
    out = {}
    for tier, (node, rtt) in path_rtts(scenario).items():
        probe = measured.get(node)
        delayer = 0.0 if probe is None else (probe["measured_ms"] - probe["configured_ms"]) / 1000.0
        excess = rows.loc[rows["tier"] == tier, "network_s"] - rtt - delayer
        out[tier] = {"rtt_s": rtt, "delayer_s": delayer,
                     "probed_rtt_s": None if probe is None else probe["measured_ms"] / 1000.0,
                     "http_s": float(excess.median()) if not excess.empty else 0.0}
    return out


def corrected(df: pd.DataFrame, offsets: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """``df`` with each completed task's tier offset (delayer + HTTP) taken off its latency."""
    out = df.copy()
    offset = out["tier"].map({t: o["delayer_s"] + o["http_s"] for t, o in offsets.items()})
    out["latency_s"] = out["latency_s"] - offset.fillna(0.0)
    return out


def gap(sim: Mapping[str, Any], emu: Mapping[str, Any], key: str) -> dict[str, float | None]:
    """Emulation minus simulation of metric ``key``: absolute and relative to the sim."""
    a, b = sim.get(key), emu.get(key)
    if a is None or b is None:
        return {"abs": None, "rel": None}
    return {"abs": b - a, "rel": (b - a) / a if a else None}


# --- the experiment's metrics ----------------------------------------------------------


def point_metrics(point: Point, replications: Mapping[str, Sequence[pd.DataFrame]],
                  offsets: Mapping[str, Mapping[str, float]] | None) -> dict[str, Any]:
    """The metrics entry of one point: per policy of its scenario and executor it ran on,
    the pooled metrics, ``vs_hybrid``, ``replicated`` and ``paired`` (see
    :func:`testbed.systems.offloading.experiment.metrics`), the burst series for a burst point, and the emulation's metrics
    corrected by the network ``offsets``."""
    executors = list(point.executors)
    entry: dict[str, Any] = {"experiment": point.experiment, "x": point.x,
                             "scenario": point.name,
                             "offered_load": offered_load(point.scenario),
                             "edge_workers": _edge_workers(point.scenario),
                             "executors": executors, "analysis": dict(point.analysis),
                             "replications": {e: len(replications[e]) for e in executors},
                             "policies": {}}
    if not all(entry["replications"].values()):
        raise TestbedError(f"{point.name}: no replication finished on "
                           f"{', '.join(e for e, n in entry['replications'].items() if not n)}")
    frames = {e: pooled(replications[e]) for e in executors}
    paired = {e: replicated_vs_hybrid(replications[e]) for e in executors}
    per_rep = {e: per_replication(replications[e], point.scenario.policies)
               for e in executors}
    for policy in point.scenario.policies:
        per: dict[str, Any] = {}
        for executor in executors:
            df = frames[executor]
            df = df[df["policy"] == policy]
            per[executor] = policy_metrics(df)
            per[executor]["vs_hybrid"] = paired[executor].get(policy)
            per[executor].update(replicated_metrics(per_rep[executor], policy))
            if point.experiment == "burst":
                per[executor]["burst"] = burst_metrics(df, point.scenario, point.analysis)
            if executor == "emulation" and offsets is not None:
                per["emulation_corrected"] = policy_metrics(corrected(df, offsets))
        entry["policies"][policy] = per
    return entry
