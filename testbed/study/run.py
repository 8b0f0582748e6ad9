"""Runs a study into its folder, resuming what an earlier attempt finished.

The folder (default ``results/<study name>/``) holds ``study.json``, ``cells/<key>/``
(each cell's run folder and ``cell.json``), ``traces/<key>.parquet`` (one Parquet
dataset over every cell), ``summary.csv``, ``summary.parquet`` and ``report.html``.
Running the same study into the same folder again runs only the cells that have not
finished; everything a killed attempt left half-written is removed first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.errors import Incomplete, TestbedError
from testbed.study.cells import (
    CELL_FILE,
    DEGRADED_DIR,
    FINISHED,
    cell_dir,
    plan_cells,
    read_cell,
    set_aside_degraded,
)
from testbed.study.spec import Study, describe
from testbed.study.summary import format_summary, summarize, write_summary

Progress = Callable[[str], None]


class StudyIncomplete(Incomplete):
    """Some cells failed or lost policies; the study folder holds everything else."""

    def __init__(self, folder: Path, failed: list[dict[str, Any]]) -> None:
        self.folder, self.failed = folder, failed
        shown = "; ".join(f"{r['label']} replication {r['replication']} {r['executor']}: "
                          f"{r.get('error') or 'policies failed: ' + _failed_policies(r)}"
                          for r in failed[:5])
        more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
        super().__init__(f"{len(failed)} cell(s) incomplete: {shown}{more}; the summary in "
                         f"{folder} counts them")


def _failed_policies(record: dict[str, Any]) -> str:
    return ", ".join(sorted({f["policy"] for f in record.get("failed", [])}))


def remove_leftovers(folder: Path) -> list[Path]:
    """Remove what a killed attempt left: unfinished cell folders, temporary files and
    traces of cells that never finished; returns what was removed."""
    removed: list[Path] = []
    cells, traces = folder / "cells", folder / "traces"
    finished: set[str] = set()
    if cells.is_dir():
        for cell in sorted(cells.iterdir()):
            record = read_cell(cell) if cell.is_dir() else None
            if record is not None and record.get("status") in FINISHED:
                finished.add(cell.name)
                continue
            shutil.rmtree(cell) if cell.is_dir() else cell.unlink()
            removed.append(cell)
    if traces.is_dir():
        for path in sorted(traces.iterdir()):
            if path.suffix != ".parquet" or path.stem not in finished:
                path.unlink()
                removed.append(path)
    return removed


#: Longest study folder path for emulation cells: their run folders hold Unix sockets
#: (``cells/<key>/run/work/launcher.sock``, 50 more bytes) and a socket path has 107.
MAX_EMULATION_FOLDER = 57


def check_socket_room(folder: Path) -> None:
    """Refuse a study folder too deep for the emulation's Unix sockets."""
    length = len(os.fsencode(folder.resolve()))
    if length > MAX_EMULATION_FOLDER:
        raise TestbedError(f"--out {folder}: the folder's path is {length} bytes; emulation "
                           "cells keep Unix sockets under it and a socket path holds 107, so "
                           f"use a folder path of at most {MAX_EMULATION_FOLDER} bytes")


@dataclass(frozen=True)
class Prepared:
    """A study folder ready to run: its study, every cell's spec and those to run."""

    study: Study
    folder: Path
    about: dict[str, Any]
    specs: list[dict[str, Any]]
    todo: list[dict[str, Any]]


def prepare_study(study: Study, out: Path | None = None, *, rerun_degraded: bool = False,
                  progress: Progress = print) -> Prepared:
    """Write ``study.json``, remove what a stopped attempt left, plan the cells and say
    which have not finished (after setting aside the degraded ones when
    ``rerun_degraded``: :func:`set_aside_degraded`); checks what emulation cells need."""
    from testbed.runner import RESULTS_ROOT

    folder = Path(out) if out is not None else RESULTS_ROOT / study.name
    folder.mkdir(parents=True, exist_ok=True)
    about = describe(study)
    (folder / "study.json").write_text(json.dumps(about, indent=2, default=str))
    removed = remove_leftovers(folder)
    specs = plan_cells(study, folder)
    if rerun_degraded:
        aside = set_aside_degraded(specs)
        if aside:
            progress(f"set aside {len(aside)} degraded cell(s) under {folder / DEGRADED_DIR} "
                     "to run them again")
    todo = [s for s in specs if not (cell_dir(s) / CELL_FILE).exists()]
    if any(s["executor"] == "emulation" for s in todo):
        if os.geteuid() != 0:
            raise TestbedError("executors: emulation cells need root (network namespaces, "
                               "tc, cgroups): run as root")
        check_socket_room(folder)
    progress(f"study {study.name}: {len(study.points())} point(s) x {study.replications} "
             f"replication(s) x {len(study.executors)} executor(s) = {len(specs)} cells; "
             f"{len(specs) - len(todo)} finished before, {len(todo)} to run"
             + (f"; removed {len(removed)} leftover(s) of a stopped attempt" if removed else ""))
    return Prepared(study, folder, about, specs, todo)


def run_cells(todo: list[dict[str, Any]], *, scheduler: str | None = None,
              workers: int | None = None, serial: bool = False,
              progress: Progress = print) -> None:
    """Run the cells ``todo`` (of one study or several): in this process when
    ``serial``, else on one Dask cluster (:func:`testbed.study.engine.run_dask`)."""
    from testbed.study.engine import run_dask, run_serial

    if not todo:
        return
    if serial:
        run_serial(todo, progress)
    else:
        run_dask(todo, progress, scheduler=scheduler, workers=workers)


def finish_study(prepared: Prepared, *, include_degraded: bool = False,
                 progress: Progress = print) -> Path:
    """Write the summary and the report of a study whose cells ran; returns the folder.
    Raises :class:`StudyIncomplete` when a cell failed or lost policies (after
    everything is written)."""
    study, folder, specs = prepared.study, prepared.folder, prepared.specs
    records = [read_cell(cell_dir(s)) or {**s, "status": "error", "error": "no record"}
               for s in specs]
    table = _outputs(folder, prepared.about, records, include_degraded)
    progress(format_summary(table, study.grid_paths, study.baseline))
    degraded = [r for r in records if r.get("degraded")]
    if degraded:
        progress(f"warning: {len(degraded)} degraded emulation cell(s) "
                 f"{'included' if include_degraded else 'left out (--include-degraded keeps them, '}"
                 f"{'' if include_degraded else '--rerun-degraded runs them again)'}"
                 f": {degraded[0]['label']}: {'; '.join(degraded[0].get('reasons', []))}")
    lagging = sorted({p for r in records for p in r.get("degraded_policies") or {}})
    if lagging:
        progress(f"warning: policies marked degraded inside sound emulation cells "
                 f"({', '.join(lagging)}) "
                 f"{'included' if include_degraded else 'left out of their own rows'}; "
                 "cell.json names the reason")
    progress(f"study folder: {folder}")
    incomplete = [r for r in records if r.get("status") != "ok"]
    if incomplete:
        raise StudyIncomplete(folder, incomplete)
    return folder


def run_study(study: Study, out: Path | None = None, *, scheduler: str | None = None,
              workers: int | None = None, include_degraded: bool = False,
              serial: bool = False, rerun_degraded: bool = False,
              progress: Progress = print) -> Path:
    """Run every cell of ``study`` not finished in the folder, then write the summary
    and the report; returns the folder (:func:`prepare_study`, :func:`run_cells`,
    :func:`finish_study`). ``rerun_degraded`` first sets aside the cells the fidelity
    guard marked degraded, so they run again. Raises :class:`StudyIncomplete` at the
    end when a cell failed or lost policies (after everything is written)."""
    prepared = prepare_study(study, out, rerun_degraded=rerun_degraded, progress=progress)
    run_cells(prepared.todo, scheduler=scheduler, workers=workers, serial=serial,
              progress=progress)
    return finish_study(prepared, include_degraded=include_degraded, progress=progress)


OUTPUTS_KEY = "outputs.key"


def _outputs(folder: Path, about: dict[str, Any], records: list[dict[str, Any]],
             include_degraded: bool) -> pd.DataFrame:
    """The summary table, written with the page unless both already describe exactly
    these cells (a re-run with nothing to do then rewrites nothing)."""
    from testbed.reports.html import write_study_page

    key = hashlib.sha256(json.dumps(
        [about, include_degraded,
         [[r.get("key"), r.get("status"), r.get("degraded"), r.get("degraded_policies")]
          for r in records]], sort_keys=True, default=str).encode()).hexdigest()
    stamp = folder / OUTPUTS_KEY
    done = [folder / "summary.parquet", folder / "summary.csv", folder / "report.html"]
    if stamp.is_file() and stamp.read_text() == key and all(p.is_file() for p in done):
        return pd.read_parquet(done[0])
    stamp.unlink(missing_ok=True)
    table = summarize(about, records, folder / "traces", include_degraded=include_degraded)
    write_summary(table, folder)
    write_study_page(folder)
    stamp.write_text(key)
    return table
