"""The event log's line: one scheduled event of one replay, when it was due and when
its change had taken effect (``work/events.jsonl``, docs/scenario.md "Events on time").

The emulation's scheduler (:mod:`testbed.emulation.events`) writes the lines, the
fidelity guard (:mod:`testbed.analysis.fidelity`) judges them. Pure: no Mininet, aiohttp, Docker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from testbed.scenario.model import Event

#: The change had taken effect (``applied_model`` says when).
APPLIED = "applied"
#: The replay ended before the change took effect: it was not due yet, or it waited for
#: an earlier event of its target, or its node was still being prepared.
NOT_APPLIED = "not applied: the replay ended first"
#: Prefix of the outcome of an action that raised; the error follows.
FAILED = "failed: "
#: The keys every line has, in this order (``ended_model`` and ``prepared_model`` only
#: where they apply).
FIELDS = ("policy", "repetition", "action", "target", "params", "at", "applied_model",
          "due_wall", "applied_wall", "outcome")


def due_wall(start_at: float, event: Event, time_scale: float) -> float:
    """The wall instant ``event`` is due in a replay whose model time 0 is ``start_at``."""
    return start_at + event.at / time_scale


def to_model(wall: float | None, start_at: float, time_scale: float) -> float | None:
    """Model time of the wall instant ``wall`` in that replay (``None`` stays ``None``)."""
    return None if wall is None else (wall - start_at) * time_scale


def log_line(policy: str, repetition: int, event: Event, start_at: float, time_scale: float,
             applied_wall: float | None, outcome: str, ended_wall: float | None = None,
             prepared_wall: float | None = None) -> dict[str, Any]:
    """One event's line.

    ``applied_model`` is the model time at which the change had taken effect (``None``
    if it never did); ``ended_model`` (only on :data:`NOT_APPLIED` lines) when the
    replay ended; ``prepared_model`` (only on a join prepared ahead) when the node's
    services answered behind its gate.
    """
    line: dict[str, Any] = {
        "policy": policy, "repetition": repetition, "action": event.action,
        "target": event.target, "params": event.to_dict()["params"], "at": event.at,
        "applied_model": to_model(applied_wall, start_at, time_scale),
        "due_wall": due_wall(start_at, event, time_scale), "applied_wall": applied_wall,
        "outcome": outcome}
    if ended_wall is not None:
        line["ended_model"] = to_model(ended_wall, start_at, time_scale)
    if prepared_wall is not None:
        line["prepared_model"] = to_model(prepared_wall, start_at, time_scale)
    return line


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def lateness_model_s(line: Mapping[str, Any]) -> float | None:
    """How late the event's change took effect, in model seconds.

    An applied event: ``applied_model - at``. One the replay ended before: how long it
    had been due by then (at least that late; 0 when it was not due yet). A failed
    action never took effect: ``None``.
    """
    if line.get("outcome") == APPLIED and _finite(line.get("applied_model")):
        return line["applied_model"] - line["at"]
    if line.get("outcome") == NOT_APPLIED and _finite(line.get("ended_model")):
        return max(0.0, line["ended_model"] - line["at"])
    return None
