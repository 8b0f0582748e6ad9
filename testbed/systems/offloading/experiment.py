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

Plus a penalty-factor sensitivity of ``hybrid`` (``PENALTY_SWEEP``, simulator only) and,
with the emulation, a calibration of the link-shaping backend (``testbed.calibrate``)
whose offsets are subtracted from the emulated latencies for claim 6.

The metric functions take per-task trace frames (``docs/traces.md``) and are pure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.errors import TestbedError
from testbed.policies.queue_aware import PENALTY_SWEEP
from testbed.scenario import Scenario, load_scenario, scenario_from_dict

Progress = Callable[[str], None]

#: Every policy, in the order tables list them.
ALL_POLICIES = ("edge-first", "random", "jsq", "jsq-s", "model-only", "queue-only", "hybrid",
                "oracle", "hybrid-global-rate", "hybrid-fixed-beta")
#: Policies that predict their latency (``estimate_s``), for the MAPE.
ESTIMATORS = ("model-only", "queue-only", "hybrid", "hybrid-global-rate", "hybrid-fixed-beta")
#: The static policies the burst claim compares with.
STATIC = ("edge-first", "random")
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

    ``bursts`` are ``(start_s, duration_s, factor)`` windows of the burst experiment;
    ``window_s`` is the rolling-p95 window, ``bin_s`` the time bin of tier shares and
    rolling p95, ``pre_s`` how long before a burst the pre-burst p95 is measured.
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


SIZES: dict[str, Size] = {
    "small": Size("small", time_scale=20.0, duration_s=30.0, loads=(0.3, 0.8),
                  edge_workers=(2, 8), edge_load=0.6, burst_duration_s=60.0, burst_load=0.4,
                  bursts=((20.0, 10.0, 2.5),), window_s=5.0, bin_s=2.0, pre_s=15.0,
                  penalty_load=0.8, repetitions=1, calibrate_probes=20),
    "medium": Size("medium", time_scale=20.0, duration_s=120.0,
                   loads=(0.2, 0.4, 0.6, 0.8, 0.9), edge_workers=(1, 2, 4, 8), edge_load=0.6,
                   burst_duration_s=240.0, burst_load=0.4,
                   bursts=((60.0, 20.0, 2.5), (160.0, 20.0, 2.5)), window_s=10.0, bin_s=4.0,
                   pre_s=40.0, penalty_load=0.8, repetitions=1, calibrate_probes=100),
    "full": Size("full", time_scale=10.0, duration_s=300.0,
                 loads=(0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), edge_workers=(1, 2, 4, 8, 16),
                 edge_load=0.6, burst_duration_s=600.0, burst_load=0.4,
                 bursts=((120.0, 30.0, 2.5), (300.0, 30.0, 2.5), (480.0, 30.0, 2.5)),
                 window_s=10.0, bin_s=4.0, pre_s=60.0, penalty_load=0.8, repetitions=3,
                 calibrate_probes=200),
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
    count of the edge tier's servers. Polls keep :data:`POLL_MODEL_S` of model staleness.
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
    data.update(name=name, policies=list(ALL_POLICIES), duration=duration,
                time_scale=size.time_scale, repetitions=size.repetitions)
    data["executor"]["poll_interval_ms"] = 1000.0 * POLL_MODEL_S / size.time_scale
    return scenario_from_dict(data, source=f"<{name}>")


@dataclass(frozen=True)
class Point:
    """One scenario of an experiment: which experiment, its x value, the scenario."""

    experiment: str
    x: float
    scenario: Scenario

    @property
    def key(self) -> str:
        """Identifies the scenario: points with equal scenarios share one run."""
        return json.dumps(self.scenario.resolved(), sort_keys=True)


def plan(size: Size) -> list[Point]:
    """Every point of the three experiments at ``size``."""
    base = load_scenario("continuum")
    points = [Point("load", load, variant(base, f"continuum-load{load:g}", size,
                                          rate=rate_for_load(base, load),
                                          duration=size.duration_s))
              for load in size.loads]
    edge_rate = rate_for_load(base, size.edge_load)
    for workers in size.edge_workers:
        points.append(Point("edge", workers, variant(
            base, f"continuum-load{size.edge_load:g}" if workers == _edge_workers(base)
            else f"continuum-edge{workers}", size, rate=edge_rate, duration=size.duration_s,
            edge_workers=workers)))
    burst = load_scenario("continuum-burst")
    points.append(Point("burst", size.burst_load, variant(
        burst, "continuum-burst", size, rate=rate_for_load(burst, size.burst_load),
        duration=size.burst_duration_s, bursts=size.bursts)))
    return points


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


def decision_us(df: pd.DataFrame) -> tuple[float, float]:
    """Mean and p99 of the policy's decision time, microseconds, over every row."""
    values = df["decision_us"].to_numpy(dtype=float)
    return float(values.mean()), float(np.percentile(values, 99))


def policy_metrics(df: pd.DataFrame) -> dict[str, Any]:
    """Every scalar metric of one policy's rows."""
    rows = ok_rows(df)
    latency = rows["latency_s"]
    mean_us, p99_us = decision_us(df)
    return {
        "n": len(df), "n_failed": int((df["outcome"] != "ok").sum()),
        "mean_s": float(latency.mean()) if not rows.empty else None,
        "p95_s": percentile(latency, 95), "p99_s": percentile(latency, 99),
        "large_p95_s": large_p95(df), "large_share": large_latency_share(df),
        "large_task_share": float((df["cls"] == "large").mean()),
        "max_wait_s": worst_wait(df), "mape": mape(df),
        "decision_mean_us": mean_us, "decision_p99_us": p99_us,
        "mean_network_s": float(rows["network_s"].mean()) if not rows.empty else None,
        "tier_share": {str(k): float(v) for k, v in
                       df["tier"].value_counts(normalize=True).sort_index().items()},
    }


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
    interval of the run (:func:`testbed.compare.compare`; ``None`` when the run is too
    short to carry one); ``excludes_zero`` marks a significant difference.
    """
    from testbed.compare import compare

    result = compare(df, baseline="hybrid", stats=("mean", "p95"))
    out = {}
    for policy, entry in result["policies"].items():
        if entry["diff"] is None:
            continue
        out[policy] = {
            stat: None if item is None else {
                "value_s": item["value"] / 1000.0,
                "ci_s": None if item["ci"] is None else [v / 1000.0 for v in item["ci"]],
                "excludes_zero": item["excludes_zero"]}
            for stat, item in entry["diff"]["stats"].items()}
    return out


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
    from testbed.runner import run_scenario
    from testbed.traces import read_traces

    run_scenario(point.scenario, out=folder, executor=executor, progress=progress)
    return read_traces(folder)


def penalty_sweep(size: Size, folder: Path, progress: Progress) -> list[dict[str, Any]]:
    """``hybrid`` with each factor of ``PENALTY_SWEEP`` in simulation at the penalty load."""
    from testbed.runner import materialise
    from testbed.sim.tiers_replay import build_model, policy_seed, results_to_rows, simulate
    from testbed.traces import rows_to_frame
    from workloads.trace import read_trace

    base = load_scenario("continuum")
    scenario = variant(base, f"continuum-load{size.penalty_load:g}", size,
                       rate=rate_for_load(base, size.penalty_load), duration=size.duration_s)
    tasks, _ = read_trace(materialise(scenario, folder / "trace"))
    model = build_model(scenario)
    out = []
    for factor in PENALTY_SWEEP:
        rows = []
        for rep in range(scenario.repetitions):
            res = simulate(model, tasks, "hybrid", policy_seed(scenario, rep),
                           network_seed=f"sim-network-{scenario.seed}-{rep}",
                           policy_params={"penalty": factor})
            rows += results_to_rows(model, tasks, res, "penalty", "hybrid", rep)
        metrics = policy_metrics(rows_to_frame(rows))
        out.append({"penalty": factor, **metrics})
        progress(f"  penalty {factor:g}: mean {metrics['mean_s']:.3f} s, "
                 f"p95 {metrics['p95_s']:.3f} s")
    return out


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


def run_experiment(size_name: str, executors: Sequence[str], out: Path,
                   progress: Progress = print) -> dict[str, Any]:
    """Run every experiment at ``size_name`` with ``executors``; returns all metrics.

    Run folders go to ``out/<executor>/<scenario name>``; the metrics are also written to
    ``out/metrics.json`` (what :func:`testbed.systems.offloading.claims.write_report` reads).
    """
    from testbed.runner import machine_details

    if size_name not in SIZES:
        raise TestbedError(f"--size: expected one of {', '.join(SIZES)}, found {size_name!r}")
    unknown = sorted(set(executors) - {"sim", "emulation"})
    if unknown or not executors:
        raise TestbedError(f"--executors: expected sim and/or emulation, found {executors!r}")
    size = SIZES[size_name]
    points = plan(size)
    unique = {p.key: p for p in points}
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"size": asdict(size), "executors": list(executors),
                              "policies": list(ALL_POLICIES), "machine": machine_details(),
                              "points": [], "runs": {}, "wall_s": {}}
    frames: dict[tuple[str, str], pd.DataFrame] = {}
    for executor in executors:
        began = time.time()
        if executor == "emulation":
            result["calibration"] = _calibrate(points[0].scenario, size.calibrate_probes,
                                               progress)
        for key, point in unique.items():
            folder = out / executor / point.scenario.name
            progress(f"[{executor}] {point.scenario.name} (offered load "
                     f"{offered_load(point.scenario):.2f})")
            frames[(executor, key)] = run_point(point, executor, folder, progress)
            meta = json.loads((folder / "metadata.json").read_text())
            result["runs"].setdefault(point.scenario.name, {})[executor] = {
                "folder": str(folder), "trace_sha256": meta["trace"]["sha256"],
                "n_tasks": meta["trace"]["n"], "wall_s": meta["wall_s"],
                "git_commit": meta["git_commit"],
                "shaping_backend": meta.get("shaping_backend"),
                "scenario": meta["scenario"]}
        result["wall_s"][executor] = time.time() - began
    if "sim" in executors:
        began = time.time()
        progress("[sim] penalty-factor sensitivity of hybrid")
        result["penalty"] = penalty_sweep(size, out / "penalty", progress)
        result["wall_s"]["penalty"] = time.time() - began
    offsets = None
    if "emulation" in executors:
        low = min((p for p in points if p.experiment == "load"), key=lambda p: p.x)
        offsets = network_offsets(low.scenario, result["calibration"],
                                  frames[("emulation", low.key)])
        result["offsets"] = {"from": low.scenario.name, "per_tier": offsets}
    for point in points:
        entry: dict[str, Any] = {"experiment": point.experiment, "x": point.x,
                                 "scenario": point.scenario.name,
                                 "offered_load": offered_load(point.scenario),
                                 "edge_workers": _edge_workers(point.scenario),
                                 "policies": {}}
        paired = {executor: paired_vs_hybrid(frames[(executor, point.key)])
                  for executor in executors}
        for policy in ALL_POLICIES:
            per: dict[str, Any] = {}
            for executor in executors:
                df = frames[(executor, point.key)]
                df = df[df["policy"] == policy]
                per[executor] = policy_metrics(df)
                per[executor]["vs_hybrid"] = paired[executor].get(policy)
                if point.experiment == "burst":
                    per[executor]["burst"] = burst_metrics(df, size)
                if executor == "emulation" and offsets is not None:
                    per["emulation_corrected"] = policy_metrics(corrected(df, offsets))
            entry["policies"][policy] = per
        result["points"].append(entry)
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    return result



def run(size: str, out: Path, progress: Progress, executors: Sequence[str]) -> Path:
    """``testbed experiment offloading``: every experiment into ``out`` (metrics.json)."""
    run_experiment(size, executors, out, progress)
    return out


def report(out: Path, report_dir: Path, command: str, executors: Sequence[str]) -> list[Path]:
    """The claims report of the metrics in ``out``, written into ``report_dir``."""
    from testbed.systems.offloading.claims import write_report

    del executors  # the metrics record which executors ran
    return [write_report(json.loads((out / "metrics.json").read_text()), report_dir, command)]
