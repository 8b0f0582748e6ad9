"""Tests of the offloading experiment: its study files, its metrics on constructed frames,
its claims, and a cut-down sim-only run through the generic experiment engine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from testbed.experiments import files
from testbed.experiments.engine import run_experiment, write_experiment_report
from testbed.registry import experiments
from testbed.reports.claims_index import claims_path, read_claims
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.study.spec import load_study, study_from_dict
from testbed.systems.offloading import claim_checks
from testbed.systems.offloading import metrics as offloading
from testbed.systems.offloading.metrics import (
    corrected,
    large_latency_share,
    large_p95,
    mape,
    network_offsets,
    rate_for_load,
    recovery_time,
    rolling_p95,
    sweep_x,
    tier_shares_over_time,
    worst_wait,
)

EXPERIMENT = experiments()["offloading"][1]


def _frame(**columns) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    base = {"outcome": ["ok"] * n, "cls": ["small"] * n, "tier": ["edge"] * n,
            "estimate_s": [np.nan] * n, "wait_s": [0.0] * n, "network_s": [0.0] * n,
            "arrival_model": np.arange(n, dtype=float), "decision_us": [1.0] * n}
    base.update(columns)
    return pd.DataFrame(base)


def test_mape_uses_completed_rows_with_an_estimate():
    df = _frame(latency_s=[1.0, 2.0, 4.0, 5.0], estimate_s=[1.5, 1.0, np.nan, 0.0],
                outcome=["ok", "ok", "ok", "timeout"])
    assert mape(df) == pytest.approx((0.5 + 0.5) / 2)
    assert mape(_frame(latency_s=[1.0])) is None


def test_large_task_p95_and_latency_share():
    latency = list(range(1, 21)) + [100.0, 200.0]
    cls = ["small"] * 20 + ["large"] * 2
    df = _frame(latency_s=latency, cls=cls)
    assert large_p95(df) == pytest.approx(np.percentile([100.0, 200.0], 95))
    assert large_latency_share(df) == pytest.approx(300.0 / (210.0 + 300.0))
    assert large_p95(_frame(latency_s=[1.0])) is None


def test_worst_wait_ignores_failed_rows():
    df = _frame(latency_s=[1.0, 2.0, 3.0], wait_s=[0.5, 7.0, 99.0],
                outcome=["ok", "ok", "error"])
    assert worst_wait(df) == 7.0


def test_tier_shares_over_time():
    df = _frame(latency_s=[1.0] * 6, arrival_model=[0.1, 0.5, 1.2, 1.4, 1.9, 3.5],
                tier=["edge", "edge", "edge", "cloud", "cloud", "local"])
    shares = tier_shares_over_time(df, bin_s=1.0, end_s=4.0)
    assert list(shares.index) == [0.0, 1.0, 2.0, 3.0]
    assert shares.loc[0.0, "edge"] == 1.0
    assert shares.loc[1.0, "cloud"] == pytest.approx(2 / 3)
    assert shares.loc[2.0].sum() == 0.0  # no task in that bin
    assert shares.loc[3.0, "local"] == 1.0


def test_rolling_p95_and_recovery_on_a_constructed_series():
    # One task every 0.1 s: latency 1 s, 10 s during a burst [20, 30), then 1 s again.
    arrivals = np.arange(0.0, 60.0, 0.1)
    latency = np.where((arrivals >= 20) & (arrivals < 30), 10.0, 1.0)
    df = _frame(latency_s=latency, arrival_model=arrivals)
    series = rolling_p95(df, window_s=5.0, step_s=1.0, end_s=60.0)
    assert series.loc[15.0] == pytest.approx(1.0)
    assert series.loc[25.0] == pytest.approx(10.0)
    # The 5 s window stops holding burst tasks 5 s after the burst's end.
    assert recovery_time(series, pre_value=1.0, burst_end=30.0, horizon=60.0) == 5.0
    assert recovery_time(series, pre_value=1.0, burst_end=30.0, horizon=33.0) is None
    sparse = rolling_p95(df.iloc[::10], window_s=5.0, step_s=1.0, end_s=60.0)
    assert sparse.isna().all()  # 5 tasks per window: fewer than MIN_WINDOW_TASKS


def test_offered_load_definition():
    base = load_scenario("continuum")
    assert offloading.capacity(base) == pytest.approx(1 + 1 + 4 * 2.0 + 16 * 1.5)
    rate = rate_for_load(base, 0.5)
    assert rate == pytest.approx(0.5 * 34 / 2)
    doc = base.resolved()
    doc["workload"]["params"]["rate"] = rate
    assert offloading.offered_load(scenario_from_dict(doc)) == pytest.approx(0.5)


@pytest.mark.parametrize("size", ["small", "medium", "full"])
def test_every_study_file_sweeps_what_it_names(size: str) -> None:
    """Each load study's rates are the offered loads its description names; every sweep
    study replays every policy entry (or the confounder set) without random bursts,
    polling every 2 model seconds unless it sweeps the polling interval."""
    loads: list[float] = []
    for path in files.study_files(EXPERIMENT, size):
        study = load_study(path)
        sweep = dict(study.analysis)["sweep"]
        for point in study.points():
            scenario = study.scenario(point, 0)
            if sweep != "poll":
                assert scenario.executor.poll_interval_model_s == 2.0
            x, _name = sweep_x(sweep, scenario)
            if sweep == "load":
                loads.append(x)
                assert f"{x:g}" in study.description
            if sweep == "burst":
                assert scenario.workload.params["bursts"] and x == pytest.approx(0.4)
            else:
                assert "burst" not in scenario.workload.params
            expected = {"poll": offloading.CONFOUNDER_POLICIES,
                        "window": offloading.CONFOUNDER_POLICIES,
                        "penalty": tuple(offloading.PENALTY_ENTRIES)}
            assert scenario.policies == expected.get(sweep, offloading.ALL_POLICIES)
    assert loads == sorted(loads) or len(loads) > 2  # load and load-sim split the sweep
    assert min(loads) >= 0.2 and max(loads) <= 0.9


def test_network_offsets_split_delayer_and_http():
    scenario = load_scenario("continuum")
    # The run's own probe of the cloud path: 42 ms configured, 42.4 measured; each task's
    # network time is that plus 1 ms of HTTP.
    probes = [{"client": "c1", "target": "cloud", "configured_ms": 42.0, "measured_ms": 42.4},
              {"client": "c2", "target": "cloud", "configured_ms": 42.0, "measured_ms": 99.0}]
    df = _frame(latency_s=[1.0] * 3, tier=["cloud"] * 3,
                network_s=[0.042 + 0.0004 + 0.001] * 3)
    offsets = network_offsets(scenario, probes, df)
    assert offsets["cloud"]["rtt_s"] == pytest.approx(0.042)
    assert offsets["cloud"]["probed_rtt_s"] == pytest.approx(0.0424)
    assert offsets["cloud"]["delayer_s"] == pytest.approx(0.0004)
    assert offsets["cloud"]["http_s"] == pytest.approx(0.001)
    assert offsets["local"] == {"rtt_s": 0.0, "delayer_s": 0.0, "probed_rtt_s": None,
                                "http_s": 0.0}
    fixed = corrected(df, offsets)
    assert fixed["latency_s"].tolist() == pytest.approx([1.0 - 0.0014] * 3)


def test_judge_reads_the_interval_of_other_minus_hybrid():
    assert claim_checks.judge({"value": 0.3, "ci": [0.1, 0.5]}) == "better"
    assert claim_checks.judge({"value": -0.3, "ci": [-0.5, -0.1]}) == "worse"
    assert claim_checks.judge({"value": 0.1, "ci": [-0.1, 0.3]}) == "tie"
    assert claim_checks.judge({"value": 0.1, "ci": None}) == "n/a"
    assert claim_checks.judge(None) == "n/a"


def test_replicated_metrics_pair_each_replication_with_hybrid():
    per_rep = [{"hybrid": {"mean_s": 1.0, "mape": 0.4}, "jsq": {"mean_s": 1.5, "mape": None}},
               {"hybrid": {"mean_s": 2.0, "mape": 0.5}, "jsq": {"mean_s": 2.7, "mape": None}},
               {"hybrid": {"mean_s": 1.5, "mape": 0.3}, "jsq": {"mean_s": 2.1, "mape": None}}]
    out = offloading.replicated_metrics(per_rep, "jsq")
    assert out["replicated"]["mean_s"]["value"] == pytest.approx(6.3 / 3)
    assert out["replicated"]["mean_s"]["n"] == 3
    diff = out["paired"]["mean_s"]
    assert diff["value"] == pytest.approx(0.6) and diff["n"] == 3
    assert diff["ci"][0] < 0.6 < diff["ci"][1] and diff["ci"][0] > 0  # 0.5, 0.7, 0.6
    assert out["replicated"]["mape"] is None and out["paired"]["mape"] is None
    assert "mean_s" not in offloading.replicated_metrics(per_rep, "hybrid")["paired"]
    one = offloading.replicated_metrics(per_rep[:1], "jsq")["paired"]["mean_s"]
    assert one["ci"] is None and one["n"] == 1


def test_strongest_member_of_a_family_is_the_lowest_mean():
    point = {"policies": {p: {"sim": {"mean_s": v, "replicated": {"mean_s": {"value": v}}}}
                          for p, v in (("edge-first", 9.0), ("edge-first-spill", 1.2),
                                       ("random", 3.0), ("random-capacity", 1.1),
                                       ("jsq", 2.0), ("jsq-s", 1.0), ("hybrid", 1.3))}}
    assert claim_checks.strongest(point, "static", "sim") == "random-capacity"
    assert claim_checks.strongest(point, "queue length", "sim") == "jsq-s"


def _tiny_studies(folder: Path) -> None:
    """The small size's study files cut down (15 model s per sweep run, a 30 s burst
    run, three replications per sweep point) into ``folder/tiny/``."""
    source = files.studies_folder(EXPERIMENT)
    (folder / "tiny").mkdir(parents=True)
    for path in files.study_files(EXPERIMENT, "small"):
        doc = yaml.safe_load(path.read_text())
        doc["scenario"] = str((path.parent / doc["scenario"]).resolve())
        if doc["analysis"]["sweep"] == "burst":
            doc["set"].update(duration=30.0, **{"workload.params.bursts": [
                {"start_s": 10.0, "duration_s": 5.0, "factor": 2.5}]})
            doc["analysis"]["pre_s"] = 8.0
        else:
            doc["set"]["duration"] = 15.0
            doc["replications"] = 3
        (folder / "tiny" / path.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    assert source.is_dir()


def test_a_cut_down_sim_experiment_end_to_end(tmp_path: Path) -> None:
    """The experiment's studies, metrics, claims and report on the simulator, through
    the generic engine; whether the claims hold is what the report is for."""
    _tiny_studies(tmp_path / "studies")
    exp = dataclasses.replace(EXPERIMENT, studies=f"testbed.systems.offloading:{tmp_path}/studies")
    run = run_experiment(exp, "tiny", ["sim"], tmp_path / "runs", progress=lambda _l: None)
    metrics = run.metrics
    stored = json.loads((tmp_path / "runs" / "metrics.json").read_text())
    assert stored["size"] == {"name": "tiny", "replications": 3}
    assert {p["experiment"] for p in metrics["points"]} == {
        "load", "edge", "burst", "poll", "window", "penalty"}
    expected = {"poll": set(offloading.CONFOUNDER_POLICIES),
                "window": set(offloading.CONFOUNDER_POLICIES),
                "penalty": set(offloading.PENALTY_ENTRIES)}
    for point in metrics["points"]:
        assert set(point["policies"]) == expected.get(point["experiment"],
                                                      set(offloading.ALL_POLICIES))
        reps = 1 if point["experiment"] == "burst" else 3
        assert point["replications"] == {"sim": reps}
        for policy, per in point["policies"].items():
            m = per["sim"]
            assert m["n"] > 0 and m["mean_s"] > 0
            estimates = policy in offloading.ESTIMATORS or policy == "oracle" or \
                point["experiment"] == "penalty"
            assert (m["mape"] is not None) == estimates
            assert (m["vs_hybrid"] is None) == (policy == "hybrid")
            assert m["replicated"]["mean_s"]["n"] == reps
            if policy != "hybrid" and reps > 1:
                assert m["paired"]["mean_s"]["ci"] is not None
    assert sorted(p["x"] for p in metrics["points"] if p["experiment"] == "poll") == [0.5, 2.0]
    assert next(p["x"] for p in metrics["points"] if p["experiment"] == "penalty") == 0.9
    report = tmp_path / "report" / "README.md"
    write_experiment_report(exp, run, "tiny", ["sim"], "testbed experiment ...", report)
    text = report.read_text()
    for n in range(1, 8):
        assert f"## Claim {n}:" in text
    assert text.count("Why: ") == 7
    for section in ("Confounder: the state polling interval",
                    "Confounder: the arrival-rate window", "Penalty-factor sensitivity",
                    "Load sweep, simulation", "Edge-capacity sweep, simulation"):
        assert f"### {section}" in text
    assert "hybrid-p5" in text and "edge-first-spill" in text
    recorded = read_claims(claims_path(report))
    assert [c["key"] for c in recorded["claims"]] == [str(n) for n in range(1, 8)]
    assert recorded["claims"][5]["verdict"] == "not run"  # claim 6 needs both executors
    assert recorded["claims"][0]["replications"] == 3
    assert recorded["claims"][3]["replications"] == 1  # one burst run
    assert all(f"## {c['section']}" in text for c in recorded["claims"])


def test_the_emulated_loads_keep_the_traces_of_one_study_of_every_load():
    """At ``medium`` the emulator replays two loads and the penalty sweep; the other loads
    are a simulator-only study whose cells keep the seeds one study of all loads gives."""
    by_name = {p.stem: load_study(p) for p in files.study_files(EXPERIMENT, "medium")}
    assert by_name["load"].executors == ("sim", "emulation")
    assert by_name["load-sim"].executors == ("sim",)
    assert by_name["penalty"].executors == ("sim", "emulation")
    assert by_name["edge"].executors == by_name["poll"].executors == ("sim",)
    path = files.studies_folder(EXPERIMENT) / "medium" / "load.yaml"
    doc = yaml.safe_load(path.read_text())
    rates = sorted(by_name["load"].axes[0].steps + by_name["load-sim"].axes[0].steps)
    doc["grid"] = {"workload.params.rate": [r for (r,) in rates]}
    whole = study_from_dict(doc, source=str(path))

    def seeds(study):
        return {dict(p.values)["workload.params.rate"]:
                [study.replication_seed(p, r) for r in range(3)] for p in study.points()}

    split = {**seeds(by_name["load"]), **seeds(by_name["load-sim"])}
    assert split == seeds(whole) and len(split) == 5


def test_paired_differences_across_replications_are_whole_run_differences():
    """Across replications the difference to hybrid is the mean of each replication's
    whole-run difference (the estimand of the whole-run means reported beside it), not of
    steady-state estimates after a warm-up."""
    from tests.unit.trace_frames import frame

    rng = np.random.default_rng(3)
    frames, whole = [], []
    for shift in (0.1, 0.3):
        hybrid = list(np.concatenate([np.linspace(5.0, 0.1, 100), rng.exponential(0.1, 900)]))
        other = [x + shift * (1.0 if k >= 100 else 10.0) for k, x in enumerate(hybrid)]
        frames.append(frame({"hybrid": hybrid, "other": other}))
        whole.append(float(np.mean(other) - np.mean(hybrid)))
    found = offloading.replicated_vs_hybrid(frames)["other"]["mean"]
    assert found["value_s"] == pytest.approx(np.mean(whole))
    assert found["replications"] == 2
    one = offloading.paired_vs_hybrid(frames[0])["other"]["mean"]
    assert one["all_tasks_s"] == pytest.approx(whole[0])
    assert one["value_s"] < one["all_tasks_s"]  # the steady state leaves the warm-up out


def test_paired_difference_without_steady_tasks_has_no_estimate_but_a_whole_run_value():
    """When every task both policies completed arrived before the shared warm-up ended
    (a policy that lost the rest of the run), the steady-state estimate is ``None``;
    the whole-run difference is still there and replications average it."""
    from tests.unit.trace_frames import frame

    hybrid = list(np.concatenate([np.linspace(20.0, 0.1, 900), np.full(100, 0.1)]))
    other = [x + 1.0 for x in hybrid]
    lost = {("other", k) for k in range(500, 1000)}
    frames = [frame({"hybrid": hybrid, "other": other}, failed=lost) for _ in range(2)]
    one = offloading.paired_vs_hybrid(frames[0])["other"]["mean"]
    assert one["value_s"] is None and one["ci_s"] is None
    assert one["all_tasks_s"] == pytest.approx(1.0)
    across = offloading.replicated_vs_hybrid(frames)["other"]["mean"]
    assert across["value_s"] == pytest.approx(1.0) and across["replications"] == 2


def test_a_policy_left_out_of_one_replication_counts_one_replication_fewer():
    """A replication whose rows for a policy were left out (a degraded policy) drops
    that policy there: its values and its differences to hybrid come from the other
    replications, even when the replication without it comes first."""
    from tests.unit.trace_frames import frame

    rng = np.random.default_rng(5)
    frames = []
    for _ in range(3):
        hybrid = list(rng.exponential(0.1, 400))
        frames.append(frame({"hybrid": hybrid, "other": [x + 0.5 for x in hybrid]}))
    frames[0] = frames[0][frames[0]["policy"] != "other"]
    per_rep = offloading.per_replication(frames, ["hybrid", "other"])
    assert [sorted(rep) for rep in per_rep] == [["hybrid"], ["hybrid", "other"],
                                                ["hybrid", "other"]]
    found = offloading.replicated_metrics(per_rep, "other")
    assert found["replicated"]["mean_s"]["n"] == 2
    assert found["paired"]["mean_s"]["value"] == pytest.approx(0.5)
    across = offloading.replicated_vs_hybrid(frames)["other"]["mean"]
    assert across["replications"] == 2 and across["value_s"] == pytest.approx(0.5)
    assert offloading.decision_us(frames[0].iloc[:0]) == (None, None, None)


def test_claim6_judges_the_gap_after_the_offsets_on_hand_made_metrics():
    """Two policies at one point on both executors: the offsets take the median gap from
    20 % to 5 %, inside the 10 % tolerance, so the claim holds; a third policy's gap
    after the offsets is named with the part it comes from."""
    def run(mean, wait=1.0):
        return {"mean_s": mean, "mean_wait_s": wait, "mean_service_s": 1.0,
                "mean_network_s": 0.01, "state_fetch_s": None}

    point = {"experiment": "load", "x": 0.5, "executors": ["sim", "emulation"],
             "replications": {"sim": 5, "emulation": 5}, "policies": {
                 "hybrid": {"sim": run(1.0), "emulation": run(1.2),
                            "emulation_corrected": run(1.05)},
                 "jsq": {"sim": run(2.0), "emulation": run(2.4),
                         "emulation_corrected": run(2.1)},
                 "oracle": {"sim": run(1.0), "emulation": run(1.5, wait=1.4),
                            "emulation_corrected": run(1.3)}}}
    metrics = {"executors": ["sim", "emulation"], "points": [point],
               "offsets": {"from": "continuum-load0.5", "per_tier": {
                   "edge": {"rtt_s": 0.006, "probed_rtt_s": 0.0064, "delayer_s": 0.0004,
                            "http_s": 0.001}}}}
    (claim,) = [c for c in claim_checks.claims_of(metrics, (6,))]
    assert claim.verdict == "holds" and claim.replications == 5
    assert "from 20.0 % to 5.0 %" in claim.why and "oracle (+30 %, mostly wait" in claim.why
    assert claim.tables[0].rows == (("edge", "6.00", "6.400", "0.400", "1.000"),)
