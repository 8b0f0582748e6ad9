"""Where an experiment's study files are, and what they say about its sizes and executors.

An experiment written as data (:class:`testbed.registry.Experiment` with ``studies``)
keeps its study files in a folder of its system's package, one sub-folder per size:
``<folder>/small/*.yaml``, ``<folder>/medium/*.yaml``, ... A size is exactly the set of
study files in its sub-folder (no size class in code); the experiment's executors are
every executor its study files name. Scenario files the studies share sit beside the
size folders and are named by relative path from a study file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.registry import Experiment

#: Sizes in the order a listing gives them; any other sub-folder name follows, by name.
SIZE_ORDER = ("small", "medium", "full")
STUDY_SUFFIX = ".yaml"
#: A shared scenario file's suffix: never taken for a study file.
SCENARIO_SUFFIX = ".scenario.yaml"


def _studies_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*" + STUDY_SUFFIX)
                  if not p.name.endswith(SCENARIO_SUFFIX))


def studies_folder(exp: Experiment) -> Path:
    """The folder holding ``exp``'s size folders (``"package:folder"`` resolved beside
    the package's ``__init__``)."""
    package, _, folder = exp.studies.partition(":")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TestbedError(f"experiment {exp.name}: studies: expected \"package:folder\" "
                           f"naming a package, found {exp.studies!r}")
    return Path(next(iter(spec.submodule_search_locations))) / folder


def sizes(exp: Experiment) -> tuple[str, ...]:
    """The experiment's sizes: its size folders that hold a study file."""
    root = studies_folder(exp)
    found = [d.name for d in root.iterdir()
             if d.is_dir() and _studies_in(d)] if root.is_dir() else []
    return tuple(sorted(found, key=lambda s: (SIZE_ORDER.index(s) if s in SIZE_ORDER
                                              else len(SIZE_ORDER), s)))


def study_files(exp: Experiment, size: str) -> list[Path]:
    """The study files of ``size``, by name; a size the experiment lacks is the CLI's
    one-line error naming the sizes it has."""
    if size not in sizes(exp):
        raise TestbedError(f"--size: {exp.name} has {', '.join(sizes(exp))}, found {size!r}")
    return _studies_in(studies_folder(exp) / size)


def _declared_executors(path: Path) -> list[str]:
    """The executors a study file names (its scenario's default when it names none)."""
    from testbed.scenario.loader import read_yaml
    from testbed.study.spec import load_study

    doc: Any = read_yaml(path)
    if isinstance(doc, dict) and isinstance(doc.get("executors"), list):
        return [str(e) for e in doc["executors"]]
    return list(load_study(path).executors)


def executors(exp: Experiment) -> tuple[str, ...]:
    """Every executor some study file of the experiment names, simulator first."""
    found = {e for size in sizes(exp) for path in study_files(exp, size)
             for e in _declared_executors(path)}
    return tuple(sorted(found, key=lambda e: (e != "sim", e)))


def listed_studies(exp: Experiment, root: Path) -> dict[str, list[str]]:
    """Per size, the experiment's study files as paths relative to ``root`` (what
    ``testbed list --json`` gives under ``studies``)."""
    out = {}
    for size in sizes(exp):
        out[size] = [_relative(p, root) for p in study_files(exp, size)]
    return out


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()
