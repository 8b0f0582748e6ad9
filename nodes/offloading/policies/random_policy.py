"""The ``random`` policy: a random choice among the targets able to serve.

It is the usual static baseline and ignores load and delay entirely. Two readings are
kept, chosen by the ``weights`` parameter: ``uniform`` (the default) picks every serving
target with the same probability, which overloads a small tier (a one-worker local
server gets as many tasks as a sixteen-worker cloud); ``capacity`` is the static split a
fair baseline uses, each target drawn with probability proportional to its capacity,
``active * service_rate`` (workers able to serve times their rate, speed included).
:func:`serving_targets` (the targets with an active worker, or all of them when none has
one) is shared with the other simple policies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from nodes.offloading.policies.base import (
    Decision,
    Policy,
    TargetState,
    TaskInfo,
    View,
    check_choice,
)
from testbed.errors import TestbedError

#: The readings of ``random``'s ``weights`` parameter.
WEIGHTS = ("uniform", "capacity")


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
    """Random placement among serving targets (uniform or by capacity), reproducible from
    ``seed``."""

    weights: str = "uniform"
    name: str = field(default="random", init=False)
    keeps_views: ClassVar[bool] = False
    reads_age: ClassVar[bool] = False
    _rng: np.random.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check ``weights`` and create the policy's own random stream from ``seed``."""
        self.weights = check_choice(self.name, "weights", self.weights, WEIGHTS)
        self._rng = np.random.default_rng(self.seed)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Draw one of :func:`serving_targets` (uniformly, or in proportion to
        ``active * service_rate``); no estimate."""
        candidates = serving_targets(view)
        if self.weights == "capacity":
            capacity = np.array([max(t.active, 0) * max(t.service_rate, 0.0)
                                 for t in candidates])
            total = float(capacity.sum())
            if total > 0:
                cumulative = np.cumsum(capacity) / total
                k = int(np.searchsorted(cumulative, self._rng.random(), side="right"))
                return Decision(candidates[min(k, len(candidates) - 1)].name, None)
        pick = candidates[int(self._rng.integers(len(candidates)))]
        return Decision(pick.name, None)
