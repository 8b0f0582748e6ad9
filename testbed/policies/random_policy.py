"""The ``random`` policy: a uniform choice among the targets able to serve.

It is the usual baseline: it ignores load and delay entirely, so any informed policy
should beat it. :func:`serving_targets` (the targets with an active worker, or all of
them when none has one) is shared with the other simple policies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from testbed.errors import TestbedError
from testbed.policies.base import Decision, Policy, TargetState, TaskInfo, View


def serving_targets(view: View) -> list[TargetState]:
    """Return the targets with ``active > 0``, sorted by name.

    If no target has an active worker, every target is returned so the task is still
    placed (and fails or waits visibly) rather than dropped by the policy. Sorting
    makes choices independent of the mapping's iteration order.
    """
    if not view.targets:
        raise TestbedError(f"client {view.client}: the policy was shown no targets")
    targets = sorted(view.targets.values(), key=lambda t: t.name)
    active = [t for t in targets if t.active > 0]
    return active or targets


@dataclass
class RandomPolicy(Policy):
    """Uniformly random placement among serving targets, reproducible from ``seed``."""

    name: str = field(default="random", init=False)
    _rng: np.random.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Create the policy's own random stream from ``seed``."""
        self._rng = np.random.default_rng(self.seed)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick one of :func:`serving_targets` uniformly at random; no estimate."""
        candidates = serving_targets(view)
        pick = candidates[int(self._rng.integers(len(candidates)))]
        return Decision(pick.name, None)
