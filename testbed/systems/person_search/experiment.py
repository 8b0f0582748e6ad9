"""``testbed experiment person-search``: the simulator's experiments and the emulated one.

:func:`run` computes, per executor of ``--executors``, the results folder of one part
(``<out>/sim``: :func:`~testbed.systems.person_search.experiment_sim.run_simulation`;
``<out>/emulation``: :func:`~testbed.systems.person_search.experiment_emulation.
run_emulation`); :func:`report` writes the matching reports (``simulation.md``,
``emulation.md``) into the report folder. Both parts take the same ``--size`` names
(:func:`testbed.experiments.sizes.size_plan`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.errors import TestbedError

PARTS = ("sim", "emulation")


def _check(executors: tuple[str, ...]) -> None:
    unknown = [e for e in executors if e not in PARTS]
    if unknown or not executors:
        raise TestbedError(f"--executors: expected sim, emulation or both, found "
                           f"{','.join(executors)!r}")


def run(size: str, out: Path, progress: Callable[[str], None] = print,
        executors: tuple[str, ...] = PARTS) -> Path:
    """Run each part of ``executors`` at ``size`` into ``out/<executor>``; returns ``out``."""
    from testbed.systems.person_search.experiment_emulation import run_emulation
    from testbed.systems.person_search.experiment_sim import run_simulation

    _check(executors)
    for executor in executors:
        if executor == "sim":
            run_simulation(out / "sim", size, progress=progress)
        else:
            run_emulation(size, out / "emulation", progress)
    return out


def report(out: Path, report_dir: Path, command: str,
           executors: tuple[str, ...] = PARTS) -> list[Path]:
    """The report of each part of ``executors`` run into ``out``, written to ``report_dir``."""
    from testbed.systems.person_search.paper_reports import (
        write_emulation_report,
        write_simulation_report,
    )

    _check(executors)
    return [write_simulation_report(out / "sim", report_dir / "simulation.md", command)
            if executor == "sim" else
            write_emulation_report(out / "emulation", report_dir / "emulation.md", command)
            for executor in executors]
