"""Tests of policy comparisons on one run: paired differences, steady-state batch-means
intervals and their own points, failed tasks counted, repetitions averaged, the
baseline stated."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.compare import compare, format_compare
from testbed.analysis.run_summary import summarize
from testbed.analysis.stats import FINAL_BATCHES, STEADY_STATE, TOO_SHORT
from testbed.errors import TestbedError
from tests.unit.test_stats import mm1_latencies
from tests.unit.trace_frames import frame


@pytest.fixture
def base_latencies() -> list[float]:
    return list(np.random.default_rng(1).exponential(0.05, size=300))


def test_uniformly_slower_policy_excludes_zero(base_latencies):
    base = list(np.random.default_rng(1).exponential(0.05, size=1000))
    df = frame({"base": base, "slow": [x + 0.010 for x in base]})
    result = compare(df, "base")
    diff = result["policies"]["slow"]["diff"]
    assert diff["n_pairs"] == 1000
    for stat in ("mean", "p50", "p95", "p99"):
        item = diff["stats"][stat]
        assert item["value"] == pytest.approx(10.0) and item["estimate"] == pytest.approx(10.0)
        if stat in ("p95", "p99"):  # 1000 tasks hold too few beyond these for batches
            assert item["ci"] is None and not item["excludes_zero"]
            continue
        low, high = item["ci"]
        assert low == pytest.approx(10.0) and high == pytest.approx(10.0)
        assert item["excludes_zero"] and item["batches"] == FINAL_BATCHES
    assert result["policies"]["base"]["diff"] is None
    assert result["baseline_chosen"] == "given" and result["replications"] == 1


def test_identical_policies_include_zero(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies})
    item = compare(df, "a")["policies"]["b"]["diff"]["stats"]["mean"]
    assert item["value"] == 0.0 and item["ci"] == [0.0, 0.0]
    assert not item["excludes_zero"]


def test_noisy_comparisons_on_an_autocorrelated_queue():
    base = mm1_latencies(20_000, 1, 0.7, seed=6)[0] / 100.0 + 0.01
    noise = np.random.default_rng(6).normal(0.0, 0.002, size=base.size)  # 5 sd below 0.01
    df = frame({"base": list(base), "same": list(base + noise),
                "worse": list(base * 1.2 + noise)}, repetitions=2)
    result = compare(df, "base")
    assert result["policies"]["worse"]["diff"]["n_pairs"] == 20_000  # tasks, not rows
    same = result["policies"]["same"]["diff"]["stats"]["mean"]
    worse = result["policies"]["worse"]["diff"]["stats"]["mean"]
    assert same["ci"][0] < 0 < same["ci"][1]
    assert worse["excludes_zero"] and worse["ci"][0] > 0.0


def test_intervals_are_wider_than_pretending_tasks_are_independent():
    x = mm1_latencies(20_000, 1, 0.7, seed=7)[0] / 100.0
    item = compare(frame({"a": list(x)}))["policies"]["a"]["stats"]["mean"]
    ms = x * 1000.0
    iid_half = 1.96 * ms.std(ddof=1) / np.sqrt(ms.size)
    assert (item["ci"][1] - item["ci"][0]) / 2 > 2 * iid_half
    assert item["value"] == pytest.approx(ms.mean())


def test_per_policy_stats(base_latencies):
    result = compare(frame({"a": base_latencies}), stats=("mean", "p90", "p99.9"))
    stats = result["policies"]["a"]["stats"]
    ms = np.array(base_latencies) * 1000
    assert stats["mean"]["value"] == pytest.approx(ms.mean())
    assert stats["p90"]["value"] == pytest.approx(np.percentile(ms, 90))
    assert stats["p99.9"]["value"] == pytest.approx(np.percentile(ms, 99.9))
    assert stats["mean"]["ci"][0] <= stats["mean"]["estimate"] <= stats["mean"]["ci"][1]
    assert stats["p99.9"]["ci"] is None  # 300 tasks: too short for a tail interval
    assert result["stats"] == ["mean", "p90", "p99.9"]
    assert result["confidence"] == 0.95 and result["unit"] == "ms"
    assert result["method"] == "batch means"


def test_quantile_diff_is_difference_of_quantiles():
    """The paired quantile difference is q(policy) - q(baseline), not q(differences)."""
    base = [0.01 * i for i in range(1, 101)]
    shifted = base[1:] + base[:1]
    item = compare(frame({"base": base, "other": shifted}), "base",
                   stats=("p50",))["policies"]["other"]["diff"]
    assert item["stats"]["p50"]["value"] == pytest.approx(0.0)


def test_failed_tasks_are_counted_and_left_out_of_pairs(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies}, failed={("b", 0), ("a", 5)})
    result = compare(df, "a")
    assert result["policies"]["b"]["diff"]["n_pairs"] == 298
    a = result["policies"]["a"]
    assert a["n_ok"] == 299 and a["failed_tasks"] == 1 and a["n_timeout"] == 1
    assert " 1 " in next(line for line in format_compare(result).splitlines()
                         if line.startswith("a "))


def test_repetitions_are_averaged_per_task(base_latencies):
    df = frame({"a": base_latencies}, repetitions=3)
    entry = compare(df)["policies"]["a"]
    assert entry["n_ok"] == 300
    summary = summarize(df)["policies"]["a"]
    assert summary["n"] == 900 and summary["intervals"]["repetitions"] == 3
    assert summary["intervals"]["replications"] == 1


def test_policy_without_completed_tasks():
    df = frame({"a": [0.1, 0.2], "b": [0.1, 0.2]}, failed={("b", 0), ("b", 1)})
    result = compare(df, "a")
    entry = result["policies"]["b"]
    assert entry["stats"]["mean"] is None and entry["failed_tasks"] == 2
    assert entry["diff"]["n_pairs"] == 0 and entry["diff"]["stats"]["p99"] is None
    # two tasks cannot carry an interval: the value stands alone
    assert result["policies"]["a"]["stats"]["mean"]["ci"] is None
    assert TOO_SHORT in format_compare(result)


def test_default_baseline_is_stated(base_latencies):
    df = frame({"zeta": base_latencies, "alpha": base_latencies})
    result = compare(df)
    assert result["baseline"] == "alpha"
    assert "baseline alpha (default: first policy by name)" in format_compare(result)


def test_compare_errors(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies})
    with pytest.raises(TestbedError, match="baseline policy 'zzz' is not in the traces"):
        compare(df, "zzz")
    with pytest.raises(TestbedError, match="unknown statistic 'median'"):
        compare(df, "a", stats=("median",))
    with pytest.raises(TestbedError, match="unknown statistic 'p101'"):
        compare(df, "a", stats=("p101",))


def test_unpaired_tasks_are_refused(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies[:-1]})
    with pytest.raises(TestbedError, match="did not run the same tasks"):
        compare(df, "a")
    doubled = pd.concat([df, df[df["policy"] == "a"]])
    with pytest.raises(TestbedError, match="appears more than once"):
        compare(doubled, "a")


def test_format_compare(base_latencies):
    df = frame({"base": base_latencies, "slow": [x + 0.01 for x in base_latencies]})
    lines = format_compare(compare(df, "base", stats=("mean", "p95"))).splitlines()
    assert "baseline base (given)" in lines[0] and "95% batch-means interval" in lines[1]
    assert lines[2].split()[:4] == ["policy", "n_ok", "failed", "stat"]
    assert len(lines) == 3 + 4
    slow_lines = [line for line in lines if line.startswith("slow")]
    assert all(line.endswith("300") for line in slow_lines)
    assert "+10.00 [+10.00, +10.00] *" in slow_lines[0]  # the mean
    assert f"+10.00 ({TOO_SHORT})" in slow_lines[1]  # p95 of 300 tasks
    assert "degraded" not in "\n".join(lines)
    flagged = format_compare(compare(df, "base"), "run: warning: degraded emulation: x")
    assert "run: warning: degraded emulation: x" in flagged.splitlines()[2]
    assert any("(baseline)" in line for line in lines if line.startswith("base "))


def test_summary_keeps_its_keys_and_adds_intervals(base_latencies):
    summary = summarize(frame({"a": base_latencies}, failed={("a", 2)}))
    entry = summary["policies"]["a"]
    for key in ("n", "n_ok", "n_failed", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"):
        assert key in entry
    assert entry["n_timeout"] == 1 and entry["n_error"] == 0 and entry["failed_tasks"] == 1
    found = entry["intervals"]
    assert found["method"] == "batch means" and found["batches"]["mean"] == FINAL_BATCHES
    assert found["estimand"] == STEADY_STATE
    low, high = found["mean_ci_ms"]
    assert low <= found["mean_ms"] <= high  # the interval's own point
    assert found["p99_ci_ms"] is None and found["notes"]["p99"] == TOO_SHORT
    assert found["p99_ms"] is not None
    json.dumps(summary, allow_nan=False)


def test_the_compare_command(tmp_path, base_latencies, capsys: pytest.CaptureFixture):
    from testbed.analysis.traces import write_traces
    from testbed.cli import main

    write_traces(frame({"b": base_latencies, "a": [x + 0.01 for x in base_latencies]}),
                 tmp_path)
    assert main(["compare", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("baseline a (default: first policy by name)")
    assert main(["compare", str(tmp_path), "--baseline", "b", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["baseline"] == "b" and found["baseline_chosen"] == "given"
    assert found["policies"]["a"]["diff"]["stats"]["mean"]["excludes_zero"]
