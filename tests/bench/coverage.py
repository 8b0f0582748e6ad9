"""Coverage of the testbed's 95 % intervals where the answer is known, with the simulator.

``python -m tests.bench.coverage [--quick] [--intervals K] [--json FILE]`` from the
repository root (no root needed) prints the table of ``docs/statistics.md``. One tier of
4 workers (service rate 1) fed Poisson arrivals over a zero-delay link
(:func:`testbed.systems.offloading.sim_replay.one_tier_model`), at loads 0.5, 0.8 and 0.9:

* **M/M/4**, exponential sizes. The truth of the steady-state mean latency is Erlang C's
  (``W_q + 1/mu``); of its p95 the root of the exact sojourn-time distribution.
* **M/G/4**, Pareto(4) sizes (mean 1, finite variance of the waits). The truth is a
  reference run of :data:`REFERENCE_TASKS` tasks per load, steady state after its
  first 5 %.

Two kinds of interval are measured against their own estimand:

* **single run** (:func:`testbed.analysis.stats.batch_interval`): per run of :data:`SINGLE_TASKS`,
  started empty, the steady-state interval, against the steady-state truth above. Runs
  the procedure calls too short give no interval; the table says how many did.
* **across replications** (:func:`testbed.analysis.stats.replication_interval`): groups of 10
  (and, for M/M/4 at 0.8 and 0.9, 20: :data:`REPLICATIONS`) runs of
  :data:`REPLICATION_TASKS` tasks started empty; the t-interval of their whole-run
  means, against the mean of a run as configured, the mean of :data:`REFERENCE_RUNS`
  further independent runs. The same
  intervals' coverage of the steady-state value is printed beside it: it shows why the
  estimand must be named.

Every cell holds at least ``--intervals`` (default 200) intervals that were given. The
goal is 93-97 %; the binomial standard error of a coverage of 95 % over 200 intervals is
1.5 points. Runs are spread over the machine's CPUs. Nothing is asserted here.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize

from nodes.offloading.queueing import erlang_c, mmc_wait
from testbed.analysis.stats import CONFIDENCE, batch_interval, replication_interval
from testbed.systems.offloading.sim_replay import one_tier_model, simulate
from workloads.trace import Task

WORKERS = 4
MU = 1.0
LOADS = (0.5, 0.8, 0.9)
#: Tasks of a single run per load: long enough for most runs to carry an interval; at
#: 0.9 two lengths, to show how coverage grows with the run where the test still passes.
SINGLE_TASKS = {0.5: (20_000,), 0.8: (80_000,), 0.9: (200_000, 400_000)}
#: Tasks of one replication per load (a short run, as a study's cell is).
REPLICATION_TASKS = {0.5: 2_000, 0.8: 5_000, 0.9: 10_000}
#: Replications behind one interval across replications; 20 as well at the loads where
#: 10 short runs are skewed enough to matter.
REPLICATIONS = {0.5: (10,), 0.8: (10, 20), 0.9: (10, 20)}
#: Runs whose mean is the truth of the intervals across replications.
REFERENCE_RUNS = 1000
REFERENCE_TASKS = 4_000_000
PARETO_ALPHA = 4.0
#: A warm-up cut longer than this share of a run is counted apart (:class:`Cell`).
LONG_CUT = 0.05
STATS = ("mean", "p95")


def sizes(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` service demands of mean 1/MU: exponential (``mmc``) or Pareto(4) (``mgc``)."""
    if kind == "mmc":
        return rng.exponential(1.0 / MU, n)
    x_m = (PARETO_ALPHA - 1.0) / (PARETO_ALPHA * MU)
    return (rng.pareto(PARETO_ALPHA, n) + 1.0) * x_m


def latencies(kind: str, rho: float, n: int, seed: int) -> np.ndarray:
    """The simulated latencies (s) of one run of ``n`` Poisson tasks started empty."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / (rho * WORKERS * MU), n))
    demands = sizes(kind, n, rng)
    tasks = [Task(i, "c1", float(a), float(s), "small")
             for i, (a, s) in enumerate(zip(arrivals, demands, strict=True))]
    res = simulate(one_tier_model(WORKERS, MU, duration=float(arrivals[-1]) + 1.0), tasks,
                   "random", seed=seed)
    return np.frombuffer(res.end) - arrivals


def mmc_sojourn_p(rho: float, q: float) -> float:
    """The ``q`` quantile of the M/M/c FCFS sojourn time: no wait with probability
    ``1 - C``, else an exponential wait of rate ``c mu - lambda``, plus the service."""
    lam, c = rho * WORKERS * MU, WORKERS
    wait_prob, theta = erlang_c(c, lam / MU), c * MU - lam

    def cdf(t: float) -> float:
        service = 1.0 - np.exp(-MU * t)
        both = 1.0 - (theta * np.exp(-MU * t) - MU * np.exp(-theta * t)) / (theta - MU)
        return (1.0 - wait_prob) * service + wait_prob * both - q

    return float(optimize.brentq(cdf, 0.0, 1000.0))


def steady_truth(kind: str, rho: float, reference_tasks: int) -> dict[str, float]:
    """The steady-state mean and p95 latency (s): exact for M/M/c, a long run otherwise."""
    if kind == "mmc":
        return {"mean": mmc_wait(rho * WORKERS * MU, MU, WORKERS) + 1.0 / MU,
                "p95": mmc_sojourn_p(rho, 0.95)}
    x = latencies(kind, rho, reference_tasks, seed=10**6 + int(rho * 100))
    x = x[len(x) // 20:]
    return {"mean": float(x.mean()), "p95": float(np.percentile(x, 95))}


def _single(args: tuple[str, float, int, int]
            ) -> tuple[dict[str, list[float] | None], int]:
    """One run's steady-state interval per statistic, and its warm-up cut (tasks)."""
    kind, rho, n, seed = args
    x = latencies(kind, rho, n, seed)
    out: dict[str, list[float] | None] = {}
    warmup = 0
    for name in STATS:
        found = batch_interval(x, name)
        out[name] = found.bounds
        warmup = found.warmup
    return out, warmup


def _run_mean(args: tuple[str, float, int, int]) -> float:
    kind, rho, n, seed = args
    return float(latencies(kind, rho, n, seed).mean())


@dataclass
class Cell:
    """One row of the table."""

    model: str
    load: float
    kind: str
    tasks: int
    statistic: str
    estimand: str
    intervals: int
    refused: int
    covered: int
    coverage: float
    of_steady_state: float | None = None
    #: Single runs: intervals whose MSER-5 warm-up cut more than :data:`LONG_CUT` of the
    #: run (a start-up transient here lasts well under 1 %), and how many of them covered.
    long_cuts: int | None = None
    long_cuts_covered: int | None = None


def single_run(pool: ProcessPoolExecutor, kind: str, rho: float, n: int, want: int,
               truth: dict[str, float]) -> list[Cell]:
    """Runs until every statistic has ``want`` intervals (or 4 x ``want`` runs)."""
    found: dict[str, list[list[float]]] = {name: [] for name in STATS}
    cut_long: dict[str, list[bool]] = {name: [] for name in STATS}
    refused = dict.fromkeys(STATS, 0)
    seed = 1
    while min(len(v) for v in found.values()) < want and seed <= 4 * want:
        batch = [(kind, rho, n, s) for s in range(seed, seed + 2 * (os.cpu_count() or 1))]
        seed += len(batch)
        for result, warmup in pool.map(_single, batch):
            for name in STATS:
                if result[name] is None:
                    refused[name] += 1
                elif len(found[name]) < want:
                    found[name].append(result[name])
                    cut_long[name].append(warmup > LONG_CUT * n)
    cells = []
    for name in STATS:
        hits = [low <= truth[name] <= high for low, high in found[name]]
        long_hits = [hit for hit, long in zip(hits, cut_long[name], strict=True) if long]
        cells.append(Cell(kind, rho, "single run", n, name, "steady state", len(found[name]),
                          refused[name], sum(hits), sum(hits) / max(1, len(hits)),
                          long_cuts=len(long_hits), long_cuts_covered=sum(long_hits)))
    return cells


def across(pool: ProcessPoolExecutor, kind: str, rho: float, n: int, want: int,
           steady: float, replications: int) -> Cell:
    """``want`` t-intervals of ``replications`` run means each against the mean of a run
    as configured (the mean of :data:`REFERENCE_RUNS` further runs)."""
    count = want * replications + REFERENCE_RUNS
    means = list(pool.map(_run_mean, [(kind, rho, n, 10**5 + s) for s in range(count)],
                          chunksize=32))
    reference = float(np.mean(means[want * replications:]))
    covered = of_steady = 0
    for k in range(want):
        found = replication_interval(means[k * replications:(k + 1) * replications],
                                     bounded=True)
        assert found.low is not None and found.high is not None
        covered += found.low <= reference <= found.high
        of_steady += found.low <= steady <= found.high
    return Cell(kind, rho, f"across {replications} replications", n, "mean",
                "mean of a run as configured", want, 0, covered, covered / want,
                of_steady / want)


def measure(want: int, quick: bool, only: Sequence[str] = (), single: bool = False
            ) -> list[Cell]:
    """Every cell of the table (``only``: of these ``KIND:LOAD``, e.g. ``mmc:0.9``;
    ``single``: single-run cells only)."""
    scale = 10 if quick else 1
    cells: list[Cell] = []
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        for kind in ("mmc", "mgc"):
            for rho in LOADS:
                if only and f"{kind}:{rho}" not in only:
                    continue
                truth = steady_truth(kind, rho, REFERENCE_TASKS // scale)
                found = [cell for n in SINGLE_TASKS[rho]
                         for cell in single_run(pool, kind, rho, n // scale, want, truth)]
                found += [] if single else [
                    across(pool, kind, rho, REPLICATION_TASKS[rho], want, truth["mean"], r)
                    for r in (REPLICATIONS[rho] if kind == "mmc" else (10,))]
                for cell in found:
                    print(format_row(cell), flush=True)
                cells += found
    return cells


def format_row(cell: Cell) -> str:
    """One line of the table."""
    model = "M/M/4" if cell.model == "mmc" else "M/G/4 Pareto(4)"
    steady = "" if cell.of_steady_state is None else \
        f"  (of the steady-state value: {100 * cell.of_steady_state:.1f} %)"
    cuts = "" if not cell.long_cuts else \
        f"  (warm-up cut > {LONG_CUT:.0%} of the run in {cell.long_cuts}: " \
        f"{100 * (cell.long_cuts_covered or 0) / cell.long_cuts:.1f} % covered)"
    return (f"{model:16} rho {cell.load}  {cell.kind:27} {cell.tasks:>7} tasks  "
            f"{cell.statistic:4}  {100 * cell.coverage:5.1f} % of {cell.intervals} "
            f"({cell.refused} runs too short){steady}{cuts}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="runs and reference runs 10 times shorter (single runs then "
                             "mostly too short: a smoke test)")
    parser.add_argument("--intervals", type=int, default=200,
                        help="intervals per cell (default 200)")
    parser.add_argument("--json", help="also write every cell to this file")
    parser.add_argument("--only", action="append", default=[], metavar="KIND:LOAD",
                        help="only this queue and load (e.g. mmc:0.9, mgc:0.8); repeatable")
    parser.add_argument("--single", action="store_true", help="single-run cells only")
    args = parser.parse_args(argv)
    print(f"{round(CONFIDENCE * 100)} % intervals; goal: coverage 93-97 %", flush=True)
    cells = measure(args.intervals, args.quick, args.only, args.single)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([asdict(c) for c in cells], fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
