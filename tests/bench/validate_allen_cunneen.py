"""Allen-Cunneen against the simulated M/G/4 wait with Pareto(2.5) sizes, over traces.

``python -m tests.bench.validate_allen_cunneen [--traces K] [--tasks N]`` from the
repository root (no root needed) prints the table of ``docs/simulator.md``: per load
(rho 0.5, 0.7, 0.9), ``K`` independent Poisson traces (default 8, seeds 20 .. 20 + K - 1;
each trace's sizes from seed + 1000) of ``N`` tasks (default 200 000) through the
simulator's one-tier model, each trace's mean wait by batch means with the fast-server
control variate (:func:`tests.unit.test_sim_theory.mean_wait`), and the mean and 95 %
t-interval across the traces of the wait and of sim / Allen-Cunneen - 1. The
Pareto(2.5) wait has infinite variance, so one trace's own interval is too narrow: the
interval across traces is the one to read. The unit test
``test_mgc_pareto_25_wait_against_allen_cunneen`` checks the first trace against the
range this command reports. Nothing is asserted here.
"""

from __future__ import annotations

import argparse

import numpy as np

from nodes.offloading.queueing import allen_cunneen_wait, pareto_scv
from testbed.analysis.stats import replication_interval
from tests.unit.test_sim_theory import MU, WORKERS, mean_wait, poisson_trace

ALPHA = 2.5
LOADS = (0.5, 0.7, 0.9)
FIRST_SEED = 20


def one_trace(rho: float, n: int, seed: int) -> float:
    """The simulated mean wait of one trace at load ``rho``."""
    lam = rho * WORKERS * MU
    x_m = (ALPHA - 1.0) / (ALPHA * MU)
    sizes = (np.random.default_rng(seed + 1000).pareto(ALPHA, n) + 1.0) * x_m
    second_moment = ALPHA * x_m**2 / (ALPHA - 2.0)
    mean, _half = mean_wait(poisson_trace(lam, n, sizes, seed=seed), lam, second_moment)
    return mean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=200_000)
    args = parser.parse_args(argv)
    if args.traces < 2:
        parser.error("--traces: expected at least 2 (an interval needs two)")
    print("| queue | rho | traces x tasks | simulated mean wait (t-interval across traces) "
          "| Allen-Cunneen | sim / AC - 1 | single traces |")
    print("|---|---|---|---|---|---|---|")
    for rho in LOADS:
        theory = allen_cunneen_wait(rho * WORKERS * MU, MU, WORKERS, 1.0, pareto_scv(ALPHA))
        waits = [one_trace(rho, args.tasks, FIRST_SEED + k) for k in range(args.traces)]
        wait = replication_interval(waits)
        gaps = [w / theory - 1.0 for w in waits]
        gap = replication_interval(gaps)
        print(f"| M/G/{WORKERS} Pareto({ALPHA:g}) | {rho:g} | {args.traces} x "
              f"{args.tasks // 1000}k | {wait.estimate:.4f} +- "
              f"{(wait.high - wait.estimate):.4f} | {theory:.4f} | "
              f"{100 * gap.estimate:+.1f} +- {100 * (gap.high - gap.estimate):.1f} % | "
              f"{100 * min(gaps):+.1f} .. {100 * max(gaps):+.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
