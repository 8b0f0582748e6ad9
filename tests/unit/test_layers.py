"""Layers point one way, checked.

- Every pure module (scenario model and loader, the system registry and registrations,
  policies, simulators, workload generators, systems' models and policies, service
  parameter declarations, the services' decision rules) imports in a fresh interpreter without loading Mininet,
  aiohttp, Docker or requests; so does loading every built-in scenario.
- No module under ``nodes/`` imports harness code above the services: from ``testbed``
  it may import only ``testbed.errors``, ``testbed.checks`` and ``testbed.latency``,
  never ``testbed.systems``, experiments, drivers, executors, the runner or the CLI.
- No generic module (one outside every system's homes: ``testbed/systems/<name>/``,
  ``nodes/<name>/``, ``workloads/<name>*.py``) imports a system's module; they reach
  systems only through the registry (:mod:`tests.import_graph` reads the imports).
- No import circle, counting imports made inside functions and those made only for type
  checking.
- The generic harness names no system: no registered system's name, program, generator,
  builder or experiment appears in its source.

Each rule has a test that shows it can fail, on a small tree made for it.
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

from testbed.registry import systems
from tests import import_graph

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
               "testbed.errors", "testbed.latency", "testbed.registry", "testbed.systems",
               "testbed.analysis.fidelity",
               "testbed.event_log",
               "testbed.study.spec", "testbed.limits", "testbed.machine"]
    modules += _package_modules("nodes.offloading.policies") + ["nodes.offloading.queueing"]
    modules += _package_modules("workloads") + NODE_RULES
    for name in systems():
        package = f"testbed.systems.{name.replace('-', '_')}"
        modules.append(package)
        modules += [f"{package}.{part}" for part in ("model", "builders", "sim", "sim_replay")
                    if importlib.util.find_spec(f"{package}.{part}") is not None]
        modules += [f"nodes.{name.replace('-', '_')}.{part}" for part in ("model", "policies")
                    if importlib.util.find_spec(f"nodes.{name.replace('-', '_')}.{part}")
                    is not None]
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

ALLOWED_FROM_NODES = re.compile(r"testbed\.(errors|checks|latency)$")


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
    assert ALLOWED_FROM_NODES.fullmatch("testbed.latency")


# --- no generic module imports a system's; no import circle ----------------------------

def test_no_generic_module_imports_a_systems_module() -> None:
    graph = import_graph.read_graph(ROOT)
    systems_here = tuple(name.replace("-", "_") for name in systems())
    assert set(systems_here) <= set(import_graph.SYSTEMS)
    wrong = import_graph.against_layers(graph, systems_here)
    assert [f"{i.source} -> {i.target} (line {i.line})" for i in wrong] == []


def test_no_import_circle_counting_imports_inside_functions_and_for_typing() -> None:
    assert import_graph.circles(import_graph.read_graph(ROOT)) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_layer_and_circle_rules_can_fail(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "testbed/__init__.py": "", "testbed/runner.py": "from testbed import report\n",
        "testbed/report.py": "def draw():\n    from testbed.runner import run\n",
        "testbed/systems/__init__.py": "",
        "testbed/systems/toy/__init__.py": "", "testbed/systems/toy/sim.py": "",
        "testbed/plot.py": "from testbed.systems.toy.sim import x\n",
        "nodes/__init__.py": "", "nodes/toy/__init__.py": "",
        "nodes/toy/server.py": "import testbed.systems.toy.sim\n",
        "workloads/__init__.py": "from workloads.toy_frames import F\n",
        "workloads/toy_frames.py": "",
        "testbed/view.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                           "    from testbed.topo import Topo\n",
        "testbed/topo.py": "from testbed.view import View\n"})
    graph = import_graph.read_graph(root)
    assert import_graph.circles(graph) == [["testbed.report", "testbed.runner"],
                                           ["testbed.topo", "testbed.view"]]
    assert [i.typing for i in graph.imports if i.source == "testbed.view"] == [True]
    assert any(i.local for i in graph.imports if i.source == "testbed.report")
    wrong = {(i.source, i.target) for i in import_graph.against_layers(graph, ("toy",))}
    assert wrong == {("testbed.plot", "testbed.systems.toy.sim"),
                     ("nodes.toy.server", "testbed.systems.toy.sim"),
                     ("workloads", "workloads.toy_frames")}


# --- the generic harness names no system ----------------------------------------------

#: Every harness module outside the systems' packages (and the registry itself).
GENERIC = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "testbed").rglob("*.py")
                 if p.relative_to(ROOT).parts[:2] != ("testbed", "systems")
                 or p.name == "__init__.py" and p.parent.name == "systems")


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
