"""The checklist "adding a system" (``docs/design.md``), exercised.

A toy system is laid out in a temporary folder in the three homes a system has: its
services and the rules they share with its simulator under ``nodes/toy/``, its workload
in ``workloads/toy.py``, its plug-in (registration, builder, simulator, emulation
driver, experiment) under ``testbed/systems/toy/``. Its files are the test tree's
``echo`` system (``tests/testsystem/``), renamed and moved into those homes. The
temporary folders join the search paths of the real ``nodes``, ``workloads`` and
``testbed.systems`` packages, as if the files had been added to the repository: the
registry then finds the system without being told, a scenario of it loads and runs on
the simulator, and its imports keep the layer rules; no generic module was edited.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import nodes
import testbed.systems as plugins
import workloads
from testbed import registry
from testbed.analysis.traces import read_traces
from testbed.runner import run_scenario
from testbed.scenario import load_scenario
from tests import import_graph

SOURCE = Path(__file__).resolve().parents[1] / "testsystem"
#: Where each file of the echo system goes, and the module it becomes.
HOMES = {
    "server": "nodes.toy.server", "config": "nodes.toy.config",
    "policies": "nodes.toy.policies", "workload": "workloads.toy",
    "__init__": "testbed.systems.toy", "builder": "testbed.systems.toy.builder",
    "driver": "testbed.systems.toy.driver", "sim": "testbed.systems.toy.sim",
    "experiment": "testbed.systems.toy.experiment",
}


def _path(root: Path, module: str, package: bool) -> Path:
    parts = module.split(".")
    return root.joinpath(*parts, "__init__.py") if package else \
        root.joinpath(*parts[:-1], parts[-1] + ".py")


def lay_out(root: Path) -> None:
    """Write the toy system into its homes under ``root``."""
    renames = sorted(((f"tests.testsystem.{name}", module) for name, module in HOMES.items()
                      if name != "__init__"), key=lambda pair: -len(pair[0]))
    for name, module in HOMES.items():
        text = (SOURCE / f"{name}.py").read_text()
        if name == "__init__":  # the registration names its modules by their new homes
            for part in ("server", "config", "workload"):
                text = text.replace(f'f"{{_HERE}}.{part}', f'"{HOMES[part]}')
        for old, new in renames:
            text = text.replace(old, new)
        text = text.replace("tests.testsystem", "testbed.systems.toy")
        text = re.sub(r"\becho\b", "toy", text)
        target = _path(root, module, name == "__init__")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for package in ("nodes/toy", "testbed", "testbed/systems"):
        (root / package / "__init__.py").touch()
    scenario = re.sub(r"\becho\b", "toy", (SOURCE / "echo.yaml").read_text())
    (root / "testbed/systems/toy/toy.yaml").write_text(scenario)
    for study in (SOURCE / "studies").rglob("*.yaml"):  # the experiment's study files
        target = root / "testbed/systems/toy/studies" / study.relative_to(SOURCE / "studies")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(re.sub(r"\becho\b", "toy", study.read_text()))


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy system's homes on the real packages' search paths, the registry reset so
    that it discovers again; everything undone afterwards."""
    root = tmp_path / "tree"
    lay_out(root)
    monkeypatch.setattr(nodes, "__path__", [*nodes.__path__, str(root / "nodes")])
    monkeypatch.setattr(workloads, "__path__", [*workloads.__path__, str(root / "workloads")])
    monkeypatch.setattr(plugins, "__path__",
                        [*plugins.__path__, str(root / "testbed" / "systems")])
    monkeypatch.setattr(registry, "_DISCOVERED", False)
    monkeypatch.setattr(registry, "_REGISTERED", {})
    yield root
    for name in [m for m in sys.modules if m.split(".")[:2] in (["nodes", "toy"],
                                                                 ["workloads", "toy"])
                 or m.startswith("testbed.systems.toy")]:
        del sys.modules[name]


def test_the_registry_finds_a_system_added_in_its_homes(toy: Path) -> None:
    system = registry.systems()["toy"]
    assert system.simulate == "testbed.systems.toy.sim:run_sim"
    assert system.programs[0].module == "nodes.toy.server"
    assert {"offloading", "armada", "person-search"} <= set(registry.systems())
    assert "toy-pings" in registry.generators()


def test_a_scenario_of_the_added_system_runs_on_the_simulator(toy: Path,
                                                              tmp_path: Path) -> None:
    scenario = load_scenario(str(toy / "testbed/systems/toy/toy.yaml"))
    assert scenario.system == "toy"
    out = run_scenario(scenario, out=tmp_path / "run", executor="sim",
                       progress=lambda _line: None, plots=False)
    frame = read_traces(out)
    assert set(frame["policy"]) == {"first", "round-robin"}
    assert (frame["outcome"] == "ok").all() and (frame["kind"] == "ping").all()


def test_the_added_system_keeps_the_layer_rules(toy: Path) -> None:
    graph = import_graph.read_graph(toy)
    assert "nodes.toy.server" in graph.modules and "workloads.toy" in graph.modules
    assert any(i.target == "nodes.toy.policies" for i in graph.imports)
    assert import_graph.circles(graph) == []
    assert import_graph.against_layers(graph, ("toy",)) == []
