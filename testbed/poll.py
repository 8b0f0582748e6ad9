"""Waiting for a condition, the one way the harness and its tests do it.

:func:`wait_until` (threads) and :func:`await_until` (asyncio) call a check every
``interval`` seconds until it returns something truthy, and return that value; after
``timeout`` seconds they raise :class:`WaitTimeout` naming what was awaited. Nothing
sleeps a fixed time and hopes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

from testbed.errors import TestbedError

T = TypeVar("T")
DEFAULT_INTERVAL_S = 0.02


class WaitTimeout(TestbedError, AssertionError):
    """The awaited condition did not come true in time (also an ``AssertionError``, so a
    test waiting on it fails rather than errors)."""


def _timed_out(what: object, timeout: float) -> WaitTimeout:
    return WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")


def wait_until(check: Callable[[], T], timeout: float = 15.0, what: str = "",
               interval: float = DEFAULT_INTERVAL_S) -> T:
    """Call ``check`` until it returns something truthy; return it (see the module)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what or check, timeout)
        time.sleep(interval)


async def await_until(check: Callable[[], Any], timeout: float = 15.0, what: str = "",
                      interval: float = DEFAULT_INTERVAL_S) -> Any:
    """:func:`wait_until` for asyncio: ``check`` may be a plain or an async function."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what or check, timeout)
        await asyncio.sleep(interval)
