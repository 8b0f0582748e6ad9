"""Computed conclusions for the Armada reports: verdicts and comparison words.

A report's conclusion states numbers and what they show; the words that say what they
show (lower or higher, k of n, holds or fails) come from the numbers through these
helpers, never from fixed text, so a rerun whose numbers flip flips the wording too
(as the offloading claims do, :mod:`testbed.systems.offloading.claim_checks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.analysis.stats import Interval, side
from testbed.reports import claims_index
from testbed.reports.claim import Claim, Condition

HOLDS = claims_index.HOLDS
FAILS = claims_index.FAILS


@dataclasses.dataclass(frozen=True)
class Conclusion:
    """A claim's verdict, the rule that gave it, and the sentences that state why."""

    verdict: str
    rule: str
    sentences: tuple[str, ...]

    def paragraph(self) -> str:
        """The sentences as one paragraph, the verdict and its rule after them."""
        return " ".join((*self.sentences, f"Verdict: **{self.verdict}**. Rule: {self.rule}."))


def verdict(checks: Mapping[str, bool]) -> str:
    """``holds`` when every named check passed, ``fails`` when none did (or there is
    none), else ``holds only for`` the passed ones, named (the ledger's shared rule)."""
    return claims_index.verdict(checks.items(), empty=FAILS)


def beats_baselines(label: str, checks: Sequence[tuple[str, bool]], where: str = "",
                    join: str = ", ") -> Conclusion:
    """Armada's scalability claim for ``label`` over named points: ``checks`` says per
    point whether ``label``'s mean latency is below both baselines' (see
    :func:`below_all`); the verdict names the points won, joined by ``join``, and the
    finding counts them, prefixed by ``where`` (which fleets)."""
    won = sum(ok for _, ok in checks)
    return Conclusion(claims_index.verdict(checks, name=join.join), (
        f"`{label}` has a lower mean latency than geo-nearest and than random, each "
        "paired within a replication with its 95 % interval below zero, at a point"),
        (f"{where}`{label}` beats both baselines at {won} of {len(checks)} points.",))


def below_all(differences: Sequence[Interval | None]) -> bool:
    """Whether every paired difference's interval lies below zero (a point won)."""
    return all(side(d) == "lower" for d in differences)


def count_of(flags: Sequence[bool]) -> str:
    """``"k of n"``: how many of ``flags`` are true."""
    return f"{sum(bool(f) for f in flags)} of {len(flags)}"


def lower_or_higher(value: float, other: float, tolerance: float = 0.0,
                    words: tuple[str, str, str] = ("lower", "higher", "the same")) -> str:
    """How ``value`` compares with ``other``: ``words`` for below, above and equal
    (within ``tolerance``, absolute), by default ``lower``, ``higher``, ``the same``."""
    if abs(value - other) <= tolerance:
        return words[2]
    return words[0] if value < other else words[1]


def rose_or_fell(start: float, end: float) -> str:
    """``rose``, ``fell`` or ``stayed`` going from ``start`` to ``end``."""
    if end == start:
        return "stayed"
    return "rose" if end > start else "fell"


def names(items: Sequence[str], empty: str = "none") -> str:
    """``a, b and c``; ``empty`` for none."""
    if not items:
        return empty
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 replica``, ``2 replicas`` (``many``: the plural when not ``word + s``)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def table_number(value: float | None, digits: int = 0, scale: float = 1.0) -> str:
    """A table cell: ``value`` times ``scale`` with ``digits`` decimals; ``-`` when
    missing."""
    return "-" if value is None else f"{value * scale:.{digits}f}"


def ms(value: float | None) -> str:
    """Milliseconds rounded for a sentence; ``-`` when missing."""
    return "-" if value is None else f"{value:.0f} ms"


def replicated_claim(key: str, claim: str, rule: str, paper: str,
                     runs: Sequence[Mapping[str, Any]]) -> Claim:
    """One claim judged on every replication of a fleet experiment: each run's
    ``checks`` (what -> passed) become conditions, named with the replication when there
    are several, and its ``sentences`` the why."""
    conditions = tuple(Condition(what if len(runs) == 1 else f"{what} (replication "
                                 f"{run['replication']})", ok)
                       for run in runs for what, ok in run["checks"].items())
    return Claim(key, claim, rule=rule, paper=paper, conditions=conditions,
                 why=" ".join(s for run in runs for s in run["sentences"]),
                 replications=len(runs) if runs else None)
