"""Helpers the unit tests share."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def wait_for(check: Callable[[], Any], timeout: float = 15.0, what: str = "",
                   interval: float = 0.05) -> Any:
    """Poll ``check`` (a plain or an async function) every ``interval`` seconds until it
    returns something truthy, and return that; fail the test after ``timeout`` seconds,
    naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        await asyncio.sleep(interval)
