"""The fidelity guard's judgement (``testbed.analysis.fidelity``) and the delayer's lateness sketch."""

from __future__ import annotations

import json
import random

import pytest

from testbed.analysis import fidelity
from testbed.analysis.fidelity import Thresholds, judge
from testbed.analysis.traces import CORE_KIND
from testbed.emulation.delayer.lateness import LatenessHistogram
from testbed.scenario.loader import load_scenario


def healthy() -> dict:
    """Measures of a healthy run, as the executor records them."""
    return {
        "host_idle_share": 0.4,
        "host_min_idle_share": 0.2,
        "dispatch_lag": {"count": 250, "p50_ms": 0.2, "p99_ms": 3.0, "max_ms": 5.0},
        "shaper_lateness": {"count": 2800, "p50_ms": 0.06, "p99_ms": 0.2, "max_ms": 0.4},
        "rtt": [{"client": "c1", "target": "cloud", "configured_ms": 42.0, "jitter_ms": 1.0,
                 "measured_ms": 43.3, "min_ms": 42.2, "samples": 5, "error": None}],
    }


def test_a_healthy_run_is_not_degraded() -> None:
    verdict = judge(healthy())
    assert verdict == {"degraded": False, "reasons": [], "degraded_policies": {},
                       "measures": healthy(), "thresholds": Thresholds().to_dict(),
                       "absent": {}}
    json.dumps(verdict)  # metadata.json keeps it as is
    assert fidelity.warning_line(verdict) is None


@pytest.mark.parametrize(("change", "words"), [
    ({"host_idle_share": 0.031}, ["host CPU idle share", "3.1 %", "10.0 %"]),
    ({"dispatch_lag": {"count": 9, "p50_ms": 1.0, "p99_ms": 77.06, "max_ms": 90.0}},
     ["dispatch lag p99", "77.06 ms", "> 10 ms"]),
    ({"shaper_lateness": {"count": 9, "p50_ms": 0.1, "p99_ms": 1.52, "max_ms": 3.0}},
     ["shaper release lateness p99", "1.52 ms", "> 1 ms"]),
    ({"rtt": [{"client": "c1", "target": "cloud", "configured_ms": 42.0, "jitter_ms": 1.0,
               "measured_ms": 50.87}]},
     ["RTT c1->cloud", "50.87 ms", "42.00 ms", "+8.87 ms > +6.20 ms allowed"]),
    ({"rtt": [{"client": "c1", "target": "edge", "configured_ms": 6.0, "jitter_ms": 0.0,
               "measured_ms": 0.1}]},
     ["RTT c1->edge", "0.10 ms", "not applied"]),
])
def test_each_measure_beyond_its_threshold_gives_one_reason(change: dict,
                                                             words: list[str]) -> None:
    verdict = judge({**healthy(), **change})
    assert verdict["degraded"] is True
    [reason] = verdict["reasons"]
    assert "\n" not in reason
    for word in words:
        assert word in reason
    assert fidelity.warning_line(verdict) == f"warning: degraded emulation: {reason}"


def test_thresholds_are_inclusive_bounds_of_health() -> None:
    t = Thresholds()
    at_bounds = {**healthy(), "host_idle_share": t.min_host_idle_share,
                 "dispatch_lag": {"p99_ms": t.max_dispatch_lag_p99_ms},
                 "shaper_lateness": {"p99_ms": t.max_shaper_late_p99_ms}}
    assert judge(at_bounds)["degraded"] is False
    assert judge(at_bounds, Thresholds(min_host_idle_share=0.5))["reasons"][0] \
        .startswith("host CPU idle share 10.0 % < 50.0 %")


def test_several_reasons_are_all_listed() -> None:
    verdict = judge({**healthy(), "host_idle_share": 0.0,
                     "dispatch_lag": {"p99_ms": 20.0}})
    assert len(verdict["reasons"]) == 2
    assert fidelity.warning_line(verdict).count(";") == 1


def test_the_rtt_allowance_grows_with_the_path_and_its_jitter() -> None:
    short = {"configured_ms": 6.0, "jitter_ms": 0.0}
    long = {"configured_ms": 200.0, "jitter_ms": 0.0}
    jittery = {"configured_ms": 42.0, "jitter_ms": 1.0}
    assert fidelity.rtt_allowance_ms(short) == 2.0  # the floor
    assert fidelity.rtt_allowance_ms(long) == pytest.approx(20.0)  # 10 %
    assert fidelity.rtt_allowance_ms(jittery) == pytest.approx(4.2 + 2.0)


def test_absent_measures_are_judged_by_nothing() -> None:
    nothing = {"host_idle_share": None, "dispatch_lag": None, "shaper_lateness": None,
               "rtt": None}
    why = {"shaper_lateness": "the netem backend reports no release lateness"}
    verdict = judge(nothing, absent=why)
    assert verdict["degraded"] is False and verdict["absent"] == why
    unanswered = [{"client": "c1", "target": "edge", "configured_ms": 6.0, "jitter_ms": 0.0,
                   "measured_ms": None, "error": "no TCP answer"}]
    assert judge({**nothing, "rtt": unanswered})["degraded"] is False


def test_dispatch_lag_counts_scheduled_rows_without_the_policys_state_fetch() -> None:
    rows = [
        {"kind": "task", "policy": "jsq", "arrival_wall": 100.0, "dispatch_wall": 100.002},
        {"kind": "task", "policy": "oracle", "arrival_wall": 100.0, "dispatch_wall": 100.030,
         "state_fetch_s": 0.025},  # waited 25 ms for the targets' true state
        {"kind": "task", "policy": "jsq", "arrival_wall": 100.0, "dispatch_wall": 100.001,
         "state_fetch_s": None},
        {"kind": "search", "arrival_wall": 100.0, "dispatch_wall": 105.0},  # not a schedule
        {"kind": "task", "arrival_wall": None, "dispatch_wall": 100.0},
        {"kind": "task", "dispatch_wall": 100.0},
    ]
    lags = fidelity.dispatch_lags(rows)
    assert lags == {"jsq": pytest.approx([0.002, 0.001]), "oracle": pytest.approx([0.005])}
    lag = fidelity.dispatch_lag(rows)
    by_policy = lag.pop("by_policy")
    assert lag == pytest.approx({"count": 3, "p50_ms": 2.0, "p99_ms": 5.0, "max_ms": 5.0})
    assert by_policy["jsq"] == pytest.approx({"count": 2, "p50_ms": 1.0, "p99_ms": 2.0,
                                              "max_ms": 2.0})
    assert fidelity.dispatch_lag(rows[3:]) is None
    assert fidelity.LAG_KINDS == (CORE_KIND,)


def test_one_lagging_policy_is_marked_alone_and_all_lagging_degrade_the_run() -> None:
    lag = {"count": 4, "p50_ms": 1.0, "p99_ms": 40.0, "max_ms": 50.0,
           "by_policy": {"jsq": {"p99_ms": 3.0}, "oracle": {"p99_ms": 45.0}}}
    verdict = judge({**healthy(), "dispatch_lag": lag})
    assert not verdict["degraded"] and verdict["reasons"] == []
    assert verdict["degraded_policies"] == {
        "oracle": "dispatch lag p99 45.00 ms > 10 ms (its tasks were sent late)"}
    assert fidelity.warning_line(verdict) == (
        "warning: degraded policies in this emulation: oracle: dispatch lag p99 45.00 ms "
        "> 10 ms (its tasks were sent late)")
    lag["by_policy"]["jsq"]["p99_ms"] = 12.0
    verdict = judge({**healthy(), "dispatch_lag": lag})
    assert verdict["degraded"] and verdict["degraded_policies"] == {}
    assert verdict["reasons"] == [("dispatch lag p99 40.00 ms > 10 ms (tasks of every policy "
                                  "were sent late)")]


def test_quantile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert fidelity.quantile(values, 0.5) == 50
    assert fidelity.quantile(values, 0.99) == 99
    assert fidelity.quantile([7.0], 0.99) == 7.0


def test_probe_plan_of_the_continuum() -> None:
    plan = fidelity.probe_plan(load_scenario("continuum"))
    assert [(p["client"], p["target"]) for p in plan] == [
        ("c1", "edge"), ("c1", "cloud"), ("c2", "edge"), ("c2", "cloud")]
    by_path = {(p["client"], p["target"]): p for p in plan}
    assert by_path["c1", "edge"]["configured_ms"] == 2 * (1 + 2)  # c1-s1, s1-edge
    assert by_path["c2", "cloud"] == {"client": "c2", "target": "cloud",
                                      "configured_ms": 2 * (1 + 20), "jitter_ms": 1.0}
    assert len(fidelity.probe_plan(load_scenario("continuum"), limit=3)) == 3


def test_probe_plan_without_task_servers_takes_every_serving_host() -> None:
    scenario = load_scenario("armada-selection")
    plan = fidelity.probe_plan(scenario)
    clients = {n.name for n in scenario.clients()}
    served = {s.node for s in scenario.services} - clients
    assert {p["client"] for p in plan} == clients
    assert {p["target"] for p in plan} == served
    assert all(p["configured_ms"] >= 0 for p in plan)


# --- the delayer's lateness sketch ------------------------------------------------------

def test_lateness_histogram_quantiles_overstate_by_at_most_a_sixteenth() -> None:
    rng = random.Random(3)
    values = [int(rng.lognormvariate(11, 1.5)) for _ in range(20_000)]  # ns, ~60 us median
    sketch = LatenessHistogram()
    for v in values:
        sketch.add(v)
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.99):
        exact = ordered[int(q * len(ordered)) - 1]
        assert exact <= sketch.quantile(q) <= exact * (1 + 1 / 16) + 1
    summary = sketch.summary()
    assert summary["count"] == len(values) and summary["max_us"] == max(values) / 1000


def test_lateness_histogram_small_and_empty() -> None:
    sketch = LatenessHistogram()
    assert sketch.summary() == {"count": 0, "p50_us": None, "p99_us": None, "max_us": None}
    for v in (-5, 0, 3, 31):  # below 32 ns every value has its own bucket
        sketch.add(v)
    assert [sketch.quantile(q) for q in (0.25, 0.5, 0.75, 1.0)] == [0, 0, 3, 31]
