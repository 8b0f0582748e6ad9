"""Tests of the interval methods: t-intervals, MSER-5 warm-up, batch means and their
coverage on an autocorrelated queue, where treating tasks as independent fails."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from testbed.analysis.stats import (
    FINAL_BATCHES,
    RUN_AS_CONFIGURED,
    STEADY_STATE,
    TEST_BATCHES,
    TOO_SHORT,
    batch_interval,
    batch_plan,
    independent,
    mser5_warmup,
    paired_batch_interval,
    replication_interval,
    smallest_batch,
    statistic,
    t_interval,
)
from testbed.errors import TestbedError


def mm1_latencies(n: int, reps: int, rho: float, seed: int) -> np.ndarray:
    """``reps`` independent M/M/1 runs (service rate 1) of ``n`` tasks each, started in
    the stationary state: rows are runs, columns the tasks' sojourn times in order."""
    rng = np.random.default_rng(seed)
    busy = rng.random(reps) < rho
    wait = np.where(busy, rng.exponential(1.0 / (1.0 - rho), reps), 0.0)
    out = np.empty((reps, n))
    for k in range(n):
        service = rng.exponential(1.0, reps)
        out[:, k] = wait + service
        wait = np.maximum(0.0, wait + service - rng.exponential(1.0 / rho, reps))
    return out


def test_t_interval_is_students():
    x = [3.0, 5.0, 4.0, 6.0, 2.0]
    mean, low, high = t_interval(x)
    half = scipy_stats.t.ppf(0.975, 4) * np.std(x, ddof=1) / np.sqrt(5)
    assert mean == 4.0 and low == pytest.approx(4.0 - half) and high == pytest.approx(4.0 + half)
    assert t_interval([7.0]) == (7.0, None, None)
    with pytest.raises(TestbedError, match="at least one value"):
        t_interval([])
    found = replication_interval([1.0, 2.0, 3.0])
    assert found.n == 3 and found.method == "replications" and found.bounds is not None
    assert "3 replication(s)" in found.describe()


def test_mser5_cuts_a_transient_and_keeps_a_stationary_series():
    rng = np.random.default_rng(0)
    transient = np.concatenate([np.linspace(50.0, 1.0, 200), rng.exponential(1.0, 1800)])
    assert 150 <= mser5_warmup(transient) <= 260
    assert mser5_warmup(rng.normal(10.0, 1.0, 2000)) <= 100
    assert mser5_warmup(np.ones(10)) == 0  # too short to search


def test_replication_intervals_name_their_estimand_and_bound_a_latency_at_zero():
    found = replication_interval([1.0, 50.0, 2.0], bounded=True)
    assert found.estimand == RUN_AS_CONFIGURED
    assert found.low == 0.0 and found.bounded_at_zero and found.high > found.estimate
    diff = replication_interval([1.0, 50.0, 2.0])
    assert diff.low < 0.0 and not diff.bounded_at_zero  # a difference may be negative


def test_von_neumann_test_tells_independent_from_correlated_values():
    rng = np.random.default_rng(1)
    iid = [independent(rng.normal(size=200)) for _ in range(200)]
    assert 0.7 <= np.mean(iid) <= 0.9  # the test's level is 0.2
    ar = np.zeros(200)
    for k in range(1, 200):
        ar[k] = 0.6 * ar[k - 1] + rng.normal()
    assert not independent(ar)


def test_the_batch_size_grows_with_the_correlation():
    rng = np.random.default_rng(2)
    iid = rng.exponential(1.0, 20_000)
    queue = mm1_latencies(20_000, 1, 0.7, seed=3)[0]
    assert batch_plan(iid, "mean").size >= TEST_BATCHES  # the batches that passed
    assert batch_interval(iid, "mean", warmup=0).batch_tasks == 20_000 // FINAL_BATCHES
    assert smallest_batch("mean") == 1 and smallest_batch("p99") == 1000
    assert smallest_batch("p50") == 20
    # a run that is short against its correlation gets no interval, and says so
    short = mm1_latencies(600, 1, 0.95, seed=3)[0]
    found = batch_interval(short, "mean")
    assert found.bounds is None and found.estimate == pytest.approx(
        statistic(short[found.warmup:], "mean"))
    assert TOO_SHORT in found.describe()
    assert batch_plan(queue[:TEST_BATCHES * 1000 - 1], "p99") is None  # < 40 batches of 1000
    passed = batch_plan(queue, "mean")
    assert passed is not None and passed.size < iid.size  # longer batches than for iid


def test_batch_means_cover_an_autocorrelated_queue_where_iid_intervals_do_not():
    """M/M/1 at rho 0.7: the true mean sojourn is 1 / (1 - rho). Over 200 runs of 20000
    tasks, 95 % steady-state intervals cover it in 93-97 % of the runs that get one;
    intervals that treat the tasks as independent cover it in under half."""
    runs = mm1_latencies(20_000, 200, 0.7, seed=11)
    truth = 1.0 / (1.0 - 0.7)
    given = batch_cover = iid_cover = 0
    for x in runs:
        found = batch_interval(x, "mean")
        assert found.estimand == STEADY_STATE
        _, low, high = t_interval(x)
        iid_cover += low <= truth <= high
        if found.bounds is None:
            continue
        given += 1
        assert found.n == FINAL_BATCHES and found.low <= found.estimate <= found.high
        batch_cover += found.low <= truth <= found.high
    assert given >= 150
    assert 0.90 <= batch_cover / given <= 0.99
    assert iid_cover / len(runs) <= 0.5


def test_a_percentile_interval_contains_its_point_and_is_bounded_at_zero():
    x = mm1_latencies(20_000, 1, 0.5, seed=2)[0]
    found = batch_interval(x, "p95")
    assert found.estimate == pytest.approx(statistic(x[found.warmup:], "p95"))
    assert found.low < found.estimate < found.high
    rng = np.random.default_rng(5)
    spiky = np.where(rng.random(4000) < 0.02, 500.0, 0.001)  # median near 0, wide spread
    low = batch_interval(spiky, "mean", warmup=0)
    assert low.bounds is not None and low.low >= 0.0


def test_paired_intervals():
    x = mm1_latencies(4000, 1, 0.7, seed=3)[0]
    same = paired_batch_interval(x, x.copy(), "mean")
    assert same.estimate == 0.0 and same.bounds == [0.0, 0.0]
    shifted = paired_batch_interval(x + 10.0, x, "p50")
    assert shifted.estimate == pytest.approx(10.0)
    assert shifted.bounds == pytest.approx([10.0, 10.0])
    noisy = paired_batch_interval(x + np.random.default_rng(4).normal(0, 0.5, x.size), x,
                                  "mean", warmup=100)
    assert noisy.low < 0.0 < noisy.high
    # the estimate is the difference of the two series' own steady-state estimates
    y = x * 1.5
    both = paired_batch_interval(y, x, "p95", warmup=100)
    assert both.estimate == pytest.approx(batch_interval(y, "p95", warmup=100).estimate
                                          - batch_interval(x, "p95", warmup=100).estimate)


def test_too_few_tasks_give_no_interval():
    found = batch_interval(np.arange(15, dtype=float), "mean")
    assert found.bounds is None and found.n == 0 and found.estimate is not None
    assert TOO_SHORT in found.describe()
    assert batch_interval(np.array([]), "mean").estimate is None
