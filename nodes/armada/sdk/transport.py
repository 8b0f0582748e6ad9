"""The transport the Armada SDKs share: the compute SDK
(:mod:`nodes.armada.sdk.client`) and the storage SDK (:mod:`nodes.armada.sdk.storage`).

Both keep a list of targets (the candidate replicas of an application, the data
replicas of its storage), send each request to the current target and, when it fails,
to the next working one at once; when none is left they refresh the list once (a new
query and probe round, a new locate) before giving up (:func:`failover_attempts`).
Both log what they do as :class:`Event` s (:class:`EventLog`), describe errors alike
(:func:`describe_error`, :func:`refusal`), and come as an asyncio client on aiohttp
(:class:`AsyncClient`) and a synchronous one on ``requests`` (:class:`SyncClient`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import aiohttp
import requests

T = TypeVar("T")


@dataclass(frozen=True)
class Event:
    """Something a client did (``kind``: each SDK lists its kinds), with details."""

    t: float  # wall epoch seconds
    kind: str
    detail: dict[str, Any]


class EventLog:
    """A client's ``events``, oldest first, for experiment reports."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def record(self, kind: str, **detail: Any) -> None:
        """Append an event of ``kind`` at the current wall time."""
        self.events.append(Event(time.time(), kind, detail))


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


class AsyncClient:
    """``async with`` (``start``, then ``close``) and the bound of every request of an
    asyncio client (``request_timeout_s``)."""

    request_timeout_s: float

    async def start(self) -> None:
        """Get ready to send (each client says what that takes)."""

    async def close(self) -> None:
        """Release every connection."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def timeout(self) -> aiohttp.ClientTimeout:
        """The bound of every request."""
        return aiohttp.ClientTimeout(total=self.request_timeout_s)


class SyncClient:
    """The ``requests`` session of a synchronous client, and ``with`` to close it."""

    _http: requests.Session | None = None

    @property
    def http(self) -> requests.Session:
        """The keep-alive pool every request of the client goes through."""
        if self._http is None:
            self._http = requests.Session()
        return self._http

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection."""
        if self._http is not None:
            self._http.close()
