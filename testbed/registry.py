"""The system registry: what each reproduced system brings to the generic harness.

A *system* (one reproduced paper, or one a researcher adds) is a package
``testbed/systems/<name>/`` whose ``__init__`` defines ``SYSTEM = System(...)``. The
registration names everything by import path (``"module:attribute"``) and imports
nothing itself, so the scenario loader can consult it without loading aiohttp, Mininet
or Docker. The generic modules (scenario loader, runner, executors, CLI, pytest plugin)
reach a system only through this module; none of them names one.

What a system registers:

- ``programs``: the service programs its scenarios run, each with the module started in
  a host and the ``Config`` that validates its ``params`` when the scenario loads;
- ``generators``: the workload generators it brings, by name (``"module:Class"``);
- ``policies``: the names a scenario of the system may list, with a line each;
- ``colours``: a fixed ``#rrggbb`` colour per policy name (entries of
  :data:`testbed.reports.colours.PALETTE`, distinct within the system), so that every
  plot draws its policies alike (:func:`policy_colours`);
- ``builders``: named scenario builders a YAML file can call with parameters;
- ``emulate`` / ``simulate``: how ``testbed run`` replays a scenario's policies on each
  executor (``simulate`` is ``None`` for a system without a simulator, which then
  refuses ``--executor sim`` with a one-line error); ``run_check``:
  ``function(scenario, executor)``, which raises a :class:`~testbed.errors.TestbedError`
  saying why that executor cannot run the scenario, called before anything is written
  (an executor that covers only some of the system's scenarios, or sizes);
- ``experiments``: the paper experiments ``testbed experiment NAME`` runs and reports;
- ``calibrations``: measurements of this machine its simulator reads (a program's times
  under CPU quotas), which ``testbed calibrate NAME`` runs and reports;
- ``policy_seed``: ``function(scenario, repetition) -> int``, the seed its policies get
  in a repetition (recorded in every run's metadata), if they take one;
- ``policy_params``: ``function(name, params) -> params``, which checks the parameters
  of a scenario's policy entry (``{name, label, params}``) and returns them cleaned, or
  raises ``ValueError("params.<field>: expected ..., found ...")``; without it the
  system's policies take no parameters;
- ``client_memory_mb`` (and each program's ``memory_mb``): what its processes hold, for
  the run limits checked before anything is built (:mod:`testbed.limits`).

A scenario belongs to the system that registers its programs (a ``system:`` key can
name it outright). :func:`register` adds a system at run time, e.g. from a test.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from testbed.errors import TestbedError


def resolve(path: str) -> Any:
    """The object named ``"package.module:attribute"`` (imported now, not before)."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


#: What one process forked from the emulation's launcher holds, MiB (PSS, measured with
#: ``tests/bench/bench_scale.py``: 1709 MB for 200 hosts each with a tier server).
DEFAULT_PROCESS_MB = 10.0


@dataclass(frozen=True)
class Program:
    """A service program: ``python -m <module>`` inside a host.

    ``config`` (``"module:Class"``) is its parameter declaration, a dataclass that
    :func:`nodes.config.validate_params` checks a scenario's ``params`` against and
    :func:`nodes.config.to_argv` turns into the command line; it lives in a module that
    imports no web framework. ``context`` names values the executor adds to the command
    line from the scenario itself: ``"speed"`` (the node's speed), ``"time_scale"`` and
    ``"task_timeout"`` (the scenario's, model seconds), ``"docker_socket"`` and
    ``"docker_pod"`` (on a ``docker`` node: the node's engine socket, mounted into the
    pod for such a program, and the pod's service container; nothing on a process node).
    ``task_server`` marks a program that clients replay trace tasks onto (a client of a
    scenario without one must reach one); ``self_contained`` marks an entry point that
    finds or drives its own servers, so its scenario's clients need no task server.
    ``memory_mb`` is what one running instance holds (proportional set size, MiB), which
    the run limits (:mod:`testbed.limits`) add up before anything is built; the default
    is the measured cost of a service forked from the launcher (``tests/bench``: 8.5 MB
    per host with its tier server at 200 hosts), rounded up.
    """

    name: str
    module: str
    description: str
    config: str | None = None
    context: tuple[str, ...] = ()
    task_server: bool = False
    self_contained: bool = False
    memory_mb: float = DEFAULT_PROCESS_MB


@dataclass(frozen=True)
class Experiment:
    """A paper experiment: ``testbed experiment NAME`` runs it and writes its report.

    An experiment is data (``docs/design.md``, "Adding an experiment"): ``studies``
    names a folder as ``"package:folder"`` (the folder beside that package's
    ``__init__``) holding one sub-folder per size (``small/``, ``medium/``, ``full/``)
    of study files, which the study engine runs (cells, seeds, Dask, resume);
    ``metrics`` (``"module:function"``, ``function(results, size) -> dict``) turns the
    studies' traces and event logs into numbers, and ``claims`` (``function(metrics) ->
    [Claim]``) the numbers into verdicts; one generic report layer writes
    ``report_dir/report_file`` (Markdown, headed ``title``), its HTML page and its
    claims file for the paper ``paper``. The sizes and executors are those of the study
    files. ``options`` declares command-line options as ``{"task-runtime": ("process",
    "docker")}`` (the first choice is the default), each setting the scenario path
    ``option_paths`` names in every study.
    """

    name: str
    description: str
    studies: str
    report_dir: str = "docs/results"
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    metrics: str = ""
    claims: str = ""
    paper: str = ""
    report_file: str = ""
    title: str = ""
    #: for an experiment of study files: the scenario path each option sets in every
    #: study (``{"task-runtime": "build.params.task_runtime"}``); a value other than the
    #: first choice also names the report and the results folder (``load-docker.md``)
    option_paths: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """A measurement of this machine a system's simulator reads (not an experiment: no
    policies, no claims): ``testbed calibrate NAME --size S`` runs ``run(size, out,
    progress)`` (``"module:function"``, returns the folder it filled) and writes its
    report with ``report(out, report_path, command)`` into ``report_dir/report_file``."""

    name: str
    description: str
    run: str
    report: str
    report_file: str
    sizes: tuple[str, ...] = ("small", "full")
    report_dir: str = "docs/results"


@dataclass(frozen=True)
class TraceKind:
    """A kind of trace row a system writes beside the core ``task`` rows.

    ``columns`` are its extension columns as ``(name, dtype)`` with dtype ``"string"``,
    ``"int"`` (a nullable integer) or ``"float"``; they follow the core columns in
    ``traces.parquet`` and stay null on rows of every other kind
    (:func:`testbed.analysis.traces.schema`).
    """

    name: str
    description: str
    columns: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class System:
    """One reproduced system's registration (see the module docstring)."""

    name: str
    description: str
    programs: tuple[Program, ...] = ()
    generators: Mapping[str, str] = field(default_factory=dict)
    policies: Mapping[str, str] = field(default_factory=dict)
    colours: Mapping[str, str] = field(default_factory=dict)
    builders: Mapping[str, str] = field(default_factory=dict)
    emulate: str | None = None
    simulate: str | None = None
    run_check: str | None = None
    experiments: tuple[Experiment, ...] = ()
    calibrations: tuple[Calibration, ...] = ()
    preload: tuple[str, ...] = ()
    policy_seed: str | None = None
    policy_params: str | None = None
    trace_kinds: tuple[TraceKind, ...] = ()
    #: what the in-host client process of each client node (dispatcher, SDK user)
    #: holds, MiB, besides its share of the trace; added up by :mod:`testbed.limits`
    client_memory_mb: float = DEFAULT_PROCESS_MB

    def program(self, name: str) -> Program | None:
        """The program registered as ``name``, or ``None``."""
        return next((p for p in self.programs if p.name == name), None)

    @property
    def executors(self) -> tuple[str, ...]:
        """The executors a scenario of this system can run on."""
        return tuple(e for e, hook in (("emulation", self.emulate), ("sim", self.simulate))
                     if hook is not None)


#: Programs of the harness itself, owned by no system (a scenario of any system may run
#: them, and they do not decide which system a scenario belongs to).
HARNESS_PROGRAMS = (
    Program("cpu_load", "nodes.cpu_load", "burns a duty cycle of one core (background load)"),
)

#: The package whose sub-packages are the built-in systems (found by name, so that the
#: registry imports none of them until asked).
PLUGINS = "testbed.systems"
#: An environment variable naming further modules, comma-separated, each defining a
#: ``SYSTEM``: systems kept outside this tree, found by every process of a run (Dask
#: workers and ``testbed run`` children of a study inherit the environment, where a
#: :func:`register` call made in one process is not seen).
PLUGINS_ENV = "TESTBED_PLUGINS"

_REGISTERED: dict[str, System] = {}
_DISCOVERED = False


def _discover() -> None:
    """Import every ``testbed.systems.<name>`` package (every package on the plug-in
    package's path) once and collect its ``SYSTEM``."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module(PLUGINS)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.ispkg:
            system = importlib.import_module(f"{PLUGINS}.{info.name}").SYSTEM
            _REGISTERED.setdefault(system.name, system)
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            system = importlib.import_module(module).SYSTEM
        except (ImportError, AttributeError) as exc:
            raise TestbedError(f"{PLUGINS_ENV}: expected modules that define SYSTEM, found "
                               f"{module!r} ({type(exc).__name__}: {exc})") from None
        _REGISTERED.setdefault(system.name, system)


def systems() -> dict[str, System]:
    """Every registered system by name (the built-in ones and any :func:`register` added)."""
    _discover()
    return dict(_REGISTERED)


def register(system: System) -> Callable[[], None]:
    """Add ``system`` to the registry; returns a function that removes it again."""
    _discover()
    if system.name in _REGISTERED:
        raise TestbedError(f"a system named {system.name!r} is registered already")
    for other in _REGISTERED.values():
        clash = {p.name for p in other.programs} & {p.name for p in system.programs}
        if clash:
            raise TestbedError(f"system {system.name!r}: program {min(clash)!r} is "
                               f"registered by {other.name!r}")
        kinds = {k.name for k in other.trace_kinds} & {k.name for k in system.trace_kinds}
        if kinds:
            raise TestbedError(f"system {system.name!r}: trace kind {min(kinds)!r} is "
                               f"registered by {other.name!r}")
    _REGISTERED[system.name] = system
    return lambda: _REGISTERED.pop(system.name, None)


def trace_kinds() -> list[tuple[System, TraceKind]]:
    """Every registered system's trace row kinds, in registry order."""
    return [(system, kind) for system in systems().values() for kind in system.trace_kinds]


def get_system(name: str) -> System:
    """The system called ``name``; a :class:`TestbedError` listing the known ones if none."""
    found = systems().get(name)
    if found is None:
        raise TestbedError(f"no system named {name!r}; known: {', '.join(sorted(systems()))}")
    return found


def find_program(name: str) -> tuple[System | None, Program] | None:
    """The system registering program ``name`` (``None`` for a harness program) and the
    program; ``None`` if nothing registers it."""
    for program in HARNESS_PROGRAMS:
        if program.name == name:
            return None, program
    for system in systems().values():
        program = system.program(name)
        if program is not None:
            return system, program
    return None


def find_builder(name: str) -> tuple[System, str] | None:
    """The system registering scenario builder ``name`` and its import path, or ``None``."""
    for system in systems().values():
        if name in system.builders:
            return system, system.builders[name]
    return None


def experiments() -> dict[str, tuple[System, Experiment]]:
    """Every registered experiment by name, with its system."""
    return {exp.name: (system, exp) for system in systems().values()
            for exp in system.experiments}


def calibrations() -> dict[str, tuple[System, Calibration]]:
    """Every registered system calibration by name, with its system."""
    return {cal.name: (system, cal) for system in systems().values()
            for cal in system.calibrations}


_GENERATORS: dict[str, Any] = {}  # by import path


def generators() -> dict[str, Any]:
    """Every registered workload generator by name, instantiated once."""
    found: dict[str, Any] = {}
    for system in systems().values():
        for name, path in system.generators.items():
            if path not in _GENERATORS:
                made = resolve(path)
                _GENERATORS[path] = made() if isinstance(made, type) else made
            found.setdefault(name, _GENERATORS[path])
    return found


def generate(name: str, params: Mapping[str, Any], clients: list[str], duration: float,
             seed: int) -> list[Any]:
    """The trace of the registered generator ``name``
    (:func:`workloads.generate_with`); a TestbedError naming the known ones for an unknown
    name, besides what ``generate_with`` raises."""
    from workloads import generate_with

    found = generators()
    if name not in found:
        raise TestbedError(f"unknown workload generator {name!r}; known: "
                           f"{', '.join(sorted(found))}")
    return generate_with(found[name], params, clients, duration, seed)


def policy_colours() -> dict[str, str]:
    """Every registered system's fixed policy colours by policy name (the first
    system, by name, that fixes a name's colour wins)."""
    found: dict[str, str] = {}
    for _, system in sorted(systems().items()):
        for name, colour in system.colours.items():
            found.setdefault(name, colour)
    return found


def program_names() -> list[str]:
    """Every registered program name, sorted (for error messages)."""
    return sorted([p.name for s in systems().values() for p in s.programs]
                  + [p.name for p in HARNESS_PROGRAMS])
