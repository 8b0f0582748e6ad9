"""Tests of the clairvoyant ``oracle`` policy and its exact FIFO start-time computation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.offloading.policies import make_policy
from nodes.offloading.policies.base import Backlog, Decision, TargetState, TaskInfo, View
from nodes.offloading.policies.oracle import fifo_start_delay
from testbed.errors import TestbedError


def tgt(
    name: str,
    in_service: tuple[float, ...] = (),
    queued: tuple[float, ...] = (),
    *,
    active: int = 1,
    speed: float | None = 1.0,
    delay: float = 0.0,
    with_backlog: bool = True,
) -> TargetState:
    return TargetState(
        name=name,
        tier="edge",
        queue=len(queued),
        busy=len(in_service),
        active=active,
        c=max(active, len(in_service), 1),
        service_rate=1.0,
        arrival_rate=0.0,
        delay_s=delay,
        age_s=0.0,
        speed=speed,
        backlog=Backlog(in_service, queued) if with_backlog else None,
    )


def view(*targets: TargetState) -> View:
    return View(now=0.0, client="c1", targets={t.name: t for t in targets})


def task(size: float | None) -> TaskInfo:
    return TaskInfo(task_id=4, client="c1", arrival=0.0, size=size)


# ------------------------------------------------------------------ FIFO start time


@pytest.mark.parametrize(
    ("in_service", "queued", "workers", "start"),
    [
        ((), (), 1, 0.0),  # idle
        ((5.0,), (), 2, 0.0),  # a free worker
        ((3.0, 1.0), (), 2, 1.0),  # the first worker to finish
        ((3.0, 1.0), (2.0,), 2, 3.0),  # queued task starts at 1, ends at 3, as does the other
        ((3.0, 1.0), (2.0, 4.0), 2, 3.0),  # 2 starts at 1 (ends 3), 4 at 3; the new one at 3
        ((3.0, 1.0), (2.0, 4.0, 0.5), 2, 3.5),
        ((1.0, 2.0, 5.0), (), 1, 5.0),  # workers disabled while busy: wait for all three
        ((1.0, 2.0, 5.0), (), 2, 2.0),
        ((1.0, 2.0, 5.0), (1.0,), 2, 3.0),
        ((), (2.0, 2.0), 0, math.inf),  # nobody may serve
    ],
)
def test_fifo_start_delay_small_cases(
    in_service: tuple[float, ...], queued: tuple[float, ...], workers: int, start: float
) -> None:
    assert fifo_start_delay(in_service, queued, workers) == start


def _earliest_free_worker(in_service: list[float], queued: list[float], workers: int) -> float:
    """Independent reference: assign each task to the worker free earliest."""
    free = sorted(in_service + [0.0] * (workers - len(in_service)))
    for service in queued:
        free[0] += service
        free.sort()
    return free[0]


@given(
    data=st.data(),
    workers=st.integers(1, 8),
    queued=st.lists(st.floats(0, 100), max_size=20),
)
@settings(max_examples=300, deadline=None)
def test_fifo_start_delay_matches_earliest_free_worker_assignment(
    data: st.DataObject, workers: int, queued: list[float]
) -> None:
    in_service = data.draw(st.lists(st.floats(0, 100), max_size=workers))
    expected = _earliest_free_worker(in_service, queued, workers)
    assert fifo_start_delay(in_service, queued, workers) == pytest.approx(expected)


# ----------------------------------------------------------------------- decisions


def test_oracle_picks_the_exact_earliest_completion() -> None:
    edge = tgt("edge", in_service=(0.5,), queued=(0.25,), delay=0.01)  # starts at 0.75
    cloud = tgt("cloud", in_service=(2.0, 2.0), active=4, speed=4.0, delay=1.0)  # a free worker
    small = make_policy("oracle", 0).choose(task(0.1), view(edge, cloud))
    assert small == Decision("edge", pytest.approx(0.75 + 0.1 + 0.01))  # cloud: 0.025 + 1
    large = make_policy("oracle", 0).choose(task(2.0), view(edge, cloud))
    assert large == Decision("cloud", pytest.approx(2.0 / 4.0 + 1.0))  # edge: 0.75 + 2 + .01


def test_oracle_differs_from_jsq_when_sizes_differ() -> None:
    long_one = tgt("a", in_service=(9.0,))  # one task, but a long one
    short_ones = tgt("b", in_service=(0.1,), queued=(0.1, 0.1))
    v = view(long_one, short_ones)
    assert make_policy("jsq", 0).choose(task(None), v).target == "a"
    assert make_policy("oracle", 0).choose(task(1.0), v) == Decision("b", pytest.approx(1.3))


def test_oracle_ties_go_to_the_first_name() -> None:
    v = view(tgt("z", in_service=(1.0,)), tgt("m", in_service=(1.0,)))
    assert make_policy("oracle", 0).choose(task(1.0), v).target == "m"


def test_oracle_needs_the_true_size() -> None:
    with pytest.raises(TestbedError, match="task 4 came without its true size"):
        make_policy("oracle", 0).choose(task(None), view(tgt("a")))


def test_oracle_skips_targets_without_true_state_and_refuses_when_none_has_it() -> None:
    partial = view(tgt("a", with_backlog=False), tgt("b", in_service=(3.0,)), tgt("c", speed=None))
    assert make_policy("oracle", 0).choose(task(1.0), partial) == Decision("b", 4.0)
    blind = view(tgt("a", with_backlog=False), tgt("c", speed=None))
    with pytest.raises(TestbedError, match=r"no serving target came with its true backlog .*a, c"):
        make_policy("oracle", 0).choose(task(1.0), blind)


def test_oracle_never_picks_an_inactive_target_and_falls_back_when_none_serves() -> None:
    v = view(tgt("dead", active=0), tgt("busy", in_service=(5.0,), queued=(5.0,)))
    assert make_policy("oracle", 0).choose(task(1.0), v).target == "busy"
    v = view(tgt("x", active=0, queued=(1.0, 1.0)), tgt("y", active=0, queued=(1.0,)))
    assert make_policy("oracle", 0).choose(task(1.0), v) == Decision("y", None)


def test_oracle_is_flagged_for_the_executors() -> None:
    oracle = make_policy("oracle", 0)
    assert oracle.sees_sizes and oracle.needs_true_state
