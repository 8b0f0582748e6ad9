"""What the Armada SDKs decide and record, apart from how they send: pure.

The compute SDK (:mod:`nodes.armada.sdk.client`) and the storage SDK
(:mod:`nodes.armada.sdk.storage`) keep a list of targets, send each request to the current
one and, when it fails, to the next working one at once; when none is left they refresh
the list once before giving up (:func:`failover_attempts`). Both log what they do as
:class:`Event` s (:class:`EventLog`, timed by a clock the owner gives: wall time for the
services, the simulation clock for a model) and describe errors alike
(:func:`describe_error`, :func:`refusal`). Nothing here sends a request, so a simulator
can run the same rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Event:
    """Something a client did (``kind``: each SDK lists its kinds), with details."""

    t: float  # the log's clock: wall epoch seconds in the services
    kind: str
    detail: dict[str, Any]


class EventLog:
    """A client's ``events``, oldest first, for experiment reports, each timed by
    ``clock`` (wall epoch seconds unless the owner runs on another clock)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.events: list[Event] = []
        self.clock = clock

    def record(self, kind: str, **detail: Any) -> None:
        """Append an event of ``kind`` at the clock's current time."""
        self.events.append(Event(self.clock(), kind, detail))


def describe_error(exc: BaseException) -> str:
    """An exception as an event's or a message's ``error``: its type and message."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def refusal(status: int, body: Any) -> str:
    """Why a service refused a request: ``"<status>: <its error>"``, or the status."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return f"{status}: {body['error']}"
    return f"status {status}"


def failover_attempts(
    pick: Callable[[], T | None], exhausted: Callable[[], Exception]
) -> Iterator[tuple[T | None, int]]:
    """The attempts of one request: ``(target, attempt number)``, the target ``pick()``
    gives (the current target, else the next working one).

    When ``pick()`` gives None, one ``(None, n)`` asks the caller to refresh the targets
    before the next pick; when it gives None again, ``exhausted()`` is raised. The caller
    stops iterating once an attempt succeeds (it never ends otherwise).
    """
    attempt = 0
    refreshed = False
    while True:
        target = pick()
        if target is None:
            if refreshed:
                raise exhausted()
            refreshed = True
            yield None, attempt
            continue
        attempt += 1
        yield target, attempt
