"""The ``edge-first`` policy: the static baseline that offloads to the edge.

Two readings are kept, chosen by the ``spill`` parameter:

- ``never`` (the default): every task goes to a target of tier ``edge`` that has an
  active worker, whatever its load; with several edge targets the first by name is used
  (the policy never balances). It is unstable as soon as the edge alone cannot carry the
  offered load.
- ``queue-threshold``: the edge takes a task while its observed queue is at most
  ``threshold`` (default: the edge target's configured worker count, the reference's
  ``q_E <= c_E``); the first edge target by name within its threshold is used. When
  every edge target is over it, the task goes to the *next tier*: the serving non-edge
  target with the lowest observed delay among those at least as far as the nearest edge
  target (the cloud in the continuum), else the nearest serving non-edge target (a
  local tier).

With no edge target able to serve, both fall back to the serving target with the lowest
observed communication delay (ties by name). Neither makes a latency estimate.
"""

from __future__ import annotations

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
from testbed.errors import TestbedError

#: The tier label this policy prefers, as written in scenarios (``TargetState.tier``).
EDGE_TIER = "edge"
#: The readings of ``edge-first``'s ``spill`` parameter.
SPILLS = ("never", "queue-threshold")


def _nearest(targets: list[TargetState]) -> TargetState:
    """The target with the lowest observed delay (ties by name)."""
    return min(targets, key=lambda t: (t.delay_s, t.name))


@dataclass
class EdgeFirstPolicy(Policy):
    """The first active edge target by name (within its queue threshold when spilling);
    else the next tier or the lowest-delay serving target."""

    spill: str = "never"
    threshold: int | None = None
    name: str = field(default="edge-first", init=False)
    keeps_views: ClassVar[bool] = False
    reads_age: ClassVar[bool] = False

    def __post_init__(self) -> None:
        """Check ``spill`` and ``threshold`` (a whole number of queued tasks, >= 0)."""
        self.spill = check_choice(self.name, "spill", self.spill, SPILLS)
        if self.threshold is not None and (
                isinstance(self.threshold, bool) or not isinstance(self.threshold, int)
                or not 0 <= self.threshold <= 1_000_000):
            raise TestbedError(f"policy {self.name!r}: threshold: expected an integer in "
                               f"[0, 1000000] or null, found {self.threshold!r}")
        if self.threshold is not None and self.spill != "queue-threshold":
            raise TestbedError(f"policy {self.name!r}: threshold: expected no value unless "
                               f"spill is queue-threshold, found {self.threshold!r}")

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the edge target the reading allows, else the next tier or the nearest."""
        candidates = serving_targets(view)  # sorted by name
        edges = [t for t in candidates if t.tier == EDGE_TIER and t.active > 0]
        if not edges:
            return Decision(_nearest(candidates).name, None)
        if self.spill == "never":
            return Decision(edges[0].name, None)
        for target in edges:
            limit = target.c if self.threshold is None else self.threshold
            if target.queue <= limit:
                return Decision(target.name, None)
        others = [t for t in candidates if t.tier != EDGE_TIER and t.active > 0]
        if not others:
            return Decision(edges[0].name, None)
        edge_delay = min(t.delay_s for t in edges)
        farther = [t for t in others if t.delay_s >= edge_delay]
        return Decision(_nearest(farther or others).name, None)
