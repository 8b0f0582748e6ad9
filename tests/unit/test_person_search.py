"""Tests of the person-search workload and its pure search layer (no network)."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest

from nodes.person_search.model import (
    AnalysisServer,
    PriorityParams,
    Search,
    compensation_factor,
    effective_candidates,
    priority_loop,
    priority_matrix,
    select,
    select_loop,
    sigma_of,
)
from nodes.person_search.policies import (
    LoadBalancePolicy,
    PriorityPolicy,
    RandomPolicy,
    make_search_policy,
)
from testbed.errors import TestbedError
from testbed.registry import generate, generators
from workloads.person_search import (
    TRUTH_NAME,
    Items,
    Layout,
    SearchWorld,
    build_world,
    movement_steps,
    read_ground_truth,
    walk,
    write_ground_truth,
)
from workloads.trace import write_trace

GEN = generators()["person-search"]
LINE3 = Items.for_layout(Layout("line", 3), 5)
IDLE3 = np.zeros(3, dtype=np.int64)


def _p(items: Items, server: int, slot: int, mu: tuple[float, float], t_l: float,
       load: np.ndarray, **options: object) -> float:
    """Eq. 1 of one item for one search, through the vectorised function."""
    params = PriorityParams(**options)  # type: ignore[arg-type]
    row = priority_matrix(items, mu, t_l, float(items.slots), load, params)[0]
    return float(row[items.item_id(server, slot)])


# --- the priority formula against hand-computed values -----------------------------------


def test_priority_matches_hand_computed_values() -> None:
    # Server 1, slot 1, mu_L = 1, T_L = 0: sigma = 0.5 * 1 + 0.5 = 1, E = 1/sqrt(2 pi),
    # V = 1 - |5 - 1| / 4 = 0, k + 1 = 1: P = 10 sqrt(2 pi).
    assert _p(LINE3, 1, 1, (1, 0), 0, IDLE3) == pytest.approx(25.066282746310005, rel=1e-12)
    # Server 2, slot 5: sigma = 3, distance 1: E = exp(-1/18) / (3 sqrt(2 pi)) = 0.1257944...,
    # V = 1: P = 10 / (E + 0.001).
    assert _p(LINE3, 2, 5, (1, 0), 0, IDLE3) == pytest.approx(78.8678306926113, rel=1e-12)
    # Two analyses already running on server 2: k + 1 = 3.
    busy = np.array([0, 0, 2])
    assert _p(LINE3, 2, 5, (1, 0), 0, busy) == pytest.approx(236.60349207783392, rel=1e-12)
    # Slot 3, sigma = 2, E = 1/(2 sqrt(2 pi)), V = 0.5: P = 10 / (E + 0.0005).
    assert _p(LINE3, 1, 3, (1, 0), 0, IDLE3) == pytest.approx(50.00721599108118, rel=1e-12)


def test_idle_server_does_not_zero_the_priority() -> None:
    """k_i + 1: an idle server's item still ranks by its probability."""
    near = _p(LINE3, 1, 1, (1, 0), 0, IDLE3)
    far = _p(LINE3, 2, 1, (0, 0), 0, IDLE3)
    assert 0 < near < far


def test_compensation_response_time_multiplies_tc_by_l() -> None:
    # Slot 3, T_L = 0: l = 2 * 3 - 1 = 5, Tc' = 50.
    value = _p(LINE3, 1, 3, (1, 0), 0, IDLE3, compensation="response-time")
    assert value == pytest.approx(250.0360799554059, rel=1e-12)
    assert value == pytest.approx(5 * _p(LINE3, 1, 3, (1, 0), 0, IDLE3), rel=1e-12)
    assert [compensation_factor(t, 2.0) for t in (0, 1, 2, 3, 4, 5)] == [3, 1, 1, 1, 3, 5]


def test_sigma_before_the_last_discovery_uses_the_time_distance() -> None:
    # T_L = 4, slot 1: the literal Eq. 3 gives 0.5 * (1 - 4) + 0.5 = -1; here 2.
    assert sigma_of(1, 4) == 2.0
    assert sigma_of(6, 4) == 1.5
    # E = exp(-1/8) / (2 sqrt(2 pi)), V = 0: P = 10 / E.
    row = priority_matrix(LINE3, (1, 0), 4.0, 5.0, IDLE3)[0]
    assert row[LINE3.item_id(0, 1)] == pytest.approx(56.80763903623372, rel=1e-12)
    assert np.isfinite(row).all()


def test_after_discovery_rule_drops_items_up_to_t_l() -> None:
    params = PriorityParams(candidates="after-discovery")
    row = priority_matrix(LINE3, (1, 0), 3.0, 5.0, IDLE3, params)[0]
    assert np.isinf(row[LINE3.time <= 3]).all()
    assert np.isfinite(row[LINE3.time > 3]).all()


def test_grid_density_is_a_product_of_two_normals() -> None:
    grid = Items.for_layout(Layout("grid", 9), 5)
    item = grid.item_id(4, 1)  # server 4 is at (1, 1)
    assert grid.position(item) == (1.0, 1.0)
    # sigma = 1, E = exp(-(1 + 1) / 2) / (2 pi), V = 0: P = 10 / E.
    row = priority_matrix(grid, (0, 0), 0.0, 5.0, np.zeros(9))[0]
    assert row[item] == pytest.approx(170.79468445347132, rel=1e-12)


def test_value_limits_and_zero_denominators() -> None:
    # T_s = 2: slot 1 would have V = 1 - 4/2 = -1; it is limited to 0, so P = Tc / E.
    row = priority_matrix(LINE3, (1, 0), 0.0, 5.0, IDLE3, PriorityParams(t_s=2.0))[0]
    assert row[LINE3.item_id(1, 1)] == pytest.approx(10 * math.sqrt(2 * math.pi), rel=1e-12)
    # w = 0 and a density that underflows: priority +inf, and the item is still selectable.
    far = Items.for_layout(Layout("line", 200), 5)
    params = PriorityParams(w=0.0)
    row = priority_matrix(far, (0, 0), 4.0, 5.0, np.zeros(200), params)[0]
    assert math.isinf(row[far.item_id(199, 5)])
    only = np.zeros(far.size, dtype=bool)
    only[[far.item_id(199, 5), far.item_id(198, 5)]] = True
    assert select(row, only)[0] == far.item_id(198, 5)
    assert select(np.array([1.0, 2.0]), np.zeros(2, dtype=bool))[0] == -1


@pytest.mark.parametrize(
    "options",
    [{"alpha": -1.0}, {"sigma_d": 0.0}, {"w": math.nan}, {"tc": 0.0}, {"t_s": 0.0},
     {"compensation": "area"}, {"candidates": "all"}],
)
def test_priority_params_refuse_undefined_values(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        PriorityParams(**options)  # type: ignore[arg-type]


# --- vectorised == loop --------------------------------------------------------------------


@pytest.mark.parametrize("layout", [Layout("line", 100), Layout("grid", 100)])
@pytest.mark.parametrize(
    "options",
    [{}, {"compensation": "response-time"}, {"candidates": "after-discovery"},
     {"w": 0.3, "alpha": 0.2, "sigma_d": 0.8, "t_s": 5.0}],
)
def test_vectorised_priorities_equal_the_loop(layout: Layout, options: dict[str, object]) -> None:
    items = Items.for_layout(layout, 5)
    rng = np.random.default_rng(3)
    searches = 40
    positions = layout.positions()
    mu = positions[rng.integers(layout.servers, size=searches)]
    t_l = rng.integers(0, 5, size=searches).astype(float)
    t_r = np.full(searches, 5.0)
    load = rng.integers(0, 4, size=layout.servers)
    cand = rng.random((searches, items.size)) < 0.8
    params = PriorityParams(**options)  # type: ignore[arg-type]
    fast = priority_matrix(items, mu, t_l, t_r, load, params, cand)
    slow = np.array(priority_loop(items, mu.tolist(), t_l.tolist(), t_r.tolist(),
                                  load.tolist(), params, cand.tolist()))
    assert np.array_equal(np.isinf(fast), np.isinf(slow))
    finite = np.isfinite(fast)
    np.testing.assert_allclose(fast[finite], slow[finite], rtol=1e-12)
    allowed = effective_candidates(items, cand, t_l, params)
    assert select(fast, allowed).tolist() == select_loop(slow.tolist(), allowed.tolist())


@pytest.mark.parametrize("layout", [Layout("line", 30), Layout("grid", 36)])
def test_vectorised_priorities_equal_the_loop_for_any_item_order(layout: Layout) -> None:
    """Items not laid out server-major take the general (gather) path."""
    base = Items.for_layout(layout, 4)
    assert base.regular
    order = np.random.default_rng(2).permutation(base.size)
    items = Items(server=base.server[order], x=base.x[order], y=base.y[order],
                  time=base.time[order], dims=base.dims, n_servers=base.n_servers, slots=4)
    assert not items.regular
    rng = np.random.default_rng(4)
    mu = layout.positions()[rng.integers(layout.servers, size=25)]
    t_l = rng.integers(0, 4, size=25).astype(float)
    load = rng.integers(0, 3, size=layout.servers)
    params = PriorityParams(compensation="response-time")
    fast = priority_matrix(items, mu, t_l, 4.0, load, params)
    slow = np.array(priority_loop(items, mu.tolist(), t_l.tolist(), [4.0] * 25, load.tolist(),
                                  params))
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    regular = priority_matrix(base, mu, t_l, 4.0, load, params)
    np.testing.assert_allclose(fast, regular[:, order], rtol=1e-12)


def test_choose_many_equals_choose_in_turn() -> None:
    world = build_world({"servers": 50, "targets": 60}, seed=5)
    searches = [Search.for_target(world, t) for t in range(world.targets)]
    for s in searches[::3]:  # some searches further along, with a discovery
        s.t_l, s.mu_l = 2.0, world.items.position(world.items.item_id(7, 2))
    policy = PriorityPolicy(world.items)
    load = np.random.default_rng(1).integers(0, 3, size=50)
    fixed = [policy.choose(s, load) for s in searches]
    assert policy.choose_many(searches, load, sequential=False) == fixed
    k = load.copy()
    in_turn = []
    for s in searches:
        in_turn.append(policy.choose(s, k))
        k[world.items.server[in_turn[-1]]] += 1
    assert policy.choose_many(searches, load) == in_turn
    assert (load == np.random.default_rng(1).integers(0, 3, size=50)).all()  # not modified
    baseline = RandomPolicy(world.items, seed=2)
    assert baseline.choose_many(searches[:5], load) == \
        [RandomPolicy(world.items, seed=2).choose(s, load) for s in searches[:5]]


# --- movement models ------------------------------------------------------------------------


def test_normal_steps_have_mean_zero_and_std_sigma() -> None:
    rng = np.random.default_rng(11)
    steps = movement_steps("normal", 40_000, 5, 2, 1.0, rng)
    for axis in (0, 1):
        values = steps[..., axis].ravel()
        assert abs(values.mean()) < 0.01
        assert values.std() == pytest.approx(1.0, abs=0.01)
    line = movement_steps("normal", 1000, 5, 1, 2.0, np.random.default_rng(1))
    assert (line[..., 1] == 0).all()
    assert line[..., 0].std() == pytest.approx(2.0, rel=0.05)


def test_normal_movement_in_the_world_has_unit_steps_far_from_the_ends() -> None:
    """On a very long line nothing is clipped: slot-to-slot moves have mean 0, std 1."""
    world = build_world({"servers": 100_000, "targets": 20_000}, seed=4)
    inner = (world.holder > 100).all(axis=1) & (world.holder < 99_900).all(axis=1)
    moves = np.diff(world.holder[inner], axis=1).ravel()
    assert abs(moves.mean()) < 0.02
    # Rounding to the nearest server adds the variance of a difference of two uniform
    # rounding errors (2 / 12) to the step's 1.
    assert moves.std() == pytest.approx(math.sqrt(1 + 2 / 12), abs=0.02)


@pytest.mark.parametrize("boundary", ["clip", "reflect"])
def test_straight_movement_moves_one_server_per_step(boundary: str) -> None:
    world = build_world({"servers": 100, "movement": "straight", "boundary": boundary,
                         "targets": 500}, seed=2)
    before, after = world.holder[:, :-1], world.holder[:, 1:]
    free = before < 99
    assert (after[free & (after > before)] - before[free & (after > before)] == 1).all()
    if boundary == "clip":
        assert (after == np.minimum(before + 1, 99)).all()
    grid = build_world({"servers": 25, "layout": "grid", "movement": "straight",
                        "boundary": boundary, "targets": 200}, seed=2)
    rows = grid.holder // 5
    assert (rows == rows[:, :1]).all()  # y never changes
    if boundary == "clip":
        assert (grid.holder[:, 1:] % 5 == np.minimum(grid.holder[:, :-1] % 5 + 1, 4)).all()


def test_clip_and_reflect_at_the_ends() -> None:
    low, high = Layout("line", 3).bounds
    assert (low, high) == (-0.5, 2.5)
    start = np.array([[2.0, 0.0], [0.0, 0.0]])
    steps = np.zeros((2, 4, 2))
    steps[0, :, 0] = 1.0
    steps[1, :, 0] = [-2.0, 0.5, -0.25, 4.0]
    clipped = walk(start, steps, low, high, "clip")[..., 0]
    assert clipped.tolist() == [[2.0, 2.5, 2.5, 2.5, 2.5], [0.0, -0.5, 0.0, -0.25, 2.5]]
    reflected = walk(start, steps, low, high, "reflect")[..., 0]
    # Straight: up to the wall at 2.5 and back. Left: the unbounded path 0, -2, -1.5,
    # -1.75, 2.25 mirrored at -0.5 (after the turn the target keeps moving mirrored).
    np.testing.assert_allclose(reflected, [[2.0, 2.0, 1.0, 0.0, 0.0],
                                           [0.0, 1.0, 0.5, 0.75, 2.25]])
    layout = Layout("line", 3)
    points = np.array([[-0.5, 0], [0.49, 0], [0.5, 0], [2.5, 0], [7.0, 0]])
    assert layout.nearest_server(points).tolist() == [0, 0, 1, 2, 2]
    assert Layout("grid", 9).nearest_server(np.array([[2.0, 1.0]])).tolist() == [5]
    with pytest.raises(ValueError, match="boundary"):
        walk(start, steps, low, high, "wrap")


def test_reflect_keeps_normal_walks_inside_and_straight_walks_bouncing() -> None:
    world = build_world({"servers": 10, "boundary": "reflect", "sigma": 3.0, "targets": 300},
                        seed=8)
    assert ((world.holder >= 0) & (world.holder < 10)).all()
    bounce = build_world({"servers": 3, "movement": "straight", "boundary": "reflect",
                          "targets": 50, "slots": 8}, seed=1)
    for row in bounce.holder.tolist():
        assert all(abs(b - a) <= 1 for a, b in itertools.pairwise(row))
        assert 0 in row[1:] or 2 in row[1:]


# --- the generator --------------------------------------------------------------------------


def test_generator_is_registered_and_deterministic() -> None:
    params = {"servers": 10, "targets": 7}
    tasks = generate("person-search", params, ["c1", "c2"], 1.0, seed=3)
    assert [t.task_id for t in tasks] == list(range(7))
    assert {(t.arrival, t.size, t.cls) for t in tasks} == {(0.0, 10.0, "search")}
    assert [t.client for t in tasks[:3]] == ["c1", "c2", "c1"]
    assert GEN.min_service_time({"tc_s": 2.5}) == 2.5
    one = GEN.world(params, 3)
    assert np.array_equal(one.holder, GEN.world(params, 3).holder)
    assert np.array_equal(one.start, GEN.world(params, 3).start)
    assert not np.array_equal(one.holder, GEN.world(params, 4).holder)
    more = GEN.world({"servers": 10, "targets": 20}, 3)  # a target's path ignores later ones
    assert np.array_equal(more.holder[:7], one.holder)
    straight = GEN.world({"servers": 10, "targets": 7, "movement": "straight"}, 3)
    assert np.array_equal(straight.start, one.start)  # starts do not depend on the movement


def test_world_ground_truth_is_consistent() -> None:
    for params in ({"servers": 10}, {"servers": 16, "layout": "grid"}):
        world = GEN.world({**params, "targets": 100}, 9)
        items = world.items
        assert items.size == world.layout.servers * 5
        for t in range(world.targets):
            hits = [i for i in range(items.size) if world.contains(t, i)]
            assert sorted(items.time[hits].tolist()) == [1.0, 2.0, 3.0, 4.0, 5.0]
            assert world.required_item(t) in hits
            assert items.time[world.required_item(t)] == 5.0
        starts = world.layout.nearest_server(world.start)
        assert np.array_equal(starts, world.holder[:, 0])
    # Every server is about equally likely at T_0 (uniform over the covered region).
    counts = np.bincount(GEN.world({"targets": 20_000}, 1).holder[:, 0], minlength=10)
    assert counts.min() > 1800 and counts.max() < 2200


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"servers": 0}, r"params\.servers: expected an integer in \[1, 1000000\], found 0"),
        ({"servers": True}, r"params\.servers: expected an integer"),
        ({"servers": 2.0}, r"params\.servers: expected an integer"),
        ({"servers": 10, "layout": "grid"}, r"params\.servers: expected a perfect square"),
        ({"layout": "ring"}, r"params\.layout: expected one of line, grid, found 'ring'"),
        ({"movement": "levy"}, r"params\.movement: expected one of normal, straight"),
        ({"boundary": "wrap"}, r"params\.boundary: expected one of clip, reflect"),
        ({"sigma": 0}, r"params\.sigma: expected a finite number > 0, found 0"),
        ({"sigma": math.inf}, r"params\.sigma: expected a finite number > 0"),
        ({"tc_s": -1}, r"params\.tc_s: expected a finite number > 0, found -1"),
        ({"targets": 0}, r"params\.targets: expected an integer in \[1, 1000000\]"),
        ({"slots": 0}, r"params\.slots: expected an integer in \[1, 1000\]"),
        ({"speed": 1}, r"params\.speed: expected one of the fields"),
    ],
)
def test_generator_refuses_bad_params(params: dict[str, object], message: str) -> None:
    with pytest.raises(TestbedError, match=message):
        generate("person-search", params, ["c"], 1.0, 0)
    with pytest.raises(ValueError) as info:
        GEN.validate(params)
    # The scenario loader turns this form into "workload.params.<field>: ..." errors.
    assert re.fullmatch(r"params[^:]*: expected .*, found .*", str(info.value), re.DOTALL)


def test_ground_truth_file_round_trips_next_to_the_trace(tmp_path) -> None:
    params = {"servers": 16, "layout": "grid", "targets": 30}
    tasks = generate("person-search", params, ["c"], 1.0, seed=6)
    write_trace(tasks, tmp_path, {"generator": "person-search", "params": params, "seed": 6})
    path = write_ground_truth(tmp_path, params, 6)
    assert path == tmp_path / TRUTH_NAME
    back = read_ground_truth(tmp_path)
    world = GEN.world(params, 6)
    assert isinstance(back, SearchWorld)
    assert back.layout == world.layout and back.slots == world.slots
    assert np.array_equal(back.holder, world.holder)
    assert np.array_equal(back.start, world.start)  # floats written exactly
    # A trace materialised with another seed does not accept this truth.
    write_trace(tasks, tmp_path, {"generator": "person-search", "params": params, "seed": 7})
    with pytest.raises(TestbedError, match="seed"):
        read_ground_truth(tmp_path)
    (tmp_path / "trace.json").unlink()
    assert np.array_equal(read_ground_truth(tmp_path).holder, world.holder)
    doc = json.loads(path.read_text())
    doc["holder"][0] = [99] * 6
    path.write_text(json.dumps(doc))
    with pytest.raises(TestbedError, match="server indices below 16"):
        read_ground_truth(tmp_path)
    with pytest.raises(TestbedError, match="not found"):
        read_ground_truth(tmp_path / "nowhere")


# --- Algorithm 1 ------------------------------------------------------------------------------


def _static_world(servers: int, at: int, slots: int = 5) -> SearchWorld:
    """A line of ``servers`` with one target that never leaves server ``at``."""
    holder = np.full((1, slots + 1), at, dtype=np.int64)
    return SearchWorld(Layout("line", servers), slots, np.array([[float(at), 0.0]]), holder)


def test_priority_search_follows_a_static_target_slot_by_slot() -> None:
    world = _static_world(3, 2)
    search = Search.for_target(world, 0)
    assert (search.mu_l, search.t_l, search.t_r) == ((2.0, 0.0), 0.0, 5.0)
    analysed = search.run(PriorityPolicy(world.items), lambda i: world.contains(0, i))
    # Slot 1 at the start server first (sigma 1 beats slot 5's sigma 3), then each later
    # slot there once the discovery moved T_L: five analyses, all hits.
    assert analysed == [world.items.item_id(2, j) for j in (1, 2, 3, 4, 5)]
    assert search.discoveries == analysed and search.found == analysed[-1]
    assert (search.mu_l, search.t_l) == ((2.0, 0.0), 4.0)


def test_priority_search_with_a_large_value_weight_goes_to_t_r_first() -> None:
    world = _static_world(3, 1)
    search = Search.for_target(world, 0)
    analysed = search.run(PriorityPolicy(world.items, w=1000.0), lambda i: world.contains(0, i))
    assert analysed == [world.items.item_id(1, 5)]


def test_priority_search_finds_a_target_that_moved_away() -> None:
    """Start at server 0, the target is at server 2 from T_1 on."""
    holder = np.array([[0, 2, 2, 2, 2, 2]])
    world = SearchWorld(Layout("line", 3), 5, np.array([[0.0, 0.0]]), holder)
    search = Search.for_target(world, 0)
    analysed = search.run(PriorityPolicy(world.items), lambda i: world.contains(0, i))
    assert analysed[-1] == world.items.item_id(2, 5) == search.found
    assert len(set(analysed)) == len(analysed)
    misses = [i for i in analysed if i not in search.discoveries]
    assert all(world.items.server[i] != 2 for i in misses)


def test_search_updates_the_discovery_point_only_forward() -> None:
    items = Items.for_layout(Layout("line", 5), 5)
    search = Search(0, items, (0.0, 0.0))
    search.dispatch(items.item_id(3, 3))
    assert not search.answer(items.item_id(3, 3), True)
    assert (search.mu_l, search.t_l) == ((3.0, 0.0), 3.0)
    search.dispatch(items.item_id(1, 2))  # an older discovery does not move it back
    search.answer(items.item_id(1, 2), True)
    assert (search.mu_l, search.t_l) == ((3.0, 0.0), 3.0)
    search.dispatch(items.item_id(4, 4))  # a miss changes nothing but the candidates
    search.answer(items.item_id(4, 4), False)
    assert (search.mu_l, search.t_l) == ((3.0, 0.0), 3.0)
    assert not search.candidates[[items.item_id(3, 3), items.item_id(1, 2),
                                  items.item_id(4, 4)]].any()
    assert search.candidates.sum() == items.size - 3
    with pytest.raises(ValueError, match="pending"):
        search.answer(items.item_id(0, 5), True)
    with pytest.raises(ValueError, match="not a candidate"):
        search.dispatch(items.item_id(4, 4))
    search.dispatch(items.item_id(0, 5))
    with pytest.raises(ValueError, match="still pending"):
        search.dispatch(items.item_id(1, 5))
    assert search.answer(items.item_id(0, 5), True) and search.done
    with pytest.raises(ValueError, match="already done"):
        search.next_item(PriorityPolicy(items), np.zeros(5))


def test_search_refuses_inconsistent_answers() -> None:
    items = Items.for_layout(Layout("line", 2), 2)
    with pytest.raises(ValueError, match="no item at T_R"):
        Search(0, items, (0.0, 0.0)).run(RandomPolicy(items), lambda i: False)
    with pytest.raises(ValueError, match="no candidates left"):
        Search(0, items, (0.0, 0.0)).run(PriorityPolicy(items), lambda i: False)


# --- baselines --------------------------------------------------------------------------------


def test_random_picks_t_r_items_without_replacement_seeded() -> None:
    world = _static_world(10, 9)
    orders = []
    for seed in (0, 0, 1):
        search = Search.for_target(world, 0)
        analysed = search.run(RandomPolicy(world.items, seed),
                              lambda i: world.contains(0, i))
        assert len(set(analysed)) == len(analysed)
        assert (world.items.time[analysed] == 5).all()
        assert analysed[-1] == world.items.item_id(9, 5)
        orders.append(analysed)
    assert orders[0] == orders[1]
    # Over many searches the first pick covers every server.
    policy = RandomPolicy(world.items, 3)
    firsts = {int(world.items.server[policy.choose(Search(s, world.items, (0.0, 0.0)),
                                                   np.zeros(10))]) for s in range(300)}
    assert firsts == set(range(10))


def test_load_balance_takes_the_least_loaded_server_and_breaks_ties_at_random() -> None:
    items = Items.for_layout(Layout("line", 4), 5)
    load = np.array([2, 0, 1, 0])
    policy = LoadBalancePolicy(items, seed=4)
    picks = [int(items.server[policy.choose(Search(s, items, (0.0, 0.0)), load)])
             for s in range(400)]
    assert set(picks) == {1, 3}
    assert 150 < picks.count(1) < 250
    again = LoadBalancePolicy(items, seed=4)
    assert picks == [int(items.server[again.choose(Search(s, items, (0.0, 0.0)), load)])
                     for s in range(400)]
    search = Search(7, items, (0.0, 0.0))
    assert policy.choose(search, np.array([2, 1, 1, 0])) == items.item_id(3, 5)  # no tie
    search.candidates[items.item_id(3, 5)] = False  # dispatched items are skipped
    assert items.server[policy.choose(search, np.array([2, 1, 1, 0]))] in (1, 2)


def test_policy_registry() -> None:
    for name in ("priority", "random", "load-balance"):
        assert make_search_policy(name, LINE3).name == name
    assert make_search_policy("priority", LINE3, w=0.5).params.w == 0.5  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown search policy"):
        make_search_policy("oracle", LINE3)
    with pytest.raises(ValueError, match="takes no options"):
        make_search_policy("random", LINE3, w=0.5)


# --- response model ---------------------------------------------------------------------------


def test_paper_rule_fixes_each_duration_at_admission() -> None:
    server = AnalysisServer(10.0)
    assert server.admit(0.0, "a") == 10.0
    assert server.admit(5.0, "b") == 25.0  # two running: 2 * Tc
    assert server.admit(5.0, "c", factor=3.0) == 95.0  # three running, l = 3
    assert server.running == 3
    assert server.next_completion() == (10.0, "a")
    with pytest.raises(ValueError, match="ends at"):
        server.complete(9.0)
    assert server.complete(10.0) == "a"
    assert server.next_completion() == (25.0, "b")  # unchanged by a's departure
    assert [server.complete(25.0), server.complete(95.0)] == ["b", "c"]
    assert server.next_completion() is None and server.running == 0


def test_processor_sharing_moves_completions_with_the_load() -> None:
    server = AnalysisServer(10.0, sharing="processor-sharing")
    assert server.admit(0.0, "a") == 10.0
    assert server.admit(5.0, "b") == 20.0  # a has 5 left: 10 s shared, then b alone
    assert server.next_completion() == (15.0, "a")
    assert server.complete(15.0) == "a"
    assert server.next_completion() == (20.0, "b")  # b had 5 left, alone now
    assert server.complete(20.0) == "b"
    both = AnalysisServer(10.0, sharing="processor-sharing")
    both.admit(0.0, "x")
    both.admit(0.0, "y")
    assert both.next_completion() == (20.0, "x")
    with pytest.raises(ValueError, match="sharing"):
        AnalysisServer(10.0, sharing="fifo")
