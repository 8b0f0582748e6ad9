"""Confidence intervals that hold for queueing latencies, each with its estimand.

The latencies of one run are not independent draws: a task that waits behind a burst
makes the next one wait too, so resampling a run's tasks as if they were independent
gives intervals far narrower than the run-to-run spread (``docs/statistics.md``). Two
methods are used instead; every interval names its method, its **estimand** (what it is
an interval *for*) and how many units stand behind it, and the point printed with it is
that same estimator's value, so the point always lies inside its interval:

* **Across replications** (:func:`replication_interval`): each independent replication
  (its own workload seed, its own trace) gives one value of a statistic; the interval is
  Student's t over those values. Its estimand is the expected value of that statistic
  for *a run as configured* (started empty, of the configured duration): a run started
  empty is not in steady state, so this is not the steady-state value unless each
  replication's warm-up was cut first.
* **Batch means** (:func:`batch_interval`, :func:`paired_batch_interval`) within one
  run. Its estimand is the **steady-state** value: the warm-up is cut with MSER-5
  (:func:`mser5_warmup`) and the point is the statistic of every task after it. The
  batch size is chosen from the data (:func:`batch_plan`): batches double in size until
  their values pass a von Neumann test of independence with at least
  :data:`TEST_BATCHES` batches; the half-width is the wider of Student's t over those
  batches and over the tasks regrouped into :data:`FINAL_BATCHES` longer batches
  (sectioning: centred on the statistic of all the tasks, not on the batches' own
  small-sample percentiles). A run too short for batches that pass the test gets no
  interval, and says so (:data:`TOO_SHORT`), rather than a wrong one. A percentile's
  batches must each hold at least :data:`TAIL_TASKS` tasks beyond it.

An interval of a latency (not of a difference) is bounded at zero: its lower end is
``max(0, low)`` (``bounded_at_zero`` says when that cut it). The coverage of both methods
is measured, not assumed: ``python -m tests.bench.coverage`` (``docs/statistics.md``).

Statistics are ``mean`` or a percentile ``p<q>`` of latencies in milliseconds
(numpy's linear interpolation, as ``summary.json``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from testbed.errors import TestbedError

CONFIDENCE = 0.95
MSER_BATCH = 5  # MSER-5: the warm-up search works on means of 5 consecutive tasks
#: Fewest batches the independence test is run on: below this it has too little power
#: to see the correlation left between short batches.
TEST_BATCHES = 40
#: How many long batches the tasks are regrouped into once the test passed (each at
#: least four times as long as the ones that passed, so they carry less of the
#: correlation the test could not see; ``docs/statistics.md``, coverage).
FINAL_BATCHES = 10
#: The test's level: a lenient one, so that doubtful batch sizes are doubled.
INDEPENDENCE_ALPHA = 0.20
#: A percentile's batches each hold at least this many tasks beyond it (p99: 1000-task
#: batches), so a batch's percentile is not just its largest value.
TAIL_TASKS = 10
#: What an estimate without an interval says, in tables and ``describe``.
TOO_SHORT = "too short for an interval"
STEADY_STATE = "steady state (warm-up removed)"
RUN_AS_CONFIGURED = "mean of a run as configured (started empty)"


def parse_statistic(name: str) -> float | None:
    """``None`` for ``mean``, ``q`` for ``p<q>`` (0 <= q <= 100); else a TestbedError."""
    if name == "mean":
        return None
    match = re.fullmatch(r"p(\d+(?:\.\d+)?)", name)
    if match and 0.0 <= float(match.group(1)) <= 100.0:
        return float(match.group(1))
    raise TestbedError(f"unknown statistic {name!r}; expected 'mean' or 'p<q>' with 0 <= q <= 100")


def statistic(values: np.ndarray, name: str) -> float:
    """The statistic ``name`` of ``values`` (non-empty)."""
    q = parse_statistic(name)
    return float(np.mean(values) if q is None else np.percentile(values, q))


def half_width(samples: Sequence[float], confidence: float = CONFIDENCE) -> float | None:
    """Student-t half-width of the mean of ``samples`` (``None`` for fewer than two)."""
    x = np.asarray(samples, dtype=float)
    if x.size < 2:
        return None
    return float(scipy_stats.t.ppf(0.5 + confidence / 2.0, x.size - 1)
                 * x.std(ddof=1) / np.sqrt(x.size))


def t_interval(samples: Sequence[float], confidence: float = CONFIDENCE
               ) -> tuple[float, float | None, float | None]:
    """Mean of ``samples`` and its Student-t interval (``None`` bounds for one sample)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise TestbedError("an interval needs at least one value")
    mean = float(x.mean())
    half = half_width(x, confidence)
    if half is None:
        return mean, None, None
    return mean, mean - half, mean + half


def mser5_warmup(series: np.ndarray) -> int:
    """Tasks at the start of ``series`` to drop as warm-up, by MSER-5.

    The series is cut into means of :data:`MSER_BATCH` consecutive tasks; the truncation
    ``d`` (in those means, at most half of them) minimising the squared standard error
    of the remaining means, ``sum((y - mean(y[d:]))^2) / (m - d)^2``, is chosen.
    """
    m = series.size // MSER_BATCH
    if m < 4:
        return 0
    y = series[: m * MSER_BATCH].reshape(m, MSER_BATCH).mean(axis=1)
    # tail sums of y and y^2 give every truncation's squared deviations at once
    tail = np.cumsum(y[::-1])[::-1]
    tail_sq = np.cumsum((y * y)[::-1])[::-1]
    d = np.arange(m // 2 + 1)
    left = m - d
    score = (tail_sq[d] - tail[d] ** 2 / left) / left ** 2
    return int(np.argmin(score)) * MSER_BATCH


@dataclass(frozen=True)
class Interval:
    """An estimate, its interval, what it estimates and what backs it.

    ``estimate`` is the point the interval belongs to (it lies inside the bounds);
    ``estimand`` is :data:`STEADY_STATE` for batch means and :data:`RUN_AS_CONFIGURED`
    for replications. ``method`` is ``"replications"`` or ``"batch means"``; ``n``
    counts replications or batches; ``warmup`` and ``batch_tasks`` describe batch means
    (0 otherwise). Bounds are ``None`` when the data cannot carry an interval (one
    replication, a run :data:`TOO_SHORT`); ``bounded_at_zero`` is set when a latency's
    lower bound was raised to zero.
    """

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    method: str
    warmup: int = 0
    batch_tasks: int = 0
    estimand: str = STEADY_STATE
    bounded_at_zero: bool = False

    @property
    def bounds(self) -> list[float] | None:
        """``[low, high]``, or ``None`` when there is no interval."""
        return None if self.low is None or self.high is None else [self.low, self.high]

    def describe(self) -> str:
        """One line naming the method and what stands behind the interval."""
        if self.method == "replications":
            return f"t-interval across {self.n} replication(s)"
        if self.low is None:
            return f"{TOO_SHORT} (after {self.warmup} warm-up tasks, MSER-5)"
        return (f"batch means: {self.n} batches of about {self.batch_tasks} tasks after "
                f"{self.warmup} warm-up tasks (MSER-5)")


def independent(values: np.ndarray, alpha: float = INDEPENDENCE_ALPHA) -> bool:
    """Whether consecutive ``values`` pass von Neumann's test of independence against
    positive lag-one correlation at level ``alpha`` (one-sided; the ratio is
    approximately normal with variance ``(k - 2) / (k^2 - 1)`` under independence)."""
    k = values.size
    centred = values - values.mean()
    spread = float(centred @ centred)
    if spread == 0.0:
        return True
    ratio = 1.0 - float(np.sum(np.diff(values) ** 2)) / (2.0 * spread)
    return ratio <= scipy_stats.norm.ppf(1.0 - alpha) * np.sqrt((k - 2) / (k * k - 1.0))


def _per_batch(series: np.ndarray, name: str, batches: int) -> np.ndarray:
    """The statistic of each of ``batches`` consecutive batches of ``series``, the first
    ``len % batches`` of them one task longer than the rest (every task is used)."""
    size, longer = divmod(series.size, batches)
    q = parse_statistic(name)
    if q is None:
        starts = np.arange(batches) * size + np.minimum(np.arange(batches), longer)
        return np.add.reduceat(series, starts) / (size + (np.arange(batches) < longer))
    cut = longer * (size + 1)
    parts = [series[:cut].reshape(longer, size + 1), series[cut:].reshape(-1, size)]
    return np.concatenate([np.percentile(part, q, axis=1) for part in parts if part.size])


def _batch_values(series: np.ndarray, name: str, batches: int,
                  theirs: np.ndarray | None = None) -> np.ndarray:
    """The statistic of each of ``batches`` near-equal consecutive batches of
    ``series`` (minus the same batch of ``theirs`` when given)."""
    values = _per_batch(series, name, batches)
    return values if theirs is None else values - _per_batch(theirs, name, batches)


def smallest_batch(name: str) -> int:
    """The smallest batch a statistic is formed over: one task for the mean, enough for
    :data:`TAIL_TASKS` tasks beyond a percentile."""
    q = parse_statistic(name)
    if q is None:
        return 1
    tail = min(q, 100.0 - q) / 100.0
    return int(np.ceil(TAIL_TASKS / tail)) if tail > 0 else 1


def batch_plan(series: np.ndarray, name: str, theirs: np.ndarray | None = None
               ) -> np.ndarray | None:
    """The values of the batches that passed the test of independence, or ``None`` when
    the steady-state ``series`` (warm-up removed) is too short for an interval.

    Batches start at :func:`smallest_batch` tasks and double until their values (of the
    statistic; of the paired difference when ``theirs`` is given) pass :func:`independent`
    while there are at least :data:`TEST_BATCHES` of them.
    """
    size = smallest_batch(name)
    while series.size // size >= TEST_BATCHES:
        values = _batch_values(series, name, series.size // size, theirs)
        if independent(values):
            return values
        size *= 2
    return None


def _sectioned(estimate: float, series: np.ndarray, name: str, warmup: int,
               theirs: np.ndarray | None, bounded: bool, confidence: float) -> Interval:
    """The batch-means interval of ``estimate``: the wider of two sectioned intervals, over
    the batches that passed :func:`batch_plan`'s test and over the tasks regrouped into
    :data:`FINAL_BATCHES` batches at least four times as long. The long batches carry
    less of the correlation the test could not see; the many short ones give a steadier
    spread, a floor under a long-batch spread that came out small by chance."""
    passed = batch_plan(series, name, theirs)
    if passed is None:
        return Interval(estimate, None, None, 0, "batch means", warmup)
    final = _batch_values(series, name, FINAL_BATCHES, theirs)
    half = max(half_width(passed, confidence) or 0.0, half_width(final, confidence) or 0.0)
    low, high = estimate - half, estimate + half
    cut = bounded and low < 0.0
    return Interval(estimate, max(low, 0.0) if bounded else low, high, FINAL_BATCHES,
                    "batch means", warmup, series.size // FINAL_BATCHES, bounded_at_zero=cut)


def batch_interval(series: np.ndarray, name: str, warmup: int | None = None,
                   confidence: float = CONFIDENCE) -> Interval:
    """The steady-state estimate of statistic ``name`` of one run's latencies
    ``series`` (tasks in arrival order) and its batch-means interval, bounded at zero.

    ``warmup`` tasks are dropped first (MSER-5 of the series when ``None``); the
    estimate is the statistic of every task after them; ``estimate`` is ``None`` only
    when no task is left.
    """
    start = mser5_warmup(series) if warmup is None else warmup
    kept = series[start:]
    if kept.size == 0:
        return Interval(None, None, None, 0, "batch means", start)
    return _sectioned(statistic(kept, name), kept, name, start, None, True, confidence)


def paired_batch_interval(mine: np.ndarray, theirs: np.ndarray, name: str,
                          warmup: int | None = None, confidence: float = CONFIDENCE
                          ) -> Interval:
    """The steady-state ``statistic(mine) - statistic(theirs)`` over tasks paired by
    position (the same tasks in arrival order under two policies) and its batch-means
    interval: both series lose ``warmup`` tasks (the longer of their two MSER-5
    warm-ups when ``None``) and are cut into the same batches, chosen on the batch
    differences. The estimate is the difference of the two series' own steady-state
    estimates over those tasks."""
    start = max(mser5_warmup(mine), mser5_warmup(theirs)) if warmup is None else warmup
    x, y = mine[start:], theirs[start:]
    if x.size == 0:
        return Interval(None, None, None, 0, "batch means", start)
    return _sectioned(statistic(x, name) - statistic(y, name), x, name, start, y, False,
                      confidence)


def replication_interval(values: Sequence[float], confidence: float = CONFIDENCE,
                         bounded: bool = False) -> Interval:
    """The t-interval of one value per independent replication (estimand
    :data:`RUN_AS_CONFIGURED`); ``bounded``: a latency, whose lower bound is at least 0."""
    estimate, low, high = t_interval(values, confidence)
    cut = bounded and low is not None and low < 0.0
    return Interval(estimate, max(low, 0.0) if cut else low, high, len(values),
                    "replications", estimand=RUN_AS_CONFIGURED, bounded_at_zero=cut)


def interval_half(interval: Interval) -> float | None:
    """The half-width of ``interval`` (None without bounds)."""
    if interval.low is None or interval.high is None or interval.estimate is None:
        return None
    return (interval.high - interval.low) / 2.0


def side(interval: Interval | None) -> str:
    """``lower``, ``higher`` or ``tied``: where an interval of a paired difference lies
    against zero (``tied`` also when there is no interval), i.e. what a study may conclude
    from it."""
    if interval is None or interval.low is None or interval.high is None:
        return "tied"
    return "lower" if interval.high < 0 else "higher" if interval.low > 0 else "tied"


def pm(interval: Interval | None, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """``mean ± half-width`` with ``digits`` decimals, both times ``scale``, then ``unit``
    (how every report writes an interval; ``-`` for no estimate)."""
    if interval is None or interval.estimate is None:
        return "-"
    h = interval_half(interval)
    mean = f"{interval.estimate * scale:.{digits}f}"
    return mean + ("" if h is None else f" ± {h * scale:.{digits}f}") + unit
