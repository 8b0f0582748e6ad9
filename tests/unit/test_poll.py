"""The one waiting helper: returns the check's value, names what it waited for."""

from __future__ import annotations

import itertools

import pytest

from testbed.poll import WaitTimeout, await_until, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", 5.0, "three calls") == "ready"


def test_wait_until_names_what_it_waited_for() -> None:
    with pytest.raises(WaitTimeout, match="timed out after 0.05 s waiting for the moon"):
        wait_until(lambda: False, 0.05, "the moon", interval=0.01)


async def test_await_until_takes_async_checks() -> None:
    counter = itertools.count()

    async def check() -> int:
        return next(counter) >= 2

    assert await await_until(check, 5.0, "two calls") is True
    with pytest.raises(AssertionError, match="nothing"):
        await await_until(lambda: 0, 0.05, "nothing", interval=0.01)
