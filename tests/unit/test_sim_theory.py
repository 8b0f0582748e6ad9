"""The simulator against queueing theory: M/M/c (Erlang-C) and M/G/c (Allen-Cunneen).

One client sends Poisson arrivals to one tier over a zero-delay link, so the tier is a
textbook M/G/c queue and the mean wait has a closed form. Traces are drawn here with
fixed seeds; the mean wait is estimated with batch means (warm-up dropped, 30 batches,
Student-t 95 % interval). ``docs/simulator.md`` records the numbers.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from testbed.queueing import allen_cunneen_wait, mmc_wait, pareto_scv
from testbed.scenario import scenario_from_dict
from testbed.sim.executor import build_model, simulate
from workloads.trace import Task

WORKERS = 4
MU = 1.0
BATCHES = 30
T_975_29 = 2.045  # Student t quantile, 29 degrees of freedom
WARMUP = 0.05  # share of tasks dropped before the batches


def one_tier_model(horizon: float):
    """A client and a ``WORKERS``-worker tier joined by one zero-delay link."""
    scenario = scenario_from_dict({
        "name": "theory", "seed": 1,
        "topology": {"nodes": [{"name": "c1", "role": "client"},
                               {"name": "srv", "role": "server", "tier": "edge"}],
                     "links": [{"a": "c1", "b": "srv"}]},
        "services": [{"name": "tier", "program": "tier_server", "node": "srv",
                      "params": {"workers": WORKERS, "mu": MU}}],
        "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": MU}},
        "policies": ["jsq"], "duration": horizon})
    return build_model(scenario)


def poisson_trace(rate: float, n: int, sizes: np.ndarray, seed: int) -> list[Task]:
    """``n`` Poisson arrivals of rate ``rate`` carrying ``sizes``."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))
    return [Task(i, "c1", float(a), float(s), "small")
            for i, (a, s) in enumerate(zip(arrivals, sizes, strict=True))]


def batch_mean_wait(tasks: list[Task]) -> tuple[float, float]:
    """Mean wait and the half-width of its 95 % batch-means interval."""
    res = simulate(one_tier_model(tasks[-1].arrival + 1.0), tasks, "jsq", seed=1)
    assert all(o == 1 for o in res.outcome)
    waits = [res.start[i] - res.server_arrival[i] for i in range(len(tasks))]
    waits = waits[int(WARMUP * len(waits)):]
    size = len(waits) // BATCHES
    means = [statistics.fmean(waits[b * size:(b + 1) * size]) for b in range(BATCHES)]
    return statistics.fmean(means), T_975_29 * statistics.stdev(means) / math.sqrt(BATCHES)


@pytest.mark.parametrize(("rho", "n"), [(0.5, 200_000), (0.7, 250_000), (0.9, 400_000)])
def test_mmc_wait_matches_erlang_c(rho: float, n: int) -> None:
    lam = rho * WORKERS * MU
    sizes = np.random.default_rng(100 + int(rho * 10)).exponential(1.0 / MU, n)
    mean, half = batch_mean_wait(poisson_trace(lam, n, sizes, seed=int(rho * 10)))
    theory = mmc_wait(lam, MU, WORKERS)
    print(f"M/M/{WORKERS} rho={rho}: sim {mean:.4f} +- {half:.4f}, Erlang-C {theory:.4f}, "
          f"error {100 * (mean / theory - 1):+.2f} %")
    assert abs(mean / theory - 1) < 0.02
    assert abs(mean - theory) < half + 0.02 * theory  # the interval is not hiding a bias


@pytest.mark.parametrize("rho", [0.7, 0.9])
def test_mgc_pareto_wait_within_allen_cunneen_gap(rho: float) -> None:
    alpha = 4.0
    n = 300_000
    lam = rho * WORKERS * MU
    x_m = (alpha - 1.0) / (alpha * MU)
    sizes = (np.random.default_rng(7).pareto(alpha, n) + 1.0) * x_m
    mean, half = batch_mean_wait(poisson_trace(lam, n, sizes, seed=8))
    theory = allen_cunneen_wait(lam, MU, WORKERS, 1.0, pareto_scv(alpha))
    print(f"M/G/{WORKERS} Pareto({alpha}) rho={rho}: sim {mean:.4f} +- {half:.4f}, "
          f"Allen-Cunneen {theory:.4f}, gap {100 * (mean / theory - 1):+.2f} %")
    assert abs(mean / theory - 1) < 0.10
