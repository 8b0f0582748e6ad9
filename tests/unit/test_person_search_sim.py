"""Tests of the person-search discrete-event executor (``testbed.systems.person_search.sim``).

Tiny hand-built worlds (static targets on a 3-server line) whose schedules are worked
out by hand, plus small generated worlds for the invariants; every run is well under a
second.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nodes.person_search.model import PriorityParams
from testbed.analysis.traces import rows_to_frame
from testbed.systems.person_search.sim import (
    analysis_rows,
    policy_seed_for,
    request_rows,
    simulate,
)
from workloads.person_search import Layout, SearchWorld, build_world

TC = 10.0
FIG3_POLICIES = ("priority", "random", "load-balance")


def static_world(servers: int, where: list[int], slots: int = 5) -> SearchWorld:
    """A line of ``servers`` where target k stays on server ``where[k]`` at every slot."""
    holder = np.array([[s] * (slots + 1) for s in where], dtype=np.int64)
    start = np.array([[float(s), 0.0] for s in where])
    return SearchWorld(layout=Layout("line", servers), slots=slots, start=start, holder=holder)


def item(server: int, slot: int, slots: int = 5) -> int:
    """Item id of ``server``'s item of ``slot`` (server-major ids)."""
    return server * slots + slot - 1


# --- hand-computed schedules ---------------------------------------------------------------


def test_static_target_alone_takes_one_analysis_per_slot() -> None:
    # From mu_L = server 1 at T_L = 0, Eq. 1 prefers (1, T1): E = 1/sqrt(2 pi) with
    # sigma = 1, against E = 0.266 (+ w V = 0.00025) for (1, T2) and 0.242 for (0, T1).
    # Each discovery moves T_L one slot on, so the search walks T1..T5 on server 1,
    # alone on its server: each analysis takes Tc.
    run = simulate(static_world(3, [1]), "priority", 0)
    assert run.a_item.tolist() == [item(1, j) for j in range(1, 6)]
    assert run.a_start.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert run.a_end.tolist() == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert run.analyses.tolist() == [5]
    assert run.response.tolist() == [50.0]
    assert run.found.tolist() == [item(1, 5)]
    assert run.total_response == 50.0


def test_paper_rule_two_searches_on_one_server() -> None:
    # Two targets on server 1; alpha = sigma_D = 0.1 makes every other server hopeless
    # (E ~ exp(-50)), so both searches always pick server 1's next slot whatever its load.
    # Paper rule, admitted in search-id order: at 0 search 0 runs alone (ends 10),
    # search 1 as the second (2 Tc, ends 20). From then on each search starts while the
    # other runs: 2 Tc per analysis. Search 0: 10, 30, 50, 70, 90; search 1: 20, 40, ..., 100.
    run = simulate(static_world(3, [1, 1]), "priority", 0, alpha=0.1, sigma_d=0.1)
    assert run.a_search.tolist() == [0, 1] * 5
    assert run.a_item.tolist() == [item(1, j) for j in range(1, 6) for _ in range(2)]
    assert run.a_end.tolist() == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
    assert run.a_queue.tolist() == [0, 1] + [1] * 8
    assert run.response.tolist() == [90.0, 100.0]
    assert run.total_response == 190.0


def test_processor_sharing_two_searches_on_one_server() -> None:
    # Same world under processor sharing: both analyses share the server from 0, each
    # needs Tc of work at rate 1/2: both end at 20, 40, ..., 100.
    run = simulate(static_world(3, [1, 1]), "priority", 0, alpha=0.1, sigma_d=0.1,
                   sharing="processor-sharing")
    assert run.a_end.tolist() == [20.0, 20.0, 40.0, 40.0, 60.0, 60.0, 80.0, 80.0, 100.0, 100.0]
    assert run.response.tolist() == [100.0, 100.0]


def test_initial_batch_counts_earlier_choices() -> None:
    # Default parameters, both targets on server 1. Sequentially, search 1 sees search
    # 0's choice on server 1: P(1, T1) = 10 * 2 / 0.399 = 50.1 against P(0, T1) =
    # 10 * 1 / 0.242 = 41.3 on idle server 0 (ties of 0 and 2 go to the lower id).
    # Without sequential choices both see idle servers and pick (1, T1).
    world = static_world(3, [1, 1])
    run = simulate(world, "priority", 0)
    assert run.a_item[:2].tolist() == [item(1, 1), item(0, 1)]
    together = simulate(world, "priority", 0, sequential=False)
    assert together.a_item[:2].tolist() == [item(1, 1), item(1, 1)]
    # The paper rule counts admission order either way: Tc, then 2 Tc on server 1.
    assert together.a_end[:2].tolist() == [10.0, 20.0]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_compensated_accounting_scales_random_by_l(seed: int) -> None:
    # random looks only at T5 items from T_L = 0: l = 2 * 5 - 1 = 9 for every analysis.
    world = static_world(3, [1])
    plain = simulate(world, "random", seed)
    compensated = simulate(world, "random", seed, accounting="compensated")
    assert compensated.analyses.tolist() == plain.analyses.tolist()
    assert plain.response.tolist() == [TC * plain.analyses[0]]
    assert compensated.response.tolist() == [9 * TC * plain.analyses[0]]
    assert set(compensated.a_factor.tolist()) == {9.0}


def test_compensated_accounting_is_one_for_consecutive_slots() -> None:
    # The static priority search always looks one slot past T_L: l = max(1, 1) = 1.
    run = simulate(static_world(3, [1]), "priority", 0, accounting="compensated")
    assert run.response.tolist() == [50.0]


# --- invariants on generated worlds -----------------------------------------------------------


@pytest.mark.parametrize("policy", FIG3_POLICIES)
@pytest.mark.parametrize("sharing", ["paper", "processor-sharing"])
def test_response_is_the_sum_of_analyses_and_total_the_sum(policy: str, sharing: str) -> None:
    run = simulate({"servers": 10, "targets": 60}, policy, 5, sharing=sharing)
    durations = run.a_end - run.a_start
    assert (durations > 0).all()
    per_request = np.bincount(run.a_search, weights=durations, minlength=run.requests)
    np.testing.assert_allclose(per_request, run.response, rtol=1e-9)
    assert run.total_response == pytest.approx(float(run.response.sum()), rel=1e-12)
    assert np.bincount(run.a_search, minlength=run.requests).tolist() == run.analyses.tolist()
    # each search's analyses follow one another without a gap, from time 0
    for k in range(run.requests):
        mine = np.flatnonzero(run.a_search == k)
        assert run.a_start[mine[0]] == 0.0
        np.testing.assert_allclose(run.a_start[mine[1:]], run.a_end[mine[:-1]])
        assert run.a_step[mine].tolist() == list(range(mine.size))
    if sharing == "paper":  # an analysis takes Tc x (those running at its start, itself)
        np.testing.assert_allclose(durations, TC * (run.a_queue + 1))
    assert run.makespan == pytest.approx(float(run.response.max()))


def test_found_items_are_the_required_ones() -> None:
    params = {"servers": 10, "targets": 40, "movement": "straight"}
    run = simulate(params, "priority", 3)
    world = build_world(params, 3)
    assert run.found.tolist() == [world.required_item(k) for k in range(40)]


@pytest.mark.parametrize("policy", FIG3_POLICIES)
def test_deterministic_by_seed(policy: str) -> None:
    params = {"servers": 10, "targets": 50}
    one, two = simulate(params, policy, 7), simulate(params, policy, 7)
    for field in ("analyses", "response", "found", "a_item", "a_start", "a_end"):
        assert np.array_equal(getattr(one, field), getattr(two, field)), field
    other = simulate(params, policy, 8)
    assert not np.array_equal(one.a_item, other.a_item)


def test_policy_seed_is_separate_and_overridable() -> None:
    assert policy_seed_for(0) == policy_seed_for(0) != policy_seed_for(1)
    assert policy_seed_for(0) != 0
    world = static_world(10, [4] * 20)
    base = simulate(world, "random", 0)
    assert base.policy_seed == policy_seed_for(0)
    same = simulate(world, "random", 99, policy_seed=policy_seed_for(0))
    assert np.array_equal(base.a_item, same.a_item)
    assert not np.array_equal(base.a_item, simulate(world, "random", 0, policy_seed=1).a_item)


def test_random_needs_more_analyses_than_priority() -> None:
    # N = 50: random draws T5 items without replacement, about (N + 1) / 2 = 25.5
    # analyses a search; priority walks the slots near the last discovery (about 14 here).
    # A wide margin: random at least 1.3 x priority, on three worlds. (At N = 20 the
    # priority policy, walking T1..T5, needs about as many analyses as random or more.)
    for seed in (0, 1, 2):
        params = {"servers": 50, "targets": 200}
        prio = simulate(params, "priority", seed).mean_analyses
        rand = simulate(params, "random", seed).mean_analyses
        assert 20.0 < rand < 31.0
        assert rand > 1.3 * prio


# --- options and errors ----------------------------------------------------------------------


def test_policy_options_reach_the_priority_policy() -> None:
    world = static_world(5, [2, 3, 2])
    a = simulate(world, "priority", 0, w=0.3)
    b = simulate(world, "priority", 0, params=PriorityParams(w=0.3))
    assert np.array_equal(a.a_item, b.a_item)
    with pytest.raises(ValueError, match="tc"):
        simulate(world, "priority", 0, params=PriorityParams(tc=5.0))
    with pytest.raises(ValueError, match="takes no options"):
        simulate(world, "random", 0, w=0.3)


def test_tc_from_params_and_argument() -> None:
    run = simulate({"servers": 3, "targets": 1, "tc_s": 2.0}, "random", 0)
    assert run.tc == 2.0 and run.response[0] == 2.0 * run.analyses[0]
    run = simulate(static_world(3, [1]), "priority", 0, tc=1.5)
    assert run.response.tolist() == [7.5]


@pytest.mark.parametrize("kwargs", [{"sharing": "fifo"}, {"accounting": "l"}, {"tc": 0.0},
                                    {"tc": math.inf}])
def test_bad_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        simulate(static_world(3, [1]), "priority", 0, **kwargs)  # type: ignore[arg-type]


def test_bad_world() -> None:
    with pytest.raises(ValueError, match="params.servers"):
        simulate({"servers": 0}, "priority", 0)
    with pytest.raises(TypeError):
        simulate([1, 2], "priority", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown search policy"):
        simulate(static_world(3, [1]), "nearest", 0)


# --- trace rows ----------------------------------------------------------------------------------


def test_rows_follow_the_trace_schema() -> None:
    run = simulate({"servers": 10, "targets": 30}, "priority", 1)
    requests = rows_to_frame(request_rows(run, run_id="r1", repetition=2, time_scale=10.0))
    assert len(requests) == 30
    assert set(requests["kind"]) == {"search"}
    assert requests["task_id"].tolist() == list(range(30))
    assert requests["latency_s"].to_numpy() == pytest.approx(run.response)
    assert requests["latency_s"].sum() == pytest.approx(run.total_response)
    assert requests["end_wall"].to_numpy() == pytest.approx(run.response / 10.0)
    assert requests["step"].tolist() == (run.analyses - 1).tolist()
    assert requests["item"].tolist() == [str(i) for i in run.found]
    assert requests["target"].tolist() == [f"edge-{i // 5}" for i in run.found]
    analyses = rows_to_frame(analysis_rows(run))
    assert len(analyses) == run.total_analyses
    assert analyses["latency_s"].sum() == pytest.approx(run.total_response)
    assert analyses["queue_at_arrival"].tolist() == run.a_queue.tolist()
