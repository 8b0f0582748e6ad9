"""A replay's scheduled events: each on time and on its own, every one logged.

The scenario's events (``docs/scenario.md``) are due at ``start_at + at / time_scale``
(wall clock). :class:`EventScheduler` runs them in *lanes*, one thread per target (a
node or a link), so a slow action on one target never delays an event on another,
while the events of one target keep their order (a node's join waits for its crash).

An action either takes effect at once (a link change, a crash: SIGKILL and the
processes' exit) or is *prepared ahead*: a ``join`` of a node whose services are down
starts them behind the node's gate (:mod:`testbed.emulation.gate`: to every other
host the node still looks crashed) a little before it is due, and at the due instant
only the node's links come up and the gate opens. So no node serves a request before
its event is due, and a join at ``time_scale`` 20 is on time even when a service start
or a container restart costs hundreds of milliseconds.

Every event of every replay gets exactly one line in the run's ``work/events.jsonl``
(:func:`testbed.event_log.log_line`; written when the replay's scheduler stops, in
schedule order): when it was due and when its change had taken effect, in wall and
model time, and its outcome. :meth:`EventScheduler.stop`
lets actions under way finish, cancels the ones not yet due, and only then returns, so
the network is restored for the next replay after its events are over. The fidelity
guard judges the lines (:func:`testbed.analysis.fidelity.event_lateness`); :func:`cost_warnings`
says before the first replay which joins cannot be prepared in time.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from testbed.event_log import APPLIED, FAILED, NOT_APPLIED, due_wall, log_line
from testbed.scenario.model import Event, Scenario

if TYPE_CHECKING:
    from testbed.emulation.topology_view import TopologyView

#: Actions that end a node's services (a later join of the node restarts them).
DOWN_ACTIONS = ("crash", "leave")
#: A join's preparation starts this many times its estimated cost before it is due
#: (never before the previous event of its node has taken effect), and at least
#: :data:`MIN_LEAD_S` before: close to the instant, so the services behind the gate run
#: no longer than needed, with room for a slow start.
LEAD_FACTOR = 3.0
MIN_LEAD_S = 0.25
#: A join's cost measured at bring-up, times this, is what :func:`cost_warnings` expects
#: it to take during a replay, when the host is busier: on the project's VM a docker
#: node's join took 0.51 - 0.69 s of wall time during replays against 0.35 s measured
#: at bring-up (docs/fidelity.md).
COST_MARGIN = 2.0


def lanes(events: Sequence[Event]) -> dict[str, list[tuple[int, Event]]]:
    """The events per target, in schedule order, each with its index in ``events``."""
    out: dict[str, list[tuple[int, Event]]] = {}
    for index, event in enumerate(events):
        out.setdefault(event.target, []).append((index, event))
    return out


def join_cost_s(scenario: Scenario, node: str, costs: Mapping[str, Any]) -> float:
    """Estimated wall seconds to bring ``node``'s services back: its container's start
    (a ``docker`` node) and its slowest service's start, as measured at bring-up."""
    starts = costs.get("service_start_s", {})
    return costs.get("container_start_s", {}).get(node, 0.0) + max(
        (starts.get(svc.name, 0.0) for svc in scenario.services_on(node)), default=0.0)


def cost_warnings(scenario: Scenario, costs: Mapping[str, Any],
                  allowed_model_s: float) -> list[dict[str, Any]]:
    """The joins that cannot be prepared in time at the scenario's ``time_scale``.

    A join of a node that an earlier event took down (crash, leave) is prepared from
    the moment that event has taken effect; when the gap between them is shorter than
    the join's expected cost (:func:`join_cost_s` times :data:`COST_MARGIN`) by more
    than ``allowed_model_s``, the join will likely be late. Each warning names both
    events, the numbers and the largest ``time_scale`` at which the join would be on
    time.
    """
    scale = scenario.time_scale
    warnings: list[dict[str, Any]] = []
    for items in lanes(scenario.events).values():
        for (_, before), (_, event) in itertools.pairwise(items):
            if event.action != "join" or before.action not in DOWN_ACTIONS:
                continue
            cost = join_cost_s(scenario, event.target, costs)
            expected = COST_MARGIN * cost
            late_model = expected * scale - (event.at - before.at)
            if cost <= 0 or late_model <= allowed_model_s:
                continue
            warnings.append({
                "action": event.action, "target": event.target, "at": event.at,
                "after": {"action": before.action, "at": before.at},
                "cost_s": cost, "expected_s": expected,
                "window_s": (event.at - before.at) / scale,
                "late_model_s": late_model, "allowed_model_s": allowed_model_s,
                "max_time_scale": (allowed_model_s + event.at - before.at) / expected})
    return warnings


def warning_text(warnings: Sequence[Mapping[str, Any]], time_scale: float) -> str | None:
    """The one progress line for :func:`cost_warnings` (``None`` without warnings)."""
    if not warnings:
        return None
    parts = [f"{w['action']} {w['target']} at {w['at']:g} model s needs about "
             f"{w['expected_s']:.2f} s of wall time ({w['cost_s']:.2f} s at bring-up) but "
             f"follows {w['after']['action']} at {w['after']['at']:g} by {w['window_s']:.2f} "
             f"s (late by about {w['late_model_s']:.1f} model s, allowed "
             f"{w['allowed_model_s']:.2g}; on time at time_scale <= "
             f"{w['max_time_scale']:.3g})" for w in warnings]
    return f"warning: at time_scale {time_scale:g} {len(warnings)} event(s) cannot be " \
           f"prepared in time: " + "; ".join(parts)


class EventScheduler:
    """Applies the scenario's events of one replay (``policy``, ``repetition``) at
    ``start_at + at / time_scale``, one lane per target; ``stop()`` when it ends."""

    def __init__(self, topo: TopologyView, start_at: float, policy: str,
                 repetition: int, log: Path, records: list[dict[str, Any]]) -> None:
        self.topo = topo
        self.start_at = start_at
        self.policy = policy
        self.repetition = repetition
        self.log = log
        self.records = records
        self.scale = topo.scenario.time_scale
        self.events = topo.scenario.events
        self.errors: list[str] = []
        self._stopped = threading.Event()
        self._lines: dict[int, dict[str, Any]] = {}
        self._threads = [threading.Thread(target=self._lane, args=(items,), daemon=True,
                                          name=f"events-{target}")
                         for target, items in lanes(self.events).items()]

    def start(self) -> Self:
        """Start every lane (each waits for its first event's instant)."""
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """The replay has ended: cancel what is not yet due or not yet in effect, wait
        for the actions under way, then log one line per event."""
        ended = time.time()
        self._stopped.set()
        for thread in self._threads:
            thread.join()
        lines = [self._lines.get(index) or self._line(event, None, NOT_APPLIED, ended=ended)
                 for index, event in enumerate(self.events)]
        with self.log.open("a") as fh:
            fh.writelines(json.dumps(line) + "\n" for line in lines)
        self.records.extend(lines)

    def _line(self, event: Event, applied: float | None, outcome: str,
              ended: float | None = None, prepared: float | None = None) -> dict[str, Any]:
        return log_line(self.policy, self.repetition, event, self.start_at, self.scale,
                        applied, outcome, ended_wall=ended, prepared_wall=prepared)

    def _wait_until(self, instant: float) -> bool:
        """Sleep until ``instant`` (wall); ``False`` if the replay ended first."""
        return not self._stopped.wait(max(0.0, instant - time.time()))

    def _lane(self, items: list[tuple[int, Event]]) -> None:
        for index, event in items:
            due = due_wall(self.start_at, event, self.scale)
            prepared: float | None = None
            try:
                if event.action == "join" and self.topo.join_pending(event.target) \
                        and self.topo.can_prepare_join(event.target):
                    lead = max(MIN_LEAD_S, LEAD_FACTOR * self.topo.join_cost_s(event.target))
                    if not self._wait_until(due - lead):
                        return
                    self.topo.prepare_join(event.target)
                    prepared = time.time()
                    if not self._wait_until(due):
                        return
                    self.topo.commit_join(event.target)
                    settle = None
                else:
                    if not self._wait_until(due):
                        return
                    settle = self.topo.event_effect(event)
                self._lines[index] = self._line(event, time.time(), APPLIED,
                                                prepared=prepared)
                if settle is not None:
                    settle()
            except Exception as exc:  # noqa: BLE001 - logged; the replay goes on and reports it
                self.errors.append(f"{event.action} {event.target}: {exc}")
                self._lines.setdefault(index, self._line(event, None, f"{FAILED}{exc}",
                                                         prepared=prepared))
