"""The person-search claims judged on hand-made per-seed numbers (a stand-in for the
report's indexed ``simulation.json``): each rule passes and fails where it should, and
the verdict names the readings that pass."""

from __future__ import annotations

from testbed.analysis.stats import replication_interval
from testbed.reports.claim import Claim
from testbed.systems.person_search.claim_checks import judge

SERVERS = [10, 50, 100]
WS = [0.001, 0.1, 0.3, 1.0]
REPS = list(range(4))
READINGS = [("plain", "priority"), ("compensated", "priority")]


class _Stub:
    """Totals per (accounting, movement, N, policy, seed) and Fig. 4 curves, built so
    that under ``plain`` priority loses at N = 10 and under ``compensated`` it wins
    everywhere, its reduction growing with N and (but for plain at N = 10) larger for
    normal movement."""

    servers, ws, reps, n = SERVERS, WS, REPS, len(REPS)

    def _total(self, acc: str, mv: str, n: int, policy: str, r: int) -> float:
        noise = 0.01 * r
        if policy == "random":
            return 100.0 + noise
        if policy == "load-balance":
            return 94.0 + noise  # 6 % below random
        share = {10: 0.5, 50: 0.2, 100: 0.05}[n] + (0.02 if mv == "straight" else 0.0)
        if acc == "plain" and n == 10:
            share = 1.5
        return 100.0 * share + noise

    def fig3_at(self, acc: str, mv: str, n: int, policy: str, r: int) -> dict:
        total = self._total(acc, mv, n, policy, r)
        return {"total_response_s": total,
                "reduction_vs_random": 1.0 - total / self._total(acc, mv, n, "random", r)}

    def seeds(self) -> str:
        return f"n = {self.n} world seeds"

    def per_seed(self, fn):
        return replication_interval([float(fn(r)) for r in REPS])

    def reduction(self, acc: str, mv: str, n: int, policy: str):
        return self.per_seed(lambda r: self.fig3_at(acc, mv, n, policy, r)
                             ["reduction_vs_random"])

    def seed_curve(self, acc: str, mv: str, n: int, policy: str, r: int) -> list[float]:
        if mv == "normal":
            return [1.0, 1.2, 1.6 + 0.01 * r, 1.3]
        return [1.0, 3.0, 7.7 + 0.01 * r, 5.0] if r != 0 else [1.0, 7.9, 7.7, 5.0]

    def peak(self, acc: str, mv: str, n: int, policy: str) -> str:
        return "0.3 (3 of 4)"

    def variation(self, acc: str, mv: str, n: int, policy: str):
        return self.per_seed(lambda r: max(self.seed_curve(acc, mv, n, policy, r))
                             / min(self.seed_curve(acc, mv, n, policy, r)))


def _judged() -> dict[str, Claim]:
    return {c.key: c for c in judge(_Stub(), READINGS, lambda a, label: f"{a}, {label}")}


def _evidence(claim: Claim, reading: int = 0) -> str:
    return claim.tables[0].rows[reading][2]


def test_each_claim_is_judged_per_reading() -> None:
    found = _judged()
    assert found["P1"].verdict == "holds only for compensated, priority"
    assert "not lower in: normal N = 10" in _evidence(found["P1"])
    assert found["P2"].verdict == "holds"  # 95 % and 6 % at N = 100
    assert found["P3"].verdict == "holds"  # plain grows too, from -50 % at N = 10
    # under plain, N = 10 gives both movements the same total: no gap
    assert found["P4"].verdict == "holds only for compensated, priority"
    assert found["P5"].verdict == "holds"
    assert found["P6"].verdict == "holds"  # 3 of 4 seeds peak at 0.3
    assert "3 of 4" in _evidence(found["P6"])


def test_a_claim_no_reading_passes_fails_and_a_missing_w_is_not_run() -> None:
    stub = _Stub()
    stub.ws = [0.001, 0.1, 1.0]
    stub.seed_curve = lambda acc, mv, n, policy, r: [1.0, 1.5, 1.2]
    found = {c.key: c for c in judge(stub, READINGS, lambda a, label: a)}
    assert found["P5"].verdict == "fails"  # same variation under both movements
    assert found["P6"].verdict == "not run" and not found["P6"].conditions


def test_each_claim_has_a_condition_and_a_row_of_evidence_per_reading() -> None:
    for claim in _judged().values():
        assert [c.what for c in claim.conditions] == ["plain, priority", "compensated, priority"]
        assert [row[:2] for row in claim.tables[0].rows] == [
            (c.what, "yes" if c.passed else "no") for c in claim.conditions]
        assert claim.replications == len(REPS)
        assert "n = 4 world seeds" in claim.tables[0].columns[2]
