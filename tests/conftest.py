"""Fixtures every test folder shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

#: Attempts a ``timing`` test gets beyond its first: its assertions compare wall-clock
#: measurements with configured values, and on a shared 2-core VM one stolen time slice
#: can push a single measurement past its tolerance. A test passes when one of its fresh
#: measurements holds; a real error (a wrong delay, a lost rate cap) fails every attempt.
TIMING_RERUNS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every ``timing`` test :data:`TIMING_RERUNS` fresh attempts (pytest-rerunfailures)."""
    for item in items:
        if item.get_closest_marker("timing") is not None:
            item.add_marker(pytest.mark.flaky(reruns=TIMING_RERUNS, reruns_delay=1))


@pytest.fixture
def echo() -> Iterator[None]:
    """The test tree's ``echo`` system registered for one test, removed after it."""
    from tests.testsystem import register_echo

    remove = register_echo()
    yield
    remove()


@pytest.fixture(autouse=True, scope="session")
def run_secret_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The test session's run secret (``tests.secured``) in ``TESTBED_SECRET_FILE``,
    as the harness hands it to what it starts: services a test starts by hand (``main``
    in process, or a subprocess) find it there. A test of a service without a secret
    removes the variable with ``monkeypatch``."""
    import os

    from nodes.secret import SECRET_ENV
    from tests.secured import secret_file

    before = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = str(secret_file(tmp_path_factory.mktemp("secret")))
    yield
    if before is None:
        os.environ.pop(SECRET_ENV, None)
    else:
        os.environ[SECRET_ENV] = before
