"""The ``oracle`` policy: the best greedy placement with perfect knowledge of the present.

It is shown what no real client can know: the task's true size (``sees_sizes``) and,
for every target, the exact work there at decision time (``needs_true_state``, a
:class:`~nodes.offloading.policies.base.Backlog`: the remaining service time of each task in
service and the service time of each queued task, model seconds at the tier's speed).
From these it computes, by :func:`fifo_start_delay`, exactly when the new task would
start at each target's FIFO ``active``-worker station, adds its own service time
``size / speed`` and the observed communication delay ``delay_s``, and picks the
smallest total (ties by name). That total is returned as ``estimate_s``.

It is a *greedy, per-task clairvoyant* oracle: exact for the task being placed given
everything already placed, but it ignores future arrivals (a task it sends to the edge
may delay later ones more than a cloud placement would) and the delay of the network
is the same observed estimate every policy sees. It is therefore a strong reference,
not a proof of optimality over the whole trace.

A target whose backlog or speed the executor could not provide is not a candidate; if no
target with an active worker has them, the policy raises :class:`TestbedError`, since
the executor broke the ``needs_true_state`` contract.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodes.offloading.policies.base import Decision, Policy, TaskInfo, View
from nodes.offloading.policies.jsq import least_loaded
from nodes.offloading.policies.random_policy import serving_targets
from testbed.errors import TestbedError


def fifo_start_delay(in_service: Iterable[float], queued: Iterable[float], workers: int) -> float:
    """Time from now until a new arrival starts service at a FIFO station.

    ``in_service``: remaining service time of each task holding a worker; ``queued``:
    service times of the waiting tasks in FIFO order; ``workers``: workers allowed to
    serve. A waiting task starts as soon as fewer than ``workers`` tasks are in service,
    which also covers more tasks in service than ``workers`` (workers disabled while
    busy finish their task but take no new one). ``inf`` when ``workers <= 0``.
    """
    if workers <= 0:
        return math.inf
    finishing = list(in_service)
    heapq.heapify(finishing)
    now = 0.0
    for service in queued:
        while len(finishing) >= workers:
            now = max(now, heapq.heappop(finishing))
        heapq.heappush(finishing, now + service)
    while len(finishing) >= workers:
        now = max(now, heapq.heappop(finishing))
    return now


@dataclass
class OraclePolicy(Policy):
    """Clairvoyant greedy placement: minimum exact start + service + observed delay."""

    name: str = field(default="oracle", init=False)
    sees_sizes: bool = field(default=True, init=False)
    needs_true_state: bool = field(default=True, init=False)

    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick the target where ``task`` would finish soonest; return that latency."""
        targets = serving_targets(view)
        able = [t for t in targets if t.active > 0]
        if not able:
            return Decision(least_loaded(targets).name, None)
        if task.size is None:
            raise TestbedError(f"oracle: task {task.task_id} came without its true size")
        best_name, best_total = "", math.inf
        for target in able:  # sorted by name: the first minimum wins ties
            if target.backlog is None or target.speed is None or target.speed <= 0:
                continue
            start = fifo_start_delay(target.backlog.in_service, target.backlog.queued,
                                     target.active)
            total = start + task.size / target.speed + target.delay_s
            if total < best_total:
                best_name, best_total = target.name, total
        if not best_name:
            raise TestbedError(
                f"oracle: task {task.task_id}: no serving target came with its true backlog "
                f"and speed ({', '.join(t.name for t in able)})"
            )
        return Decision(best_name, best_total)
