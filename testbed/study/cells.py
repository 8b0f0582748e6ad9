"""Cells of a study: one (point, replication, executor), run once, kept for good.

A cell's folder is ``cells/<key>/`` in the study folder, where ``key`` is a hash of the
resolved scenario (policies and seeds included), the executor and the code version
(:func:`code_version`). The cell runs the scenario into ``cells/<key>/run/`` (a plain
run folder), copies the run's traces, with the cell's coordinates added, to
``traces/<key>.parquet``, and writes ``cells/<key>/cell.json`` last. So a cell is
finished exactly when its ``cell.json`` exists with status ``ok`` or ``incomplete``
(some policies failed; what finished is kept and the failures are listed); anything
else under ``cells/`` is what a killed study left, and is removed before the cell runs
again. A cell whose run could not produce anything is recorded with status ``error``
and runs again on the next resume.

Simulator cells run in the calling process. Emulation cells run as ``testbed run``
child processes: the emulation's teardown on SIGINT/SIGTERM installs signal handlers,
which only a main thread may do, never a Dask worker thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from testbed import __version__
from testbed.study.spec import Point, Study

#: Statuses of a finished cell; ``error`` cells run again on resume.
FINISHED = ("ok", "incomplete")
CELL_FILE = "cell.json"
#: What a cell's record copies from its spec.
RECORD_KEYS = ("key", "point", "values", "label", "replication", "seed", "executor", "code")


def code_version() -> str:
    """The testbed version and git commit the cells are keyed by."""
    from testbed.runner import git_commit

    return f"{__version__}+{git_commit() or 'unknown'}"


def cell_key(resolved: Mapping[str, Any], executor: str, code: str) -> str:
    """The cell's folder name: a hash of what determines its results."""
    blob = json.dumps({"scenario": resolved, "executor": executor, "code": code},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _grid_value(value: Any) -> Any:
    """A grid value as a table cell: scalars stay, containers become JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True)


def plan_cells(study: Study, folder: Path, code: str | None = None) -> list[dict[str, Any]]:
    """Every cell of ``study`` as a plain, picklable spec (what :func:`run_cell` takes)."""
    code = code or code_version()
    specs = []
    points: list[Point] = study.points()
    for point in points:
        for replication in range(study.replications):
            resolved = study.scenario(point, replication).resolved()
            for executor in study.executors:
                specs.append({
                    "key": cell_key(resolved, executor, code),
                    "study_folder": str(folder),
                    "point": point.index,
                    "values": {p: _grid_value(v) for p, v in point.values},
                    "label": point.label(),
                    "replication": replication,
                    "executor": executor,
                    "scenario": resolved,
                    "seed": resolved["seed"],
                    "code": code,
                })
    return specs


def cell_dir(spec: Mapping[str, Any]) -> Path:
    """``cells/<key>/`` of the cell."""
    return Path(spec["study_folder"]) / "cells" / spec["key"]


def traces_file(spec: Mapping[str, Any]) -> Path:
    """``traces/<key>.parquet`` of the cell."""
    return Path(spec["study_folder"]) / "traces" / f"{spec['key']}.parquet"


#: Where :func:`set_aside_degraded` keeps a degraded cell's folder, as
#: ``degraded/<key>-<attempt>/``, when the cell runs again.
DEGRADED_DIR = "degraded"


def set_aside_degraded(specs: list[dict[str, Any]]) -> list[Path]:
    """Move every finished cell the fidelity guard marked degraded out of ``cells/`` into
    ``degraded/<key>-<attempt>/``, so the cell runs again; returns the new folders.

    The same seeds run again, so only the host's share of the cell differs. Its folder
    moves first and then its traces go: a stop in between leaves an unfinished cell,
    whose traces the next attempt removes as leftovers. Nothing is deleted: every
    attempt stays readable beside the study.
    """
    moved = []
    for spec in specs:
        folder = cell_dir(spec)
        record = read_cell(folder)
        if record is None or record.get("status") not in FINISHED \
                or not record.get("degraded"):
            continue
        attic = Path(spec["study_folder"]) / DEGRADED_DIR
        attic.mkdir(exist_ok=True)
        target = attic / f"{spec['key']}-{earlier_attempts(spec) + 1}"
        folder.rename(target)
        traces_file(spec).unlink(missing_ok=True)
        moved.append(target)
    return moved


def earlier_attempts(spec: Mapping[str, Any]) -> int:
    """How many degraded attempts of the cell were set aside before."""
    attic = Path(spec["study_folder"]) / DEGRADED_DIR
    return len(list(attic.glob(f"{spec['key']}-*"))) if attic.is_dir() else 0


def read_cell(folder: Path) -> dict[str, Any] | None:
    """A cell folder's record, or ``None`` if the cell never finished writing it."""
    try:
        return json.loads((folder / CELL_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_finished(spec: Mapping[str, Any]) -> bool:
    """Whether the cell ran to the end before (its files are then never rewritten)."""
    record = read_cell(cell_dir(spec))
    return record is not None and record.get("status") in FINISHED


def _write_atomically(path: Path, write: Any) -> None:
    """Write through ``path.tmp`` and rename, so ``path`` is whole or absent."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _run_sim(spec: Mapping[str, Any], run_dir: Path) -> tuple[str, str | None]:
    """Run a simulator cell in this process: (status, error)."""
    from testbed.errors import TestbedError
    from testbed.replays import RunIncomplete
    from testbed.runner import run_scenario
    from testbed.scenario.loader import scenario_from_dict

    try:
        scenario = scenario_from_dict(spec["scenario"], source=f"<cell {spec['key']}>")
        run_scenario(scenario, out=run_dir, executor="sim", progress=lambda _line: None,
                     plots=False)
    except RunIncomplete:
        return "incomplete", None
    except TestbedError as exc:
        return "error", str(exc)
    return "ok", None


@contextmanager
def _host_lock() -> Iterator[None]:
    """Inside a Dask worker, hold the cluster-wide lock of this host for an emulation
    (worker resources bound emulations per worker; a host may run several workers)."""
    try:
        from distributed import Lock, get_worker

        get_worker()
    except (ImportError, ValueError):
        yield
        return
    import socket

    with Lock(f"testbed-emulation-{socket.gethostname()}"):
        yield


def _run_emulation(spec: Mapping[str, Any], folder: Path, run_dir: Path
                   ) -> tuple[str, str | None]:
    """Run an emulation cell as a ``testbed run`` child process: (status, error)."""
    scenario_file = folder / "scenario.yaml"
    log = folder / "run.log"
    argv = [sys.executable, "-m", "testbed.cli", "run", str(scenario_file),
            "--executor", "emulation", "--out", str(run_dir)]
    from testbed.parent_death import ENV

    env = {**os.environ, ENV: str(os.getpid())}  # the child ends with this process
    with _host_lock(), log.open("w") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, check=False).returncode
    if code == 0:
        return "ok", None
    if code == 1 and (run_dir / "traces.parquet").exists():
        return "incomplete", None
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return "error", f"testbed run exited {code}: {lines[-1] if lines else 'no output'}"


def _traces_with_coordinates(spec: Mapping[str, Any], run_dir: Path) -> pd.DataFrame:
    """The run's traces with the cell's coordinates as columns."""
    from testbed.analysis.traces import read_traces

    df = read_traces(run_dir)
    df.insert(0, "cell", spec["key"])
    df.insert(1, "executor", spec["executor"])
    df.insert(2, "replication", spec["replication"])
    df.insert(3, "point", spec["point"])
    for path, value in spec["values"].items():
        df[path] = value
    return df


def run_cell(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Run one cell (unless it finished before) and return its record.

    What a killed earlier attempt left of this cell is removed first; the traces file
    and then ``cell.json`` are written last, each atomically.
    """
    folder = cell_dir(spec)
    record = read_cell(folder)
    if record is not None and record.get("status") in FINISHED:
        return {**record, "skipped": True}
    if folder.exists():
        shutil.rmtree(folder)
    traces_file(spec).unlink(missing_ok=True)
    folder.mkdir(parents=True)
    (folder / "scenario.yaml").write_text(json.dumps(spec["scenario"], indent=1))
    run_dir = folder / "run"
    started = time.time()
    if spec["executor"] == "sim":
        status, error = _run_sim(spec, run_dir)
    else:
        status, error = _run_emulation(spec, folder, run_dir)
    record = {k: spec[k] for k in RECORD_KEYS}
    record.update(status=status, error=error, failed=[], degraded=False, reasons=[],
                  degraded_policies={}, started=started, wall_s=time.time() - started,
                  degraded_attempts=earlier_attempts(spec))
    if status in FINISHED:
        meta = json.loads((run_dir / "metadata.json").read_text())
        fidelity = meta.get("fidelity") or {}
        record.update(failed=meta.get("failed", []),
                      degraded=bool(fidelity.get("degraded", False)),
                      reasons=list(fidelity.get("reasons", [])),
                      degraded_policies=dict(fidelity.get("degraded_policies") or {}))
        frame = _traces_with_coordinates(spec, run_dir)
        traces_file(spec).parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(traces_file(spec), lambda p: frame.to_parquet(p, index=False))
    _write_atomically(folder / CELL_FILE,
                      lambda p: p.write_text(json.dumps(record, indent=2, default=str)))
    return record
