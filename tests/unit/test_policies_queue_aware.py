"""Tests of the queue-aware policies, the new baselines and the policy registry.

Views are built by hand so every expected estimate can be computed independently from
the closed forms (Erlang-C times the Allen-Cunneen factor), never by calling the code
under test.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.offloading.policies import POLICIES, make_policy, policy_params, policy_variants
from nodes.offloading.policies.base import Backlog, Decision, TargetState, TaskInfo, View
from nodes.offloading.policies.queue_aware import PENALTY_SWEEP, RHO_CAP, model_wait
from nodes.offloading.queueing import erlang_c
from testbed.errors import TestbedError

TASK = TaskInfo(task_id=0, client="c1", arrival=0.0)
CS2 = 1.0 / (2.5 * 0.5)  # classical Pareto, alpha = 2.5
ESTIMATING = ("model-only", "queue-only", "hybrid", "hybrid-global-rate", "hybrid-fixed-beta")


def tgt(
    name: str,
    *,
    tier: str = "edge",
    queue: int = 0,
    busy: int = 0,
    active: int | None = None,
    c: int = 4,
    mu: float = 1.0,
    lam: float = 0.0,
    delay: float = 0.01,
) -> TargetState:
    return TargetState(
        name=name,
        tier=tier,
        queue=queue,
        busy=busy,
        active=c if active is None else active,
        c=c,
        service_rate=mu,
        arrival_rate=lam,
        delay_s=delay,
        age_s=0.0,
    )


def view(*targets: TargetState) -> View:
    return View(now=0.0, client="c1", targets={t.name: t for t in targets})


def greedy(name: str, **params: Any):
    """A policy that never explores, so its choice is the argmin."""
    return make_policy(name, 0, epsilon=0.0, **params)


def ac_wait(lam: float, mu: float, c: int) -> float:
    """Allen-Cunneen with Poisson arrivals and Pareto(2.5) service, computed here."""
    return erlang_c(c, lam / mu) / (c * mu - lam) * (1.0 + CS2) / 2.0


# ------------------------------------------------------------------------- registry


def test_every_policy_of_the_issue_is_registered() -> None:
    assert set(POLICIES) == {
        "edge-first", "random", "jsq", "jsq-s", "model-only", "queue-only", "hybrid",
        "oracle", "hybrid-global-rate", "hybrid-fixed-beta",
    }
    for name in POLICIES:
        policy = make_policy(name, 7)
        assert policy.name == name and policy.seed == 7
        assert policy.sees_sizes == policy.needs_true_state == (name == "oracle")


def test_make_policy_passes_parameters() -> None:
    policy = make_policy("hybrid", 1, penalty=3.0, alpha=4.0, epsilon=0.1)
    assert (policy.penalty, policy.alpha, policy.epsilon) == (3.0, 4.0, 0.1)
    assert make_policy("hybrid-fixed-beta", 1, beta=0.2).beta == 0.2
    assert policy_params("hybrid-fixed-beta") == (
        "alpha", "beta", "ca2", "epsilon", "penalty", "rho_threshold",
    )
    assert policy_params("jsq") == ("normalise",)
    assert policy_params("jsq-s") == ()


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("hybrid", {"beta": 0.5}, r"policy 'hybrid': unknown parameter 'beta'; accepted: alpha"),
        ("jsq", {"penalty": 2},
         r"policy 'jsq': unknown parameter 'penalty'; accepted: normalise"),
        ("jsq-s", {"penalty": 2}, r"policy 'jsq-s': unknown parameter 'penalty'; accepted: none"),
        ("hybrid", {"penalty": 0.5}, r"penalty: expected a number in \[1, inf\], found 0.5"),
        ("hybrid", {"epsilon": 1.5}, r"epsilon: expected a number in \[0, 1\], found 1.5"),
        ("model-only", {"alpha": 2}, r"alpha: expected a number in \(2, inf\], found 2"),
        ("hybrid", {"ca2": "1"}, r"ca2: expected a number in \[0, inf\], found '1'"),
        ("hybrid-fixed-beta", {"beta": -0.1}, r"beta: expected a number in \[0, 1\]"),
    ],
)
def test_bad_parameters_are_refused(name: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(TestbedError, match=message):
        make_policy(name, 0, **params)


def test_policy_variants_sweep_one_parameter() -> None:
    variants = policy_variants("hybrid", 3, "penalty", PENALTY_SWEEP, epsilon=0.0)
    assert list(variants) == list(PENALTY_SWEEP)
    assert all(p.penalty == f and p.seed == 3 and p.epsilon == 0 for f, p in variants.items())


# ------------------------------------------------------------------ simple baselines


def test_edge_first_sticks_to_the_first_edge_by_name() -> None:
    v = view(
        tgt("e2", queue=50), tgt("e1", queue=40), tgt("cl", tier="cloud"),
        tgt("lo", tier="local", delay=0.0),
    )
    assert make_policy("edge-first", 0).choose(TASK, v) == Decision("e1", None)


def test_edge_first_falls_back_to_the_lowest_delay_serving_target() -> None:
    v = view(
        tgt("e1", active=0), tgt("cl", tier="cloud", delay=0.05),
        tgt("lo", tier="local", delay=0.001), tgt("x", tier="local", delay=0.0, active=0),
    )
    assert make_policy("edge-first", 0).choose(TASK, v) == Decision("lo", None)


def test_jsq_s_scales_the_backlog_by_capacity() -> None:
    # (queue + busy + 1) / (active mu): a = 4/4 = 1.0, b = 2/1 = 2.0, c = 4/(2*3) = 0.67
    v = view(tgt("a", queue=1, busy=2, c=4), tgt("b", busy=1, c=1), tgt("c", queue=1, busy=2,
                                                                           c=4, active=2, mu=3))
    assert make_policy("jsq-s", 0).choose(TASK, v) == Decision("c", None)
    assert make_policy("jsq", 0).choose(TASK, v).target == "b"  # what plain JSQ does


def test_jsq_s_ties_by_delay_then_name_and_skips_inactive() -> None:
    v = view(tgt("a", busy=1, delay=0.02), tgt("b", busy=1, delay=0.01), tgt("z", active=0))
    assert make_policy("jsq-s", 0).choose(TASK, v).target == "b"
    v = view(tgt("n", busy=1), tgt("m", busy=1))
    assert make_policy("jsq-s", 0).choose(TASK, v).target == "m"


# ------------------------------------------------------------------ hybrid estimator


def test_hybrid_picks_the_analytically_lower_total() -> None:
    edge = tgt("edge", queue=2, busy=4, c=4, mu=1.0, lam=3.0, delay=0.005)
    cloud = tgt("cloud", tier="cloud", busy=3, c=32, mu=0.5, lam=1.5, delay=0.05)
    beta = 2 / 4
    edge_total = (1 - beta) * ac_wait(3.0, 1.0, 4) + beta * 2 / 4 + 1.0 + 0.005
    cloud_total = ac_wait(1.5, 0.5, 32) + 2.0 + 0.05
    assert edge_total < cloud_total
    decision = greedy("hybrid").choose(TASK, view(edge, cloud))
    assert decision.target == "edge"
    assert decision.estimate_s == pytest.approx(edge_total, rel=1e-12)
    slow_edge = tgt("edge", queue=9, busy=4, c=4, mu=1.0, lam=3.0, delay=0.005)  # beta = 1
    decision = greedy("hybrid").choose(TASK, view(slow_edge, cloud))
    assert decision.target == "cloud"
    assert decision.estimate_s == pytest.approx(cloud_total, rel=1e-12)


def _estimate(name: str, target: TargetState, **params: Any) -> float:
    estimate = greedy(name, **params).choose(TASK, view(target)).estimate_s
    assert estimate is not None
    return estimate


def test_blend_is_pure_model_on_an_empty_queue_and_pure_queue_from_c_waiting() -> None:
    empty = tgt("t", busy=3, c=4, lam=2.5)
    assert _estimate("hybrid", empty) == _estimate("model-only", empty)
    assert _estimate("hybrid", empty) == pytest.approx(ac_wait(2.5, 1.0, 4) + 1.0 + 0.01)
    for queue in (4, 5, 30):
        full = tgt("t", queue=queue, busy=4, c=4, lam=2.5)
        assert _estimate("hybrid", full) == _estimate("queue-only", full)
        assert _estimate("hybrid", full) == pytest.approx(queue / 4 + 1.0 + 0.01)
    half = tgt("t", queue=1, busy=4, c=4, lam=2.5)  # beta = 1/4
    expected = 0.75 * ac_wait(2.5, 1.0, 4) + 0.25 * (1 / 4) + 1.0 + 0.01
    assert _estimate("hybrid", half) == pytest.approx(expected, rel=1e-12)


def test_queue_wait_uses_active_servers() -> None:
    degraded = tgt("t", queue=6, busy=2, c=4, active=2, mu=2.0)
    assert _estimate("queue-only", degraded) == pytest.approx(6 / (2 * 2.0) + 0.5 + 0.01)


def test_penalty_applies_only_above_the_threshold_and_not_to_the_estimate() -> None:
    hot_lam = 0.95 * 4  # rho 0.95, yet the lower total thanks to its short delay
    hot = tgt("hot", c=4, lam=hot_lam, delay=0.0)
    cool = tgt("cool", tier="cloud", c=4, lam=2.0, delay=ac_wait(hot_lam, 1, 4))
    hot_total = ac_wait(hot_lam, 1.0, 4) + 1.0
    cool_total = ac_wait(2.0, 1.0, 4) + 1.0 + ac_wait(hot_lam, 1, 4)
    assert hot_total < cool_total < 2 * hot_total
    assert greedy("hybrid", penalty=1.0).choose(TASK, view(hot, cool)).target == "hot"
    decision = greedy("hybrid").choose(TASK, view(hot, cool))  # default penalty 2
    assert decision == Decision("cool", pytest.approx(cool_total))
    assert greedy("hybrid", rho_threshold=0.96).choose(TASK, view(hot, cool)).target == "hot"
    at_threshold = tgt("hot", c=4, lam=0.9 * 4, delay=0.0)  # rho = 0.9 is not "above"
    cool = tgt("cool", tier="cloud", c=4, lam=2.0, delay=ac_wait(0.9 * 4, 1, 4))
    assert greedy("hybrid", penalty=100.0).choose(TASK, view(at_threshold, cool)).target == "hot"


@pytest.mark.parametrize("name", ESTIMATING)
def test_an_unstable_tier_never_raises_and_ranks_last(name: str) -> None:
    stable = tgt("stable", tier="cloud", c=8, mu=0.5, lam=2.0, delay=0.1, busy=4)
    for lam, queue in ((4.0, 0), (4.0, 3), (40.0, 0), (400.0, 100)):
        unstable = tgt("unstable", c=4, mu=1.0, lam=lam, queue=queue, busy=4, delay=0.0)
        estimate = greedy(name).choose(TASK, view(unstable)).estimate_s
        assert estimate is not None and math.isfinite(estimate) and estimate >= 1.0
        decision = greedy(name).choose(TASK, view(unstable, stable))
        # queue-only does not look at rates and the global proxy hides the tier's own
        # rate, so an overloaded tier with a short queue can fool them (by design).
        if name not in ("queue-only", "hybrid-global-rate"):
            assert decision.target == "stable"


def test_overload_treatment_is_documented_formula() -> None:
    capped = ac_wait(RHO_CAP * 4, 1.0, 4)
    assert model_wait(8.0, 1.0, 4, 3, 1.0, CS2) == pytest.approx(capped * 2.0 / RHO_CAP + 4 / 4)
    assert model_wait(4.0, 1.0, 4, 0, 1.0, CS2) == pytest.approx(capped / RHO_CAP + 1 / 4)
    assert model_wait(1.0, 1.0, 0, 0, 1.0, CS2) == math.inf


@given(
    lam=st.floats(0, 1e4),
    extra=st.floats(0, 1e3),
    mu=st.floats(1e-3, 1e3),
    n=st.integers(1, 128),
    q=st.integers(0, 10_000),
)
@settings(max_examples=300, deadline=None)
def test_model_wait_is_finite_nonnegative_and_monotone_in_load(
    lam: float, extra: float, mu: float, n: int, q: int
) -> None:
    low = model_wait(lam, mu, n, q, 1.0, CS2)
    high = model_wait(lam + extra, mu, n, q, 1.0, CS2)
    assert 0.0 <= low <= high * (1 + 1e-9) + 1e-12 and math.isfinite(high)
    assert model_wait(lam, mu, n, q + 1, 1.0, CS2) >= low


@pytest.mark.parametrize("name", ESTIMATING)
def test_a_tier_without_active_workers_is_never_chosen(name: str) -> None:
    dead = tgt("dead", active=0, delay=0.0)
    loaded = tgt("loaded", tier="cloud", queue=20, busy=4, lam=3.9, delay=0.5)
    policy = make_policy(name, 5)  # exploring too
    assert {policy.choose(TASK, view(dead, loaded)).target for _ in range(2000)} == {"loaded"}


@pytest.mark.parametrize("name", ESTIMATING)
def test_no_serving_target_means_least_loaded_and_no_estimate(name: str) -> None:
    v = view(tgt("a", active=0, queue=3), tgt("b", active=0, queue=1))
    assert make_policy(name, 0).choose(TASK, v) == Decision("b", None)


def _choices(name: str, seed: int, v: View, n: int) -> list[str]:
    policy = make_policy(name, seed)
    return [policy.choose(TASK, v).target for _ in range(n)]


@pytest.mark.parametrize("name", ESTIMATING)
def test_exploration_is_about_five_percent_and_seeded(name: str) -> None:
    v = view(tgt("best", delay=0.0), tgt("b", delay=1.0), tgt("c", delay=2.0))
    n = 30_000
    counts = Counter(_choices(name, 11, v, n))
    explored_away = n - counts["best"]  # exploration lands on "best" a third of the time
    expected = n * 0.05 * 2 / 3
    assert abs(explored_away - expected) < 4 * math.sqrt(expected)
    assert abs(counts["b"] - counts["c"]) < 4 * math.sqrt(expected)
    assert _choices(name, 11, v, 500) == _choices(name, 11, v, 500)
    assert _choices(name, 11, v, 500) != _choices(name, 12, v, 500)


def test_exploration_choice_carries_its_own_estimate() -> None:
    v = view(tgt("best", delay=0.0), tgt("far", delay=3.0))
    policy = make_policy("hybrid", 2, epsilon=1.0)
    decisions = [policy.choose(TASK, v) for _ in range(200)]
    assert {d.target for d in decisions} == {"best", "far"}
    assert all(d.estimate_s == pytest.approx(1.0 + v.targets[d.target].delay_s)
               for d in decisions)


def test_estimators_agree_when_their_waits_agree() -> None:
    # No queue and no arrivals: W_model = W_queue = 0, so every blend is 0 too.
    v = view(tgt("a", delay=0.02), tgt("b", mu=2.0, delay=0.3), tgt("c", mu=0.5, c=8))
    runs = []
    for name in ESTIMATING:
        policy = make_policy(name, 9)
        runs.append([policy.choose(TASK, v) for _ in range(2000)])
    assert all(run == runs[0] for run in runs[1:])
    assert {d.target for d in runs[0]} == {"a", "b", "c"}  # exploration included


def test_fixed_beta_uses_its_constant() -> None:
    t = tgt("t", queue=0, busy=4, c=4, lam=3.0)  # hybrid: beta = 0 here
    model, queue = ac_wait(3.0, 1.0, 4), 0.0
    assert _estimate("hybrid-fixed-beta", t) == pytest.approx(0.5 * model + 0.5 * queue + 1.01)
    t = tgt("t", queue=8, busy=4, c=4, lam=3.0)  # hybrid: beta = 1 here
    expected = 0.8 * ac_wait(3.0, 1.0, 4) + 0.2 * 2.0 + 1.01
    assert _estimate("hybrid-fixed-beta", t, beta=0.2) == pytest.approx(expected)
    assert _estimate("hybrid-fixed-beta", t, beta=1.0) == _estimate("queue-only", t)
    assert _estimate("hybrid-fixed-beta", t, beta=0.0) == _estimate("model-only", t)


def test_global_rate_ablation_is_biased_under_skewed_rates() -> None:
    # 90 % of the traffic reaches the edge (rho 0.925), 10 % the cloud.
    edge = tgt("edge", c=4, lam=3.7, busy=4, delay=0.0)
    cloud = tgt("cloud", tier="cloud", c=4, lam=0.3, delay=0.5)
    per_tier = greedy("hybrid").choose(TASK, view(edge, cloud))
    global_rate = greedy("hybrid-global-rate").choose(TASK, view(edge, cloud))
    assert per_tier.target == "cloud"  # the edge is near saturation (and penalised)
    assert global_rate.target == "edge"  # with 2.0 each, the edge looks half loaded
    assert global_rate.estimate_s == pytest.approx(ac_wait(2.0, 1.0, 4) + 1.0)
    balanced = view(tgt("edge", lam=2.0, delay=0.0), tgt("cloud", tier="cloud", lam=2.0))
    assert (greedy("hybrid").choose(TASK, balanced)
            == greedy("hybrid-global-rate").choose(TASK, balanced))


def test_the_global_rate_shares_over_every_target_of_the_view() -> None:
    v = view(tgt("a", lam=3.0), tgt("b", lam=1.0), tgt("dead", active=0, lam=2.0))
    decision = greedy("hybrid-global-rate").choose(TASK, v)
    assert decision.estimate_s == pytest.approx(ac_wait(2.0, 1.0, 4) + 1.01)


# ------------------------------------------------------------------- every policy


@st.composite
def target_states(draw: st.DrawFn, name: str) -> TargetState:
    c = draw(st.integers(1, 64))
    active = draw(st.integers(0, c))
    busy = draw(st.integers(0, c))
    queue = draw(st.integers(0, 40))
    speed = draw(st.floats(0.05, 20))
    works = st.floats(0, 50, allow_nan=False)
    return TargetState(
        name=name,
        tier=draw(st.sampled_from(["local", "edge", "cloud"])),
        queue=queue,
        busy=busy,
        active=active,
        c=c,
        service_rate=draw(st.floats(1e-3, 1e3)),
        arrival_rate=draw(st.floats(0, 1e4)),
        delay_s=draw(st.floats(0, 2)),
        age_s=draw(st.floats(0, 10)),
        speed=speed,
        backlog=Backlog(
            tuple(draw(st.lists(works, min_size=busy, max_size=busy))),
            tuple(draw(st.lists(works, min_size=queue, max_size=queue))),
        ),
    )


@st.composite
def views(draw: st.DrawFn) -> View:
    names = draw(st.lists(st.text("abcxyz", min_size=1, max_size=4), min_size=1, max_size=5,
                          unique=True))
    return View(now=draw(st.floats(0, 1e6)), client="c1",
                targets={n: draw(target_states(n)) for n in names})


@pytest.mark.parametrize("name", sorted(POLICIES))
@given(v=views(), size=st.floats(1e-4, 1e3), seed=st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_every_policy_answers_any_valid_view(name: str, v: View, size: float, seed: int) -> None:
    policy = make_policy(name, seed)
    task = TaskInfo(1, "c1", 0.0, size if policy.sees_sizes else None)
    decision = policy.choose(task, v)
    assert decision.target in v.targets
    if any(t.active > 0 for t in v.targets.values()):
        assert v.targets[decision.target].active > 0
    assert decision.estimate_s is None or (
        math.isfinite(decision.estimate_s) and decision.estimate_s >= 0
    )
    if name in ESTIMATING or name == "oracle":
        assert (decision.estimate_s is None) == all(t.active == 0 for t in v.targets.values())
