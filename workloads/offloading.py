"""The ``bursty-pareto`` generator: on/off bursty Poisson arrivals, Pareto sizes.

Each client is an independent source. Its arrival rate is piecewise constant: it
alternates between *off* periods (rate ``rate``) and *on* periods (rate
``rate * factor``), with exponentially distributed durations of means ``off_mean_s`` and
``on_mean_s``, starting in off. Without ``burst`` the rate is constant (plain Poisson).

Alternatively ``bursts`` declares a deterministic schedule, a list of
``{start_s, duration_s, factor}`` windows during which the rate is ``rate * factor``
(``rate`` elsewhere). Windows may not overlap; they may extend past ``duration``. Known
burst windows let an experiment measure how fast latency recovers after each burst;
``burst`` and ``bursts`` are mutually exclusive.

Arrivals are exact for the piecewise-constant rate: the number of arrivals in
``[0, duration)`` is drawn as Poisson(Lambda) with Lambda the integrated rate, their
positions in integrated-rate space are uniform, and each is mapped back to time through
the inverse of the (piecewise-linear) integrated rate.

Sizes are classical Pareto with shape ``alpha`` > 2 (finite variance) and scale
``x_m = (alpha - 1) / (alpha * mu)``, so the mean size is ``1 / mu``. Tasks whose size
lies in the top decile of that distribution (above ``x_m * 10 ** (1 / alpha)``) get
``cls = "large"``, the others ``"small"``.

Randomness: client ``i`` (its index in the client list) draws from three independent
streams derived from ``SeedSequence(seed, spawn_key=(i, k))`` for phases, arrivals and
sizes, so a client's tasks do not depend on the other clients, and the size sequence
does not depend on the arrival parameters.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.checks import is_number
from workloads.trace import Task

_PHASES, _ARRIVALS, _SIZES = 0, 1, 2
_KNOWN = ("alpha", "burst", "bursts", "mu", "rate")
_BURST_KNOWN = ("factor", "off_mean_s", "on_mean_s")
_WINDOW_KNOWN = ("duration_s", "factor", "start_s")
DEFAULT_ALPHA = 2.5


def _number(params: Mapping[str, Any], key: str, path: str, *, above: float) -> float:
    """Return ``params[key]`` as a float, requiring a finite real number > ``above``."""
    value = params[key]
    ok = is_number(value, finite=True) and value > above
    if not ok:
        raise ValueError(f"{path}.{key}: expected a finite number > {above:g}, found {value!r}")
    return float(value)


def _check_keys(params: Mapping[str, Any], path: str, known: tuple[str, ...]) -> None:
    """Refuse keys outside ``known`` so a misspelt field is not silently ignored."""
    for key in params:
        if key not in known:
            raise ValueError(
                f"{path}.{key}: expected one of the fields {', '.join(known)}, "
                f"found an unknown field"
            )


def _scale(mu: float, alpha: float) -> float:
    """Pareto scale ``x_m`` giving mean ``1 / mu`` for shape ``alpha``."""
    return (alpha - 1.0) / (alpha * mu)


class BurstyPareto:
    """Generator ``bursty-pareto`` (see the module docstring for the model)."""

    name = "bursty-pareto"

    def validate(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` (``"params.<field>: expected ..., found ..."``) if invalid.

        Required: ``rate`` > 0, ``mu`` > 0. Optional: ``alpha`` > 2 (default 2.5), and
        either ``burst`` with ``on_mean_s`` > 0, ``off_mean_s`` > 0 and ``factor`` > 0,
        or ``bursts``, a list of windows with ``start_s`` >= 0, ``duration_s`` > 0 and
        ``factor`` > 0 that do not overlap.
        """
        if not isinstance(params, Mapping):
            # The Generator contract reports every bad param as ValueError.
            raise ValueError(f"params: expected a mapping, found {params!r}")  # noqa: TRY004
        _check_keys(params, "params", _KNOWN)
        for key in ("rate", "mu"):
            if key not in params:
                raise ValueError(f"params.{key}: expected a finite number > 0, found nothing")
            _number(params, key, "params", above=0.0)
        if "alpha" in params:
            _number(params, "alpha", "params", above=2.0)
        if params.get("bursts") is not None:
            if params.get("burst") is not None:
                raise ValueError("params.bursts: expected no random burst model next to a "
                                 "burst schedule, found both burst and bursts")
            _check_windows(params["bursts"])
            return
        burst = params.get("burst")
        if burst is None:
            return
        if not isinstance(burst, Mapping):
            raise ValueError(  # noqa: TRY004 - same contract as above
                f"params.burst: expected a mapping with {', '.join(_BURST_KNOWN)}, found {burst!r}"
            )
        _check_keys(burst, "params.burst", _BURST_KNOWN)
        for key in _BURST_KNOWN:
            if key not in burst:
                raise ValueError(f"params.burst.{key}: expected a finite number > 0, found nothing")
            _number(burst, key, "params.burst", above=0.0)

    def min_service_time(self, params: Mapping[str, Any]) -> float:
        """Return ``x_m``, the Pareto scale: no task is smaller (params must be valid)."""
        return _scale(float(params["mu"]), float(params.get("alpha", DEFAULT_ALPHA)))

    def expected_tasks(self, params: Mapping[str, Any], clients: int, duration: float) -> float:
        """The mean number of tasks ``clients`` make in ``duration`` (params must be valid):
        the integrated rate, with the random burst model at its long-run on/off shares.
        Computed from the params alone, so a run can be sized before anything is drawn."""
        rate = float(params["rate"])
        windows = params.get("bursts")
        burst = params.get("burst")
        if windows is not None:
            extra = sum((float(w["factor"]) - 1.0)
                        * max(0.0, min(duration, float(w["start_s"]) + float(w["duration_s"]))
                              - min(duration, float(w["start_s"])))
                        for w in windows)
            per_client = rate * (duration + extra)
        elif burst is not None:
            off, on = float(burst["off_mean_s"]), float(burst["on_mean_s"])
            per_client = rate * duration * (off + on * float(burst["factor"])) / (off + on)
        else:
            per_client = rate * duration
        return clients * per_client

    def generate(
        self, params: Mapping[str, Any], clients: Sequence[str], duration: float, seed: int
    ) -> list[Task]:
        """Return all clients' tasks in ``[0, duration)`` sorted by arrival, ids ``0..n-1``.

        ``params`` must already be valid (see :meth:`validate`); ties in arrival time are
        ordered by client index.
        """
        rate = float(params["rate"])
        mu = float(params["mu"])
        alpha = float(params.get("alpha", DEFAULT_ALPHA))
        burst = params.get("burst")
        windows = params.get("bursts")
        x_m = _scale(mu, alpha)
        large_above = x_m * 10.0 ** (1.0 / alpha)

        per_client: list[tuple[np.ndarray, np.ndarray]] = []
        for index in range(len(clients)):
            streams = [
                np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index, k)))
                for k in (_PHASES, _ARRIVALS, _SIZES)
            ]
            if windows is not None:
                starts, rates = _scheduled_segments(rate, windows, duration)
            else:
                starts, rates = _rate_segments(rate, burst, duration, streams[_PHASES])
            times = _arrivals(starts, rates, duration, streams[_ARRIVALS])
            sizes = (streams[_SIZES].pareto(alpha, size=times.size) + 1.0) * x_m
            per_client.append((times, sizes))

        times = np.concatenate([t for t, _ in per_client])
        sizes = np.concatenate([s for _, s in per_client])
        owner = np.concatenate([np.full(t.size, i) for i, (t, _) in enumerate(per_client)])
        order = np.lexsort((owner, times))
        return [
            Task(
                task_id=task_id,
                client=clients[int(owner[j])],
                arrival=float(times[j]),
                size=float(sizes[j]),
                cls="large" if sizes[j] > large_above else "small",
            )
            for task_id, j in enumerate(order)
        ]


def _check_windows(windows: Any) -> None:
    """Validate a ``bursts`` schedule: a list of non-overlapping windows."""
    if not isinstance(windows, Sequence) or isinstance(windows, (str, bytes)):
        raise ValueError(  # noqa: TRY004 - the Generator contract reports bad params so
            f"params.bursts: expected a list of {{{', '.join(_WINDOW_KNOWN)}}} "
            f"mappings, found {windows!r}")
    spans = []
    for k, window in enumerate(windows):
        path = f"params.bursts[{k}]"
        if not isinstance(window, Mapping):
            raise ValueError(  # noqa: TRY004 - same contract
                f"{path}: expected a mapping with {', '.join(_WINDOW_KNOWN)}, found {window!r}")
        _check_keys(window, path, _WINDOW_KNOWN)
        for key in _WINDOW_KNOWN:
            if key not in window:
                raise ValueError(f"{path}.{key}: expected a finite number, found nothing")
        start = window["start_s"]
        if not is_number(start, finite=True) or not start >= 0:
            raise ValueError(f"{path}.start_s: expected a finite number >= 0, found {start!r}")
        length = _number(window, "duration_s", path, above=0.0)
        _number(window, "factor", path, above=0.0)
        spans.append((start, start + length, k))
    spans.sort()
    for (_, end, k), (start, _, j) in itertools.pairwise(spans):
        if start < end:
            raise ValueError(f"params.bursts[{j}].start_s: expected a window not "
                             f"overlapping bursts[{k}] (ends at {end:g}), found {start:g}")


def _scheduled_segments(
    rate: float, windows: Sequence[Mapping[str, Any]], duration: float
) -> tuple[np.ndarray, np.ndarray]:
    """Return the segments of a deterministic burst schedule, clipped to ``duration``.

    Between windows the rate is ``rate``; inside window ``k`` it is ``rate * factor_k``.
    Zero-length segments (a window starting at 0 or right after another) are dropped.
    """
    starts, rates = [0.0], [rate]
    for window in sorted(windows, key=lambda w: float(w["start_s"])):
        begin = float(window["start_s"])
        end = begin + float(window["duration_s"])
        if begin >= duration:
            break
        starts += [begin, end]
        rates += [rate * float(window["factor"]), rate]
    bounds = np.append(np.array(starts), duration)
    keep = (bounds[1:] > bounds[:-1]) & (bounds[:-1] < duration)
    return np.array(starts)[keep], np.array(rates)[keep]


def _rate_segments(
    rate: float, burst: Mapping[str, Any] | None, duration: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Return the start times and rates of the piecewise-constant arrival rate.

    Without ``burst`` there is one segment. Otherwise off and on periods alternate,
    starting with off, until ``duration`` is covered; the first start is always 0.
    """
    if burst is None:
        return np.zeros(1), np.array([rate])
    off_mean = float(burst["off_mean_s"])
    on_mean = float(burst["on_mean_s"])
    factor = float(burst["factor"])
    lengths: list[np.ndarray] = []
    covered = 0.0
    batch = max(16, 2 * math.ceil(duration / (off_mean + on_mean)))
    while covered < duration:
        pairs = np.empty(2 * batch)
        pairs[0::2] = rng.exponential(off_mean, size=batch)
        pairs[1::2] = rng.exponential(on_mean, size=batch)
        lengths.append(pairs)
        covered += float(pairs.sum())
    ends = np.cumsum(np.concatenate(lengths))
    count = int(np.searchsorted(ends, duration, side="left")) + 1  # segments reaching duration
    starts = np.concatenate(([0.0], ends[: count - 1]))
    rates = np.where(np.arange(count) % 2 == 0, rate, rate * factor)
    return starts, rates


def _arrivals(
    starts: np.ndarray, rates: np.ndarray, duration: float, rng: np.random.Generator
) -> np.ndarray:
    """Draw the sorted arrival times of a Poisson process with piecewise-constant rate.

    ``starts[k]`` is where segment ``k`` (rate ``rates[k]``) begins; the last segment runs
    to ``duration``.
    """
    ends = np.append(starts[1:], duration)
    cumulative = np.concatenate(([0.0], np.cumsum(rates * (ends - starts))))
    total = float(cumulative[-1])
    points = np.sort(rng.uniform(0.0, total, size=rng.poisson(total)))
    segment = np.searchsorted(cumulative, points, side="right") - 1
    segment = np.clip(segment, 0, rates.size - 1)
    times = starts[segment] + (points - cumulative[segment]) / rates[segment]
    return times[times < duration]
