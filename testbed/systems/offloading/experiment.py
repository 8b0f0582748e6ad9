"""The offloading experiments of the queue-aware paper, and their metrics.

Three experiments on the ``continuum`` scenario family, every policy, both executors on
identical traces (``docs/experiments.md`` is the reference):

* **load sweep**: the Poisson rate is set so the *offered load*
  ``rho = sum_clients rate * E[size] / sum_tiers workers * speed`` (work arriving per model
  second over the work all tiers can do per model second; ``E[size] = 1 / mu`` of the
  workload) takes each value of the size's ``loads``;
* **burst**: ``continuum-burst`` with a deterministic burst schedule (known windows), for
  tier shares over time and the recovery time after each burst;
* **edge-capacity sweep**: the edge's worker count varies at the arrival rate of a fixed
  reference load (the offered load then changes with the capacity).

Plus, as studies on the executors the size names: a penalty-factor sensitivity of
``hybrid`` (``PENALTY_SWEEP`` as policy entries, at a load where the penalty changes
decisions), and the two confounders of every comparison, the state polling interval and
the tier servers' arrival-rate window (both in model seconds, so ``time_scale`` does not
move them), swept at a high load. With the emulation, a calibration of the link-shaping
backend (``testbed.calibrate``) gives the offsets subtracted from the emulated latencies
for claim 6.

Every policy is compared with the strong reading of each baseline as well as the weak
one (``docs/policies.md``): ``edge-first-spill`` and ``random-capacity`` beside
``edge-first`` and ``random``, ``jsq-s`` (``jsq`` normalised by capacity) beside ``jsq``.
Each point's metrics carry, besides the pooled values, one value per independent
replication summarised as a t-interval across them, and the paired difference to
``hybrid`` per replication with its interval.

The metric functions take per-task trace frames (``docs/traces.md``) and are pure.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from nodes.offloading.policies.queue_aware import PENALTY_SWEEP
from testbed.errors import TestbedError
from testbed.scenario import Scenario, load_scenario, scenario_from_dict
from testbed.study.spec import Study, load_study

Progress = Callable[[str], None]

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
#: The model-time state staleness every size keeps: polls every 2 model seconds, as the
#: built-in ``continuum`` scenario (100 wall ms at time scale 20).
POLL_MODEL_S = 2.0


@dataclass(frozen=True)
class Size:
    """How big an experiment run is. Durations are model seconds.

    ``replications`` counts independent traces per point of the load and edge sweeps
    (studies, ``docs/studies.md``); ``repetitions`` replays each trace again with other
    policy seeds. ``bursts`` are ``(start_s, duration_s, factor)`` windows of the burst
    experiment;
    ``window_s`` is the rolling-p95 window, ``bin_s`` the time bin of tier shares and
    rolling p95, ``pre_s`` how long before a burst the pre-burst p95 is measured.
    ``penalty_load`` is where the penalty sweep runs (where the penalty changes decisions),
    ``confounder_load`` where the polling intervals ``polls_model_s`` and the rate windows
    ``windows_model_s`` are swept. ``emulated_sweeps`` names the sweeps that also run on
    the emulator when the experiment has it (the others run on the simulator only: the
    emulator replays in wall time, so its share of a size is what bounds the size's wall
    time), and ``emulation_loads`` the loads of the load sweep it replays (``None``: all).
    """

    name: str
    time_scale: float
    duration_s: float
    loads: tuple[float, ...]
    edge_workers: tuple[int, ...]
    edge_load: float
    burst_duration_s: float
    burst_load: float
    bursts: tuple[tuple[float, float, float], ...]
    window_s: float
    bin_s: float
    pre_s: float
    penalty_load: float
    repetitions: int
    calibrate_probes: int
    replications: int = 1
    confounder_load: float = 0.9
    polls_model_s: tuple[float, ...] = (0.1, 0.5, 2.0)
    windows_model_s: tuple[float, ...] = (20.0, 200.0)
    emulated_sweeps: tuple[str, ...] = ("load", "edge", "poll", "window", "penalty")
    emulation_loads: tuple[float, ...] | None = None

    def emulated_loads(self) -> tuple[float, ...]:
        """The loads of the load sweep the emulator replays."""
        if self.emulation_loads is None:
            return self.loads
        return tuple(x for x in self.loads if x in self.emulation_loads)


SIZES: dict[str, Size] = {
    "small": Size("small", time_scale=20.0, duration_s=30.0, loads=(0.3, 0.8),
                  edge_workers=(2, 8), edge_load=0.6, burst_duration_s=60.0, burst_load=0.4,
                  bursts=((20.0, 10.0, 2.5),), window_s=5.0, bin_s=2.0, pre_s=15.0,
                  penalty_load=0.9, repetitions=1, calibrate_probes=20,
                  polls_model_s=(0.5, 2.0), emulated_sweeps=("load", "edge")),
    "medium": Size("medium", time_scale=20.0, duration_s=120.0,
                   loads=(0.2, 0.4, 0.6, 0.8, 0.9), edge_workers=(1, 2, 4, 8), edge_load=0.6,
                   burst_duration_s=240.0, burst_load=0.4,
                   bursts=((60.0, 20.0, 2.5), (160.0, 20.0, 2.5)), window_s=10.0, bin_s=4.0,
                   pre_s=40.0, penalty_load=0.9, repetitions=1, calibrate_probes=100,
                   replications=10, emulated_sweeps=("load", "penalty"),
                   emulation_loads=(0.2, 0.9)),
    "full": Size("full", time_scale=10.0, duration_s=300.0,
                 loads=(0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), edge_workers=(1, 2, 4, 8, 16),
                 edge_load=0.6, burst_duration_s=600.0, burst_load=0.4,
                 bursts=((120.0, 30.0, 2.5), (300.0, 30.0, 2.5), (480.0, 30.0, 2.5)),
                 window_s=10.0, bin_s=4.0, pre_s=60.0, penalty_load=0.9, repetitions=1,
                 calibrate_probes=200, replications=10),
}


# --- scenarios ---------------------------------------------------------------------------


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


def variant(base: Scenario, name: str, size: Size, *, rate: float, duration: float,
            edge_workers: int | None = None,
            bursts: Sequence[tuple[float, float, float]] = ()) -> Scenario:
    """``base`` with every policy, the size's timing, a Poisson rate and optional changes.

    The random burst model of the base is dropped (a load sweep needs a known load);
    ``bursts`` adds a deterministic schedule instead. ``edge_workers`` replaces the worker
    count of the edge tier's servers. Polls keep :data:`POLL_MODEL_S` of model staleness
    (``executor.poll_interval_model_s``).
    """
    data = base.resolved()
    params = {k: v for k, v in data["workload"]["params"].items() if k not in ("burst", "bursts")}
    params["rate"] = rate
    if bursts:
        params["bursts"] = [{"start_s": s, "duration_s": d, "factor": f} for s, d, f in bursts]
    data["workload"]["params"] = params
    if edge_workers is not None:
        for service in data["services"]:
            if service["tier"] == "edge":
                service["params"]["workers"] = edge_workers
    data.update(name=name, policies=list(POLICY_ENTRIES.values()), duration=duration,
                time_scale=size.time_scale, repetitions=size.repetitions)
    data["executor"]["poll_interval_model_s"] = POLL_MODEL_S
    return scenario_from_dict(data, source=f"<{name}>")


@dataclass(frozen=True)
class Point:
    """One scenario of an experiment: which experiment, its x value, the scenario, and
    the name its runs go by (the scenario's name unless given)."""

    experiment: str
    x: float
    scenario: Scenario
    label: str = ""
    executors: tuple[str, ...] = ("sim", "emulation")

    @property
    def name(self) -> str:
        """The point's name in metrics and reports."""
        return self.label or self.scenario.name


def burst_point(size: Size) -> Point:
    """The burst experiment's one scenario at ``size``."""
    burst = load_scenario("continuum-burst")
    return Point("burst", size.burst_load, variant(
        burst, "continuum-burst", size, rate=rate_for_load(burst, size.burst_load),
        duration=size.burst_duration_s, bursts=size.bursts))


def sweep_base(size: Size) -> Scenario:
    """The scenario both sweeps vary: ``continuum`` with every policy, the size's timing
    and the Poisson rate of the edge sweep's reference load."""
    base = load_scenario("continuum")
    return variant(base, "continuum-sweep", size, rate=rate_for_load(base, size.edge_load),
                   duration=size.duration_s)


def sweep_studies(size: Size, executors: Sequence[str], scenario_file: Path
                  ) -> list[tuple[str, Study]]:
    """Every sweep as a study file beside one scenario file (``load.yaml``, ``edge.yaml``,
    ``poll.yaml``, ``window.yaml``, ``penalty.yaml``; ``testbed study`` runs them as they
    are), ``hybrid`` the baseline and ``size.replications`` independent traces per point.

    * load: the Poisson rate of each of the size's loads, every policy entry;
    * edge: the edge's worker count at the reference load's rate, every policy entry;
    * poll: ``executor.poll_interval_model_s`` at the confounder load, with
      :data:`CONFOUNDER_POLICIES`;
    * window: every tier server's ``window_model_s`` together, at the confounder load,
      with :data:`CONFOUNDER_POLICIES`;
    * penalty: ``hybrid`` under each penalty factor (:data:`PENALTY_ENTRIES`) at the
      penalty load.

    A sweep runs on every executor of ``executors`` if ``size.emulated_sweeps`` names it,
    else on the simulator only. When the emulator replays only some loads
    (``size.emulation_loads``), the others are a second study, ``load-sim.yaml``, on the
    simulator only; both share the study seed, and a cell's seed hashes its grid values,
    not its position, so every load keeps the traces it would have in one study.
    """
    base = sweep_base(size)
    scenario_file.parent.mkdir(parents=True, exist_ok=True)
    scenario_file.write_text(json.dumps(base.resolved(), indent=1))
    reference = load_scenario("continuum")
    sim_only = [e for e in executors if e == "sim"]
    common = {"scenario": str(scenario_file), "executors": list(executors),
              "policies": list(POLICY_ENTRIES.values()), "baseline": "hybrid",
              "replications": size.replications, "seed": base.seed}
    edge = next(s.name for s in base.task_servers() if s.tier == "edge")
    rate = "workload.params.rate"

    def on(sweep: str, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` on the executors ``sweep`` runs on."""
        return doc if sweep in size.emulated_sweeps else {**doc, "executors": sim_only}

    def rates(loads: Sequence[float]) -> list[float]:
        return [round(rate_for_load(reference, x), 9) for x in loads]

    emulated = size.emulated_loads() if "emulation" in executors else size.loads
    rest = [x for x in size.loads if x not in emulated]
    docs: list[tuple[str, str, dict[str, Any]]] = []
    if emulated:
        docs.append(("load", "load", on("load", {**common, "grid": {rate: rates(emulated)}})))
    if rest and sim_only:
        docs.append(("load", "load-sim", {**common, "executors": sim_only,
                                          "grid": {rate: rates(rest)}}))
    docs.append(("edge", "edge", on("edge", {**common, "grid": {
        f"services.{edge}.params.workers": list(size.edge_workers)}})))
    confounders = {**common, "policies": [POLICY_ENTRIES[p] for p in CONFOUNDER_POLICIES]}
    docs.append(("poll", "poll", on("poll", {**confounders, "grid": {
        rate: rates([size.confounder_load]),
        "executor.poll_interval_model_s": list(size.polls_model_s)}})))
    docs.append(("window", "window", on("window", {**confounders, "grid": {
        rate: rates([size.confounder_load]),
        "zip": [{f"services.{svc.name}.params.window_model_s": list(size.windows_model_s)
                 for svc in base.task_servers()}]}})))
    docs.append(("penalty", "penalty", on("penalty", {
        **common, "policies": list(PENALTY_ENTRIES.values()),
        "grid": {rate: rates([size.penalty_load])}})))
    out = []
    for experiment, name, doc in docs:
        if not doc["executors"]:
            continue
        file = scenario_file.parent / f"{name}.yaml"
        file.write_text(yaml.safe_dump({"study": f"offloading-{name}", **doc},
                                       sort_keys=False))
        out.append((experiment, load_study(file)))
    return out


@functools.cache
def _load_of_rate(loads: tuple[float, ...]) -> dict[float, float]:
    """Each load of ``loads`` by its arrival rate on the continuum scenario (rounded to
    9 places): one scenario read for all the points of a load sweep."""
    reference = load_scenario("continuum")
    return {round(rate_for_load(reference, x), 9): x for x in loads}


def _sweep_x(experiment: str, size: Size, point: Any) -> tuple[float, str]:
    """A study point's x value and the name its runs go by in the metrics."""
    values = dict(point.values)
    if experiment == "load":
        x = _load_of_rate(tuple(size.loads))[round(float(values["workload.params.rate"]), 9)]
        return x, f"continuum-load{x:g}"
    if experiment == "edge":
        x = int(next(v for k, v in values.items() if k.endswith(".workers")))
        return x, f"continuum-edge{x}"
    if experiment == "poll":
        x = float(values["executor.poll_interval_model_s"])
        return x, f"continuum-poll{x:g}"
    if experiment == "window":
        x = float(next(v for k, v in values.items() if k.endswith(".window_model_s")))
        return x, f"continuum-window{x:g}"
    return size.penalty_load, f"continuum-penalty{size.penalty_load:g}"


def _edge_workers(scenario: Scenario) -> int:
    """Total workers of the scenario's edge tier."""
    return sum(int(s.params["workers"]) for s in scenario.task_servers() if s.tier == "edge")


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


def burst_metrics(df: pd.DataFrame, size: Size) -> dict[str, Any]:
    """Per-burst recovery, tier shares before and during bursts, and the plotted series."""
    end = size.burst_duration_s
    series = rolling_p95(df, size.window_s, size.bin_s, end)
    windows = sorted(size.bursts)
    recoveries = []
    for k, (start, length, _) in enumerate(windows):
        before = ok_rows(df)
        before = before[(before["arrival_model"] >= start - size.pre_s)
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
    shares = tier_shares_over_time(df, size.bin_s, end)
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


def delayer_offsets(calibration: Sequence[Mapping[str, Any]]) -> dict[float, float]:
    """Per-direction offset of a delayed link, seconds, per configured one-way delay (ms).

    From :func:`testbed.calibrate.calibrate` rows: ``(rtt_p50 - expected_rtt) / 2``.
    """
    return {float(r["configured_delay_ms"]): (r["rtt_p50_ms"] - r["expected_rtt_ms"]) / 2000.0
            for r in calibration
            if r.get("rtt_p50_ms") is not None and r["configured_delay_ms"] > 0}


def path_rtts(scenario: Scenario) -> dict[str, tuple[float, list[float]]]:
    """Per tier server: configured round trip (s) from the first client and its link delays."""
    client = scenario.clients()[0].name
    out = {}
    for svc in scenario.task_servers():
        if svc.node == client or scenario.node(svc.node).role != "client":
            delays = [lk.delay_ms for lk in scenario.topology.path(client, svc.node)]
            out[svc.tier or svc.name] = (2.0 * sum(delays) / 1000.0, delays)
    return out


def network_offsets(scenario: Scenario, calibration: Sequence[Mapping[str, Any]],
                    low_load: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per tier: the delayer's share and the HTTP share of the emulation's network excess.

    ``delayer_s = 2 * sum`` of the calibrated per-direction offsets of the path's delayed
    links (both directions of the request); ``http_s`` is the median of ``network_s -
    configured RTT - delayer_s`` over the completed emulated tasks of a low-load run
    (``low_load``), the HTTP and loopback cost the simulator does not model.
    """
    per_link = delayer_offsets(calibration)
    rows = ok_rows(low_load)
    out = {}
    for tier, (rtt, delays) in path_rtts(scenario).items():
        delayer = 2.0 * sum(per_link.get(float(d), 0.0) for d in delays if d > 0)
        excess = rows.loc[rows["tier"] == tier, "network_s"] - rtt - delayer
        out[tier] = {"rtt_s": rtt, "delayer_s": delayer,
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


# --- running -----------------------------------------------------------------------------


def run_point(point: Point, executor: str, folder: Path, progress: Progress) -> pd.DataFrame:
    """Run one scenario with one executor into ``folder``; returns its traces."""
    from testbed.analysis.traces import read_traces
    from testbed.runner import run_scenario

    run_scenario(point.scenario, out=folder, executor=executor, progress=progress)
    return read_traces(folder)


def _calibrate(scenario: Scenario, probes: int, progress: Progress) -> list[dict[str, Any]]:
    """Calibrate the shaping backend at the topology's link delays (no bandwidth cases)."""
    from mininet.log import setLogLevel

    from testbed.calibrate import calibrate

    setLogLevel("error")
    delays = sorted({lk.delay_ms for lk in scenario.topology.links if lk.delay_ms > 0})
    progress(f"calibrating the {scenario.executor.shaping} shaping backend at one-way "
             f"delays {', '.join(f'{d:g}' for d in delays)} ms ({probes} probes each)")
    return calibrate(backend=scenario.executor.shaping, delays_ms=delays, bws_mbit=(),
                     probes=probes, iperf_seconds=1.0)


def _run_info(folder: Path) -> dict[str, Any]:
    """What the report says about one run folder."""
    meta = json.loads((folder / "metadata.json").read_text())
    return {"folder": str(folder), "trace_sha256": meta["trace"]["sha256"],
            "n_tasks": meta["trace"]["n"], "wall_s": meta["wall_s"],
            "git_commit": meta["git_commit"], "shaping_backend": meta.get("shaping_backend"),
            "scenario": meta["scenario"], "fidelity": meta.get("fidelity")}


def _fidelity_entry(point: str, replication: int, found: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """What the report says about one emulated run's fidelity (``found`` is a cell
    record or a run's ``fidelity`` verdict)."""
    return {"point": point, "replication": replication,
            "degraded": bool(found.get("degraded")), "reasons": list(found.get("reasons") or []),
            "degraded_policies": dict(found.get("degraded_policies") or {})}


def run_sweeps(size: Size, executors: Sequence[str], out: Path, progress: Progress,
               result: dict[str, Any]) -> tuple[list[Point], dict[tuple[str, str], list[Path]]]:
    """Run every sweep of :func:`sweep_studies` under ``out/studies``; returns their
    points and, per (executor, point name), the run folders of its finished replications.

    Cells that failed are named under ``result["incomplete"]`` and the experiment goes
    on with what finished (a point with no finished replication has no metrics).
    """
    from testbed.study.cells import FINISHED, plan_cells, read_cell
    from testbed.study.run import StudyIncomplete, run_study

    points: list[Point] = []
    runs: dict[tuple[str, str], list[Path]] = {}
    studies = out / "studies"
    for experiment, study in sweep_studies(size, executors, studies / "continuum-sweep.yaml"):
        folder = studies / study.name
        progress(f"[{experiment} sweep] study {folder}")
        try:
            run_study(study, folder, progress=progress)
        except StudyIncomplete as exc:
            progress(f"warning: {exc}")
            result.setdefault("incomplete", []).append(str(exc))
        specs = plan_cells(study, folder)
        for point in study.points():
            x, name = _sweep_x(experiment, size, point)
            points.append(Point(experiment, x, study.scenario(point, 0), name,
                                tuple(study.executors)))
            for spec in specs:
                if spec["point"] != point.index:
                    continue
                record = read_cell(folder / "cells" / spec["key"]) or {}
                if record.get("status") in FINISHED:
                    runs.setdefault((spec["executor"], name), []).append(
                        folder / "cells" / spec["key"] / "run")
                    if spec["executor"] == "emulation":
                        result.setdefault("fidelity", []).append(_fidelity_entry(
                            name, spec["replication"], record))
    order = {e: i for i, e in reversed(list(enumerate(p.experiment for p in points)))}
    points.sort(key=lambda p: (order[p.experiment], p.x))
    return points, runs


def run_experiment(size_name: str, executors: Sequence[str], out: Path,
                   progress: Progress = print) -> dict[str, Any]:
    """Run every experiment at ``size_name`` with ``executors``; returns all metrics.

    The sweeps are studies (``out/studies/offloading-*/``, their cells on a local Dask
    cluster); the burst run goes to ``out/<executor>/continuum-burst``. Re-run into the
    same ``out``, the experiment runs only what an earlier attempt did not finish (the
    calibration, a few seconds, runs again). The metrics are also written to
    ``out/metrics.json`` (what :func:`testbed.systems.offloading.claims.write_report`
    reads). Per point, executor and policy: pooled metrics over its replications' tasks
    (descriptive), the differences to ``hybrid`` on mean and p95 (``vs_hybrid``: t across
    replications, or batch means of one), and every :data:`INTERVAL_KEYS` metric across
    replications and paired with ``hybrid`` (:func:`replicated_metrics`). Every emulated
    run's fidelity verdict is listed under ``fidelity``; the metrics keep degraded runs
    (the experiment is the paper's grid, not a study's table) and the report names them.
    The machine's load average is recorded at the start and the end (``load_average``).
    """
    from testbed.analysis.traces import read_traces
    from testbed.runner import machine_details

    if size_name not in SIZES:
        raise TestbedError(f"--size: expected one of {', '.join(SIZES)}, found {size_name!r}")
    unknown = sorted(set(executors) - {"sim", "emulation"})
    if unknown or not executors:
        raise TestbedError(f"--executors: expected sim and/or emulation, found {executors!r}")
    size = SIZES[size_name]
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"size": asdict(size), "executors": list(executors),
                              "policies": list(ALL_POLICIES),
                              "policy_entries": dict(POLICY_ENTRIES),
                              "families": {k: list(v) for k, v in FAMILIES.items()},
                              "machine": machine_details(),
                              "load_average": {"start": list(os.getloadavg())},
                              "points": [], "runs": {}, "wall_s": {}}
    if "emulation" in executors:
        result["calibration"] = _calibrate(sweep_base(size), size.calibrate_probes, progress)
    began = time.time()
    points, folders = run_sweeps(size, executors, out, progress, result)
    result["wall_s"]["sweeps"] = time.time() - began
    burst = burst_point(size)
    for executor in executors:
        began = time.time()
        folder = out / executor / burst.name
        progress(f"[{executor}] {burst.name} (offered load {offered_load(burst.scenario):.2f})")
        if (folder / "metadata.json").is_file():  # finished by an earlier attempt
            progress(f"[{executor}] {burst.name}: finished before, kept")
            began -= json.loads((folder / "metadata.json").read_text())["wall_s"]
        else:
            if folder.exists():  # what a stopped attempt left
                shutil.rmtree(folder)
            run_point(burst, executor, folder, progress)
        folders[(executor, burst.name)] = [folder]
        if executor == "emulation":
            verdict = json.loads((folder / "metadata.json").read_text()).get("fidelity") or {}
            result.setdefault("fidelity", []).append(_fidelity_entry(burst.name, 0, verdict))
        result["wall_s"][f"burst {executor}"] = time.time() - began
    points.append(replace(burst, executors=tuple(executors)))
    replications = {key: [read_traces(f) for f in found] for key, found in folders.items()}
    for (executor, name), found in folders.items():
        result["runs"].setdefault(name, {})[executor] = {
            **_run_info(found[0]), "replications": len(found)}
    offsets = None
    if "emulation" in executors:
        low = min((p for p in points if p.experiment == "load"
                   and "emulation" in p.executors), key=lambda p: p.x)
        offsets = network_offsets(low.scenario, result["calibration"],
                                  replications[("emulation", low.name)][0])
        result["offsets"] = {"from": low.name, "per_tier": offsets}
    for point in points:
        result["points"].append(point_metrics(point, size, replications, offsets, out))
    result["load_average"]["end"] = list(os.getloadavg())
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def point_metrics(point: Point, size: Size,
                  replications: Mapping[tuple[str, str], Sequence[pd.DataFrame]],
                  offsets: Mapping[str, Mapping[str, float]] | None, out: Path
                  ) -> dict[str, Any]:
    """The metrics entry of one point: per policy of its scenario and executor it ran on,
    the pooled metrics, ``vs_hybrid``, ``replicated`` and ``paired`` (see
    :func:`run_experiment`), the burst series for the burst point, and the emulation's
    metrics corrected by the network ``offsets``."""
    executors = list(point.executors)
    entry: dict[str, Any] = {"experiment": point.experiment, "x": point.x,
                             "scenario": point.name,
                             "offered_load": offered_load(point.scenario),
                             "edge_workers": _edge_workers(point.scenario),
                             "executors": executors,
                             "replications": {e: len(replications.get((e, point.name), []))
                                              for e in executors},
                             "policies": {}}
    if not all(entry["replications"].values()):
        raise TestbedError(f"{point.name}: no replication finished on "
                           f"{', '.join(e for e, n in entry['replications'].items() if not n)}"
                           f"; see {out / 'studies'}")
    frames = {e: pooled(replications[(e, point.name)]) for e in executors}
    paired = {e: replicated_vs_hybrid(replications[(e, point.name)]) for e in executors}
    per_rep = {e: per_replication(replications[(e, point.name)], point.scenario.policies)
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
                per[executor]["burst"] = burst_metrics(df, size)
            if executor == "emulation" and offsets is not None:
                per["emulation_corrected"] = policy_metrics(corrected(df, offsets))
        entry["policies"][policy] = per
    return entry


def run(size: str, out: Path, progress: Progress, executors: Sequence[str]) -> Path:
    """``testbed experiment offloading``: every experiment into ``out`` (metrics.json)."""
    run_experiment(size, executors, out, progress)
    return out
