"""Fuzzing the loader: whatever a file holds, it returns a Scenario or raises ScenarioError.

Three sources of input: random YAML-ish structures, random text written to a file, and
mutations of the valid built-in scenario (a leaf replaced by junk, a key deleted or added,
a list item duplicated), which reach deep into the validation instead of failing at the
top level.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.errors import ScenarioError
from testbed.scenario import (
    Scenario,
    builtin_scenarios,
    builtin_topologies,
    load_scenario,
    scenario_from_dict,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Words the loader gives meaning to, so random structures hit real branches.
WORDS = [
    "name",
    "topology",
    "services",
    "workload",
    "policies",
    "duration",
    "seed",
    "events",
    "executor",
    "time_scale",
    "repetitions",
    "nodes",
    "links",
    "switch",
    "role",
    "client",
    "server",
    "a",
    "b",
    "delay_ms",
    "jitter_ms",
    "tier_server",
    "params",
    "workers",
    "mu",
    "random",
    "at",
    "action",
    "target",
    "crash",
    "link_change",
    "c1",
    "s1",
    "edge",
    "cloud",
    "c1-s1",
    "continuum",
    "jsq",
    "bursty-pareto",
    "rate",
    "generator",
    "program",
    "node",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(WORDS),
)
keys = st.one_of(st.sampled_from(WORDS), st.text(max_size=8), st.integers(-3, 3))
structures = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=25,
)


def builtin_document() -> dict[str, Any]:
    """The built-in scenario as parsed YAML, with its topology inlined (to fuzz it too)."""
    doc = yaml.safe_load(builtin_scenarios()["continuum"].read_text())
    doc["topology"] = yaml.safe_load(builtin_topologies()["continuum"].read_text())
    doc["events"] = [
        {"at": 5, "action": "link_change", "target": "cloud-s1", "params": {"delay_ms": 30}},
        {"random": {"action": "crash", "targets": ["edge"], "rate_per_s": 0.1}},
    ]
    return doc


BASE = builtin_document()


def load_quietly(doc: Any) -> Scenario | None:
    """Validate ``doc``; ScenarioError is an acceptable answer, anything else is a bug."""
    try:
        return scenario_from_dict(doc, source="<fuzz>")
    except ScenarioError:
        return None


def containers(doc: Any) -> list[Any]:
    """Every dict and list inside ``doc``, itself included."""
    found = [doc]
    children = doc.values() if isinstance(doc, dict) else doc
    for child in children:
        if isinstance(child, (dict, list)):
            found += containers(child)
    return found


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """The built-in document with one to three random edits."""
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(containers(doc)))
        if not target:
            continue
        slots = list(target) if isinstance(target, dict) else list(range(len(target)))
        slot = draw(st.sampled_from(slots))
        edit = draw(st.sampled_from(["replace", "delete", "add", "duplicate"]))
        if edit == "replace":
            target[slot] = draw(structures)
        elif edit == "delete":
            del target[slot]
        elif edit == "add" and isinstance(target, dict):
            target[draw(keys)] = draw(structures)
        elif edit == "add":
            target.insert(slot, draw(structures))
        elif isinstance(target, list):
            target.append(copy.deepcopy(target[slot]))
    return doc


def test_base_document_is_valid() -> None:
    assert isinstance(load_quietly(BASE), Scenario)


@FUZZ
@given(structures)
def test_random_structures(doc: Any) -> None:
    load_quietly(doc)


@FUZZ
@given(mutated())
def test_mutations_of_the_builtin(doc: dict[str, Any]) -> None:
    scenario = load_quietly(doc)
    if scenario is not None:
        assert scenario_from_dict(scenario.resolved()) == scenario


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(
    text=st.one_of(
        st.text(max_size=200),
        structures.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
        mutated().map(lambda d: yaml.safe_dump(d, sort_keys=False)),
    )
)
def test_random_files(fuzz_dir: Path, text: str) -> None:
    path = fuzz_dir / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    with contextlib.suppress(ScenarioError):
        load_scenario(str(path))
