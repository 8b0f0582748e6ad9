"""The one claim type: a paper's statement, the rule that judges it, and its verdict.

A claim function of an experiment (``docs/design.md``, "Adding an experiment") returns
:class:`Claim` objects computed from the experiment's metrics: the conditions the rule
tested (each passed or not, optionally per executor), the evidence as tables of numbers,
a sentence saying why the verdict came out as it did (computed from the same numbers),
how many independent replications stand behind it and the effect it rests on. The
verdict is never written by hand: :attr:`Claim.verdict` applies the one rule every
report shares (:func:`testbed.reports.claims_index.verdict`).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.reports import claims_index


@dataclass(frozen=True)
class Table:
    """Evidence or measurements as text cells: a ``title``, ``columns``, ``rows`` and a
    ``note`` under it."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {i} has {len(row)} cells, "
                                 f"expected {len(self.columns)} ({', '.join(self.columns)})")


@dataclass(frozen=True)
class Condition:
    """One condition the rule tested: ``what`` (``load 0.8``), whether it ``passed``, and
    the ``executor`` it was tested on (empty when it does not depend on one)."""

    what: str
    passed: bool
    executor: str = ""


def _named(passed: list[Condition]) -> str:
    """The passed conditions as a verdict names them: grouped by executor when any
    has one (``simulation: load 0.2, load 0.4; emulation: load 0.9``); conditions whose
    names hold a comma (``compensated, unanalysed``) are separated by semicolons."""
    if not any(c.executor for c in passed):
        sep = "; " if any(", " in c.what for c in passed) else ", "
        return sep.join(c.what for c in passed)
    grouped: dict[str, list[str]] = {}
    for c in passed:
        grouped.setdefault(c.executor, []).append(c.what)
    return "; ".join(f"{e}: {', '.join(w)}" if e else ", ".join(w)
                     for e, w in grouped.items())


@dataclass(frozen=True)
class Claim:
    """A judged claim. ``key`` orders and names it (``1``, ``A3``), ``claim`` is the
    statement as the report titles it, ``paper`` the paper's own words, ``rule`` how it
    is judged; ``replications`` is the fewest independent replications behind any
    condition and ``effect`` the effect the verdict rests on, with its interval."""

    key: str
    claim: str
    rule: str
    conditions: tuple[Condition, ...]
    why: str = ""
    paper: str = ""
    tables: tuple[Table, ...] = ()
    replications: int | None = None
    effect: str = ""

    @property
    def verdict(self) -> str:
        """``holds``, ``fails``, ``holds only for`` the passed conditions, or ``not run``."""
        return claims_index.verdict(((c, c.passed) for c in self.conditions),
                                    name=_named)

    @property
    def section(self) -> str:
        """The heading of the report section that gives the evidence."""
        return f"Claim {self.key}: {self.claim}"
