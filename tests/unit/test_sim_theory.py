"""The simulator against queueing theory: M/M/c (Erlang-C) and M/G/c (Allen-Cunneen).

One client sends Poisson arrivals to one tier over a zero-delay link, so the tier is a
textbook M/G/c queue and the mean wait has a closed form. Traces are drawn here with
fixed seeds; the mean wait is estimated with batch means (warm-up dropped, 30 batches,
Student-t 95 % interval).

Plain batch means would need millions of tasks for a 2 % interval at rho = 0.9, so the
estimate uses a control variate: the waits of a single server ``WORKERS`` times as fast
fed the same arrivals and sizes (Lindley's recursion), whose exact mean is known
(Pollaczek-Khinchine) and which moves with the simulated waits batch by batch
(correlation 0.9-0.997). The simulated batch means minus ``beta`` times the control's
error keep the simulator's mean and shrink the interval 3-10 fold.
``docs/simulator.md`` records the numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nodes.offloading.queueing import allen_cunneen_wait, mmc_wait, pareto_scv
from testbed.systems.offloading.sim_replay import one_tier_model, simulate
from workloads.trace import Task

WORKERS = 4
MU = 1.0
BATCHES = 30
T_975_29 = 2.045  # Student t quantile, 29 degrees of freedom
WARMUP = 0.05  # share of tasks dropped before the batches


def poisson_trace(rate: float, n: int, sizes: np.ndarray, seed: int) -> list[Task]:
    """``n`` Poisson arrivals of rate ``rate`` carrying ``sizes``."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))
    return [Task(i, "c1", float(a), float(s), "small")
            for i, (a, s) in enumerate(zip(arrivals, sizes, strict=True))]


def fast_server_waits(tasks: list[Task]) -> np.ndarray:
    """Waits of one server ``WORKERS`` times as fast on the same trace (Lindley)."""
    out = np.empty(len(tasks))
    wait = 0.0
    for j, task in enumerate(tasks):
        if j:
            prev = tasks[j - 1]
            wait = max(0.0, wait + prev.size / WORKERS - (task.arrival - prev.arrival))
        out[j] = wait
    return out


def batch_means(values: np.ndarray) -> np.ndarray:
    """Means of ``BATCHES`` consecutive batches after the warm-up."""
    kept = values[int(WARMUP * len(values)):]
    size = len(kept) // BATCHES
    return kept[:size * BATCHES].reshape(BATCHES, size).mean(axis=1)


def mean_wait(tasks: list[Task], lam: float, second_moment: float) -> tuple[float, float]:
    """Simulated mean wait and the half-width of its 95 % interval (control variate).

    ``second_moment`` is E[size^2]; with it the fast server's mean wait is exact.
    """
    res = simulate(one_tier_model(WORKERS, MU, duration=tasks[-1].arrival + 1.0), tasks, "jsq", seed=1)
    assert all(o == 1 for o in res.outcome)
    waits = np.frombuffer(res.start) - np.frombuffer(res.server_arrival)
    rho = lam / (WORKERS * MU)
    control_mean = lam * second_moment / WORKERS**2 / (2.0 * (1.0 - rho))
    sim = batch_means(waits)
    control = batch_means(fast_server_waits(tasks)) - control_mean
    beta = float(np.cov(sim, control)[0, 1] / control.var(ddof=1))
    adjusted = sim - beta * control
    half = T_975_29 * float(adjusted.std(ddof=1)) / math.sqrt(BATCHES)
    return float(adjusted.mean()), half


@pytest.mark.parametrize(("rho", "n"), [(0.5, 400_000), (0.7, 200_000), (0.9, 200_000)])
def test_mmc_wait_matches_erlang_c(rho: float, n: int) -> None:
    lam = rho * WORKERS * MU
    sizes = np.random.default_rng(100 + int(rho * 10)).exponential(1.0 / MU, n)
    mean, half = mean_wait(poisson_trace(lam, n, sizes, seed=int(rho * 10)), lam,
                           2.0 / MU**2)
    theory = mmc_wait(lam, MU, WORKERS)
    print(f"M/M/{WORKERS} rho={rho}: sim {mean:.4f} +- {half:.4f}, Erlang-C {theory:.4f}, "
          f"error {100 * (mean / theory - 1):+.2f} %")
    assert abs(mean / theory - 1) < 0.02
    assert half < 0.02 * theory  # the interval is tight enough for the check to mean much


#: Allen-Cunneen's measured underestimate of the M/G/4 Pareto(4) mean wait (relative):
#: sim / AC - 1 = +10.0 %, +4.8 %, +1.4 % at rho 0.5, 0.7, 0.9 (docs/simulator.md).
AC_GAP = {0.5: 0.100, 0.7: 0.048, 0.9: 0.014}


@pytest.mark.parametrize("rho", sorted(AC_GAP))
def test_mgc_pareto_wait_within_allen_cunneen_gap(rho: float) -> None:
    alpha = 4.0
    n = 200_000
    lam = rho * WORKERS * MU
    x_m = (alpha - 1.0) / (alpha * MU)
    sizes = (np.random.default_rng(7).pareto(alpha, n) + 1.0) * x_m
    second_moment = alpha * x_m**2 / (alpha - 2.0)
    mean, half = mean_wait(poisson_trace(lam, n, sizes, seed=8), lam, second_moment)
    theory = allen_cunneen_wait(lam, MU, WORKERS, 1.0, pareto_scv(alpha))
    print(f"M/G/{WORKERS} Pareto({alpha}) rho={rho}: sim {mean:.4f} +- {half:.4f}, "
          f"Allen-Cunneen {theory:.4f}, gap {100 * (mean / theory - 1):+.2f} %")
    assert abs((mean / theory - 1) - AC_GAP[rho]) < 0.02


#: Allen-Cunneen against the M/G/4 wait with the Pareto(2.5) sizes every offloading
#: experiment uses (Cs^2 = 0.8): sim / AC - 1 over 8 independent traces of 200k tasks
#: (seeds 20-27), mean and 95 % t-interval across them: -16.3 +- 2.4 % at rho 0.5,
#: -12.0 +- 2.3 % at 0.7, -2.3 +- 0.9 % at 0.9 (docs/simulator.md): here the
#: approximation *overestimates*. The bounds hold the range of single traces seen there
#: (-19.6..-12.3, -15.7..-7.2, -4.3..-0.8 %) with some room.
AC_GAP_PARETO_25 = {0.5: (-0.23, -0.09), 0.7: (-0.19, -0.04), 0.9: (-0.06, 0.0)}


@pytest.mark.parametrize("rho", sorted(AC_GAP_PARETO_25))
def test_mgc_pareto_25_wait_against_allen_cunneen(rho: float) -> None:
    alpha, n, seed = 2.5, 200_000, 20
    lam = rho * WORKERS * MU
    x_m = (alpha - 1.0) / (alpha * MU)
    sizes = (np.random.default_rng(seed + 1000).pareto(alpha, n) + 1.0) * x_m
    second_moment = alpha * x_m**2 / (alpha - 2.0)
    mean, half = mean_wait(poisson_trace(lam, n, sizes, seed=seed), lam, second_moment)
    theory = allen_cunneen_wait(lam, MU, WORKERS, 1.0, pareto_scv(alpha))
    gap = mean / theory - 1
    print(f"M/G/{WORKERS} Pareto({alpha}) rho={rho}: sim {mean:.4f} +- {half:.4f}, "
          f"Allen-Cunneen {theory:.4f}, gap {100 * gap:+.2f} %")
    low, high = AC_GAP_PARETO_25[rho]
    assert low <= gap <= high
