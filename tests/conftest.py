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
