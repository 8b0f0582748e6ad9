"""Read scenario and topology YAML files and validate them into the frozen model.

Validation stops at the first problem and raises one :class:`ScenarioError` naming the
file, the field path (``topology.links[2].delay_ms``), what was expected and what was
found. Whatever a file contains, nothing but ``ScenarioError`` escapes from here. The
loader is pure: it reads files and consults the system registry
(:mod:`testbed.registry`) for programs and their parameter declarations, generators,
policies and scenario builders, but builds nothing and names no system.
The accepted format is documented field by field in ``docs/scenario.md``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import random
import re
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml

from testbed import machine
from testbed.checks import is_int, is_number
from testbed.errors import ScenarioError
from testbed.scenario.model import (
    ACTIONS,
    EXECUTORS,
    NODE_ACTIONS,
    ROLES,
    RUNTIMES,
    SHAPINGS,
    SWITCHES,
    TIMING_FLOOR_S,
    Event,
    ExecutorDefaults,
    Link,
    Node,
    PolicyEntry,
    Scenario,
    Service,
    Topology,
    Workload,
    default_task_timeout,
    install_rebuild,
    plain_copy,
)

NODE_NAME = re.compile(r"[a-z][a-z0-9]{0,7}")
SCENARIO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SERVICE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
PROGRAM_NAME = re.compile(r"[a-z_][a-z0-9_]{0,63}(\.[a-z_][a-z0-9_]{0,63}){0,3}")
TOPOLOGY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
LABEL = re.compile(r"[a-z][a-z0-9_-]{0,31}")
POLICY_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,63}")
VOLUME_PATH = re.compile(r"(/(?!\.\.?(/|$))[A-Za-z0-9._-]+)+")
_PARAMS_ERROR = re.compile(r"(?P<path>params[^:]*): expected (?P<expected>.*), "
                           r"found (?P<found>.*)", re.DOTALL)

MAX_SEED = 2**63 - 1
MAX_EVENTS = 10_000  # expected events per random schedule
MAX_REPETITIONS = 1_000
MAX_DELAY_MS = 60_000.0
MAX_BW_MBIT = 1_000_000.0
MAX_QUEUE = 1_000_000
MAX_MEMORY_MB = 2**24
MAX_PARAM_DEPTH = 16
MAX_PARAM_ITEMS = 1_000

_EXPECT_NODE_NAME = "a node name matching ^[a-z][a-z0-9]{0,7}$ (interface names derive from it)"
_EXPECT_LABEL = "a tier label matching ^[a-z][a-z0-9_-]{0,31}$"


def builtin_scenarios() -> dict[str, Path]:
    """The scenarios shipped in ``testbed/scenarios/``, by name (the file stem)."""
    folder = resources.files("testbed") / "scenarios"
    return {
        entry.name[: -len(".yaml")]: Path(str(entry))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml") and entry.is_file()
    }


def builtin_topologies() -> dict[str, Path]:
    """The topologies shipped in the top-level ``topologies`` package, by name.

    The package's ``__path__`` is searched directly rather than through
    ``importlib.resources``, which fails when an editable install made before
    ``topologies/__init__.py`` existed turns it into a namespace package.
    """
    found: dict[str, Path] = {}
    for root in importlib.import_module("topologies").__path__:
        folder = Path(root)
        if folder.is_dir():
            for entry in sorted(folder.glob("*.yaml")):
                found.setdefault(entry.stem, entry)
    return found


def load_scenario(name_or_path: str) -> Scenario:
    """Load a built-in scenario by name, or a scenario file by path, and validate it."""
    builtins = builtin_scenarios()
    if name_or_path in builtins:
        path = builtins[name_or_path]
    else:
        path = Path(name_or_path)
        if not _is_file(path):
            raise ScenarioError(
                name_or_path,
                "",
                f"a built-in scenario ({', '.join(builtins) or 'none'}) or a scenario file",
                "<no such scenario>",
            )
    return scenario_from_dict(read_yaml(path), source=str(path))


def load_topology(name_or_path: str) -> Topology:
    """Load a topology from the ``topologies`` package by name, or from a file by path."""
    path = _find_topology(name_or_path, Path.cwd())
    if path is None:
        raise ScenarioError(
            name_or_path,
            "",
            f"a topology name ({', '.join(builtin_topologies()) or 'none'}) or a topology file",
            "<no such topology>",
        )
    return _topology(_Checker(str(path)), read_yaml(path), "")


def scenario_from_dict(data: Any, source: str = "<dict>") -> Scenario:
    """Validate an already parsed scenario document (as ``yaml.safe_load`` returns it).

    ``source`` names the document in errors; if it is a file path, a topology given as
    a relative path is looked up next to it, otherwise in the working directory.
    """
    base_dir = Path.cwd() if source.startswith("<") else Path(source).parent
    return _scenario(_Checker(source), data, base_dir)


# --- reading files -------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses duplicate mapping keys instead of keeping the last."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = (key_node.tag, key_node.value)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping",
                            node.start_mark,
                            f"found duplicate key {key_node.value!r}",
                            key_node.start_mark,
                        )
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """Parse one YAML file, turning every failure into a ``ScenarioError``."""
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ScenarioError(label, "", "a readable UTF-8 YAML file", f"<{exc}>") from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ScenarioError(label, where, "valid YAML", f"<{exc.problem}>") from exc
    # PyYAML lets ValueError, AttributeError and RecursionError escape for odd explicit
    # tags (``!!int abc``, ``!!timestamp x``) and deep nesting: all mean "not valid YAML".
    except Exception as exc:
        raise ScenarioError(label, "", "valid YAML", f"<{type(exc).__name__}: {exc}>") from exc


def _is_file(path: Path) -> bool:
    """``Path.is_file`` that answers False for names the OS refuses (too long, NUL...)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _find_topology(ref: str, base_dir: Path) -> Path | None:
    """A topology file: a name in the ``topologies`` package, else a path from base_dir."""
    if TOPOLOGY_NAME.fullmatch(ref):
        known = builtin_topologies()
        if ref in known:
            return known[ref]
    path = base_dir / ref
    return path if _is_file(path) else None


# --- generic checks --------------------------------------------------------------------


def _join(path: str, key: object) -> str:
    """The path of ``key`` inside the mapping at ``path``."""
    shown = key if isinstance(key, str) else repr(key)[:40]
    return f"{path}.{shown}" if path else str(shown)


def _shown(value: object) -> object:
    """What an error shows as "found": containers are summarised, never repr'd whole."""
    if isinstance(value, Mapping):
        return f"<mapping with {len(value)} keys>"
    if isinstance(value, (list, tuple, set)):
        return f"<{type(value).__name__} of {len(value)} items>"
    return value


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    """Human text for an interval such as ``> 0``, ``in [0, 100]`` or ``in (0, 1]``."""

    def num(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{num(lo)}, {num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {num(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {num(hi)}"
    return ""


class _Checker:
    """Type and range checks that raise ``ScenarioError`` for one file."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, expected: str, found: object) -> NoReturn:
        raise ScenarioError(self.file, path, expected, _shown(found))

    def mapping(
        self,
        value: object,
        path: str,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """A mapping holding all ``required`` keys and nothing else but ``optional`` ones."""
        if not isinstance(value, dict):
            self.fail(path, "a mapping", value)
        allowed = required + optional
        for key in value:
            if key not in allowed:
                keys = f"one of the keys {', '.join(allowed)}" if allowed else "no keys"
                self.fail(_join(path, key), keys, "<unknown key>")
        for key in required:
            if key not in value:
                self.fail(_join(path, key), "a value (the field is required)", "<missing>")
        return value

    def sequence(self, value: object, path: str, nonempty: bool = False) -> list[Any]:
        """A list (non-empty if asked)."""
        if not isinstance(value, list) or (nonempty and not value):
            self.fail(path, "a non-empty list" if nonempty else "a list", value)
        return value

    def string(self, value: object, path: str, pattern: re.Pattern[str] | None = None,
               expected: str = "a string") -> str:
        """A string, matching ``pattern`` in full if one is given."""
        if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
            self.fail(path, expected, value)
        return value

    def choice(self, value: object, path: str, choices: tuple[str, ...]) -> str:
        """One of a fixed set of strings."""
        if not isinstance(value, str) or value not in choices:
            self.fail(path, f"one of {', '.join(choices)}", value)
        return value

    def integer(self, value: object, path: str, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``; booleans and integral floats are refused."""
        if not is_int(value) or not lo <= value <= hi:
            self.fail(path, f"an integer {_range_text(lo, hi, False, False)}", value)
        return value

    def number(
        self,
        value: object,
        path: str,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> float:
        """A finite int or float within the given bounds, returned as float."""
        expected = f"a finite number {_range_text(lo, hi, lo_open, hi_open)}".rstrip()
        if not is_number(value):
            self.fail(path, expected, value)
        try:
            number = float(value)
        except OverflowError:
            self.fail(path, expected, value)
        if (
            not math.isfinite(number)
            or (lo is not None and (number <= lo if lo_open else number < lo))
            or (hi is not None and (number >= hi if hi_open else number > hi))
        ):
            self.fail(path, expected, value)
        return number

    def nullable(self, data: Mapping[str, Any], key: str, path: str,
                 check: Callable[[object, str], Any]) -> Any:
        """``data[key]`` checked by ``check``, or ``None`` when absent or null."""
        value = data.get(key)
        return None if value is None else check(value, _join(path, key))

    def free(self, value: object, path: str) -> dict[str, Any]:
        """A free-form parameter mapping: JSON-like, bounded in depth and size, copied."""
        budget = [MAX_PARAM_ITEMS]

        def copy(item: object, where: str, depth: int) -> Any:
            budget[0] -= 1
            if budget[0] < 0 or depth > MAX_PARAM_DEPTH:
                self.fail(where, f"parameters of at most {MAX_PARAM_ITEMS} values nested at "
                                 f"most {MAX_PARAM_DEPTH} deep", "<too large>")
            if isinstance(item, dict):
                out = {}
                for key, sub in item.items():
                    if not isinstance(key, str):
                        self.fail(_join(where, key), "a string key", key)
                    out[key] = copy(sub, _join(where, key), depth + 1)
                return out
            if isinstance(item, list):
                return [copy(sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item)]
            if isinstance(item, float) and not math.isfinite(item):
                self.fail(where, "a finite number", item)
            if item is None or isinstance(item, (str, int, float)):
                return item
            self.fail(where, "a string, number, boolean, null, list or mapping", repr(item))

        if not isinstance(value, dict):
            self.fail(path, "a mapping", value)
        return copy(value, path, 0)


def _systems(c: _Checker, path: str) -> Any:
    """The system registry, imported only now so the model stays importable without it."""
    try:
        return importlib.import_module("testbed.registry")
    except ImportError as exc:
        c.fail(path, "a name registered by a system", f"<registry unavailable: {exc}>")


def _hook_error(c: _Checker, prefix: str, what: str, exc: BaseException) -> NoReturn:
    """Report a registered hook's error at ``prefix.params...`` of the file.

    Hooks (generators, builders, program configs) report
    ``ValueError("params.<field>: expected ..., found ...")``; that becomes a
    ``ScenarioError`` at ``<prefix>.params.<field>``. Any other ``ValueError``,
    ``KeyError``, ``TypeError`` or arithmetic error is reported at ``<prefix>.params``.
    """
    if isinstance(exc, ValueError):
        match = _PARAMS_ERROR.fullmatch(str(exc))
        if match:
            c.fail(_join(prefix, match["path"]), match["expected"], f"<{match['found']}>")
        c.fail(_join(prefix, "params"), f"parameters accepted by {what}", f"<{exc}>")
    c.fail(_join(prefix, "params"), f"parameters accepted by {what}",
           f"<{type(exc).__name__}: {exc}>")


_HOOK_ERRORS = (ValueError, KeyError, TypeError, ArithmeticError)


# --- topology -----------------------------------------------------------------------


def _topology(c: _Checker, value: object, path: str) -> Topology:
    """Validate a topology mapping found at ``path`` of ``c``'s file."""
    data = c.mapping(value, path, required=("nodes",), optional=("switch", "links",
                                                                   "description"))
    if "description" in data:
        c.string(data["description"], _join(path, "description"))
    switch = c.choice(data.get("switch", "linuxbridge"), _join(path, "switch"), SWITCHES)
    nodes: list[Node] = []
    for i, item in enumerate(c.sequence(data["nodes"], _join(path, "nodes"), nonempty=True)):
        node = _node(c, item, f"{_join(path, 'nodes')}[{i}]")
        if any(n.name == node.name for n in nodes):
            c.fail(f"{_join(path, 'nodes')}[{i}].name", "a node name not used before", node.name)
        nodes.append(node)
    names = {n.name for n in nodes}
    links: list[Link] = []
    for i, item in enumerate(c.sequence(data.get("links", []), _join(path, "links"))):
        where = f"{_join(path, 'links')}[{i}]"
        link = _link(c, item, where, names)
        for j, other in enumerate(links):
            if other.joins(link.a, link.b):
                c.fail(where, f"a node pair not linked before (links[{j}] joins it already)",
                       f"<{link.a}-{link.b}>")
        links.append(link)
    topology = Topology(nodes=tuple(nodes), links=tuple(links), switch=switch)
    reached = _reachable(nodes[0].name, links)
    for node in nodes[1:]:
        if node.name not in reached:
            c.fail(_join(path, "links"), "links that connect every node",
                   f"<no route from {nodes[0].name} to {node.name}>")
    return topology


def _reachable(start: str, links: list[Link]) -> set[str]:
    """Every node reachable from ``start`` over ``links`` (one search, linear in size)."""
    neighbours: dict[str, list[str]] = {}
    for link in links:
        neighbours.setdefault(link.a, []).append(link.b)
        neighbours.setdefault(link.b, []).append(link.a)
    seen = {start}
    todo = [start]
    while todo:
        for other in neighbours.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def _node(c: _Checker, value: object, path: str) -> Node:
    """Validate one node entry."""
    data = c.mapping(value, path, required=("name", "role"),
                     optional=("tier", "lat", "lon", "cpu", "speed", "memory_mb", "runtime",
                               "volumes"))
    name = c.string(data["name"], _join(path, "name"), NODE_NAME, _EXPECT_NODE_NAME)
    role = c.choice(data["role"], _join(path, "role"), ROLES)
    tier = c.nullable(data, "tier", path, lambda v, p: c.string(v, p, LABEL, _EXPECT_LABEL))
    lat = c.nullable(data, "lat", path, lambda v, p: c.number(v, p, -90, 90))
    lon = c.nullable(data, "lon", path, lambda v, p: c.number(v, p, -180, 180))
    if (lat is None) != (lon is None):
        missing = "lat" if lat is None else "lon"
        c.fail(_join(path, missing), "a value: lat and lon are given together", None)
    if role == "switch":
        for key in ("cpu", "speed", "memory_mb", "runtime", "volumes"):
            if data.get(key) is not None:
                c.fail(_join(path, key), "nothing: switches run no programs", data[key])
        return Node(name=name, role=role, tier=tier, lat=lat, lon=lon, runtime=None)
    return Node(
        name=name,
        role=role,
        tier=tier,
        lat=lat,
        lon=lon,
        cpu=c.nullable(data, "cpu", path, lambda v, p: c.number(v, p, 0, 1, lo_open=True)),
        speed=c.number(data.get("speed", 1.0), _join(path, "speed"), lo=0, lo_open=True),
        memory_mb=c.nullable(data, "memory_mb", path, lambda v, p: _memory_mb(c, v, p)),
        runtime=(runtime := c.choice(data.get("runtime", "process"), _join(path, "runtime"),
                                     RUNTIMES)),
        volumes=_volumes(c, data.get("volumes"), _join(path, "volumes"), runtime),
    )


def _memory_mb(c: _Checker, value: object, path: str) -> int:
    """A node memory limit (MiB) no larger than this machine's memory: a larger one would
    limit nothing (the kernel accepts it and never enforces it)."""
    found = c.integer(value, path, 1, MAX_MEMORY_MB)
    total_mb = machine.total_memory() // machine.MIB
    if total_mb and found > total_mb:
        c.fail(path, f"at most {total_mb} MiB, this machine's memory (MemTotal "
                     f"{total_mb / 1024:.1f} GiB)", found)
    return found


def _volumes(c: _Checker, value: object, path: str, runtime: str
             ) -> tuple[tuple[str, str], ...]:
    """A docker node's named volumes: ``{name: absolute path in the container}``."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        c.fail(path, "a mapping of volume names to absolute paths", value)
    data = value
    if data and runtime != "docker":
        c.fail(path, "nothing unless runtime is docker (a process node's services keep "
                     "their data on the host's disk)", value)
    seen: dict[str, str] = {}
    for name, where in data.items():
        entry = _join(path, str(name))
        c.string(name, entry, LABEL, "a volume name matching ^[a-z][a-z0-9_-]{0,31}$")
        c.string(where, entry, VOLUME_PATH, "an absolute path like /var/lib/data "
                                            "(no '.' or '..' parts, no trailing '/')")
        if where in seen.values():
            c.fail(entry, "a path no other volume of the node uses", where)
        seen[name] = where
    return tuple(sorted(seen.items()))


def _shaping(c: _Checker, data: Mapping[str, Any], path: str) -> dict[str, float]:
    """Check the shaping fields present in ``data`` (shared by links and link_change)."""
    out: dict[str, float] = {}
    if "delay_ms" in data:
        out["delay_ms"] = c.number(data["delay_ms"], _join(path, "delay_ms"), 0, MAX_DELAY_MS)
    if "jitter_ms" in data:
        out["jitter_ms"] = c.number(data["jitter_ms"], _join(path, "jitter_ms"), 0,
                                    MAX_DELAY_MS)
    if "loss_pct" in data:
        out["loss_pct"] = c.number(data["loss_pct"], _join(path, "loss_pct"), 0, 100)
    if data.get("bw_mbit") is not None:
        out["bw_mbit"] = c.number(data["bw_mbit"], _join(path, "bw_mbit"), 0, MAX_BW_MBIT,
                                  lo_open=True)
    return out


def _link(c: _Checker, value: object, path: str, names: set[str]) -> Link:
    """Validate one link entry against the declared node names."""
    data = c.mapping(value, path, required=("a", "b"),
                     optional=("delay_ms", "jitter_ms", "loss_pct", "bw_mbit", "queue"))
    ends = []
    for key in ("a", "b"):
        end = c.string(data[key], _join(path, key), expected="the name of a declared node")
        if end not in names:
            c.fail(_join(path, key), "the name of a declared node", end)
        ends.append(end)
    if ends[0] == ends[1]:
        c.fail(_join(path, "b"), "a node other than a (no self-links)", ends[1])
    shaping = _shaping(c, data, path)
    link = Link(
        a=ends[0],
        b=ends[1],
        queue=c.nullable(data, "queue", path, lambda v, p: c.integer(v, p, 1, MAX_QUEUE)),
        **shaping,
    )
    if link.jitter_ms > link.delay_ms:
        c.fail(_join(path, "jitter_ms"), f"a jitter <= delay_ms ({link.delay_ms:g})",
               link.jitter_ms)
    return link


# --- scenario -------------------------------------------------------------------------


_TOP_KEYS = ("name", "system", "build", "description", "seed", "topology", "services",
             "workload", "policies", "duration", "repetitions", "time_scale",
             "task_timeout", "events", "executor")
_BUILT_KEYS = ("description", "seed", "topology", "services", "workload", "policies",
               "duration", "time_scale", "task_timeout", "events", "executor")


def _built(c: _Checker, data: dict[str, Any]) -> dict[str, Any]:
    """The document with its ``build:`` expanded: the builder's keys, then the file's.

    ``build: {builder: NAME, params: {...}}`` calls the scenario builder a system
    registered as NAME; keys the file itself gives replace the builder's whole.
    """
    if "build" not in data:
        return data
    spec = c.mapping(data["build"], "build", required=("builder",), optional=("params",))
    name = c.string(spec["builder"], "build.builder")
    registry = _systems(c, "build.builder")
    found = registry.find_builder(name)
    if found is None:
        known = sorted(b for sys_ in registry.systems().values() for b in sys_.builders)
        c.fail("build.builder", f"one of the scenario builders {', '.join(known) or 'none'}",
               name)
    params = c.free(spec.get("params", {}), "build.params")
    try:
        made = registry.resolve(found[1])(plain_copy(params))
    except _HOOK_ERRORS as exc:
        _hook_error(c, "build", f"scenario builder {name}", exc)
    if not isinstance(made, dict) or set(made) - set(_BUILT_KEYS):
        c.fail("build", f"a builder returning some of {', '.join(_BUILT_KEYS)}",
               f"<builder {name} returned {_shown(made)}>")
    return {**plain_copy(made), **{k: v for k, v in data.items() if k != "build"}}


def _scenario(c: _Checker, value: object, base_dir: Path) -> Scenario:
    """Validate a whole scenario document."""
    c.mapping(value, "", optional=_TOP_KEYS)
    data = _built(c, value)
    for key in ("name", "topology", "services", "workload", "duration"):
        if key not in data:
            c.fail(key, "a value (the field is required)", "<missing>")
    name = c.string(data["name"], "name", SCENARIO_NAME,
                    "a scenario name matching ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description = c.string(data.get("description", ""), "description")
    seed = c.integer(data.get("seed", 1), "seed", 0, MAX_SEED)
    topology = _topology_ref(c, data["topology"], base_dir)
    services = _services(c, data["services"], topology)
    registered = [_program(c, svc.program, "services") for svc in services]
    system = _system_of(c, data.get("system"), [owner for owner, _ in registered])
    contained = any(program.self_contained for _, program in registered)
    _check_clients(c, services, topology, contained)
    workload, generator = _workload(c, data["workload"], seed)
    if "policies" not in data:
        c.fail("policies", "a value (the field is required)", "<missing>")
    entries = _policies(c, data["policies"], system, nonempty=not contained)
    repetitions = c.integer(data.get("repetitions", 1), "repetitions", 1, MAX_REPETITIONS)
    duration = c.number(data["duration"], "duration", lo=0, lo_open=True)
    time_scale = c.number(data.get("time_scale", 1), "time_scale", lo=1)
    task_timeout = c.number(data.get("task_timeout", default_task_timeout(duration)),
                            "task_timeout", lo=0, lo_open=True)
    speeds = [topology.node(s.node).speed for s in services if s.task_server]
    if speeds:
        _check_timing_floor(c, workload, generator, max(speeds), time_scale)
    events = _events(c, data.get("events", []), topology, duration, seed)
    executor = _executor(c, data.get("executor", {}), time_scale)
    return Scenario(
        name=name,
        system=system.name,
        description=description,
        seed=seed,
        topology=topology,
        services=services,
        workload=workload,
        policies=tuple(e.label for e in entries),
        policy_entries=entries,
        repetitions=repetitions,
        duration=duration,
        time_scale=time_scale,
        task_timeout=task_timeout,
        events=events,
        executor=executor,
        source=c.file,
        raw=plain_copy(value),
    )


def _topology_ref(c: _Checker, value: object, base_dir: Path) -> Topology:
    """An inline topology, or one named by a string (package name or relative path)."""
    if isinstance(value, str):
        path = _find_topology(value, base_dir)
        if path is None:
            known = ", ".join(builtin_topologies()) or "none"
            c.fail("topology", f"a topology name ({known}), a topology file path relative "
                               "to the scenario, or an inline topology", value)
        return _topology(_Checker(str(path)), read_yaml(path), "")
    return _topology(c, value, "topology")


def _program(c: _Checker, program: str, path: str) -> tuple[Any, Any]:
    """The system registering ``program`` and its registration, or a ScenarioError."""
    registry = _systems(c, path)
    found = registry.find_program(program)
    if found is None:
        c.fail(path, f"a program registered by a system ({', '.join(registry.program_names())})",
               program)
    return found


def _program_params(c: _Checker, program: Any, value: object, path: str) -> dict[str, Any]:
    """A service's params, checked against its program's registered declaration.

    ``program.config`` names a Config dataclass (checked by
    :func:`nodes.config.validate_params`, which refuses the values the executor passes
    itself) or a function returning the clean params; without one the params are free.
    """
    params = c.free(value, path)
    if program.config is None:
        return params
    try:
        declared = _systems(c, path).resolve(program.config)
    except (ImportError, AttributeError) as exc:
        c.fail(path, f"parameters of program {program.name}",
               f"<its declaration {program.config} is unavailable: {exc}>")
    try:
        if dataclasses.is_dataclass(declared):
            from nodes.config import fields_of, validate_params

            clean = validate_params(declared, params, reserved=program.context)
            # the resolved scenario states every default, so a run describes itself
            for f in fields_of(declared):
                if f.name not in clean and f.name not in program.context \
                        and f.default is not None and f.default != ():
                    clean[f.name] = f.default
            return clean
        return declared(params)
    except _HOOK_ERRORS as exc:
        _hook_error(c, path[: -len(".params")], f"program {program.name}", exc)


def _services(c: _Checker, value: object, topology: Topology) -> tuple[Service, ...]:
    """Validate the services: registered programs, nodes, ports, tiers and params."""
    services: list[Service] = []
    for i, item in enumerate(c.sequence(value, "services", nonempty=True)):
        path = f"services[{i}]"
        data = c.mapping(item, path, required=("name", "program", "node"),
                         optional=("port", "tier", "params"))
        name = c.string(data["name"], f"{path}.name", SERVICE_NAME,
                        "a service name matching ^[a-z][a-z0-9_-]{0,31}$")
        if any(s.name == name for s in services):
            c.fail(f"{path}.name", "a service name not used before", name)
        program = c.string(data["program"], f"{path}.program", PROGRAM_NAME,
                           "a registered program name (dotted for a system's sub-package, "
                           "e.g. system.service)")
        _, registered = _program(c, program, f"{path}.program")
        node_name = c.string(data["node"], f"{path}.node")
        try:
            node = topology.node(node_name)
        except KeyError:
            c.fail(f"{path}.node", "the name of a node of the topology", node_name)
        if node.is_switch:
            c.fail(f"{path}.node", "a client or server node (switches run no programs)",
                   node_name)
        port = c.integer(data.get("port", 8000), f"{path}.port", 1, 65535)
        if any(s.node == node.name and s.port == port for s in services):
            c.fail(f"{path}.port", f"a port not used by another service on {node.name}", port)
        tier = c.nullable(data, "tier", path, lambda v, p: c.string(v, p, LABEL, _EXPECT_LABEL))
        tier = node.tier if tier is None else tier
        if registered.task_server and tier is None:
            c.fail(f"{path}.tier", f"a tier label (neither the service nor its node has one; "
                                   f"a {program} records its tier in every task row)", None)
        params = _program_params(c, registered, data.get("params", {}), f"{path}.params")
        _check_address_refs(c, params, f"{path}.params", topology)
        services.append(Service(name=name, program=program, node=node.name, port=port,
                                tier=tier, params=params, task_server=registered.task_server))
    return tuple(services)


def _system_of(c: _Checker, value: object, owners_of_programs: list[Any]) -> Any:
    """The scenario's system: named by ``system:``, else the one owning its programs
    (``owners_of_programs``: each service's system, ``None`` for a harness program)."""
    registry = _systems(c, "system")
    owners = sorted({owner.name for owner in owners_of_programs if owner is not None})
    if value is not None:
        name = c.choice(value, "system", tuple(sorted(registry.systems())))
        foreign = [o for o in owners if o != name]
        if foreign:
            c.fail("system", f"the system of the scenario's programs ({', '.join(owners)})",
                   name)
        return registry.systems()[name]
    if len(owners) != 1:
        c.fail("services", "programs of one system (or a system: key naming it)",
               f"<programs of {', '.join(owners)}>")
    return registry.systems()[owners[0]]


def _check_clients(c: _Checker, services: tuple[Service, ...], topology: Topology,
                   contained: bool) -> None:
    """Every client can reach a task server, unless a self-contained program serves them
    (``contained``).

    A self-contained entry point (registered so, e.g. a service that hands clients
    their candidate servers) finds or drives its own servers, so clients need none.
    """
    scenario_clients = [n for n in topology.nodes if n.role == "client"]
    if not scenario_clients:
        c.fail("topology", "a topology with at least one client node", "<no client>")
    if contained:
        return
    for client in scenario_clients:
        if not any(
            s.task_server and (s.node == client.name or topology.node(s.node).role != "client")
            for s in services
        ):
            c.fail("services", f"a task server that client {client.name} can use (on its own "
                               "node or on a non-client node)", "<none>")


_ADDRESS_REF = re.compile(r"\{ip:([^}]*)\}")


def _check_address_refs(c: _Checker, value: object, path: str, topology: Topology) -> None:
    """Every ``{ip:NODE}`` in a parameter (at any depth) names a host of the topology."""
    if isinstance(value, str):
        for name in _ADDRESS_REF.findall(value):
            node = next((n for n in topology.nodes if n.name == name), None)
            if node is None or node.is_switch:
                c.fail(path, "{ip:NODE} naming a client or server node of the topology",
                       value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_address_refs(c, item, f"{path}.{key}", topology)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_address_refs(c, item, f"{path}[{i}]", topology)


def _call_generator(c: _Checker, name: str, hook: Callable[[dict[str, Any]], Any],
                    params: Mapping[str, Any]) -> Any:
    """Call a generator hook on a copy of the params, mapping its errors to the file."""
    try:
        return hook(plain_copy(params))
    except _HOOK_ERRORS as exc:
        _hook_error(c, "workload", f"generator {name}", exc)


def _workload(c: _Checker, value: object, seed: int) -> tuple[Workload, Any]:
    """Validate the workload; also return the generator object for the timing check."""
    data = c.mapping(value, "workload", required=("generator",), optional=("params", "seed"))
    name = c.string(data["generator"], "workload.generator")
    generators = _systems(c, "workload.generator").generators()
    if name not in generators:
        c.fail("workload.generator", f"one of the generators {', '.join(sorted(generators))}",
               name)
    params = c.free(data.get("params", {}), "workload.params")
    generator = generators[name]
    validate = getattr(generator, "validate", None)
    if validate is not None:
        _call_generator(c, name, validate, params)
    workload_seed = c.integer(data.get("seed", seed), "workload.seed", 0, MAX_SEED)
    return Workload(generator=name, params=params, seed=workload_seed), generator


def _policies(c: _Checker, value: object, system: Any, nonempty: bool = True
              ) -> tuple[PolicyEntry, ...]:
    """Validate the policy entries against the policies the system registers.

    An entry is a registered name, or a mapping ``{name, label, params}``: the label
    (default: the name) names it in traces and tables, and the parameters are checked
    by the system's ``policy_params`` hook (a system without one takes no parameters and
    so no label other than the name). Labels are
    unique, and a label never reads as another registered policy's name. A scenario
    whose clients select for themselves (a self-contained entry point) may list none
    (``nonempty=False``).
    """
    items = c.sequence(value, "policies", nonempty=nonempty)
    registry = system.policies
    known = f"one of the {system.name} policies {', '.join(sorted(registry))}"
    entries: list[PolicyEntry] = []
    for i, item in enumerate(items):
        path = f"policies[{i}]"
        if isinstance(item, dict):
            data = c.mapping(item, path, required=("name",), optional=("label", "params"))
            name = data["name"]
            if not isinstance(name, str) or name not in registry:
                c.fail(f"{path}.name", known, name)
            label = c.string(data.get("label", name), f"{path}.label", POLICY_LABEL,
                             "a label matching ^[A-Za-z0-9][A-Za-z0-9_.+=-]{0,63}$")
            if label != name and label in registry:
                c.fail(f"{path}.label", "a label that is not another policy's name", label)
            if label != name and system.policy_params is None:
                c.fail(f"{path}.label", f"the name {name} (the {system.name} policies take no "
                                        "parameters, so one entry per name needs no label)",
                       label)
            params = _policy_params(c, system, name, data.get("params", {}), path)
        elif isinstance(item, str) and item in registry:
            name, label, params = item, item, {}
        else:
            c.fail(path, f"{known}, or a mapping with name, label and params", item)
        if any(e.label == label for e in entries):
            c.fail(path, "a policy label not listed before", label)
        entries.append(PolicyEntry(label=label, name=name, params=params))
    return tuple(entries)


def _policy_params(c: _Checker, system: Any, name: str, value: object, path: str
                   ) -> dict[str, Any]:
    """A policy entry's params, checked by the system's ``policy_params`` hook, which
    returns them cleaned or raises ``ValueError("params.<field>: expected ..., found
    ...")``; a system without the hook accepts no parameters."""
    params = c.free(value, f"{path}.params")
    if system.policy_params is None:
        if params:
            c.fail(f"{path}.params.{next(iter(params))}",
                   f"no parameters (the {system.name} policies take none)", "<unknown key>")
        return params
    try:
        check = _systems(c, path).resolve(system.policy_params)
    except (ImportError, AttributeError) as exc:
        c.fail(f"{path}.params", f"parameters of policy {name}",
               f"<its declaration {system.policy_params} is unavailable: {exc}>")
    try:
        return dict(check(name, params))
    except _HOOK_ERRORS as exc:
        _hook_error(c, path, f"policy {name}", exc)


def _check_timing_floor(c: _Checker, workload: Workload, generator: Any, speed: float,
                        time_scale: float) -> None:
    """Refuse a time_scale that compresses the shortest service below the timing floor."""
    hook = getattr(generator, "min_service_time", None)
    if hook is None:
        return
    reported = _call_generator(c, workload.generator, hook, workload.params)
    try:
        smallest = float(reported)
    except (TypeError, ValueError, OverflowError):
        c.fail("workload.params", f"parameters for which generator {workload.generator} "
                                  "reports a numeric smallest service time", repr(reported))
    compressed = smallest / speed / time_scale
    if not compressed >= TIMING_FLOOR_S:  # also catches NaN
        c.fail(
            "time_scale",
            f"a time_scale of at most {smallest / speed / TIMING_FLOOR_S:g}, so that the "
            f"smallest service time ({smallest:g} model s at the fastest server speed "
            f"{speed:g}) stays at or above the timing floor of {TIMING_FLOOR_S * 1000:g} ms",
            f"<{time_scale:g}, which compresses it to {compressed * 1000:.3g} ms>",
        )


# --- events and executor -----------------------------------------------------------------


def _target(c: _Checker, value: object, path: str, action: str, topology: Topology) -> str:
    """A node name for node actions, a link ``a-b`` (normalised as declared) otherwise."""
    if action in NODE_ACTIONS:
        target = c.string(value, path, expected="the name of a non-switch node")
        if not any(n.name == target and not n.is_switch for n in topology.nodes):
            c.fail(path, "the name of a non-switch node", target)
        return target
    target = c.string(value, path, expected="a link written a-b")
    ends = target.split("-")
    if len(ends) == 2:
        try:
            return topology.link(*ends).name
        except KeyError:
            pass
    c.fail(path, "a link of the topology written a-b", target)


def _event_params(c: _Checker, value: object, path: str, action: str) -> dict[str, Any]:
    """The parameters an action takes: shaping for link_change, ``cpu`` for load."""
    if action == "link_change":
        data = c.mapping(value, path, optional=("delay_ms", "jitter_ms", "loss_pct", "bw_mbit"))
        params = _shaping(c, data, path)
        if not params:
            c.fail(path, "at least one of delay_ms, jitter_ms, loss_pct, bw_mbit", value)
        return params
    if action == "load":
        data = c.mapping(value, path, required=("cpu",))
        return {"cpu": c.number(data["cpu"], f"{path}.cpu", 0, 1)}
    c.mapping(value, path)
    return {}


def _random_events(c: _Checker, value: object, path: str, topology: Topology,
                   duration: float, seed: int) -> list[Event]:
    """Expand a random schedule (a Poisson process over the duration) into events."""
    data = c.mapping(value, path, required=("action", "targets", "rate_per_s"),
                     optional=("seed", "params"))
    action = c.choice(data["action"], f"{path}.action", ACTIONS)
    targets = [
        _target(c, item, f"{path}.targets[{j}]", action, topology)
        for j, item in enumerate(c.sequence(data["targets"], f"{path}.targets", nonempty=True))
    ]
    rate = c.number(data["rate_per_s"], f"{path}.rate_per_s", lo=0, lo_open=True)
    if not rate * duration <= MAX_EVENTS:
        c.fail(f"{path}.rate_per_s", f"a rate giving at most {MAX_EVENTS} events on average over "
                                     f"the duration of {duration:g} s", rate)
    rng_seed = c.integer(data.get("seed", seed), f"{path}.seed", 0, MAX_SEED)
    params = _event_params(c, data.get("params", {}), f"{path}.params", action)
    # Without its own seed, each schedule mixes in its position so two schedules differ.
    rng = random.Random(f"{rng_seed}:{path}" if "seed" not in data else rng_seed)
    events: list[Event] = []
    at = rng.expovariate(rate)
    while at < duration:
        events.append(Event(at=at, action=action, target=rng.choice(targets),
                            params=dict(params)))
        at += rng.expovariate(rate)
    return events


def _events(c: _Checker, value: object, topology: Topology, duration: float,
            seed: int) -> tuple[Event, ...]:
    """Validate explicit events, expand random ones, and sort all by time (stably)."""
    timed: list[tuple[Event, str]] = []
    for i, item in enumerate(c.sequence(value, "events")):
        path = f"events[{i}]"
        if isinstance(item, dict) and "random" in item:
            data = c.mapping(item, path, required=("random",))
            timed += [(e, f"{path}.random.params")
                      for e in _random_events(c, data["random"], f"{path}.random", topology,
                                              duration, seed)]
            continue
        data = c.mapping(item, path, required=("at", "action", "target"),
                         optional=("params",))
        at = c.number(data["at"], f"{path}.at", 0, duration, hi_open=True)
        action = c.choice(data["action"], f"{path}.action", ACTIONS)
        target = _target(c, data["target"], f"{path}.target", action, topology)
        params = _event_params(c, data.get("params", {}), f"{path}.params", action)
        timed.append((Event(at=at, action=action, target=target, params=params),
                      f"{path}.params"))
    timed.sort(key=lambda pair: pair[0].at)
    _check_link_changes(c, timed, topology)
    return tuple(event for event, _ in timed)


def _check_link_changes(c: _Checker, timed: list[tuple[Event, str]],
                        topology: Topology) -> None:
    """Replay link changes in time order and refuse any that leaves jitter > delay."""
    state = {link.name: (link.delay_ms, link.jitter_ms) for link in topology.links}
    for event, path in timed:
        if event.action == "link_change":
            delay, jitter = state[event.target]
            delay = event.params.get("delay_ms", delay)
            jitter = event.params.get("jitter_ms", jitter)
            if jitter > delay:
                c.fail(path, f"jitter_ms <= delay_ms after the change at {event.at:g} s on "
                             f"{event.target}", f"<delay {delay:g} ms, jitter {jitter:g} ms>")
            state[event.target] = (delay, jitter)


def _executor(c: _Checker, value: object, time_scale: float) -> ExecutorDefaults:
    """Validate the executor defaults; a poll interval in model seconds must come to at
    least the timing floor of wall time at ``time_scale``."""
    data = c.mapping(value, "executor",
                     optional=("default", "poll_interval_ms", "poll_interval_model_s",
                               "shaping", "state_timeout_s"))
    model_s = c.nullable(data, "poll_interval_model_s", "executor",
                         lambda v, path: c.number(v, path, 0, 3_600, lo_open=True))
    if model_s is not None and model_s / time_scale < TIMING_FLOOR_S:
        c.fail("executor.poll_interval_model_s",
               f"at least {TIMING_FLOOR_S * time_scale:g} model s (the 1 ms timing floor at "
               f"time_scale {time_scale:g})", model_s)
    return ExecutorDefaults(
        poll_interval_model_s=model_s,
        default=c.choice(data.get("default", "emulation"), "executor.default", EXECUTORS),
        poll_interval_ms=c.number(data.get("poll_interval_ms", 100), "executor.poll_interval_ms",
                                  0, 60_000, lo_open=True),
        shaping=c.choice(data.get("shaping", "auto"), "executor.shaping", SHAPINGS),
        state_timeout_s=c.number(data.get("state_timeout_s", 1.0), "executor.state_timeout_s",
                                 0, 3_600, lo_open=True),
    )


install_rebuild(scenario_from_dict)
