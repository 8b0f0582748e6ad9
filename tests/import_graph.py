"""The project's import graph, read from the source: circles and imports against the layers.

``python -m tests.import_graph`` (from the repository root; nothing is imported, the
files are parsed) prints, for the modules under ``testbed/``, ``nodes/`` and
``workloads/``:

* lines per top-level folder and per folder below it;
* module-to-module imports, and how many of them sit inside a function;
* **import circles**: groups of modules that reach one another through imports (the
  strongly connected components of more than one module), counting imports made inside
  functions, which Python resolves just as well, only later, and imports made only for
  type checking (under ``if TYPE_CHECKING:``), which never run but tie one module's
  design to another's all the same;
* **imports against the layers**: a module under ``nodes/`` that imports
  ``testbed.systems``, and a generic module (one that is no system's) that imports a
  system's module. A system's modules are ``testbed/systems/<name>/``, ``nodes/<name>/``
  and ``workloads/<name>*.py`` for each registered system's package name.

``tests/unit/test_layers.py`` holds the same rules as tests; this module is how the
counts in ``docs/design.md`` were taken.
"""

from __future__ import annotations

import argparse
import ast
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("testbed", "nodes", "workloads")
#: The registered systems' package names (kept here so that counting loads no code).
SYSTEMS = ("armada", "offloading", "person_search")


@dataclass(frozen=True)
class Import:
    """One import of a project module by another; ``local``: inside a function;
    ``typing``: under ``if TYPE_CHECKING:`` (for annotations only)."""

    source: str
    target: str
    local: bool
    line: int
    typing: bool = False


@dataclass
class Graph:
    """Every project module (name -> path) and every import between two of them."""

    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)


def module_name(path: Path, root: Path = ROOT) -> str:
    """``testbed/study/__init__.py`` -> ``testbed.study``; ``nodes/common.py`` -> ``nodes.common``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` names, or its nearest enclosing one (``a.b.func`` ->
    ``a.b``); ``None`` outside the project."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def _targets(node: ast.AST, module: str, modules: dict[str, Path]) -> list[str]:
    """The project modules one import statement loads."""
    if isinstance(node, ast.Import):
        return [t for alias in node.names if (t := _resolve(alias.name, modules))]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        here = module if _is_package(module, modules) else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            here = here.rpartition(".")[0]
        base = f"{here}.{base}" if base else here
    found = []
    for alias in node.names:
        target = _resolve(f"{base}.{alias.name}", modules) or _resolve(base, modules)
        if target:
            found.append(target)
    return found


def _walk(tree: ast.AST) -> Iterable[tuple[ast.AST, bool]]:
    """Every import statement of ``tree`` and whether it sits inside a function."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, local = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, local
        inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def _type_checking(tree: ast.AST) -> set[int]:
    """Lines of imports under ``if TYPE_CHECKING:`` (never run; counted, and marked)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for inner in ast.walk(child):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        lines.add(inner.lineno)
    return lines


def read_graph(root: Path = ROOT, top: Sequence[str] = TOP) -> Graph:
    """Parse every module under ``top`` (folders of ``root``)."""
    graph = Graph()
    for folder in top:
        for path in sorted((root / folder).rglob("*.py")):
            graph.modules[module_name(path, root)] = path
    for module, path in graph.modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        typing_only = _type_checking(tree)
        for node, local in _walk(tree):
            for target in dict.fromkeys(_targets(node, module, graph.modules)):
                if target != module:
                    graph.imports.append(Import(module, target, local, node.lineno,
                                                node.lineno in typing_only))
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module
    (Tarjan's algorithm, iterative), each sorted, largest first."""
    edges: dict[str, set[str]] = {m: set() for m in graph.modules}
    for imp in graph.imports:
        edges[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph.modules:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def system_of(module: str, systems: Sequence[str] = SYSTEMS) -> str | None:
    """The system whose home holds ``module``, or ``None`` for a generic module."""
    parts = module.split(".")
    for name in systems:
        if parts[:3] == ["testbed", "systems", name] or parts[:2] == ["nodes", name]:
            return name
        if parts[0] == "workloads" and len(parts) > 1 and parts[1].startswith(name):
            return name
    return None


def against_layers(graph: Graph, systems: Sequence[str] = SYSTEMS) -> list[Import]:
    """Imports that break the layer rules (module docstring)."""
    wrong = []
    for imp in graph.imports:
        if imp.source.startswith("nodes.") and imp.target.startswith("testbed.systems.") or system_of(imp.source, systems) is None and \
                system_of(imp.target, systems) is not None:
            wrong.append(imp)
    return wrong


def lines_per_folder(graph: Graph, root: Path = ROOT) -> dict[str, int]:
    """Lines of Python per folder (each file counted in its own folder only)."""
    counts: dict[str, int] = {}
    for path in graph.modules.values():
        folder = str(path.parent.relative_to(root))
        counts[folder] = counts.get(folder, 0) + len(path.read_text().splitlines())
    return dict(sorted(counts.items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    graph = read_graph()
    found = circles(graph)
    wrong = against_layers(graph)
    counts = lines_per_folder(graph)
    summary = {"modules": len(graph.modules), "imports": len(graph.imports),
               "imports_in_functions": sum(i.local for i in graph.imports),
               "imports_for_typing": sum(i.typing for i in graph.imports),
               "circles": found,
               "against_layers": [f"{i.source} -> {i.target} (line {i.line})" for i in wrong],
               "lines_per_folder": counts}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{summary['modules']} modules, {summary['imports']} module-to-module imports "
          f"({summary['imports_in_functions']} inside functions, "
          f"{summary['imports_for_typing']} for type checking only)")
    print(f"{len(found)} import circle(s):")
    for circle in found:
        print("  " + " <-> ".join(circle))
    print(f"{len(wrong)} import(s) against the layers:")
    for text in summary["against_layers"]:
        print("  " + text)
    print("lines per folder:")
    for folder, count in counts.items():
        print(f"  {folder:45} {count:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
