"""Runs an experiment written as data: its study files, then its metrics, claims and report.

``testbed experiment NAME --size S`` runs every study file of the size on the executors
asked (each study keeps those of its own executors that were asked; a study with none
left is skipped), each into ``<out>/<study file name>/`` through the study engine
(:mod:`testbed.study.run`: cells, seeds, Dask, resume), the cells of all studies on one
cluster. A re-run into the same folder therefore runs only the cells that are missing. Then the experiment's
metric function reads the studies (:class:`~testbed.experiments.results.StudyResult`)
into ``<out>/metrics.json``, its claim function judges the claims, and the one report
layer (:mod:`testbed.reports.experiment_report`) writes the report.

A study whose cells did not all finish does not stop the others: the metrics see what
finished, the report's fidelity section names what did not, and the command exits 1.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import Incomplete, TestbedError
from testbed.experiments.files import study_files
from testbed.experiments.results import StudyResult
from testbed.registry import Experiment, resolve
from testbed.reports.claim import Claim
from testbed.reports.experiment_report import ReportInput, StudyPart, write_report
from testbed.study.spec import Study

Progress = Callable[[str], None]
METRICS_FILE = "metrics.json"


class ExperimentIncomplete(Incomplete):
    """Some cells did not finish; the metrics and the report cover everything else."""


@dataclass(frozen=True)
class ExperimentRun:
    """What one ``testbed experiment`` left: the studies, metrics and judged claims."""

    out: Path
    studies: dict[str, StudyResult]
    metrics: dict[str, Any]
    claims: list[Claim]
    incomplete: list[str]


def load_studies(exp: Experiment, size: str, overrides: Mapping[str, Any] | None = None
                 ) -> list[tuple[Path, Study]]:
    """Every study file of ``size``, checked, with ``overrides`` (scenario path to value)
    added to each file's ``set:``."""
    from testbed.scenario.loader import read_yaml
    from testbed.study.spec import load_study, study_from_dict

    found = []
    for path in study_files(exp, size):
        if not overrides:
            found.append((path, load_study(path)))
            continue
        doc = read_yaml(path)
        if isinstance(doc, dict):
            doc = {**doc, "set": {**(doc.get("set") or {}), **overrides}}
        found.append((path, study_from_dict(doc, source=str(path))))
    return found


def run_studies(exp: Experiment, size: str, executors: Sequence[str], out: Path, *,
                scheduler: str | None = None, serial: bool = False,
                rerun_degraded: bool = False, overrides: Mapping[str, Any] | None = None,
                progress: Progress = print) -> tuple[dict[str, StudyResult], list[str]]:
    """Run every study file of ``size`` on the asked ``executors`` it names; returns the
    studies by file name and the messages of those with unfinished cells. ``serial``
    runs the cells in this process (a system registered at run time, as tests do, is
    unknown to a Dask worker's fresh interpreter); ``rerun_degraded`` runs again the cells
    the fidelity guard marked degraded."""
    from testbed.study.run import (
        StudyIncomplete,
        check_socket_room,
        finish_study,
        prepare_study,
        run_cells,
    )

    studies = load_studies(exp, size, overrides)  # every one checked before any runs
    if any("emulation" in s.executors and "emulation" in executors for _, s in studies):
        if os.geteuid() != 0:
            raise TestbedError("executors: emulation cells need root (network namespaces, "
                               "tc, cgroups): run as root, or --executors sim")
        for path, _ in studies:
            check_socket_room(out / path.stem)
    prepared = {}
    for path, study in studies:
        chosen = tuple(e for e in study.executors if e in executors)
        if not chosen:
            progress(f"[{path.stem}] skipped: it runs on {', '.join(study.executors)}")
            continue
        progress(f"[{path.stem}] study {study.name} into {out / path.stem}")
        prepared[path.stem] = prepare_study(dataclasses.replace(study, executors=chosen),
                                            out / path.stem, rerun_degraded=rerun_degraded,
                                            progress=progress)
    # every study's cells on one cluster: simulator cells of all studies in parallel,
    # then the emulation cells, one at a time
    run_cells([spec for p in prepared.values() for spec in p.todo], scheduler=scheduler,
              serial=serial, progress=progress)
    results: dict[str, StudyResult] = {}
    incomplete: list[str] = []
    for name, ready in prepared.items():
        try:
            finish_study(ready, progress=progress)
        except StudyIncomplete as exc:
            progress(f"warning: {exc}")
            incomplete.append(f"{name}: {exc}")
        results[name] = StudyResult.read(name, ready.study, ready.folder)
    return results, incomplete


def run_experiment(exp: Experiment, size: str, executors: Sequence[str], out: Path, *,
                   scheduler: str | None = None, serial: bool = False,
                   rerun_degraded: bool = False, overrides: Mapping[str, Any] | None = None,
                   progress: Progress = print) -> ExperimentRun:
    """Run ``exp``'s studies at ``size`` into ``out`` (each with ``overrides`` set, the
    experiment's options), then its metrics and claims."""
    out.mkdir(parents=True, exist_ok=True)
    studies, incomplete = run_studies(exp, size, executors, out, scheduler=scheduler,
                                      serial=serial, rerun_degraded=rerun_degraded,
                                      overrides=overrides, progress=progress)
    if not studies:
        raise TestbedError(f"--executors: no study file of {exp.name} at size {size} runs on "
                           f"{', '.join(executors)}")
    metrics = resolve(exp.metrics)(studies, size) if exp.metrics else {}
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=1, sort_keys=True,
                                               default=str) + "\n")
    claims = list(resolve(exp.claims)(metrics)) if exp.claims else []
    return ExperimentRun(out, studies, metrics, claims, incomplete)


def write_experiment_report(exp: Experiment, run: ExperimentRun, size: str,
                            executors: Sequence[str], command: str, path: Path) -> list[Path]:
    """The experiment's report of ``run`` at ``path`` (Markdown), with its page and
    claims file."""
    parts = [StudyPart(name, result.about(), result.summary(),
                       [cell.record for cell in result.cells])
             for name, result in run.studies.items()]
    description = exp.description.strip()
    if description and not description.endswith("."):
        description += "."
    report = ReportInput(title=exp.title or exp.name,
                         description=description[:1].upper() + description[1:],
                         paper=exp.paper or exp.name, command=command, size=size,
                         executors=tuple(executors), studies=parts, metrics=run.metrics,
                         claims=run.claims)
    return write_report(report, path)
