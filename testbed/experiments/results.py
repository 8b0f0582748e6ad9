"""What an experiment's metric functions read: each study's cells, traces and event logs.

A metric function gets one :class:`StudyResult` per study file (keyed by the file's
name without ``.yaml``) and the size. Everything it reads is in the study folder the
engine wrote: the cells' records, their run folders (``metadata.json``,
``work/events.jsonl``, the system's own files) and their traces; nothing is measured here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.study.cells import FINISHED, cell_dir, plan_cells, read_cell
from testbed.study.spec import Point, Study


@dataclass(frozen=True)
class Cell:
    """One finished or failed cell: its record, and where its run is."""

    record: dict[str, Any]
    run: Path

    @property
    def finished(self) -> bool:
        """Whether the cell ran to the end (``ok``, or ``incomplete`` with what finished)."""
        return self.record.get("status") in FINISHED

    @property
    def executor(self) -> str:
        return str(self.record["executor"])

    @property
    def point(self) -> int:
        return int(self.record["point"])

    @property
    def replication(self) -> int:
        return int(self.record["replication"])

    @property
    def degraded(self) -> bool:
        """Whether the fidelity guard marked the emulated cell degraded."""
        return bool(self.record.get("degraded"))

    def traces(self) -> pd.DataFrame:
        """The run's traces (``docs/traces.md``; the study's copy under ``traces/``
        adds the cell's coordinates as columns)."""
        from testbed.analysis.traces import read_traces

        return read_traces(self.run)

    def metadata(self) -> dict[str, Any]:
        """The run's ``metadata.json``."""
        return json.loads((self.run / "metadata.json").read_text())

    def events(self) -> list[dict[str, Any]]:
        """The run's event log (``work/events.jsonl``: every scheduled event of every
        replay, when it was due and when it took effect), one mapping per line; empty
        for a run without events."""
        path = self.run / "work" / "events.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class StudyResult:
    """One study of an experiment, as its folder holds it after the engine ran."""

    name: str
    study: Study
    folder: Path
    cells: tuple[Cell, ...] = field(default=())

    @classmethod
    def read(cls, name: str, study: Study, folder: Path) -> StudyResult:
        """Every planned cell of ``study`` in ``folder`` (a cell that never wrote its
        record counts as failed, status ``error``)."""
        cells = []
        for spec in plan_cells(study, folder):
            record = read_cell(cell_dir(spec)) or {**{k: spec[k] for k in (
                "key", "point", "values", "label", "replication", "seed", "executor")},
                "status": "error", "error": "no record"}
            cells.append(Cell(record, cell_dir(spec) / "run"))
        return cls(name, study, folder, tuple(cells))

    @property
    def points(self) -> list[Point]:
        """The study's grid points, in grid order."""
        return self.study.points()

    def finished(self, executor: str | None = None, point: int | None = None,
                 sound: bool = False) -> Iterator[Cell]:
        """Finished cells, optionally of one executor and point; ``sound`` leaves out
        degraded emulation cells."""
        for cell in self.cells:
            if not cell.finished or (sound and cell.degraded):
                continue
            if executor is not None and cell.executor != executor:
                continue
            if point is not None and cell.point != point:
                continue
            yield cell

    def cell_doc(self, cell: Cell) -> dict[str, Any]:
        """The scenario document ``cell`` ran, as the study wrote it: the study's
        scenario with its ``set:`` and the cell's grid values (builder parameters
        included, before the builder expands them)."""
        return self.study.point_doc(cell.record["values"].items())

    def frames(self, point: int, executor: str) -> list[pd.DataFrame]:
        """The traces of each finished replication of ``point`` on ``executor``, in
        replication order (one frame per independent trace)."""
        cells = sorted(self.finished(executor, point), key=lambda c: c.replication)
        return [c.traces() for c in cells]

    def summary(self) -> pd.DataFrame:
        """The study's table (``summary.parquet``: per point, executor and policy,
        statistics across replications, ``docs/studies.md``)."""
        return pd.read_parquet(self.folder / "summary.parquet")

    def about(self) -> dict[str, Any]:
        """The study's ``study.json``."""
        return json.loads((self.folder / "study.json").read_text())
