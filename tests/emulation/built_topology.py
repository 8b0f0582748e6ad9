"""A scenario brought up for a module's tests, torn down after them, checked clean."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testbed.emulation.executor import EmulatedTopology, emulated_topology
from testbed.emulation.ledger import Ledger
from testbed.emulation.names import reserve_prefix
from testbed.scenario import Scenario


def built_topology(scenario: Scenario, name: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedTopology]:
    """Bring ``scenario`` up under a ledger named for ``name``, yield it, and after the
    tests check that teardown reported no error and left no ledger entry open."""
    workdir = tmp_path_factory.mktemp(name)
    ledger = Ledger(f"test-{name}-{os.getpid()}")
    errors: list[str] = []
    with emulated_topology(scenario, ledger, workdir, reserve_prefix(ledger),
                           lambda _line: None, errors) as built:
        yield built
    assert errors == []
    assert ledger.open_entries() == []
