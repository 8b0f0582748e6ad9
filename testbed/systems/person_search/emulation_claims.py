"""The person-search paper's claims judged again from the emulated totals.

The emulator replays Fig. 3's comparison on the simulator report's worlds (same world
seeds) with real processes and HTTP. Two claims can be judged from what it replays:
P1 (priority has the shortest total in every condition) and P3 (priority's reduction
against random grows with the number of edge servers). Each is judged per priority
variant the run has (one reading of the candidate-set rule each), with the same rules
as the simulator's verdicts (:mod:`~testbed.systems.person_search.claim_checks`):
paired differences within a world, a 95 % t-interval across worlds. So both executors'
verdicts stand side by side in the claims index, and a reader sees whether real
execution changes a verdict. With fewer than two worlds there is no interval and no
verdict.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from testbed.analysis.stats import replication_interval
from testbed.reports.claim import Claim
from testbed.systems.person_search.claim_checks import (
    BASELINES,
    above_zero,
    below_zero,
    reading_claim,
)
from testbed.systems.person_search.replicated import pm, points

KEY = "emulated_total_s"

Where = tuple[int, str]


def _totals(results: Sequence[Mapping[str, Any]]
            ) -> dict[tuple[int, str, str], dict[int, float]]:
    """Emulated total per (servers, movement, policy), by world (replication)."""
    out: dict[tuple[int, str, str], dict[int, float]] = {}
    for r in results:
        out.setdefault((r["servers"], r["movement"], r["policy"]), {})[
            int(r.get("replication", 0))] = float(r[KEY])
    return out


def judge_emulated(results: Sequence[Mapping[str, Any]],
                   reading: Callable[[Mapping[str, Any]], str]) -> list[Claim]:
    """P1 and P3 on the emulated totals, per priority variant (named with
    ``reading(row)``); empty with fewer than two worlds (P3 also needs two numbers of
    servers)."""
    totals = _totals(results)
    worlds = {int(r.get("replication", 0)) for r in results}
    if len(worlds) < 2 or "random" not in {r["policy"] for r in results}:
        return []
    conds: list[Where] = sorted({(n, m) for n, m, _ in totals})
    ran_policies = list(dict.fromkeys(r["policy"] for r in results))
    variants = [p for p in ran_policies if p not in BASELINES]
    baselines = [b for b in BASELINES if b in ran_policies]
    names = {r["policy"]: f"{r['policy']} ({reading(r)})" for r in results}

    def ran(r: int, cells: Sequence[tuple[int, str, str]]) -> bool:
        return all(r in totals.get(cell, {}) for cell in cells)

    def lowest(policy: str) -> tuple[bool, str]:
        misses = []
        for n, mv in conds:
            gap = replication_interval([
                totals[(n, mv, policy)][r] - min(totals[(n, mv, b)][r] for b in baselines)
                for r in sorted(worlds)
                if ran(r, [(n, mv, p) for p in (policy, *baselines)])])
            if not below_zero(gap):
                misses.append(f"{mv} N = {n} (priority minus the better baseline: "
                              f"{pm(gap, 0)} s)")
        return not misses, (f"lower in {len(conds) - len(misses)} of {len(conds)} "
                            f"conditions; not lower in: {', '.join(misses) or 'none'}")

    def reduction(policy: str, n: int, mv: str, r: int) -> float:
        return 1.0 - totals[(n, mv, policy)][r] / totals[(n, mv, "random")][r]

    def grows(policy: str) -> tuple[bool, str]:
        misses, steps = [], []
        for mv in sorted({m for _, m in conds}):
            sizes = sorted(n for n, m in conds if m == mv)
            for a, b in itertools.pairwise(sizes):
                step = replication_interval([
                    reduction(policy, b, mv, r) - reduction(policy, a, mv, r)
                    for r in sorted(worlds)
                    if ran(r, [(n, mv, p) for n in (a, b) for p in (policy, "random")])])
                steps.append(f"{mv} {a} to {b}: {points(step)}")
                if not above_zero(step):
                    misses.append(f"{mv} {a} to {b}")
        return not misses, f"{'; '.join(steps)} (does not grow: {', '.join(misses) or 'none'})"

    judged = [_judged("P1", "priority has the shortest total in every emulated condition",
                      "In all experimental conditions, the proposed method reduced response "
                      "time compared with the other methods.",
                      "per emulated condition (movement, N) the paired difference priority "
                      "minus the better of random and load-balance, per world, has its "
                      "95 % interval below zero; a variant passes when every condition does",
                      {v: lowest(v) for v in variants}, names, len(worlds))]
    if any(len([n for n, m in conds if m == mv]) > 1 for _, mv in conds):
        judged.append(_judged(
            "P3", "priority's reduction grows with the number of emulated edge servers",
            "The greater the number of edge servers, the greater the reduction effect.",
            "for each movement and each step to the next larger emulated N, the paired "
            "change of the reduction against random, per world, has its 95 % interval "
            "above zero", {v: grows(v) for v in variants}, names, len(worlds)))
    return judged


def _judged(key: str, title: str, paper: str, rule: str,
            outcome: Mapping[str, tuple[bool, str]], names: Mapping[str, str],
            worlds: int) -> Claim:
    """One claim's verdict per priority variant, each named with its reading."""
    return reading_claim(key, title, paper, rule,
                         {names[v]: ok for v, (ok, _) in outcome.items()},
                         tuple(f"{names[v]}: {text}." for v, (_, text) in outcome.items()),
                         worlds, f"n = {worlds} world seeds")
