"""pytest plugin: run scenarios from tests and assert on their results.

Registered as a ``pytest11`` entry point, so any project that installs the testbed gets:

- the ``emulation`` marker, for tests that build real networks: they are skipped with a
  clear reason when not running as root;
- the ``run_scenario`` fixture: ``run_scenario("continuum", duration=20,
  policies=["random", "jsq"])`` runs a built-in scenario (or a YAML path) on the
  scenario's default executor (``executor.default``, emulation unless it says ``sim``),
  or on ``executor="sim"`` / ``"emulation"``, and returns a :class:`ScenarioRun` with its
  ``summary``, ``traces`` and ``metadata``; an executor the scenario's system lacks is
  refused with the CLI's one-line error;
- the ``load_scenario`` fixture, the loader itself, for tests of scenario files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass
class ScenarioRun:
    """The results folder of one run, loaded."""

    folder: Path
    summary: dict
    metadata: dict

    @property
    def traces(self) -> Any:
        from testbed.analysis.traces import read_traces

        return read_traces(self.folder)

    def policy(self, name: str) -> dict:
        """The summary statistics of one policy."""
        return self.summary["policies"][name]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "emulation: builds real namespaces, links and services; needs root")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="emulation tests need root (network namespaces, tc)")
    for item in items:
        if "emulation" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def load_scenario() -> Callable[..., Any]:
    from testbed.scenario.loader import load_scenario as loader

    return loader


@pytest.fixture
def run_scenario(tmp_path: Path) -> Callable[..., ScenarioRun]:
    """Run a scenario with overrides on its default executor (or ``executor=``); results
    go under ``tmp_path``."""
    from testbed.runner import run_scenario as runner
    from testbed.scenario.loader import load_scenario as loader

    counter = iter(range(1000))

    def run(name_or_path: str, progress: Callable[[str], None] | None = None,
            executor: str | None = None, **overrides: Any) -> ScenarioRun:
        scenario = loader(str(name_or_path))
        if overrides:
            scenario = scenario.with_overrides(**overrides)
        folder = tmp_path / f"run{next(counter)}"
        runner(scenario, out=folder, executor=executor or scenario.executor.default,
               progress=progress or (lambda _line: None))
        return ScenarioRun(folder=folder,
                           summary=json.loads((folder / "summary.json").read_text()),
                           metadata=json.loads((folder / "metadata.json").read_text()))

    return run
