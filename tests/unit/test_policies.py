"""Tests of the simple placement policies and their registry."""

from __future__ import annotations

from collections import Counter

import pytest

from nodes.offloading.policies import POLICIES, make_policy
from nodes.offloading.policies.base import Decision, Policy, TargetState, TaskInfo, View
from nodes.offloading.policies.jsq import JSQPolicy
from nodes.offloading.policies.random_policy import RandomPolicy
from testbed.errors import TestbedError

TASK = TaskInfo(task_id=0, client="c1", arrival=0.0)


def state(name: str, queue: int = 0, busy: int = 0, active: int = 1, delay: float = 0.01):
    return TargetState(
        name=name,
        tier="edge",
        queue=queue,
        busy=busy,
        active=active,
        c=max(active, 1),
        service_rate=1.0,
        arrival_rate=0.0,
        delay_s=delay,
        age_s=0.0,
    )


def view(*targets: TargetState) -> View:
    return View(now=0.0, client="c1", targets={t.name: t for t in targets})


def test_registry():
    assert POLICIES["random"] is RandomPolicy and POLICIES["jsq"] is JSQPolicy
    for name in POLICIES:
        policy = make_policy(name, seed=1)
        assert isinstance(policy, Policy)
        assert policy.name == name
        assert policy.seed == 1
        assert policy.sees_sizes == (name == "oracle")  # only the declared oracle


def test_unknown_policy_lists_known_names():
    known = ", ".join(sorted(POLICIES))
    with pytest.raises(TestbedError, match=f"unknown policy 'nope'; known: {known}"):
        make_policy("nope", 0)


# --- random -----------------------------------------------------------------------------


def _random_choices(seed: int, v: View, n: int = 200) -> list[str]:
    policy = make_policy("random", seed)
    return [policy.choose(TASK, v).target for _ in range(n)]


def test_random_is_deterministic_per_seed():
    v = view(state("a"), state("b"), state("c"))
    assert _random_choices(5, v) == _random_choices(5, v)
    assert _random_choices(5, v) != _random_choices(6, v)


def test_random_ignores_mapping_order():
    forward = view(state("a"), state("b"), state("c"))
    backward = view(state("c"), state("b"), state("a"))
    assert _random_choices(5, forward) == _random_choices(5, backward)


def test_random_covers_all_targets_uniformly():
    v = view(state("a"), state("b"), state("c"), state("d"))
    counts = Counter(_random_choices(0, v, n=4000))
    assert set(counts) == {"a", "b", "c", "d"}
    assert all(abs(n - 1000) < 150 for n in counts.values())


def test_random_never_picks_inactive():
    v = view(state("a"), state("b", active=0), state("c"))
    assert set(_random_choices(1, v, n=500)) == {"a", "c"}


def test_random_decision_has_no_estimate():
    assert make_policy("random", 0).choose(TASK, view(state("a"))) == Decision("a", None)


# --- jsq --------------------------------------------------------------------------------


def test_jsq_picks_least_loaded():
    v = view(state("a", queue=3, busy=1), state("b", queue=0, busy=2), state("c", queue=1, busy=2))
    assert make_policy("jsq", 0).choose(TASK, v) == Decision("b", None)


def test_jsq_counts_queue_and_busy():
    v = view(state("a", queue=0, busy=4), state("b", queue=2, busy=1))
    assert make_policy("jsq", 0).choose(TASK, v).target == "b"


def test_jsq_ties_broken_by_delay_then_name():
    policy = make_policy("jsq", 0)
    v = view(state("a", busy=1, delay=0.05), state("b", queue=1, delay=0.02), state("c", busy=3))
    assert policy.choose(TASK, v).target == "b"
    v = view(state("z", busy=1), state("m", busy=1), state("q", busy=1))
    assert policy.choose(TASK, v).target == "m"


def test_jsq_skips_inactive_even_if_empty():
    v = view(state("idle", active=0), state("busy", queue=5, busy=2))
    assert make_policy("jsq", 0).choose(TASK, v).target == "busy"


def test_jsq_is_deterministic():
    v = view(state("a", busy=1), state("b", busy=1))
    assert {make_policy("jsq", s).choose(TASK, v).target for s in range(10)} == {"a"}


# --- shared behaviour -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_falls_back_to_all_targets_when_none_active(name):
    v = view(state("a", active=0, queue=2), state("b", active=0))
    picks = {make_policy(name, s).choose(TASK, v).target for s in range(20)}
    assert picks <= {"a", "b"} and picks


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_targets_is_an_error(name):
    with pytest.raises(TestbedError, match="no targets"):
        make_policy(name, 0).choose(TASK, view())
