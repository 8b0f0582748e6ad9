"""The ``jsq`` policy: join the shortest queue.

It sends each task to the serving target with the fewest tasks in the system
(``queue + busy``) as last observed. Ties go to the target with the lowest observed
communication delay, then to the lexicographically smallest name, so the policy is
deterministic and needs no randomness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.policies.base import Decision, Policy, TaskInfo, View
from testbed.policies.random_policy import serving_targets


@dataclass
class JSQPolicy(Policy):
    """Join-the-shortest-queue placement with deterministic tie-breaking."""

    name: str = field(default="jsq", init=False)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the least loaded serving target (ties: lowest ``delay_s``, then name)."""
        best = min(serving_targets(view), key=lambda t: (t.queue + t.busy, t.delay_s, t.name))
        return Decision(best.name, None)
