"""Fixtures every test folder shares."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Attempts a ``timing`` test gets beyond its first: its assertions compare wall-clock
#: measurements with configured values, and on a shared 2-core VM one stolen time slice
#: can push a single measurement past its tolerance. A test passes when one of its fresh
#: measurements holds; a real error (a wrong delay, a lost rate cap) fails every attempt.
TIMING_RERUNS = 2
#: Seconds between those attempts, so that one disturbance does not spoil all three.
TIMING_RERUN_DELAY_S = 5
#: Before the first ``timing`` test the host must be this idle (share of all CPU time)
#: over :data:`QUIET_WINDOW_S`: right after the rest of the suite, engines, containers
#: and helpers it started may still be winding down for a minute.
QUIET_IDLE_SHARE = 0.85
QUIET_WINDOW_S = 2.0
#: Longest wait for that quiet host; past it the timing tests run anyway, and say so.
QUIET_TIMEOUT_S = 180.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every ``timing`` test :data:`TIMING_RERUNS` fresh attempts (pytest-rerunfailures)."""
    for item in items:
        if item.get_closest_marker("timing") is not None:
            item.add_marker(pytest.mark.flaky(reruns=TIMING_RERUNS,
                                              reruns_delay=TIMING_RERUN_DELAY_S))


def _quiet_window() -> float:
    """The host's CPU idle share over the next :data:`QUIET_WINDOW_S` seconds."""
    import time

    from testbed.host_monitor import PROC_STAT, idle_share, parse_cpu_times

    before = parse_cpu_times(PROC_STAT.read_text())
    time.sleep(QUIET_WINDOW_S)  # the measurement window itself
    return idle_share(before, parse_cpu_times(PROC_STAT.read_text()))


@pytest.fixture(autouse=True, scope="session")
def quiet_host_for_timing(request: pytest.FixtureRequest) -> None:
    """When the session holds ``timing`` tests, wait (bounded) until the host is quiet
    before the first: their measurements judge the code, not what ran before them."""
    if not any(item.get_closest_marker("timing") for item in request.session.items):
        return
    from testbed.errors import TestbedError
    from testbed.poll import wait_until

    seen: list[float] = []

    def quiet() -> bool:
        seen.append(_quiet_window())
        return seen[-1] >= QUIET_IDLE_SHARE

    try:
        wait_until(quiet, timeout=QUIET_TIMEOUT_S, what="a quiet host", interval=0.0)
    except TestbedError:
        print(f"\ntiming tests: the host stayed busy for {QUIET_TIMEOUT_S:g} s "
              f"(idle share {seen[-1]:.2f} < {QUIET_IDLE_SHARE}); running them anyway")


@pytest.fixture
def echo() -> Iterator[None]:
    """The test tree's ``echo`` system registered for one test, removed after it."""
    from tests.testsystem import register_echo

    remove = register_echo()
    yield
    remove()


@pytest.fixture
def echo_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ``echo`` system as a plug-in named by ``TESTBED_PLUGINS``: every process of a
    study (Dask workers, ``testbed run`` children) finds it, as a researcher's own
    system outside the tree; the registry discovers again before and after."""
    from testbed import registry

    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv(registry.PLUGINS_ENV, "tests.testsystem")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    monkeypatch.setattr(registry, "_REGISTERED", {})
    yield


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
