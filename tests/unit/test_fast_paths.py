"""The performance shortcuts change nothing: same decisions, same objects.

* ``jsq`` decides in one pass without sorting: checked against the documented rule
  (:func:`least_loaded` over :func:`serving_targets`);
* the queue-aware policies memoise each target's score and decision and cache the name
  order: checked against the plain computation (every target's ``wait``, total, penalty
  and exploration, in name order) on sequences of views whose states repeat, as between
  two polls, and change;
* the simulator fills in the frozen :class:`TargetState`, :class:`View` and
  :class:`TaskInfo` objects instead of calling their ``__init__``: checked equal to,
  printed like and as immutable as normally built ones.
* a policy that keeps no views (``keeps_views = False``) is shown shared objects,
  updated in place or replaced: checked equal, decision by decision, to the fresh ones
  a keeping policy gets (``age_s`` nan if it declares ``reads_age = False``), with the
  same results; the policies' reuse of the last ranking for a repeated mapping is part
  of the view sequences above.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.offloading.policies import make_policy
from nodes.offloading.policies.base import Decision, Policy, TargetState, TaskInfo, View
from nodes.offloading.policies.jsq import least_loaded
from nodes.offloading.policies.queue_aware import QueueAwarePolicy
from nodes.offloading.policies.random_policy import serving_targets
from testbed.registry import generate
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.systems.offloading.sim import Simulation
from testbed.systems.offloading.sim_replay import build_model

ESTIMATING = ("model-only", "queue-only", "hybrid", "hybrid-global-rate", "hybrid-fixed-beta")
TASK = TaskInfo(task_id=0, client="c1", arrival=0.0)


def reference(policy: QueueAwarePolicy, view: View) -> Decision:
    """The queue-aware decision computed plainly, drawing from ``policy``'s stream."""
    targets = serving_targets(view)
    able = [t for t in targets if t.active > 0 and t.service_rate > 0]
    if not able:
        return Decision(least_loaded(targets).name, None)
    rates = policy.arrival_rates(view, able)
    totals, best, best_score = [], 0, math.inf
    for index, (target, lam) in enumerate(zip(able, rates, strict=True)):
        total = policy.wait(target, lam) + 1.0 / target.service_rate + target.delay_s
        totals.append(total)
        rho = lam / (target.active * target.service_rate)
        score = total * policy.penalty if rho > policy.rho_threshold else total
        if score < best_score:
            best, best_score = index, score
    if policy._uniform() < policy.epsilon:
        best = min(int(policy._uniform() * len(able)), len(able) - 1)
    estimate = totals[best]
    return Decision(able[best].name, estimate if math.isfinite(estimate) else None)


@st.composite
def state(draw: st.DrawFn, name: str) -> TargetState:
    """Every field from a few values, so two states often differ in one field only."""
    c = draw(st.sampled_from([1, 4, 16]))
    return TargetState(
        name=name, tier="edge", queue=draw(st.sampled_from([0, 1, 3, 8, 20])),
        busy=draw(st.integers(0, c)), active=draw(st.sampled_from([0, 1, c])), c=c,
        service_rate=draw(st.sampled_from([0.0, 1.0, 2.5])),
        arrival_rate=draw(st.sampled_from([0.0, 0.5, 3.0, 12.0, 40.0])),
        delay_s=draw(st.sampled_from([0.0, 0.004, 0.04])),
        age_s=draw(st.sampled_from([0.0, 0.3])), speed=1.0)


@st.composite
def view_sequences(draw: st.DrawFn) -> list[View]:
    """Views drawn from a small pool of states per target, so states recur; a view whose
    states are the previous one's often shows the same mapping object, as the simulator
    does for policies that keep no views."""
    names = draw(st.lists(st.sampled_from(["local", "edge", "cloud", "b", "a"]), min_size=1,
                          max_size=4, unique=True))
    pool = {n: draw(st.lists(state(n), min_size=1, max_size=4)) for n in names}
    picks = draw(st.lists(st.lists(st.integers(0, 3), min_size=len(names),
                                   max_size=len(names)), min_size=1, max_size=40))
    views: list[View] = []
    for j, row in enumerate(picks):
        targets = {n: pool[n][pick % len(pool[n])] for n, pick in zip(names, row, strict=True)}
        if views and targets == views[-1].targets and draw(st.booleans()):
            targets = views[-1].targets  # type: ignore[assignment]
        views.append(View(float(j), "c1", targets))
    return views


@pytest.mark.parametrize("name", ESTIMATING)
@given(views=view_sequences(), seed=st.integers(0, 2**16),
       epsilon=st.sampled_from([0.0, 0.05, 0.5]))
@settings(max_examples=150, deadline=None)
def test_memoised_queue_aware_decisions_equal_the_plain_computation(
        name: str, views: list[View], seed: int, epsilon: float) -> None:
    fast = make_policy(name, seed, epsilon=epsilon)
    plain = make_policy(name, seed, epsilon=epsilon)
    assert isinstance(plain, QueueAwarePolicy)
    for view in views:
        assert fast.choose(TASK, view) == reference(plain, view)


@given(views=view_sequences())
@settings(max_examples=100, deadline=None)
def test_one_pass_jsq_equals_the_documented_rule(views: list[View]) -> None:
    policy = make_policy("jsq", 0)
    for view in views:
        assert policy.choose(TASK, view) == Decision(
            least_loaded(serving_targets(view)).name, None)


@dataclass
class Keeper(Policy):
    """Sends every task to the first target by name; keeps what it was shown."""

    name: str = field(default="keeper", init=False)
    shown: list[tuple[TaskInfo, View]] = field(default_factory=list)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        self.shown.append((task, view))
        return Decision(min(view.targets), None)


def rebuilt(obj: Any) -> Any:
    """``obj`` built again through its class's constructor."""
    return type(obj)(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})


def continuum_minute() -> tuple[Any, list[Any], tuple[list[Any], ...]]:
    """The continuum scenario's model, a 60 s trace of it, and the trace as the
    simulation's columns (task ids, client indices, arrivals, sizes)."""
    data = load_scenario("continuum").resolved()
    data["duration"] = 60.0
    scenario = scenario_from_dict(data)
    model = build_model(scenario)
    tasks = generate("bursty-pareto", scenario.workload.params, list(model.clients),
                     scenario.duration, 1)
    index = {name: k for k, name in enumerate(model.clients)}
    return model, tasks, ([t.task_id for t in tasks], [index[t.client] for t in tasks],
                          [t.arrival for t in tasks], [t.size for t in tasks])


def test_simulator_objects_equal_normally_built_ones() -> None:
    model, tasks, columns = continuum_minute()
    keepers = [Keeper() for _ in model.clients]
    Simulation(model, *columns, keepers).run()
    shown = [pair for keeper in keepers for pair in keeper.shown]
    assert len(shown) == len(tasks)
    for task, view in shown:
        objects = [task, view, *view.targets.values()]
        for obj in objects:
            copy = rebuilt(obj)
            assert obj == copy and repr(obj) == repr(copy)
            assert list(vars(obj)) == list(vars(copy))
            with pytest.raises(dataclasses.FrozenInstanceError):
                obj.client = "x"  # type: ignore[misc]
        assert all(t.age_s >= 0 for t in view.targets.values())


@dataclass
class Snapshotter(Policy):
    """Like :class:`Keeper`, but declares it keeps no views: keeps rebuilt copies."""

    name: str = field(default="snapshotter", init=False)
    keeps_views: ClassVar[bool] = False
    shown: list[tuple[TaskInfo, View]] = field(default_factory=list)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        copy = View(view.now, view.client, {n: rebuilt(t) for n, t in view.targets.items()})
        self.shown.append((rebuilt(task), copy))
        return Decision(min(view.targets), None)


@dataclass
class AgelessSnapshotter(Snapshotter):
    """A :class:`Snapshotter` that declares it reads no ages."""

    reads_age: ClassVar[bool] = False


def without_ages(view: View) -> View:
    """``view`` with every target's ``age_s`` set to 0."""
    return dataclasses.replace(view, targets={
        name: dataclasses.replace(t, age_s=0.0) for name, t in view.targets.items()})


@pytest.mark.parametrize("policy", [Snapshotter, AgelessSnapshotter])
def test_views_updated_in_place_hold_what_fresh_ones_would(policy: type[Snapshotter]) -> None:
    """A policy with ``keeps_views = False`` is shown the same objects each time, updated
    in place; at every decision they equal the fresh ones a keeping policy gets (but for
    ``age_s``, nan when it reads no ages), and the replay's results are the same."""
    model, _, columns = continuum_minute()
    keepers = [Keeper() for _ in model.clients]
    fresh = Simulation(model, *columns, keepers, seed=3).run()
    snapshotters = [policy() for _ in model.clients]
    shared = Simulation(model, *columns, snapshotters, seed=3).run()
    for keeper, snapshotter in zip(keepers, snapshotters, strict=True):
        assert len(snapshotter.shown) == len(keeper.shown) > 100
        for (task, view), (task_copy, view_copy) in zip(keeper.shown, snapshotter.shown,
                                                        strict=True):
            if not policy.reads_age:
                assert all(math.isnan(t.age_s) for t in view_copy.targets.values())
                view, view_copy = without_ages(view), without_ages(view_copy)
            assert task == task_copy and view == view_copy
            assert repr(view) == repr(view_copy)
    for column in ("route", "server_arrival", "start", "end", "seen", "network",
                   "queue_at_arrival", "estimate", "state_age", "outcome"):
        assert bytes(getattr(fresh, column)) == bytes(getattr(shared, column)), column


def test_a_rate_hook_reading_the_clock_is_asked_again_for_the_same_mapping() -> None:
    """The last ranking is reused for the same mapping object only when nothing else it
    read can change: a subclass whose rate hook reads ``view.now`` ranks afresh."""
    from nodes.offloading.policies.queue_aware import ModelOnlyPolicy

    @dataclass
    class ClockRates(ModelOnlyPolicy):
        def arrival_rates(self, view: View, targets: Any) -> list[float]:
            hot = "a" if view.now < 1.0 else "b"  # the loaded tier moves with the clock
            return [3.5 if t.name == hot else 0.1 for t in targets]

    def state(name: str) -> TargetState:
        return TargetState(name=name, tier="edge", queue=0, busy=0, active=4, c=4,
                           service_rate=1.0, arrival_rate=0.0, delay_s=0.0, age_s=0.0)

    targets = {"a": state("a"), "b": state("b")}
    policy = ClockRates(seed=1, epsilon=0.0)
    task = TaskInfo(1, "c1", 0.0)
    assert policy.choose(task, View(0.0, "c1", targets)).target == "b"
    assert policy.choose(task, View(2.0, "c1", targets)).target == "a"
