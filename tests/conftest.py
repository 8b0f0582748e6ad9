"""Fixtures every test folder shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def echo() -> Iterator[None]:
    """The test tree's ``echo`` system registered for one test, removed after it."""
    from tests.testsystem import register_echo

    remove = register_echo()
    yield
    remove()
