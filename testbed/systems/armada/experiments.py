"""The entry points ``testbed experiment armada-*`` calls, one pair per experiment.

Each experiment module keeps its own ``run_<name>(size, out, progress, ...)`` and
``write_<name>_report(out, report, command)``; this module adapts them to the registry's
signatures (:class:`testbed.registry.Experiment`), imports them only when called, and names
each report file in ``docs/results/armada/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Run = Callable[..., Path]
Report = Callable[..., list[Path]]


def _entries(module: str, name: str) -> tuple[Run, Report]:
    """``run`` and ``report`` for ``testbed.systems.armada.<module>``'s ``run_<name>``
    and ``write_<name>_report``; the report is ``<name>.md``."""
    path = f"testbed.systems.armada.{module}"

    def run(size: str, out: Path, progress: Callable[[str], None],
            executors: Sequence[str], **options: Any) -> Path:
        del executors  # each Armada experiment runs on the one executor it is made for
        return getattr(importlib.import_module(path), f"run_{name}")(size, out, progress,
                                                                     **options)

    def report(out: Path, report_dir: Path, command: str, executors: Sequence[str],
               **options: Any) -> list[Path]:
        del executors
        write = getattr(importlib.import_module(path), f"write_{name}_report")
        return [write(out, report_dir / f"{name}.md", command)]

    return run, report


run_startup, report_startup = _entries("startup_experiment", "startup")
run_calibrate, report_calibrate = _entries("calibration_run", "calibration")
