"""The policy interface: pure objects shared by the emulated dispatcher and the simulator.

A policy sees, per candidate target, only what a real client could know (a
:class:`TargetState` per target inside a :class:`View`) and answers with a
:class:`Decision`. After the task completes, :meth:`Policy.observe` receives the
:class:`Outcome` so estimating policies can learn and record their prediction error.
Only a policy whose ``sees_sizes`` is true (an oracle) is handed the task's true size,
and only one whose ``needs_true_state`` is true is shown each target's exact
:class:`Backlog` (fetched fresh by the executor right before the decision).
All times are model-time seconds except ``TargetState.delay_s``, which is physical
(link delays are never scaled).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from testbed.errors import TestbedError

#: Weight of the newest poll round trip in a target's ``delay_s`` moving average (the
#: dispatcher and the tier simulator observe delay the same way).
DELAY_EWMA_ALPHA = 0.2
#: Longest a single ``/state`` poll may take before it counts as failed (wall seconds).
POLL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TaskInfo:
    """What a policy may know about the task it places."""

    task_id: int
    client: str
    arrival: float  # model time, seconds since the start of the trace
    size: float | None = None  # true service demand; set only for policies with sees_sizes


@dataclass(frozen=True)
class Backlog:
    """The exact work at a tier when it was observed, in model seconds at the tier's speed.

    Only policies with ``needs_true_state`` (the oracle) are shown it: a real client
    cannot know remaining service times or the sizes of other clients' queued tasks.
    """

    in_service: tuple[float, ...]  # remaining service time of each task holding a worker
    queued: tuple[float, ...]  # service time (size / speed) of each waiting task, FIFO order


@dataclass(frozen=True)
class TargetState:
    """One candidate target as the client last observed it."""

    name: str
    tier: str
    queue: int  # tasks waiting (not in service)
    busy: int  # workers serving a task
    active: int  # workers able to serve (c minus failed/disabled)
    c: int  # configured workers
    service_rate: float  # mu per worker, tasks per model-second, speed factor included
    arrival_rate: float  # tier's own arrival rate over a sliding window, all clients
    delay_s: float  # observed communication delay (request + response), physical seconds
    age_s: float  # how old this state was when the decision used it (wall seconds); nan
    #               for a policy that reads no ages (``Policy.reads_age``) in the simulator
    speed: float | None = None  # the tier's speed factor (size / speed = service time)
    backlog: Backlog | None = None  # exact work at the tier; only for needs_true_state


@dataclass(frozen=True)
class View:
    """Everything a policy is shown for one decision.

    A caller never changes a ``targets`` mapping once it has shown it (changed targets
    come in a new mapping; only ``age_s`` may be updated in place, for a policy that
    keeps no views), so a policy may cache what it derives from a mapping on its identity.
    """

    now: float  # model time
    client: str
    targets: Mapping[str, TargetState]


@dataclass(frozen=True)
class Decision:
    target: str
    estimate_s: float | None = None  # predicted total latency (model s), if the policy made one


@dataclass(frozen=True)
class Outcome:
    """What happened to a placed task, reported back to the policy that placed it."""

    task_id: int
    target: str
    latency_s: float  # total latency, model seconds
    wait_s: float
    service_s: float
    network_s: float
    estimate_s: float | None
    ok: bool = True


@dataclass
class Policy(ABC):
    """Base class of every placement policy.

    Subclasses set ``name`` and implement :meth:`choose`. ``seed`` makes any randomness
    reproducible: two instances built with the same seed make the same choices for the
    same inputs.

    ``keeps_views`` (a class attribute) says whether the policy may hold on to the
    :class:`View`, its ``targets`` mapping or a :class:`TargetState` after :meth:`choose`
    returns. A policy that declares ``False`` reads them only during the call, so the
    simulator shows it one View and TaskInfo, updated in place before each decision,
    and the same mapping until a target's state changes (building fresh objects per
    decision costs more than most policies' own work); every field holds what a fresh
    object would. ``reads_age`` (a class attribute) says whether
    :meth:`choose` reads :attr:`TargetState.age_s`, the one field that changes at every
    decision; a policy that keeps no views and declares ``False`` is shown ``age_s =
    nan`` by the simulator, which then need not compute it.
    """

    seed: int = 0
    name: str = field(default="", init=False)
    sees_sizes: bool = field(default=False, init=False)
    needs_true_state: bool = field(default=False, init=False)
    keeps_views: ClassVar[bool] = True
    reads_age: ClassVar[bool] = True

    @abstractmethod
    def choose(self, task: TaskInfo, view: View) -> Decision:
        """Pick a target among ``view.targets`` for ``task``."""

    def observe(self, outcome: Outcome) -> None:
        """Learn from a completed task. The default ignores it."""


def check_choice(policy: str, name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise :class:`TestbedError` in
    the form the scenario loader reports (``policy 'p': name: expected ..., found ...``)."""
    if not isinstance(value, str) or value not in choices:
        raise TestbedError(f"policy {policy!r}: {name}: expected one of "
                           f"{', '.join(choices)}, found {value!r}")
    return value
