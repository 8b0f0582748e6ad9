"""The ``edge-first`` policy: the static baseline that always offloads to the edge.

Every task goes to a target of tier ``edge`` that has an active worker, whatever its
load; when several edge targets exist, the first by name is used (the policy is static:
it never balances). Only when no edge target can serve does it fall back to the serving
target with the lowest observed communication delay (ties by name), which in the
continuum is the nearest tier still up. It makes no latency estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.policies.base import Decision, Policy, TaskInfo, View
from testbed.policies.random_policy import serving_targets

#: The tier label this policy prefers, as written in scenarios (``TargetState.tier``).
EDGE_TIER = "edge"


@dataclass
class EdgeFirstPolicy(Policy):
    """Always the first active edge target by name; else the lowest-delay serving one."""

    name: str = field(default="edge-first", init=False)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the first active edge target, or the lowest-``delay_s`` serving target."""
        candidates = serving_targets(view)  # sorted by name
        for target in candidates:
            if target.tier == EDGE_TIER and target.active > 0:
                return Decision(target.name, None)
        return Decision(min(candidates, key=lambda t: (t.delay_s, t.name)).name, None)
