"""The person-search paper's claims judged from the simulator's numbers.

Each claim of the paper's evaluation (Fig. 3 and Fig. 4 and their text) gets a rule over
per-world-seed statistics (a 95 % t-interval across world seeds, paired within a seed
where two policies or settings are compared) and is judged under every reading the
report keeps: the accounting of Eq. 7-8 times the candidate-set rule. The verdict is
*holds* when every reading passes, *fails* when none does, else *holds only for* the
readings that pass; the paragraph saying why is built from the same numbers.
:func:`judge` takes the studies' rows indexed by point
(:class:`~testbed.systems.person_search.simulation_tables.SimData`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from testbed.analysis.stats import Interval
from testbed.reports.claim import Claim, Condition, Table
from testbed.systems.person_search.replicated import pct, pm, points

#: Policies the paper's Fig. 3 compares the priority policy with.
BASELINES = ("random", "load-balance")
#: How far (as a share) a measured reduction may sit from the paper's figure and still
#: count as reproducing it: the interval must reach within this band.
REDUCTION_BAND = 0.05
#: The paper's figures the quantitative claims name.
#: How the claims index names the paper.
PAPER_NAME = "001: context-based person search on edge servers (priority Eq. 1)"
PAPER_PRIORITY_REDUCTION = 0.95
PAPER_BALANCE_REDUCTION = 0.06
PEAK_W = 0.3


def reading_claim(key: str, title: str, paper: str, rule: str, passed: Mapping[str, bool],
                  why: Sequence[str], replications: int | None, unit: str) -> Claim:
    """One claim judged under each reading: a condition per reading (passed or not) and
    its evidence, ``why[i]`` (``"<reading>: <numbers>."``), in a table; ``unit`` says
    what stands behind each number (``n = 10 world seeds``)."""
    rows = tuple((name, "yes" if ok else "no",
                  text.removeprefix(f"{name}: ").removesuffix("."))
                 for (name, ok), text in zip(passed.items(), why, strict=True))
    evidence = Table("Per reading", ("reading", "passes the rule",
                                     f"evidence ({unit} per point)"), rows)
    return Claim(key, title, rule=rule, paper=paper,
                 conditions=tuple(Condition(name, ok) for name, ok in passed.items()),
                 tables=(evidence,) if rows else (), replications=replications)


def below_zero(interval: Interval) -> bool:
    """The interval lies below zero."""
    return interval.high is not None and interval.high < 0.0


def above_zero(interval: Interval) -> bool:
    """The interval lies above zero."""
    return interval.low is not None and interval.low > 0.0


def _near(interval: Interval, target: float) -> bool:
    """The interval reaches within :data:`REDUCTION_BAND` of ``target``."""
    if interval.low is None or interval.high is None:
        return False
    return interval.low <= target + REDUCTION_BAND and interval.high >= target - REDUCTION_BAND


def _listing(items: Sequence[str]) -> str:
    return "; ".join(items) if items else "none"


class _Judge:
    """The claims over one report's data, per reading (accounting, priority label)."""

    def __init__(self, data: Any, readings: Sequence[tuple[str, str]],
                 name: Callable[[str, str], str]) -> None:
        self.data = data
        self.readings = list(readings)
        self.name = name
        self.conds = list(itertools.product(("normal", "straight"), data.servers))

    def total(self, acc: str, mv: str, n: int, label: str, r: int) -> float:
        return float(self.data.fig3_at(acc, mv, n, label, r)["total_response_s"])

    def red(self, acc: str, mv: str, n: int, label: str, r: int) -> float:
        return float(self.data.fig3_at(acc, mv, n, label, r)["reduction_vs_random"])

    def variation(self, acc: str, mv: str, n: int, label: str, r: int) -> float:
        curve = self.data.seed_curve(acc, mv, n, label, r)
        return max(curve) / min(curve)

    def claim(self, key: str, title: str, paper: str, rule: str, passed: dict[str, bool],
              why: tuple[str, ...]) -> Claim:
        return reading_claim(key, title, paper, rule, passed, why, self.data.n,
                             self.data.seeds())

    def each(self, judge: Callable[[str, str], tuple[bool, str]]) -> tuple[dict[str, bool],
                                                                             tuple[str, ...]]:
        passed, why = {}, []
        for acc, label in self.readings:
            ok, text = judge(acc, label)
            passed[self.name(acc, label)] = ok
            why.append(f"{self.name(acc, label)}: {text}.")
        return passed, tuple(why)

    def lowest(self) -> Claim:
        def one(acc: str, label: str) -> tuple[bool, str]:
            misses = []
            for mv, n in self.conds:
                gap = self.data.per_seed(lambda r, mv=mv, n=n: self.total(acc, mv, n, label, r)
                                         - min(self.total(acc, mv, n, b, r) for b in BASELINES))
                if not below_zero(gap):
                    misses.append(f"{mv} N = {n} (priority minus the better baseline: "
                                  f"{pm(gap, 2, 1e-6)} x 10^6 s)")
            won = len(self.conds) - len(misses)
            return not misses, (f"lower in {won} of {len(self.conds)} conditions; not lower "
                                f"in: {_listing(misses)}")
        passed, why = self.each(one)
        return self.claim("P1", "priority has the shortest total in every condition of Fig. 3",
                      "In all experimental conditions, the proposed method reduced response "
                      "time compared with the other methods.",
                      "per condition (movement, N) the paired difference priority minus the "
                      "better of random and load-balance, per world seed, has its 95 % "
                      "interval below zero; a reading passes when every condition does",
                      passed, why)

    def figures(self) -> Claim:
        big = max(self.data.servers)
        balance = {acc: self.data.reduction(acc, "normal", big, "load-balance")
                   for acc, _ in self.readings}

        def one(acc: str, label: str) -> tuple[bool, str]:
            mine = self.data.reduction(acc, "normal", big, label)
            ok = _near(mine, PAPER_PRIORITY_REDUCTION) and _near(
                balance[acc], PAPER_BALANCE_REDUCTION)
            return ok, (f"priority {pct(mine)} (paper 95 %), load-balance "
                        f"{pct(balance[acc])} (paper 6 %)")
        passed, why = self.each(one)
        return self.claim("P2", f"priority cuts random's total by about 95 % and load-balance by "
                            f"about 6 % (normal movement, N = {big})",
                      "The proposed method reduced response time most under normal "
                      "distribution movement and 100 edge servers, where the reduction rate "
                      "was 95 % compared with random selection; simple load balancing only "
                      "reduced response time by 6 %.",
                      f"each reduction's 95 % interval reaches within "
                      f"{100 * REDUCTION_BAND:g} points of the paper's figure",
                      passed, why)

    def grows(self) -> Claim:
        pairs = list(zip(self.data.servers, self.data.servers[1:]))

        def one(acc: str, label: str) -> tuple[bool, str]:
            misses, steps = [], []
            for mv in ("normal", "straight"):
                for a, b in pairs:
                    step = self.data.per_seed(lambda r, mv=mv, a=a, b=b: self.red(
                        acc, mv, b, label, r) - self.red(acc, mv, a, label, r))
                    steps.append(f"{mv} {a} to {b}: {points(step)}")
                    if not above_zero(step):
                        misses.append(f"{mv} {a} to {b}")
            return not misses, (f"{'; '.join(steps)} (does not grow: {_listing(misses)})")
        passed, why = self.each(one)
        return self.claim("P3", "priority's reduction grows with the number of edge servers",
                      "The greater the number of edge servers, the greater the reduction "
                      "effect.",
                      "for both movements and each step to the next larger N, the paired "
                      "change of priority's reduction vs random has its 95 % interval above "
                      "zero", passed, why)

    def above_at_each_n(self, gap_of: Callable[[int, int], float],
                        text: Callable[[int, Interval], str]) -> tuple[bool, str]:
        """Whether ``gap_of(n, seed)``'s interval across seeds lies above zero at every
        N, and the sentence listing ``text(n, interval)`` per N and the misses."""
        misses, parts = [], []
        for n in self.data.servers:
            gap = self.data.per_seed(lambda r, n=n: gap_of(n, r))
            parts.append(text(n, gap))
            if not above_zero(gap):
                misses.append(f"N = {n}")
        return not misses, f"{'; '.join(parts)} (not larger: {_listing(misses)})"

    def movement(self) -> Claim:
        def one(acc: str, label: str) -> tuple[bool, str]:
            return self.above_at_each_n(
                lambda n, r: self.red(acc, "normal", n, label, r)
                - self.red(acc, "straight", n, label, r),
                lambda n, gap: f"N = {n}: {points(gap)}")
        passed, why = self.each(one)
        return self.claim("P4", "priority's reduction is larger under normal than straight "
                            "movement at every N",
                      "The reduction rate is higher in the normal distribution movement in "
                      "any number of edge servers.",
                      "at each N the paired difference of priority's reduction vs random, "
                      "normal minus straight, has its 95 % interval above zero",
                      passed, why)

    def sensitivity(self) -> Claim:
        def one(acc: str, label: str) -> tuple[bool, str]:
            return self.above_at_each_n(
                lambda n, r: self.variation(acc, "straight", n, label, r)
                - self.variation(acc, "normal", n, label, r),
                lambda n, _gap: (f"N = {n}: {pm(self.data.variation(acc, 'normal', n, label), 2)}x "
                                 f"normal, {pm(self.data.variation(acc, 'straight', n, label), 2)}x "
                                 "straight"))
        passed, why = self.each(one)
        return self.claim("P5", "w moves the total more under straight movement (7.7x) than "
                            "under normal movement (1.6x)",
                      "Depending on the value of w, the response time varies by 1.6 times in "
                      "the normal distribution movement case but by 7.7 times in the "
                      "straight movement case.",
                      "at each N the paired difference of the variation over w (largest "
                      "over smallest total, per world seed), straight minus normal, has its "
                      "95 % interval above zero", passed, why)

    def peak(self) -> Claim:
        if PEAK_W not in self.data.ws:
            return self.claim("P6", "straight movement: the total peaks at w = 0.3",
                          "", f"w = {PEAK_W:g} is not on this size's grid", {}, ())

        def one(acc: str, label: str) -> tuple[bool, str]:
            misses, counts = [], []
            for n in self.data.servers:
                at = sum(self.data.ws[int(np.argmax(self.data.seed_curve(
                    acc, "straight", n, label, r)))] == PEAK_W for r in self.data.reps)
                counts.append(f"N = {n}: {at} of {self.data.n} (most often at w = "
                              f"{self.data.peak(acc, 'straight', n, label)})")
                if 2 * at <= self.data.n:
                    misses.append(f"N = {n}")
            return not misses, (f"world seeds peaking at w = {PEAK_W:g}: {'; '.join(counts)} "
                                f"(no majority: {_listing(misses)})")
        passed, why = self.each(one)
        return self.claim("P6", f"straight movement: the total rises with w up to {PEAK_W:g} and "
                            "falls after",
                      "In the straight movement case, the response time increases as w "
                      "increases until it is 0.3 and decreases as w increases thereafter.",
                      f"at each N the largest total over w lies at w = {PEAK_W:g} in more "
                      "than half of the world seeds", passed, why)


def judge(data: Any, readings: Sequence[tuple[str, str]],
          name: Callable[[str, str], str]) -> list[Claim]:
    """Every claim of the paper's evaluation, judged under each reading of ``readings``
    (``(accounting, priority label)``, named by ``name``)."""
    j = _Judge(data, readings, name)
    return [j.lowest(), j.figures(), j.grows(), j.movement(), j.sensitivity(), j.peak()]
