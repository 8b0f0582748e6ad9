"""Study files: a scenario, a grid of values to vary in it, and how often to replicate.

A study file (YAML, format in ``docs/studies.md``) names a scenario and a ``grid``: a
mapping from a dotted path into the scenario document to a list of values. The points
of the study are the cartesian product of the grid's axes; a ``zip:`` entry is one axis
whose paths vary together (its value lists must be equally long). Paths address nested
mappings by key and lists of named mappings (``services``) by their ``name``:
``services.edge.params.workers``.

Replication ``r`` of a point gets its own seed, derived from the study seed, the point's
values and ``r``, and set as the scenario's ``seed`` (and the workload's, when the
scenario names one): each replication is an independent trace, replayed by every
policy and executor of the point (common random numbers inside a replication). A
study's ``seeds:`` may instead give replication ``r`` the study seed plus ``r`` at every
point (``rule: sequence``), hash only some named settings of each point instead of all
its grid values (``over``: points that differ elsewhere then share their traces), and
set the seed at more scenario paths (``also``, such as a builder's ``build.params.seed``).
A scenario's ``repetitions`` stay inside a cell.

Everything is checked before anything runs: the study's own keys, every grid path
against the scenario, every point's scenario by the scenario loader, and what each point
needs against this machine (the run limits, :mod:`testbed.limits`). Errors name
the study file, the field and what was expected, like the scenario loader's.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import ScenarioError
from testbed.scenario.loader import (
    MAX_SEED,
    builtin_scenarios,
    read_yaml,
    scenario_from_dict,
)
from testbed.scenario.model import Scenario, plain_copy

STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
STUDY_KEYS = ("study", "description", "scenario", "set", "executors", "policies", "baseline",
              "order", "replications", "seed", "seeds", "grid", "analysis")
#: How a cell orders its policies (``order:``): as the study lists them, or rotated left
#: by the point's index plus the replication, so that where policies run one after
#: another on one deployment none is always first on it.
ORDERS = ("fixed", "rotate")
#: How replication seeds are derived (``seeds.rule``): ``hash`` of the study seed, the
#: point's values and the replication (independent at every point), or ``sequence``,
#: the study seed plus the replication (the same seeds at every point: replication r
#: meets the same random draws wherever the grid puts it, as common random numbers).
SEED_RULES = ("hash", "sequence")
MAX_REPLICATIONS = 1_000
#: Replication seeds have 31 bits: systems derive further seeds from a scenario seed by
#: arithmetic (``seed * 1000 + repetition``), which must stay within 63 bits.
SEED_MASK = 2**31 - 1
MAX_POINTS = 10_000
ZIP = "zip"
#: Grid paths the study sets itself, per replication.
RESERVED = ("seed", "workload.seed", "name", "system")


@dataclass(frozen=True)
class Axis:
    """One axis of the grid: the paths it sets and, per step, one value per path."""

    paths: tuple[str, ...]
    steps: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Point:
    """One combination of grid values, by path, in the grid's path order."""

    index: int
    values: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        """``{path: value}``."""
        return dict(self.values)

    def label(self) -> str:
        """``path=value, ...`` (``base`` for a study without a grid)."""
        return ", ".join(f"{p}={v}" for p, v in self.values) or "base"


@dataclass(frozen=True)
class Study:
    """A validated study: its scenario document and everything needed to make cells."""

    name: str
    description: str
    source: str
    scenario_doc: dict[str, Any]
    scenario_source: str
    system: str
    executors: tuple[str, ...]
    policies: tuple[str, ...]  # the labels of the policy entries
    baseline: str
    replications: int
    seed: int
    axes: tuple[Axis, ...]
    #: each policy entry as a scenario writes it (a name, or ``{name, label, params}``)
    policy_docs: tuple[Any, ...] = ()
    #: settings the study fixes in the scenario for every point (``set:``), by path
    fixed: tuple[tuple[str, Any], ...] = ()
    #: parameters the study hands to an experiment's metric function (``analysis:``)
    analysis: tuple[tuple[str, Any], ...] = ()
    #: ``fixed`` or ``rotate`` (:data:`ORDERS`)
    order: str = "fixed"
    #: ``hash`` or ``sequence`` (:data:`SEED_RULES`)
    seed_rule: str = "hash"
    #: scenario paths that take the replication seed besides ``seed`` and
    #: ``workload.seed`` (``seeds.also``), such as a builder's own ``seed`` parameter
    seed_paths: tuple[str, ...] = ()
    #: under the ``hash`` rule, the named scenario paths whose values (instead of the
    #: point's grid values) the seed hashes (``seeds.over``), as ``(name, path)``
    seed_over: tuple[tuple[str, str], ...] = ()

    @property
    def grid_paths(self) -> list[str]:
        """Every grid path, in file order."""
        return [p for axis in self.axes for p in axis.paths]

    def points(self) -> list[Point]:
        """The cartesian product of the axes (one point without a grid)."""
        combos = itertools.product(*(axis.steps for axis in self.axes))
        out = []
        for index, combo in enumerate(combos):
            values = tuple((path, value) for axis, step in zip(self.axes, combo, strict=True)
                           for path, value in zip(axis.paths, step, strict=True))
            out.append(Point(index, values))
        return out

    def point_doc(self, values: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        """The study's scenario document (its ``set:`` applied) with a point's grid
        ``values`` set, before seeds and policies: what seeds hash over and what a cell's
        readers see (builder parameters included, before the builder expands them)."""
        doc = plain_copy(self.scenario_doc)
        for path, value in values:
            set_path(doc, path, plain_copy(value))
        return doc

    def replication_seed(self, point: Point, replication: int) -> int:
        """The seed of ``replication`` at ``point``: under the ``hash`` rule a hash of
        the study seed, the point's values (not its position, so adding a grid value
        keeps the others' traces) and the replication number, or with ``seeds.over``
        of ``[seed, {name: value at its path in the point's scenario}, replication]``;
        under ``sequence`` the study seed plus the replication number."""
        if self.seed_rule == "sequence":
            return self.seed + replication
        hashed: Any = list(point.values)
        if self.seed_over:
            doc = self.point_doc(point.values)
            hashed = {name: get_path(doc, path) for name, path in self.seed_over}
        blob = json.dumps([self.seed, hashed, replication], sort_keys=True, default=str)
        return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:4], "big") & SEED_MASK

    def cell_policies(self, point: Point, replication: int) -> list[Any]:
        """The policy entries of one replication of ``point`` in the order its run
        replays them (:data:`ORDERS`)."""
        entries = list(self.policy_docs or self.policies)
        if self.order == "rotate" and entries:
            k = (point.index + replication) % len(entries)
            entries = entries[k:] + entries[:k]
        return entries

    def scenario(self, point: Point, replication: int) -> Scenario:
        """The validated scenario of one replication of ``point``; a
        :class:`ScenarioError` names the study file, the point and the field."""
        doc = self.point_doc(point.values)
        seed = self.replication_seed(point, replication)
        doc["seed"] = seed
        if isinstance(doc.get("workload"), dict) and "seed" in doc["workload"]:
            doc["workload"]["seed"] = seed
        for path in self.seed_paths:
            set_path(doc, path, seed)
        doc["policies"] = plain_copy(self.cell_policies(point, replication))
        try:
            scenario = scenario_from_dict(doc, source=self.scenario_source)
        except ScenarioError as exc:
            raise ScenarioError(self.source, f"grid (point {point.label()}): "
                                f"{exc.path}", exc.expected, exc.found) from exc
        if scenario.workload.seed != seed:
            raise ScenarioError(self.source, "scenario",
                                "a scenario whose workload seed follows its seed (replications "
                                "need independent traces)",
                                f"<workload seed fixed at {scenario.workload.seed}>")
        return scenario


def _fail(source: str, path: str, expected: str, found: object) -> ScenarioError:
    return ScenarioError(source, path, expected, found)


def _segment(container: Any, key: str) -> tuple[Any, Any]:
    """The child of ``container`` at ``key`` and how to address it (None: not there)."""
    if isinstance(container, dict):
        return (container.get(key), key) if key in container else (None, None)
    if isinstance(container, list):
        for i, item in enumerate(container):
            if isinstance(item, dict) and item.get("name") == key:
                return item, i
    return None, None


def _missing(container: Any, key: str, where: str) -> str:
    """Why ``key`` is not found under ``where``: what is there instead."""
    if isinstance(container, dict):
        return f"a key of {where or 'the scenario'} ({', '.join(map(str, container)) or 'none'})"
    if isinstance(container, list):
        names = [str(i.get("name")) for i in container if isinstance(i, dict) and "name" in i]
        return f"the name of an entry of {where} ({', '.join(names) or 'none'})"
    return f"a path into a mapping, but {where} is the value {container!r}"


def check_path(doc: Mapping[str, Any], path: str) -> str | None:
    """``None`` if ``set_path`` can set ``path`` in ``doc``, else what was expected.

    Every segment but the last must exist; the last may be a new key of a mapping (a
    setting the scenario leaves at its default, such as ``task_timeout``).
    """
    parts = path.split(".")
    if not all(parts):
        return "a dotted path such as workload.params.rate"
    node: Any = doc
    for depth, key in enumerate(parts):
        where = ".".join(parts[:depth])
        child, address = _segment(node, key)
        last = depth == len(parts) - 1
        if address is None:
            if last and isinstance(node, dict):
                return None
            return _missing(node, key, where)
        node = child
    return None


def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at ``path`` (checked by :func:`check_path`) in ``doc``."""
    parts = path.split(".")
    node: Any = doc
    for key in parts[:-1]:
        node = _segment(node, key)[0]
    _child, address = _segment(node, parts[-1])
    node[parts[-1] if address is None else address] = value


def get_path(doc: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` in ``doc`` (``None`` where a segment is missing)."""
    node: Any = doc
    for key in path.split("."):
        node, address = _segment(node, key)
        if address is None:
            return None
    return node


def _axes(source: str, grid: object, doc: Mapping[str, Any]) -> tuple[Axis, ...]:
    """Validate ``grid`` against the scenario document."""
    if grid is None:
        return ()
    if not isinstance(grid, dict):
        raise _fail(source, "grid", "a mapping from a dotted path to a list of values",
                    grid)
    axes: list[Axis] = []
    seen: set[str] = set()

    def values(value: object, where: str) -> list[Any]:
        if not isinstance(value, list) or not value:
            raise _fail(source, where, "a non-empty list of values", value)
        return value

    def path_ok(path: object, where: str) -> str:
        if not isinstance(path, str):
            raise _fail(source, where, "a dotted path into the scenario", path)
        if path in RESERVED or path.startswith("seed."):
            raise _fail(source, where, "a path the study does not set itself (it sets seed "
                        "and workload.seed per replication; name and system are fixed)",
                        path)
        if path in seen:
            raise _fail(source, where, "each path once in the grid", path)
        why = check_path(doc, path)
        if why is not None:
            raise _fail(source, where, why, "<not in the scenario>")
        seen.add(path)
        return path

    for key, value in grid.items():
        if key == ZIP:
            groups = value if isinstance(value, list) else None
            if not groups:
                raise _fail(source, "grid.zip", "a list of mappings, each from paths to "
                            "equally long lists of values", value)
            for g, group in enumerate(groups):
                where = f"grid.zip[{g}]"
                if not isinstance(group, dict) or len(group) < 2:
                    raise _fail(source, where, "a mapping of at least two paths that vary "
                                "together", group)
                paths = tuple(path_ok(p, f"{where}.{p}") for p in group)
                lists = [values(group[p], f"{where}.{p}") for p in paths]
                if len({len(v) for v in lists}) != 1:
                    raise _fail(source, where, "value lists of one length",
                                f"<lengths {', '.join(str(len(v)) for v in lists)}>")
                axes.append(Axis(paths, tuple(zip(*lists, strict=True))))
            continue
        where = f"grid.{key}"
        path = path_ok(key, where)
        axes.append(Axis((path,), tuple((v,) for v in values(value, where))))
    return tuple(axes)


def _fixed(source: str, value: object, doc: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The ``set:`` mapping checked against the scenario document: each path as a grid
    path is (not one the study sets itself), each value set before the grid's."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise _fail(source, "set", "a mapping from a dotted path to a value", value)
    out = []
    for path, item in value.items():
        where = f"set.{path}"
        if not isinstance(path, str):
            raise _fail(source, where, "a dotted path into the scenario", path)
        if path in RESERVED or path.startswith("seed."):
            raise _fail(source, where, "a path the study does not set itself (it sets seed "
                        "and workload.seed per replication; name and system are fixed)", path)
        why = check_path(doc, path)
        if why is not None:
            raise _fail(source, where, why, "<not in the scenario>")
        out.append((path, item))
    return tuple(out)


def _seeds(source: str, value: object, doc: Mapping[str, Any], grid: tuple[str, ...]
           ) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The ``seeds:`` mapping checked: its rule (:data:`SEED_RULES`), the paths of
    ``also`` (scenario paths, none the study or its grid sets otherwise) and ``over``
    (names of scenario paths whose values the ``hash`` rule hashes: each set by the
    scenario, ``set:`` or the grid)."""
    if value is None:
        return SEED_RULES[0], (), ()
    if not isinstance(value, dict) or set(value) - {"rule", "also", "over"}:
        raise _fail(source, "seeds", "a mapping with rule (hash or sequence), also (a "
                    "list of scenario paths that take the replication seed) and over (a "
                    "mapping of names to the scenario paths the hash covers)", value)
    rule = value.get("rule", SEED_RULES[0])
    if rule not in SEED_RULES:
        raise _fail(source, "seeds.rule", f"one of {', '.join(SEED_RULES)}", rule)
    also = value.get("also", [])
    if not isinstance(also, list) or not all(isinstance(p, str) for p in also):
        raise _fail(source, "seeds.also", "a list of dotted scenario paths", also)
    for i, path in enumerate(also):
        where = f"seeds.also[{i}]"
        if path in RESERVED or path in grid or also.index(path) != i:
            raise _fail(source, where, "a path set by nothing else (not seed, "
                        "workload.seed, a grid path or a path listed twice)", path)
        why = check_path(doc, path)
        if why is not None:
            raise _fail(source, where, why, "<not in the scenario>")
    over = value.get("over", {})
    if not isinstance(over, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in over.items()):
        raise _fail(source, "seeds.over", "a mapping of names to dotted scenario paths",
                    over)
    if over and rule != "hash":
        raise _fail(source, "seeds.over", "no over under rule sequence (its seeds do not "
                    "hash the point)", over)
    for name, path in over.items():
        if path in RESERVED or (path not in grid and get_path(doc, path) is None):
            raise _fail(source, f"seeds.over.{name}", "a path whose value the scenario, "
                        "set: or the grid gives (not seed or workload.seed)", path)
    return rule, tuple(also), tuple(sorted(over.items()))


def _scenario_doc(source: str, ref: object, base: Path) -> tuple[dict[str, Any], str]:
    """The scenario document a study names (built-in name or path from the study's
    folder) and the source its relative topology paths resolve against."""
    if not isinstance(ref, str) or not ref:
        raise _fail(source, "scenario", "a built-in scenario name or a scenario file path",
                    ref)
    builtins = builtin_scenarios()
    path = builtins.get(ref)
    if path is None:
        candidate = Path(ref) if Path(ref).is_absolute() else base / ref
        if not candidate.is_file():
            raise _fail(source, "scenario", f"a built-in scenario ({', '.join(builtins)}) "
                        "or a scenario file", ref)
        path = candidate
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise _fail(str(path), "", "a mapping (a scenario document)", doc)
    return doc, str(path)


def _int(source: str, data: Mapping[str, Any], key: str, default: int, lo: int,
         hi: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(source, key, f"an integer in [{lo}, {hi}]", value)
    return value


def _names(source: str, value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _fail(source, key, "a non-empty list of names", value)
    if len(set(value)) != len(value):
        raise _fail(source, key, "each name once", value)
    return value


def _policy_entries(source: str, value: object, base: Scenario) -> list[tuple[str, Any]]:
    """The study's policy entries as ``(label, entry as written)``: the base scenario's
    when ``value`` is absent; else each a registered name, a label of the base scenario
    (its entry kept) or a ``{name, label, params}`` mapping, checked as the scenario
    loader checks them (errors name the study file and ``policies[i]...``)."""
    if value is None:
        return [(p, base.policy_entry(p).to_dict()) for p in base.policies]
    if not isinstance(value, list) or not value:
        raise _fail(source, "policies", "a non-empty list of policy entries", value)
    try:
        chosen = base.with_overrides(policies=value)
    except ScenarioError as exc:
        raise ScenarioError(source, exc.path, exc.expected, exc.found) from exc
    return [(p, chosen.policy_entry(p).to_dict()) for p in chosen.policies]


def study_from_dict(data: Any, source: str = "<dict>") -> Study:
    """Validate a parsed study document; ``source`` names it in errors and its folder
    is where a relative scenario path is looked up."""
    from testbed.registry import get_system
    from testbed.runner import check_executor

    if not isinstance(data, dict):
        raise _fail(source, "", "a mapping (a study document)", data)
    for key in data:
        if key not in STUDY_KEYS:
            raise _fail(source, str(key), f"one of the keys {', '.join(STUDY_KEYS)}",
                        "<unknown key>")
    for key in ("study", "scenario"):
        if key not in data:
            raise _fail(source, key, "a value (the field is required)", "<missing>")
    name = data["study"]
    if not isinstance(name, str) or not STUDY_NAME.fullmatch(name):
        raise _fail(source, "study", "a study name matching ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                    name)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _fail(source, "description", "a string", description)
    base = Path.cwd() if source.startswith("<") else Path(source).parent
    doc, scenario_source = _scenario_doc(source, data["scenario"], base)
    fixed = _fixed(source, data.get("set"), doc)
    for path, value in fixed:
        set_path(doc, path, plain_copy(value))
    analysis = data.get("analysis", {})
    if not isinstance(analysis, dict) or not all(isinstance(k, str) for k in analysis):
        raise _fail(source, "analysis", "a mapping of parameters for the experiment's "
                    "metric function", analysis)
    try:
        base_scenario = scenario_from_dict(doc, source=scenario_source)
    except ScenarioError as exc:
        raise ScenarioError(source, f"scenario ({exc.file}): {exc.path}", exc.expected,
                            exc.found) from exc
    system = get_system(base_scenario.system)
    executors = _names(source, data.get("executors", [base_scenario.executor.default]),
                       "executors")
    for i, executor in enumerate(executors):
        try:
            check_executor(system, executor, f"executors[{i}]")
        except Exception as exc:
            raise _fail(source, f"executors[{i}]", f"an executor the {system.name} system "
                        f"runs on ({', '.join(system.executors)})", executor) from exc
    policy_docs = _policy_entries(source, data.get("policies"), base_scenario)
    policies = [label for label, _ in policy_docs]
    baseline = data.get("baseline", policies[0])
    if baseline not in policies:
        raise _fail(source, "baseline", f"one of the study's policies ({', '.join(policies)})",
                    baseline)
    order = data.get("order", ORDERS[0])
    if order not in ORDERS:
        raise _fail(source, "order", f"one of {', '.join(ORDERS)}", order)
    replications = _int(source, data, "replications", 1, 1, MAX_REPLICATIONS)
    seed = _int(source, data, "seed", 1, 0, MAX_SEED)
    axes = _axes(source, data.get("grid"), doc)
    seed_rule, seed_paths, seed_over = _seeds(source, data.get("seeds"), doc,
                                              tuple(p for axis in axes for p in axis.paths))
    if seed_rule == "sequence" and seed + replications - 1 > SEED_MASK:
        raise _fail(source, "seed", f"a seed of at most {SEED_MASK - replications + 1} "
                    f"(rule sequence: the seed plus each of {replications} replications "
                    f"within {SEED_MASK})", seed)
    study = Study(name=name, description=description, source=source, scenario_doc=doc,
                  scenario_source=scenario_source, system=system.name,
                  executors=tuple(executors), policies=tuple(policies),
                  policy_docs=tuple(doc for _, doc in policy_docs), baseline=baseline,
                  replications=replications, seed=seed,
                  axes=axes, fixed=fixed, analysis=tuple(sorted(analysis.items())),
                  order=order, seed_rule=seed_rule, seed_paths=seed_paths,
                  seed_over=seed_over)
    count = 1
    for axis in study.axes:
        count *= len(axis.steps)
    if count > MAX_POINTS:
        raise _fail(source, "grid", f"at most {MAX_POINTS} points", f"<{count} points>")
    from testbed.limits import check_run

    for point in study.points():  # every point is valid and fits before anything runs
        cell = study.scenario(point, 0)
        for executor in study.executors:
            check_run(cell, executor)
    return study


def load_study(path: str | Path) -> Study:
    """Read and validate a study file."""
    path = Path(path)
    if not path.is_file():
        raise _fail(str(path), "", "a study file (YAML)", "<no such file>")
    return study_from_dict(read_yaml(path), source=str(path))


def describe(study: Study) -> dict[str, Any]:
    """What ``study.json`` holds: the study's settings as a report needs them."""
    return {"study": study.name, "description": study.description, "source": study.source,
            "scenario": study.scenario_source, "system": study.system,
            "grid": study.grid_paths, "baseline": study.baseline,
            "policies": list(study.policies), "policy_entries": plain_copy(list(
                study.policy_docs or study.policies)), "executors": list(study.executors),
            "order": study.order, "replications": study.replications, "seed": study.seed,
            "set": dict(study.fixed), "analysis": dict(study.analysis),
            "points": [p.as_dict() for p in study.points()],
            **({"seeds": {"rule": study.seed_rule, "also": list(study.seed_paths),
                          **({"over": dict(study.seed_over)} if study.seed_over else {})}}
               if (study.seed_rule, study.seed_paths, study.seed_over)
               != (SEED_RULES[0], (), ()) else {})}

