"""Tests of the report layer: CDF plots, tables and the paired bootstrap comparison."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from testbed.errors import TestbedError
from testbed.report import compare, format_compare, format_table, plot_cdfs
from testbed.traces import rows_to_frame, summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def frame(latencies: dict[str, list[float]], repetitions: int = 1, failed=()) -> pd.DataFrame:
    """A trace frame: ``latencies[policy][i]`` is task i's latency (s) in every repetition.

    ``failed`` lists (policy, task_id) pairs recorded as timeouts instead.
    """
    rows = []
    for policy, values in latencies.items():
        for rep in range(repetitions):
            for task_id, latency in enumerate(values):
                ok = (policy, task_id) not in failed
                rows.append(
                    {
                        "run": "r",
                        "policy": policy,
                        "repetition": rep,
                        "kind": "task",
                        "task_id": task_id,
                        "client": "c1",
                        "target": f"t{task_id % 2}",
                        "tier": "edge",
                        "size": 0.01,
                        "cls": "small",
                        "arrival_model": float(task_id),
                        "dispatch_model": float(task_id),
                        "arrival_wall": 100.0 + task_id,
                        "dispatch_wall": 100.0 + task_id,
                        "state_age_s": 0.0,
                        "decision_us": 1.0,
                        "outcome": "ok" if ok else "timeout",
                        **(_ok_columns(task_id, latency) if ok else {}),
                    }
                )
    return rows_to_frame(rows)


def _ok_columns(task_id: int, latency: float) -> dict:
    wall = 100.0 + task_id
    return {
        "response_model": task_id + latency,
        "server_arrival_wall": wall,
        "start_wall": wall,
        "end_wall": wall + latency,
        "response_wall": wall + latency,
        "latency_s": latency,
        "network_s": 0.0,
        "wait_s": 0.0,
        "service_s": latency,
        "latency_wall_s": latency,
        "queue_at_arrival": 0,
    }


@pytest.fixture
def base_latencies() -> list[float]:
    return list(np.random.default_rng(1).exponential(0.05, size=300))


# --- plots ------------------------------------------------------------------------------


@pytest.mark.parametrize("log_x", [False, True])
def test_plot_cdfs_writes_one_png_per_policy_and_combined(tmp_path, base_latencies, log_x):
    df = frame({"jsq": base_latencies, "random/v2": [x + 0.01 for x in base_latencies]})
    paths = plot_cdfs(df, tmp_path / "plots", log_x=log_x)
    names = [p.name for p in paths]
    assert names == ["cdf_jsq.png", "cdf_random_v2.png", "cdf_all.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_plot_cdfs_policy_without_completed_tasks(tmp_path):
    df = frame({"a": [0.1, 0.2], "b": [0.1, 0.2]}, failed={("b", 0), ("b", 1)})
    paths = plot_cdfs(df, tmp_path)
    assert all(p.is_file() for p in paths) and len(paths) == 3


# --- table ------------------------------------------------------------------------------


def test_format_table(base_latencies):
    df = frame({"jsq": base_latencies, "random": base_latencies}, failed={("random", 3)})
    summary = summarize(df)
    text = format_table(summary)
    lines = text.splitlines()
    assert lines[0].split() == ["policy", "n", "failed", "mean_ms", "p50_ms", "p95_ms", "p99_ms"]
    assert len({len(line) for line in lines}) == 1  # fixed width
    jsq = lines[1].split()
    assert jsq[:3] == ["jsq", "300", "0"]
    assert float(jsq[3]) == pytest.approx(summary["policies"]["jsq"]["mean_ms"], abs=0.005)
    assert lines[2].split()[:3] == ["random", "300", "1"]


def test_format_table_missing_values():
    summary = summarize(frame({"a": [0.1]}, failed={("a", 0)}))
    assert format_table(summary).splitlines()[1].split() == ["a", "1", "1", "-", "-", "-", "-"]


# --- compare ----------------------------------------------------------------------------


def test_uniformly_slower_policy_excludes_zero(base_latencies):
    df = frame({"base": base_latencies, "slow": [x + 0.010 for x in base_latencies]})
    result = compare(df, "base", n_boot=500)
    diff = result["policies"]["slow"]["diff"]
    assert diff["n_pairs"] == 300
    for stat in ("mean", "p50", "p95", "p99"):
        item = diff["stats"][stat]
        assert item["value"] == pytest.approx(10.0)
        low, high = item["ci"]
        assert low > 0 and low == pytest.approx(10.0) and high == pytest.approx(10.0)
        assert item["excludes_zero"]
    assert result["policies"]["base"]["diff"] is None


def test_identical_policies_include_zero(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies})
    item = compare(df, "a", n_boot=300)["policies"]["b"]["diff"]["stats"]["mean"]
    assert item["value"] == 0.0 and item["ci"] == [0.0, 0.0]
    assert not item["excludes_zero"]


def test_noisy_comparisons():
    rng = np.random.default_rng(3)
    base = rng.exponential(0.05, size=400)
    noise = rng.normal(0.0, 0.01, size=400)
    df = frame(
        {"base": list(base), "same": list(base + noise), "worse": list(base + 0.01 + noise)},
        repetitions=2,
    )
    result = compare(df, "base", n_boot=1000, seed=1)
    assert result["policies"]["worse"]["diff"]["n_pairs"] == 800
    same = result["policies"]["same"]["diff"]["stats"]["mean"]
    worse = result["policies"]["worse"]["diff"]["stats"]["mean"]
    assert same["ci"][0] < 0 < same["ci"][1]
    assert worse["excludes_zero"] and worse["ci"][0] > 5.0


def test_per_policy_stats_and_cis(base_latencies):
    df = frame({"a": base_latencies})
    result = compare(df, "a", stats=("mean", "p90", "p99.9"), n_boot=400)
    stats = result["policies"]["a"]["stats"]
    ms = np.array(base_latencies) * 1000
    assert stats["mean"]["value"] == pytest.approx(ms.mean())
    assert stats["p90"]["value"] == pytest.approx(np.percentile(ms, 90))
    assert stats["p99.9"]["value"] == pytest.approx(np.percentile(ms, 99.9))
    for item in stats.values():
        assert item["ci"][0] <= item["value"] <= item["ci"][1]
    assert result["stats"] == ["mean", "p90", "p99.9"]
    assert result["confidence"] == 0.95 and result["unit"] == "ms"


def test_compare_is_reproducible_and_independent_of_other_policies(base_latencies):
    two = frame({"a": base_latencies, "b": [x * 1.1 for x in base_latencies]})
    three = frame(
        {"a": base_latencies, "b": [x * 1.1 for x in base_latencies], "c": base_latencies}
    )
    r1, r2 = compare(two, "a", n_boot=200), compare(two, "a", n_boot=200)
    assert r1 == r2
    r3 = compare(three, "a", n_boot=200)
    assert r3["policies"]["b"] == r1["policies"]["b"]
    assert compare(two, "a", n_boot=200, seed=9)["policies"]["b"] != r1["policies"]["b"]


def test_quantile_diff_is_difference_of_quantiles():
    """The paired quantile difference is q(policy) - q(baseline), not q(differences)."""
    base = [0.01 * i for i in range(1, 101)]
    # Same values shifted by one task: 99 pairs differ by +10 ms, one by -990 ms. The
    # median of the differences would be +10 ms; the difference of medians is 0.
    shifted = base[1:] + base[:1]
    df = frame({"base": base, "other": shifted})
    item = compare(df, "base", stats=("p50",), n_boot=200)["policies"]["other"]["diff"]
    assert item["stats"]["p50"]["value"] == pytest.approx(0.0)


def test_failed_tasks_are_left_out_of_pairs(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies}, failed={("b", 0), ("a", 5)})
    result = compare(df, "a", n_boot=100)
    assert result["policies"]["b"]["diff"]["n_pairs"] == 298
    assert result["policies"]["a"]["n_ok"] == 299


def test_policy_without_completed_tasks():
    df = frame({"a": [0.1, 0.2], "b": [0.1, 0.2]}, failed={("b", 0), ("b", 1)})
    entry = compare(df, "a", n_boot=50)["policies"]["b"]
    assert entry["stats"]["mean"] is None
    assert entry["diff"]["n_pairs"] == 0 and entry["diff"]["stats"]["p99"] is None
    assert "b" in format_compare(compare(df, "a", n_boot=50))


def test_compare_errors(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies})
    with pytest.raises(TestbedError, match="baseline policy 'zzz' is not in the traces"):
        compare(df, "zzz")
    with pytest.raises(TestbedError, match="unknown statistic 'median'"):
        compare(df, "a", stats=("median",))
    with pytest.raises(TestbedError, match="unknown statistic 'p101'"):
        compare(df, "a", stats=("p101",))
    with pytest.raises(TestbedError, match="n_boot"):
        compare(df, "a", n_boot=0)
    with pytest.raises(TestbedError, match="seed"):
        compare(df, "a", seed=-1)


def test_unpaired_tasks_are_refused(base_latencies):
    df = frame({"a": base_latencies, "b": base_latencies[:-1]})
    with pytest.raises(TestbedError, match="did not run the same tasks"):
        compare(df, "a")
    doubled = pd.concat([df, df[df["policy"] == "a"]])
    with pytest.raises(TestbedError, match="appears more than once"):
        compare(doubled, "a")


def test_format_compare(base_latencies):
    df = frame({"base": base_latencies, "slow": [x + 0.01 for x in base_latencies]})
    text = format_compare(compare(df, "base", stats=("mean", "p95"), n_boot=100))
    lines = text.splitlines()
    assert "baseline base" in lines[0] and "95%" in lines[0]
    assert lines[1].split()[:3] == ["policy", "n_ok", "stat"]
    assert len(lines) == 2 + 4
    slow_lines = [line for line in lines if line.startswith("slow")]
    assert all(line.endswith("300") for line in slow_lines)
    assert all("+10.00 [+10.00, +10.00] *" in line for line in slow_lines)
    assert any("(baseline)" in line for line in lines if line.startswith("base "))
