"""Layers point one way, checked.

- Every pure module (scenario model and loader, the system registry and registrations,
  policies, simulators, workload generators, systems' models and policies, service
  parameter declarations, the services' decision rules) imports in a fresh interpreter without loading Mininet,
  aiohttp, Docker or requests; so does loading every built-in scenario.
- No module under ``nodes/`` imports harness code above the services: it may import
  only ``testbed.errors``, ``testbed.latency``, ``testbed.policies`` and systems'
  ``model``/``policies`` modules (the pure layers both sides share), never experiments,
  drivers, executors, simulators, the runner or the CLI.
- The generic harness names no system: no registered system's name, program, generator,
  builder or experiment appears in its source.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.systems import systems

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("mininet", "aiohttp", "docker", "requests")
#: Services' decision rules kept apart from their HTTP code, so a simulator can run them
NODE_RULES = ["nodes.armada.geo", "nodes.armada.selection", "nodes.armada.scheduler",
              "nodes.armada.baselines", "nodes.armada.scaling", "nodes.armada.sdk.choice",
              "nodes.armada.sdk.failover"]


def _package_modules(package: str) -> list[str]:
    """``package`` and every module below it."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations is not None, package
    found = [package]
    for info in pkgutil.walk_packages(spec.submodule_search_locations, prefix=f"{package}."):
        found.append(info.name)
    return found


def _pure_modules() -> list[str]:
    modules = ["testbed.scenario", "testbed.scenario.loader", "testbed.scenario.model",
               "testbed.errors", "testbed.latency", "testbed.systems", "testbed.fidelity",
               "testbed.event_log",
               "testbed.study.spec", "testbed.limits", "testbed.machine"]
    modules += _package_modules("testbed.policies") + _package_modules("testbed.sim")
    modules += _package_modules("workloads") + NODE_RULES
    for name in systems():
        package = f"testbed.systems.{name.replace('-', '_')}"
        modules.append(package)
        modules += [f"{package}.{part}" for part in ("model", "policies", "builders")
                    if importlib.util.find_spec(f"{package}.{part}") is not None]
    for system in systems().values():
        for program in system.programs:
            if program.config:
                modules.append(program.config.partition(":")[0])
    return sorted(set(modules))


PURE = _pure_modules()


def _loaded_heavy(code: str) -> list[str]:
    """The heavy frameworks in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = (f"{code}\nimport sys\n"
             f"print('loaded:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), res.stdout[-2000:]
    return [m for m in last[len("loaded:"):].split(",") if m]


@pytest.mark.parametrize("module", PURE)
def test_pure_module_loads_no_framework(module: str) -> None:
    assert _loaded_heavy(f"import {module}") == [], f"{module} pulls in a framework"


def test_loading_every_builtin_scenario_loads_no_framework() -> None:
    code = ("from testbed.scenario.loader import builtin_scenarios, load_scenario\n"
            "for name in builtin_scenarios():\n    load_scenario(name)")
    assert _loaded_heavy(code) == []


def test_the_probe_can_fail() -> None:
    assert _loaded_heavy("import aiohttp") == ["aiohttp"]


# --- nodes import nothing above the services ------------------------------------------

ALLOWED_FROM_NODES = re.compile(
    r"testbed\.(errors|checks|latency|policies(\..+)?|systems\.[a-z_]+\.(model|policies))$")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def test_nodes_import_no_harness_code_above_them() -> None:
    wrong = [f"{path.relative_to(ROOT)}: {name}"
             for path in sorted((ROOT / "nodes").rglob("*.py"))
             for name in _imports(path)
             if name.split(".")[0] == "testbed" and not ALLOWED_FROM_NODES.fullmatch(name)]
    assert wrong == []


def test_the_import_rule_can_fail() -> None:
    assert not ALLOWED_FROM_NODES.fullmatch("testbed.systems.armada.fleet")
    assert not ALLOWED_FROM_NODES.fullmatch("testbed.emulation.executor")
    assert ALLOWED_FROM_NODES.fullmatch("testbed.systems.person_search.model")


# --- the generic harness names no system ----------------------------------------------

GENERIC = ["testbed/runner.py", "testbed/cli.py", "testbed/traces.py", "testbed/report.py",
           "testbed/pytest_plugin.py", "testbed/errors.py", "testbed/calibrate.py",
           "testbed/host_monitor.py", "testbed/latency.py", "testbed/__init__.py",
           "testbed/fidelity.py", "testbed/stats.py", "testbed/compare.py",
           "testbed/compare_folders.py", "testbed/replays.py", "testbed/report_html.py",
           "testbed/html_page.py", "testbed/study", "testbed/limits.py", "testbed/machine.py",
           "testbed/systems/__init__.py", "testbed/sim/__init__.py",
           "testbed/scenario", "testbed/emulation", "testbed/experiments"]


def _system_names() -> set[str]:
    names: set[str] = set()
    for system in systems().values():
        names |= {system.name, system.name.replace("-", "_")}
        for program in system.programs:
            names |= {program.name, program.name.split(".")[0]}
        names |= set(system.generators) | set(system.builders)
        names |= {exp.name for exp in system.experiments}
    return names


def _generic_files() -> list[Path]:
    files: list[Path] = []
    for entry in GENERIC:
        path = ROOT / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_generic_modules_name_no_system() -> None:
    words = sorted(_system_names(), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, words)) + r")(?![\w-])",
                         re.IGNORECASE)
    hits = [f"{path.relative_to(ROOT)}:{n}: {match.group(0)}"
            for path in _generic_files()
            for n, line in enumerate(path.read_text().splitlines(), 1)
            for match in [pattern.search(line)] if match]
    assert hits == []


def test_the_name_scan_sees_the_systems() -> None:
    names = _system_names()
    assert {"offloading", "armada", "person-search", "person_search", "tier_server"} <= names
