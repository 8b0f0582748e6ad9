"""Runs a scenario end to end and writes its self-describing results folder.

A run folder holds ``metadata.json`` (resolved scenario, seeds, versions, git commit,
kernel, shaping backend, host and runtime details, wall time), the materialised
``trace/`` the policies replayed, ``traces.parquet`` + ``traces.csv``, ``summary.json``,
one latency-CDF plot per policy, ``report.html`` (one self-contained page of it
all) and ``work/`` (service and driver logs).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from testbed import __version__
from testbed.analysis.fidelity import warning_line
from testbed.errors import TestbedError
from testbed.limits import check_run
from testbed.machine import is_root, total_memory
from testbed.redact import redacted
from testbed.replays import RunIncomplete
from testbed.scenario.model import Scenario
from workloads import generate_with
from workloads.trace import write_trace

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RESULTS_ROOT = PROJECT_ROOT / "results"
EXECUTORS = ("emulation", "sim")


def new_run_id(scenario: Scenario) -> str:
    """``<scenario>-<UTC time>-<4 hex>`` (the run's interfaces carry a prefix reserved
    separately: :func:`testbed.emulation.names.reserve_prefix`)."""
    return f"{scenario.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-" \
           f"{secrets.token_hex(2)}"


def materialise(scenario: Scenario, folder: Path) -> Path:
    """Generate the workload trace once, before any policy runs, and write it.

    A generator that keeps more than the trace schema holds (ground truth, who each
    frame shows) writes it beside the trace with its ``write_side_files`` hook.
    """
    from testbed.registry import generators

    generator = generators()[scenario.workload.generator]
    clients = [n.name for n in scenario.clients()]
    tasks = generate_with(generator, scenario.workload.params, clients, scenario.duration,
                          scenario.workload.seed)
    write_trace(tasks, folder, {"generator": scenario.workload.generator,
                                "params": dict(scenario.workload.params),
                                "seed": scenario.workload.seed, "clients": clients,
                                "duration": scenario.duration})
    side_files = getattr(generator, "write_side_files", None)
    if side_files is not None:
        side_files(folder, scenario.workload.params, scenario.workload.seed)
    return folder


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "testbed": __version__}
    for dist in ("mininet", "aiohttp", "numpy", "pandas", "pyarrow", "os-ken", "docker",
                 "requests", "matplotlib", "PyYAML"):
        try:
            out[dist] = importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The project's git commit (``-dirty`` when tracked files changed), if known.

    Asked once per process: a process runs the code it imported at its start, so a later
    edit of the tree would not describe it (a study worker runs many cells).
    """
    try:
        res = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=False)
    except OSError:
        return None
    if res.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True, check=False)
    return res.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def machine_details() -> dict[str, Any]:
    """What the run ran on: kernel, CPUs, memory."""
    mem = total_memory() or None
    return {"hostname": platform.node(), "kernel": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "memory_bytes": mem,
            "os": platform.platform()}


def _policy_seeds(system: Any, scenario: Scenario) -> dict[str, list[int]] | None:
    """Each policy's seed per repetition, as the system seeds them (``None``: unseeded)."""
    from testbed.registry import resolve

    if system.policy_seed is None:
        return None
    seed = resolve(system.policy_seed)
    return {p: [seed(scenario, r) for r in range(scenario.repetitions)]
            for p in scenario.policies}


def check_executor(system: Any, executor: str, option: str) -> None:
    """Refuse, in one line naming ``option``, an executor ``system`` cannot run."""
    if executor not in EXECUTORS:
        raise TestbedError(f"{option}: expected one of {', '.join(EXECUTORS)}, "
                           f"found {executor!r}")
    if executor not in system.executors:
        has = " and ".join(system.executors) or "no executor"
        raise TestbedError(f"{option} {executor}: the {system.name} system has no "
                           f"{'simulator' if executor == 'sim' else 'emulation driver'} "
                           f"(it runs on {has})")


def run_scenario(scenario: Scenario, out: Path | None = None, executor: str = "emulation",
                 progress: Callable[[str], None] = print,
                 ledger_root: Path | None = None, driver: Any = None,
                 metadata: Mapping[str, Any] | None = None, plots: bool = True) -> Path:
    """Run ``scenario`` with every policy and write the results folder; returns it.

    A replay (policy, repetition) that fails does not stop the others: the folder holds
    every replay that finished, ``metadata.json`` lists the failed ones with their
    errors under ``failed``, and :class:`~testbed.replays.RunIncomplete` is raised at
    the end.

    ``driver`` replaces the system's emulation driver (an experiment that measures more
    than a replay of the trace brings its own, see
    :class:`~testbed.emulation.executor.Driver`); ``metadata`` adds keys to
    ``metadata.json`` (an experiment's name, size and plan). ``plots=False`` skips the
    figures and the page (a study draws its own across cells).
    """
    from testbed.analysis import run_summary, traces
    from testbed.registry import get_system, resolve
    from testbed.reports import latency_report as report

    system = get_system(scenario.system)
    check_executor(system, executor, "--executor")
    if system.run_check is not None:
        resolve(system.run_check)(scenario, executor)  # refused before anything is written
    if driver is not None and executor != "emulation":
        raise TestbedError(f"--executor {executor}: this run brings its own emulation "
                           "driver and runs in emulation only")
    needs = check_run(scenario, executor)  # before anything is generated or built
    if executor == "emulation" and not is_root():
        raise TestbedError("emulation needs root (network namespaces, tc, cgroups): "
                           "run as root, or use --executor sim where the system has one")
    run = new_run_id(scenario)
    folder = Path(out) if out is not None else RESULTS_ROOT / run
    if folder.exists() and any(folder.iterdir()):
        raise TestbedError(f"--out {folder}: the folder exists and is not empty")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        workdir = folder / "work"
        workdir.mkdir()
    except OSError as exc:
        flag = "--out" if out is not None else "results folder"
        raise TestbedError(f"{flag} {folder}: cannot write there ({exc.strerror}); "
                           "give --out a folder you can write") from None
    started = time.time()
    trace_dir = materialise(scenario, folder / "trace")
    trace_meta = json.loads((trace_dir / "trace.json").read_text())
    progress(f"run {run}: {trace_meta['n']} tasks materialised; policies "
             f"{', '.join(scenario.policies)} x {scenario.repetitions} repetition(s)")
    if executor == "sim":
        details = resolve(system.simulate)(scenario, run, trace_dir, workdir, progress)
    else:
        from testbed.emulation.executor import run_emulation

        if driver is None:
            driver = resolve(system.emulate)(scenario)
        details = run_emulation(scenario, run, trace_dir, workdir, progress, driver,
                                ledger_root)
    failed = details.pop("failed", [])
    df = traces.rows_to_frame(details.pop("rows"))
    traces.write_traces(df, folder)
    summary = run_summary.summarize(df)
    run_summary.write_summary(summary, folder)
    if plots:
        report.plot_cdfs(df, folder)
    meta = {
        "run": run,
        "system": scenario.system,
        "scenario": redacted(scenario.resolved()),
        "source": scenario.source,
        "executor": executor,
        "seeds": {"scenario": scenario.seed, "workload": scenario.workload.seed,
                  "policies": _policy_seeds(system, scenario)},
        "policy_entries": {p: {"name": scenario.policy_entry(p).name,
                               "params": dict(scenario.policy_entry(p).params)}
                           for p in scenario.policies},
        "trace": {"n": trace_meta["n"], "sha256": trace_meta["sha256"]},
        "versions": _versions(),
        "git_commit": git_commit(),
        "machine": machine_details(),
        "estimate": {"bytes": round(needs.total_bytes), "parts": needs.describe()},
        "command": sys.argv,
        "started": started,
        "wall_s": time.time() - started,
        **details,
        **(metadata or {}),
        "failed": failed,
    }
    (folder / "metadata.json").write_text(json.dumps(meta, indent=2, default=str))
    if plots:  # after metadata.json: the page shows its fidelity note and failed replays
        from testbed.reports.html import write_run_page

        write_run_page(folder)
    progress(report.format_table(summary))
    warning = warning_line(details.get("fidelity") or {})
    if warning:  # an emulation whose host, shaper or paths were off: see docs/fidelity.md
        progress(warning)
    progress(f"results: {folder}")
    if failed:
        raise RunIncomplete(str(folder), failed)
    return folder
