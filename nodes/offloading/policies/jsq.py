"""The join-the-shortest-queue policies: ``jsq`` and its capacity-scaled variant ``jsq-s``.

``jsq`` sends each task to the serving target with the fewest tasks in the system
(``queue + busy``) as last observed. ``jsq-s`` scales that count by the target's service
capacity, so a tier with many or fast workers is not mistaken for a loaded one: it picks
the smallest expected drain time ``(queue + busy + 1) / (active * service_rate)``, the
time the target's active workers need, at their mean rate, to finish everything already
there plus the new task. Ties go to the target with the lowest observed communication
delay, then to the lexicographically smallest name, so both are deterministic and need
no randomness. Neither makes a latency estimate: they rank, they do not predict.

``jsq`` keeps both readings of "shortest queue" under one name with its ``normalise``
parameter: ``none`` (the default) counts raw tasks; ``capacity`` ranks by the expected
wait per unit of capacity, the drain time ``jsq-s`` uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from nodes.offloading.policies.base import (
    Decision,
    Policy,
    TargetState,
    TaskInfo,
    View,
    check_choice,
)
from nodes.offloading.policies.random_policy import serving_targets

#: The readings of ``jsq``'s ``normalise`` parameter.
NORMALISE = ("none", "capacity")


def least_loaded(targets: Sequence[TargetState]) -> TargetState:
    """The target with the fewest tasks in the system (ties: lowest ``delay_s``, then name).

    Also the last-resort choice of the estimating policies when no target can serve.
    """
    return min(targets, key=lambda t: (t.queue + t.busy, t.delay_s, t.name))


def drain_time(target: TargetState) -> float:
    """``(queue + busy + 1) / (active * service_rate)``; ``inf`` when it has no capacity."""
    capacity = target.active * target.service_rate
    if capacity <= 0:
        return math.inf
    return (target.queue + target.busy + 1) / capacity


@dataclass
class JSQPolicy(Policy):
    """Join-the-shortest-queue placement (raw counts or per unit of capacity) with
    deterministic tie-breaking."""

    normalise: str = "none"
    name: str = field(default="jsq", init=False)
    keeps_views: ClassVar[bool] = False
    reads_age: ClassVar[bool] = False
    # One immutable Decision per target name, reused (a jsq decision carries no estimate).
    _decisions: dict[str, Decision] = field(default_factory=dict, init=False, repr=False,
                                            compare=False)
    #: the last targets mapping decided on and its decision (see :meth:`choose`)
    _last: tuple[Mapping[str, TargetState], Decision] | None = field(
        default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check ``normalise``."""
        self.normalise = check_choice(self.name, "normalise", self.normalise, NORMALISE)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the least loaded serving target (ties: lowest ``delay_s``, then name);
        with ``normalise: capacity``, the smallest :func:`drain_time` instead.

        One pass over the mapping: the key ends with the (unique) name, so the minimum
        is the one :func:`least_loaded` finds in :func:`serving_targets`'s sorted list,
        without sorting or building that list on every decision. Shown the same mapping
        object as last time (a shown mapping never changes, see :class:`View`), the
        last decision is returned (unless a subclass reads ages, which change within
        one mapping).
        """
        targets = view.targets
        last = self._last
        if last is not None and last[0] is targets and not self.reads_age:
            return last[1]
        decision = self._choose(view)
        self._last = (targets, decision)
        return decision

    def _choose(self, view: View) -> Decision:
        """The decision for ``view``, computed (see :meth:`choose`)."""
        if self.normalise == "capacity":
            return shortest_drain(view)
        best_key = None
        for t in view.targets.values():
            if t.active > 0:
                key = (t.queue + t.busy, t.delay_s, t.name)
                if best_key is None or key < best_key:
                    best_key = key
        if best_key is None:  # no serving target (or none at all): the general rule
            return Decision(least_loaded(serving_targets(view)).name, None)
        decision = self._decisions.get(best_key[2])
        if decision is None:
            decision = self._decisions[best_key[2]] = Decision(best_key[2], None)
        return decision


@dataclass
class JSQScaledPolicy(Policy):
    """Join the target whose active workers would drain their backlog soonest."""

    name: str = field(default="jsq-s", init=False)
    keeps_views: ClassVar[bool] = False
    reads_age: ClassVar[bool] = False

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the smallest :func:`drain_time` (ties: lowest ``delay_s``, then name)."""
        return shortest_drain(view)


def shortest_drain(view: View) -> Decision:
    """The serving target with the smallest :func:`drain_time` (ties: lowest ``delay_s``,
    then name)."""
    best = min(serving_targets(view), key=lambda t: (drain_time(t), t.delay_s, t.name))
    return Decision(best.name, None)
