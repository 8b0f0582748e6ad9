"""Rows of many world seeds, indexed by point: means and 95 % t-intervals across the seeds.

The simulator's studies (:mod:`~testbed.systems.person_search.simulation_rows`) and the
emulated comparison give one row per point and replication (world seed). :class:`Table` indexes a table's
rows by the fields that name a point; a :class:`Point` gives, for any field, the mean
over its world seeds and the Student-t interval across them
(:func:`testbed.analysis.stats.replication_interval`). A statistic that combines several points
(a difference, a ratio, a count over conditions) is computed per world seed first, on
rows that share that seed, and only then averaged (:func:`across`): the points of one
replication ran on the same worlds, so their differences are paired.

The formatters write an interval as ``mean ± half-width`` and say how many world seeds
stand behind it (:func:`seeds`), so a report can print both beside every number.

Pure: numpy and scipy (through :mod:`testbed.analysis.stats`) only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from testbed.analysis.stats import Interval, pm, replication_interval
from testbed.analysis.stats import interval_half as half


class Point:
    """The rows of one point, one per world seed, keyed by their ``replication``."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Index ``rows`` by replication (one row per replication)."""
        self.by_rep: dict[int, Mapping[str, Any]] = {}
        for row in rows:
            rep = int(row["replication"])
            if rep in self.by_rep:
                raise ValueError(f"two rows of one point for replication {rep}")
            self.by_rep[rep] = row

    @property
    def n(self) -> int:
        """Number of world seeds behind the point."""
        return len(self.by_rep)

    def at(self, rep: int) -> Mapping[str, Any]:
        """The row of replication ``rep``."""
        return self.by_rep[rep]

    def values(self, field: str, key: str | None = None) -> list[float]:
        """``field`` (``field[key]`` for a dict field) of every world seed, None left out."""
        out = []
        for rep in sorted(self.by_rep):
            value = self.by_rep[rep][field]
            value = value if key is None else value[key]
            if value is not None:
                out.append(float(value))
        return out

    def ci(self, field: str, key: str | None = None) -> Interval:
        """Mean and 95 % t-interval of ``field`` across the world seeds."""
        return replication_interval(self.values(field, key))

    def mean(self, field: str, key: str | None = None) -> float:
        """Mean of ``field`` over the world seeds."""
        return float(self.ci(field, key).estimate)

    def first(self, field: str) -> Any:
        """``field`` of the first world seed (for fields every seed shares)."""
        return self.by_rep[min(self.by_rep)][field]


class Table:
    """A table's rows grouped into :class:`Point` objects by the fields ``keys``."""

    def __init__(self, rows: Iterable[Mapping[str, Any]], keys: Sequence[str]) -> None:
        """Group ``rows`` by the values of ``keys`` (in that order)."""
        grouped: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for row in rows:
            grouped.setdefault(tuple(row[k] for k in keys), []).append(row)
        self.keys = tuple(keys)
        self.points = {k: Point(v) for k, v in grouped.items()}

    def __getitem__(self, key: tuple[Any, ...]) -> Point:
        """The point named by ``key`` (``KeyError`` naming the key if there is none)."""
        try:
            return self.points[key]
        except KeyError:
            raise KeyError(f"no point {dict(zip(self.keys, key, strict=False))}") from None

    def __contains__(self, key: object) -> bool:
        """Whether the table has the point ``key``."""
        return key in self.points


def across(reps: Iterable[int], per_seed: Callable[[int], float | None]) -> Interval:
    """Mean and 95 % t-interval of ``per_seed(rep)`` over the replications ``reps``
    (a per-seed statistic over several points; None values are left out)."""
    values = [v for v in (per_seed(r) for r in reps) if v is not None]
    return replication_interval([float(v) for v in values])


# ------------------------------------------------------------------ formatting


def pct(interval: Interval, digits: int = 1) -> str:
    """A share or reduction as ``mean ± half-width %``."""
    return pm(interval, digits, 100.0, " %")


def points(interval: Interval, digits: int = 1) -> str:
    """A difference of shares in percentage points, signed: ``+4.1 ± 0.3 points``."""
    if interval.estimate is None:
        return "-"
    h = half(interval)
    return f"{100.0 * interval.estimate:+.{digits}f}" + \
        ("" if h is None else f" ± {100.0 * h:.{digits}f}") + " points"


def mega(interval: Interval) -> str:
    """Model seconds in units of 10^6 s: ``mean ± half-width``, 3 significant digits."""
    if interval.estimate is None:
        return "-"
    value = interval.estimate / 1e6
    digits = max(0, 2 - int(f"{abs(value):e}".split("e")[1])) if value else 2
    return pm(interval, digits, 1e-6)


def seeds(n: int) -> str:
    """How many world seeds stand behind a number: ``n = 10 world seeds``."""
    return f"n = {n} world seed" + ("" if n == 1 else "s")


def said(interval: Interval, text: str) -> str:
    """``text`` (a formatted interval) followed by its number of world seeds."""
    return f"{text} ({seeds(interval.n)})"
