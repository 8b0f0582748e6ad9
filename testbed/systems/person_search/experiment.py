"""``testbed experiment person-search-emulation``: the emulated searches beside their twins.

:func:`run` computes the results folder (``<out>/emulation``:
:func:`~testbed.systems.person_search.experiment_emulation.run_emulation`) and
:func:`report` writes ``emulation.md`` into the report folder. The simulator's
experiment is study files (:mod:`testbed.systems.person_search.simulation_experiment`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.errors import TestbedError

PARTS = ("emulation",)


def _check(executors: tuple[str, ...]) -> None:
    if tuple(executors) != PARTS:
        raise TestbedError(f"--executors: expected emulation, found {','.join(executors)!r}")


def run(size: str, out: Path, progress: Callable[[str], None] = print,
        executors: tuple[str, ...] = PARTS) -> Path:
    """Run the emulated part at ``size`` into ``out/emulation``; returns ``out``."""
    from testbed.systems.person_search.experiment_emulation import run_emulation

    _check(executors)
    run_emulation(size, out / "emulation", progress)
    return out


def report(out: Path, report_dir: Path, command: str,
           executors: tuple[str, ...] = PARTS) -> list[Path]:
    """The report of the part run into ``out``, written to ``report_dir``."""
    from testbed.systems.person_search.paper_reports import write_emulation_report

    _check(executors)
    return [write_emulation_report(out / "emulation", report_dir / "emulation.md", command)]
