"""The baselines' second readings: ``random`` by capacity, ``edge-first`` spilling past a
queue threshold, ``jsq`` normalised by capacity (docs/policies.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from nodes.offloading.policies import check_params, make_policy
from nodes.offloading.policies.base import TargetState, TaskInfo, View
from testbed.errors import TestbedError

TASK = TaskInfo(task_id=0, client="c1", arrival=0.0)


def target(name: str, tier: str, workers: int, rate: float, delay: float, queue: int = 0,
           busy: int = 0) -> TargetState:
    return TargetState(name=name, tier=tier, queue=queue, busy=busy, active=workers,
                       c=workers, service_rate=rate, arrival_rate=0.0, delay_s=delay,
                       age_s=0.0)


LOCAL = target("c1-local", "local", 1, 1.0, 0.0)
EDGE = target("edge", "edge", 4, 2.0, 0.006)
CLOUD = target("cloud", "cloud", 16, 1.5, 0.042)


def view(*targets: TargetState) -> View:
    return View(now=0.0, client="c1", targets={t.name: t for t in targets})


def choices(policy, v: View, n: int) -> Counter:
    return Counter(policy.choose(TASK, v).target for _ in range(n))


def test_random_by_capacity_splits_in_proportion_to_workers_times_rate() -> None:
    v = view(LOCAL, EDGE, CLOUD)  # capacities 1, 8, 24 tasks per model second
    n = 33_000
    counts = choices(make_policy("random", 5, weights="capacity"), v, n)
    for t, share in ((LOCAL, 1 / 33), (EDGE, 8 / 33), (CLOUD, 24 / 33)):
        sd = (share * (1 - share) / n) ** 0.5
        assert abs(counts[t.name] / n - share) < 5 * sd, (t.name, counts)
    uniform = choices(make_policy("random", 5), v, n)
    assert abs(uniform["c1-local"] / n - 1 / 3) < 0.02  # the other reading, unchanged


def test_random_by_capacity_skips_targets_without_active_workers() -> None:
    v = view(LOCAL, replace(EDGE, active=0), CLOUD)
    assert "edge" not in choices(make_policy("random", 1, weights="capacity"), v, 500)


def test_edge_first_never_spills_by_default() -> None:
    full = replace(EDGE, queue=50, busy=4)
    assert make_policy("edge-first", 0).choose(TASK, view(LOCAL, full, CLOUD)).target == "edge"


@pytest.mark.parametrize(("queue", "threshold", "expected"), [
    (4, None, "edge"),    # q_E <= c_E: still the edge
    (5, None, "cloud"),   # past the worker count: the next tier outward
    (2, 2, "edge"),
    (3, 2, "cloud"),
    (0, 0, "edge"),
])
def test_edge_first_spills_to_the_next_tier_past_its_threshold(
        queue: int, threshold: int | None, expected: str) -> None:
    policy = make_policy("edge-first", 0, spill="queue-threshold", threshold=threshold)
    edge = replace(EDGE, queue=queue, busy=4)
    assert policy.choose(TASK, view(LOCAL, edge, CLOUD)).target == expected


def test_edge_first_spills_to_the_nearest_other_tier_when_none_is_farther() -> None:
    policy = make_policy("edge-first", 0, spill="queue-threshold")
    edge = replace(EDGE, queue=9, busy=4)
    assert policy.choose(TASK, view(LOCAL, edge)).target == "c1-local"


def test_edge_first_without_a_serving_edge_takes_the_nearest() -> None:
    policy = make_policy("edge-first", 0, spill="queue-threshold")
    down = replace(EDGE, active=0)
    assert policy.choose(TASK, view(LOCAL, down, CLOUD)).target == "c1-local"


def test_jsq_normalised_by_capacity_is_the_drain_time_rule() -> None:
    # Raw counts prefer the empty local server; per unit of capacity the cloud drains
    # its 10 tasks (plus the new one) in 11/24 s against the local server's 1 s.
    v = view(LOCAL, replace(CLOUD, queue=0, busy=10), replace(EDGE, queue=4, busy=4))
    assert make_policy("jsq", 0).choose(TASK, v).target == "c1-local"
    normalised = make_policy("jsq", 0, normalise="capacity").choose(TASK, v).target
    assert normalised == "cloud" == make_policy("jsq-s", 0).choose(TASK, v).target


@pytest.mark.parametrize(("name", "params", "field", "expected"), [
    ("random", {"weights": "speed"}, "weights", "uniform, capacity"),
    ("random", {"weight": "capacity"}, "weight", "parameters of random (weights)"),
    ("edge-first", {"spill": "sometimes"}, "spill", "never, queue-threshold"),
    ("edge-first", {"spill": "queue-threshold", "threshold": -1}, "threshold", "integer"),
    ("edge-first", {"spill": "queue-threshold", "threshold": 1.5}, "threshold", "integer"),
    ("edge-first", {"threshold": 3}, "threshold", "spill is queue-threshold"),
    ("jsq", {"normalise": "speed"}, "normalise", "none, capacity"),
    ("hybrid", {"penalty": 0.5}, "penalty", "[1, inf]"),
    ("jsq-s", {"normalise": "capacity"}, "normalise", "parameters of jsq-s (none)"),
])
def test_bad_parameters_name_the_field(name: str, params: dict, field: str,
                                       expected: str) -> None:
    with pytest.raises(ValueError) as err:
        check_params(name, params)
    message = str(err.value)
    assert message.startswith(f"params.{field}: expected "), message
    assert expected in message, message


def test_good_parameters_come_back_unchanged() -> None:
    params = {"spill": "queue-threshold", "threshold": 2}
    assert check_params("edge-first", params) == params
    assert check_params("hybrid", {"penalty": 5}) == {"penalty": 5}
    with pytest.raises(TestbedError):
        make_policy("random", 0, weights=3)
