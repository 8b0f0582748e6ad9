"""Confidence intervals that hold for queueing latencies.

The latencies of one run are not independent draws: a task that waits behind a burst
makes the next one wait too, so resampling a run's tasks as if they were independent
gives intervals far narrower than the run-to-run spread (``docs/statistics.md``). Two
methods are used instead, and every interval says which one and how many units stand
behind it:

* **Across replications** (:func:`t_interval`): each independent replication (its own
  workload seed, its own trace) gives one value of a statistic; the interval is
  Student's t over those values. This is the method of studies.
* **Batch means** (:func:`batch_interval`, :func:`paired_batch_interval`) when there is
  a single replication: the warm-up is cut with MSER-5 (:func:`mser5_warmup`), the
  remaining tasks, in arrival order, are split into :data:`BATCHES` consecutive batches
  and the statistic is computed per batch. Batches long enough to outlast the
  correlation are close to independent, so the spread of the batch values gives the
  standard error. The interval is centred on the statistic of all the batched tasks
  together (sectioning: for the mean it is the mean of the batch means; for a
  percentile it avoids the small-sample bias of the batches' own percentiles), with
  Student's t on ``BATCHES - 1`` degrees of freedom. With fewer than :data:`BATCHES`
  completed tasks after the warm-up no interval is given.

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
BATCHES = 20
MSER_BATCH = 5  # MSER-5: the warm-up search works on means of 5 consecutive tasks


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
    """An interval of a statistic: ``estimate`` (its centre), bounds, and what backs it.

    ``method`` is ``"replications"`` or ``"batch means"``; ``n`` counts replications or
    batches; ``warmup`` and ``batch_tasks`` describe batch means (0 otherwise). Bounds are
    ``None`` when the data cannot carry an interval (one replication, too few tasks).
    """

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    method: str
    warmup: int = 0
    batch_tasks: int = 0

    @property
    def bounds(self) -> list[float] | None:
        """``[low, high]``, or ``None`` when there is no interval."""
        return None if self.low is None or self.high is None else [self.low, self.high]

    def describe(self) -> str:
        """One line naming the method and what stands behind the interval."""
        if self.method == "replications":
            return f"t-interval across {self.n} replication(s)"
        if self.low is None:
            return f"no interval: fewer than {BATCHES} completed tasks after the warm-up"
        return (f"batch means: {self.n} batches of {self.batch_tasks} tasks after "
                f"{self.warmup} warm-up tasks (MSER-5)")


def _batches(n: int, warmup: int, batches: int) -> tuple[int, int] | None:
    """(first task, batch size) of ``batches`` equal batches after ``warmup``, or None."""
    size = (n - warmup) // batches
    if size < 1:
        return None
    return n - batches * size, size  # the remainder is dropped from the warm-up side


def batch_interval(series: np.ndarray, name: str, batches: int = BATCHES,
                   confidence: float = CONFIDENCE) -> Interval:
    """The batch-means interval of statistic ``name`` of one run's ``series`` (tasks in
    arrival order)."""
    warmup = mser5_warmup(series)
    plan = _batches(series.size, warmup, batches)
    if plan is None:
        return Interval(None, None, None, 0, "batch means", warmup)
    start, size = plan
    per_batch = [statistic(series[start + k * size: start + (k + 1) * size], name)
                 for k in range(batches)]
    return _sectioned(statistic(series[start:], name), per_batch, start, size, confidence)


def _sectioned(estimate: float, per_batch: Sequence[float], start: int, size: int,
               confidence: float) -> Interval:
    half = half_width(per_batch, confidence)
    if half is None:
        return Interval(estimate, None, None, len(per_batch), "batch means", start, size)
    return Interval(estimate, estimate - half, estimate + half, len(per_batch),
                    "batch means", start, size)


def paired_batch_interval(mine: np.ndarray, theirs: np.ndarray, name: str,
                          batches: int = BATCHES, confidence: float = CONFIDENCE) -> Interval:
    """The batch-means interval of ``statistic(mine) - statistic(theirs)`` over tasks
    paired by position (the same tasks in arrival order under two policies): both series
    lose the longer of their two warm-ups and are cut into the same batches."""
    warmup = max(mser5_warmup(mine), mser5_warmup(theirs))
    plan = _batches(mine.size, warmup, batches)
    if plan is None:
        return Interval(None, None, None, 0, "batch means", warmup)
    start, size = plan
    per_batch = []
    for k in range(batches):
        part = slice(start + k * size, start + (k + 1) * size)
        per_batch.append(statistic(mine[part], name) - statistic(theirs[part], name))
    estimate = statistic(mine[start:], name) - statistic(theirs[start:], name)
    return _sectioned(estimate, per_batch, start, size, confidence)


def replication_interval(values: Sequence[float], confidence: float = CONFIDENCE
                         ) -> Interval:
    """The t-interval of one value per independent replication."""
    estimate, low, high = t_interval(values, confidence)
    return Interval(estimate, low, high, len(values), "replications")


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
