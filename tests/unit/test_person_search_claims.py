"""The person-search claims judged on hand-made per-seed numbers (a stand-in for the
report's indexed ``simulation.json``): each rule passes and fails where it should, and
the verdict names the readings that pass."""

from __future__ import annotations

from testbed.analysis.stats import replication_interval
from testbed.systems.person_search.claim_checks import judge, section

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


def _judged() -> dict:
    return {c.key: c for c in judge(_Stub(), READINGS, lambda a, label: f"{a}, {label}")}


def test_each_claim_is_judged_per_reading() -> None:
    found = _judged()
    assert found["P1"].verdict == "holds only for compensated, priority"
    assert "not lower in: normal N = 10" in found["P1"].why[0]
    assert found["P2"].verdict == "holds"  # 95 % and 6 % at N = 100
    assert found["P3"].verdict == "holds"  # plain grows too, from -50 % at N = 10
    # under plain, N = 10 gives both movements the same total: no gap
    assert found["P4"].verdict == "holds only for compensated, priority"
    assert found["P5"].verdict == "holds"
    assert found["P6"].verdict == "holds"  # 3 of 4 seeds peak at 0.3
    assert "3 of 4" in found["P6"].why[0]


def test_a_claim_no_reading_passes_fails_and_a_missing_w_is_not_run() -> None:
    stub = _Stub()
    stub.ws = [0.001, 0.1, 1.0]
    stub.seed_curve = lambda acc, mv, n, policy, r: [1.0, 1.5, 1.2]
    found = {c.key: c for c in judge(stub, READINGS, lambda a, label: a)}
    assert found["P5"].verdict == "fails"  # same variation under both movements
    assert found["P6"].verdict == "not run" and not found["P6"].passed


def test_the_section_lists_every_verdict_under_its_heading() -> None:
    lines = section(list(_judged().values()), "n = 4 world seeds")
    text = "\n".join(lines)
    assert "| P1 | priority has the shortest total in every condition of Fig. 3 | holds only" \
        in text
    assert text.count("### Claim P") == 6 and "**Verdict: holds.**" in text
