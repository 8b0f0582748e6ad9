"""Scenario model and loader: the built-in scenario, defaults, topology references,
overrides, random event schedules, and a corpus of bad files that must each fail with
one ScenarioError at the right field."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.errors import ScenarioError
from testbed.scenario import (
    TIMING_FLOOR_S,
    builtin_scenarios,
    builtin_topologies,
    load_scenario,
    load_topology,
    scenario_from_dict,
)

BAD_DIR = Path(__file__).parent / "bad_scenarios"
BAD_FILES = sorted(BAD_DIR.glob("*.yaml"))

MINIMAL: dict[str, Any] = {
    "name": "mini",
    "topology": {
        "nodes": [
            {"name": "c1", "role": "client", "tier": "local"},
            {"name": "s1", "role": "switch"},
            {"name": "edge", "role": "server", "tier": "edge", "speed": 2.0},
        ],
        "links": [{"a": "c1", "b": "s1"}, {"a": "edge", "b": "s1", "delay_ms": 2}],
    },
    "services": [
        {
            "name": "edge",
            "program": "tier_server",
            "node": "edge",
            "params": {"workers": 2, "mu": 1.0},
        },
    ],
    "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": 1.0}},
    "policies": ["random"],
    "duration": 10,
}


def minimal(**changes: Any) -> dict[str, Any]:
    """A fresh copy of the minimal valid scenario with top-level keys replaced."""
    doc = copy.deepcopy(MINIMAL)
    doc.update(copy.deepcopy(changes))
    return doc


def write(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# --- the built-in scenario -------------------------------------------------------------


def test_builtin_continuum_is_listed_and_loads() -> None:
    assert "continuum" in builtin_scenarios()
    assert "continuum" in builtin_topologies()
    s = load_scenario("continuum")
    assert s.name == "continuum"
    assert (s.seed, s.repetitions, s.duration, s.time_scale) == (1, 1, 60.0, 20.0)
    assert s.policies == ("random", "jsq")
    assert [n.name for n in s.clients()] == ["c1", "c2"]
    assert s.node("s1").is_switch and s.node("s1").runtime is None
    assert (s.node("edge").speed, s.node("cloud").speed, s.node("c1").speed) == (2.0, 1.5, 1.0)
    workers = {sv.node: sv.params["workers"] for sv in s.task_servers()}
    assert workers == {"c1": 1, "c2": 1, "edge": 4, "cloud": 16}
    assert {sv.tier for sv in s.task_servers()} == {"local", "edge", "cloud"}
    cloud = s.topology.link("s1", "cloud")
    assert (cloud.delay_ms, cloud.jitter_ms, cloud.bw_mbit) == (20.0, 1.0, 100.0)
    assert s.topology.link("c1", "s1").delay_ms == 1.0
    assert s.topology.link("edge", "s1").delay_ms == 2.0
    assert s.workload.generator == "bursty-pareto"
    assert s.workload.params["burst"] == {"on_mean_s": 5, "off_mean_s": 15, "factor": 3}
    assert s.workload.seed == 1
    assert all(n.lat is not None and n.lon is not None for n in s.topology.nodes)


def test_builtin_passes_the_timing_floor() -> None:
    s = load_scenario("continuum")
    alpha, mu = s.workload.params["alpha"], s.workload.params["mu"]
    compressed = (alpha - 1) / (alpha * mu) / 2.0 / s.time_scale
    assert compressed == pytest.approx(0.015)
    assert compressed >= TIMING_FLOOR_S


def test_servers_for_excludes_other_clients_local_servers() -> None:
    s = load_scenario("continuum")
    assert [sv.name for sv in s.servers_for("c1")] == ["c1-local", "edge", "cloud"]
    assert [sv.name for sv in s.servers_for(s.node("c2"))] == ["c2-local", "edge", "cloud"]
    assert s.services_on("edge") == (s.service("edge"),)


def test_topology_path_follows_fewest_hops() -> None:
    topo = load_scenario("continuum").topology
    assert [link.name for link in topo.path("c1", "cloud")] == ["c1-s1", "cloud-s1"]
    assert topo.path("c1", "c1") == ()
    assert sum(link.delay_ms for link in topo.path("cloud", "c2")) == 21.0


def test_resolved_is_json_and_loads_back_equal() -> None:
    s = load_scenario("continuum")
    resolved = s.resolved()
    assert isinstance(resolved["topology"], dict)  # inlined, not a name
    assert resolved["services"][0]["params"]["model"] == "hold"  # default filled
    again = scenario_from_dict(json.loads(json.dumps(resolved)))
    assert again == s


def test_scenario_is_frozen() -> None:
    s = load_scenario("continuum")
    with pytest.raises(AttributeError):
        s.seed = 2  # type: ignore[misc]


# --- defaults ----------------------------------------------------------------------------


def test_defaults_are_filled() -> None:
    s = scenario_from_dict(minimal())
    assert (s.seed, s.repetitions, s.time_scale, s.description, s.events) == (1, 1, 1.0, "", ())
    assert s.topology.switch == "linuxbridge"
    link = s.topology.link("c1", "s1")
    assert (link.delay_ms, link.jitter_ms, link.loss_pct, link.bw_mbit, link.queue) == (
        0.0,
        0.0,
        0.0,
        None,
        None,
    )
    node = s.node("c1")
    assert (node.runtime, node.speed, node.cpu, node.memory_mb, node.lat) == (
        "process",
        1.0,
        None,
        None,
        None,
    )
    service = s.service("edge")
    assert (service.port, service.tier, service.params["model"]) == (8000, "edge", "hold")
    assert s.workload.seed == 1
    ex = s.executor
    assert (ex.default, ex.poll_interval_ms, ex.shaping, ex.state_timeout_s) == (
        "emulation",
        100.0,
        "auto",
        1.0,
    )


def test_workload_seed_follows_scenario_seed_unless_given() -> None:
    assert scenario_from_dict(minimal(seed=9)).workload.seed == 9
    doc = minimal(seed=9)
    doc["workload"]["seed"] = 4
    assert scenario_from_dict(doc).workload.seed == 4


def test_service_tier_overrides_node_tier() -> None:
    doc = minimal()
    doc["services"][0]["tier"] = "fog"
    assert scenario_from_dict(doc).service("edge").tier == "fog"


def test_explicit_nulls_mean_unset_for_optional_fields() -> None:
    doc = minimal()
    doc["topology"]["links"][0].update(bw_mbit=None, queue=None)
    doc["topology"]["nodes"][0].update(cpu=None, lat=None, lon=None)
    s = scenario_from_dict(doc)
    assert s.topology.links[0].bw_mbit is None and s.node("c1").cpu is None


# --- topology references ---------------------------------------------------------------


def test_topology_by_package_name(tmp_path: Path) -> None:
    doc = yaml.safe_load(builtin_scenarios()["continuum"].read_text())
    path = write(tmp_path / "scen.yaml", doc)
    assert load_scenario(str(path)).topology == load_topology("continuum")


def test_topology_by_path_relative_to_scenario(tmp_path: Path) -> None:
    (tmp_path / "nets").mkdir()
    write(tmp_path / "nets" / "small.yaml", MINIMAL["topology"])
    path = write(tmp_path / "scen.yaml", minimal(topology="nets/small.yaml"))
    inline = scenario_from_dict(minimal())
    assert load_scenario(str(path)).topology == inline.topology
    assert load_topology(str(tmp_path / "nets" / "small.yaml")) == inline.topology


def test_error_in_referenced_topology_names_that_file(tmp_path: Path) -> None:
    topo = copy.deepcopy(MINIMAL["topology"])
    topo["links"][1]["delay_ms"] = -1
    write(tmp_path / "broken.yaml", topo)
    path = write(tmp_path / "scen.yaml", minimal(topology="broken.yaml"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    assert err.value.file.endswith("broken.yaml")
    assert err.value.path == "links[1].delay_ms"


def test_unknown_scenario_and_topology_names() -> None:
    with pytest.raises(ScenarioError, match="built-in scenario"):
        load_scenario("no-such-scenario")
    with pytest.raises(ScenarioError, match="continuum"):
        load_topology("no-such-topology")


def test_unreadable_file_is_a_scenario_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ScenarioError, match="UTF-8"):
        load_scenario(str(path))


# --- overrides -----------------------------------------------------------------------------


def test_with_overrides_replaces_and_revalidates() -> None:
    s = load_scenario("continuum")
    o = s.with_overrides(policies=("jsq",), seed=7, duration=30, repetitions=3, time_scale=10)
    assert (o.policies, o.seed, o.duration, o.repetitions, o.time_scale) == (
        ("jsq",),
        7,
        30.0,
        3,
        10.0,
    )
    assert o.workload.seed == 7  # derived from the scenario seed, so it follows
    assert o.topology == s.topology and o.source == s.source
    assert s.with_overrides(seed=None) == s
    assert s.with_overrides() == s


def test_with_overrides_refuses_bad_values() -> None:
    s = load_scenario("continuum")
    with pytest.raises(ScenarioError) as err:
        s.with_overrides(time_scale=1000)
    assert err.value.path == "time_scale"
    assert "1 ms" in str(err.value) and "0.3 ms" in str(err.value)
    with pytest.raises(ScenarioError, match="policies"):
        s.with_overrides(policies=["nope"])
    with pytest.raises(ScenarioError, match="repetitions"):
        s.with_overrides(repetitions=True)
    with pytest.raises(TypeError):
        s.with_overrides(name="other")


def test_overriding_duration_rechecks_events() -> None:
    s = scenario_from_dict(minimal(events=[{"at": 8, "action": "crash", "target": "edge"}]))
    with pytest.raises(ScenarioError) as err:
        s.with_overrides(duration=5)
    assert err.value.path == "events[0].at"


# --- events ----------------------------------------------------------------------------------

RANDOM_EVENTS = [
    {"at": 3.0, "action": "link_change", "target": "s1-edge", "params": {"delay_ms": 5}},
    {"random": {"action": "crash", "targets": ["edge", "c1"], "rate_per_s": 2.0}},
    {"random": {"action": "load", "targets": ["edge"], "rate_per_s": 2.0, "params": {"cpu": 0.5}}},
    {"at": 1.0, "action": "link_down", "target": "c1-s1"},
]


def test_explicit_events_are_sorted_and_link_targets_normalised() -> None:
    s = scenario_from_dict(minimal(events=[RANDOM_EVENTS[0], RANDOM_EVENTS[3]]))
    assert [(e.at, e.action, e.target) for e in s.events] == [
        (1.0, "link_down", "c1-s1"),
        (3.0, "link_change", "edge-s1"),
    ]
    assert s.events[1].link_ends == ("edge", "s1")
    assert s.events[1].params == {"delay_ms": 5.0}


def test_random_events_expand_deterministically() -> None:
    first = scenario_from_dict(minimal(events=RANDOM_EVENTS))
    second = scenario_from_dict(minimal(events=RANDOM_EVENTS))
    assert first.events == second.events
    times = [e.at for e in first.events]
    assert times == sorted(times)
    assert all(0 <= t < first.duration for t in times)
    crashes = [e for e in first.events if e.action == "crash"]
    loads = [e for e in first.events if e.action == "load"]
    assert crashes and loads
    assert {e.target for e in crashes} <= {"edge", "c1"}
    assert all(e.params == {"cpu": 0.5} for e in loads)
    # Same rate and default seed, but each schedule mixes in its position: they differ.
    assert [e.at for e in crashes] != [e.at for e in loads]


def test_random_events_follow_the_seed() -> None:
    base = scenario_from_dict(minimal(events=RANDOM_EVENTS))
    assert base.with_overrides(seed=2).events != base.events
    pinned = copy.deepcopy(RANDOM_EVENTS)
    pinned[1]["random"]["seed"] = 5
    a = scenario_from_dict(minimal(events=pinned))
    b = scenario_from_dict(minimal(events=pinned, seed=3))
    assert [e for e in a.events if e.action == "crash"] == [
        e for e in b.events if e.action == "crash"
    ]


def test_link_changes_are_checked_in_time_order() -> None:
    events = [
        {"at": 2, "action": "link_change", "target": "edge-s1", "params": {"jitter_ms": 4}},
        {"at": 1, "action": "link_change", "target": "edge-s1", "params": {"delay_ms": 5}},
    ]
    assert len(scenario_from_dict(minimal(events=events)).events) == 2
    events[1]["at"] = 3
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(minimal(events=events))
    assert err.value.path == "events[0].params"


# --- the generator contract ----------------------------------------------------------------


class Plain:
    """A generator with neither hook: any params, no timing check."""

    name = "plain"


class Picky:
    """A generator whose validation fails with something other than a ValueError."""

    name = "picky"

    def validate(self, params: dict[str, Any]) -> None:
        raise KeyError("rate")


@pytest.fixture
def test_generators() -> Iterator[None]:
    """A system registering the two generators above, removed after the test."""
    from testbed.registry import System, register

    remove = register(System(name="generator-tests", description="test generators",
                             generators={"plain": f"{__name__}:Plain",
                                         "picky": f"{__name__}:Picky"}))
    yield
    remove()


@pytest.mark.usefixtures("test_generators")
def test_generator_without_hooks_is_accepted() -> None:
    doc = minimal(workload={"generator": "plain", "params": {"anything": [1, "x"]}}, time_scale=1e9)
    assert scenario_from_dict(doc).workload.params == {"anything": [1, "x"]}


@pytest.mark.usefixtures("test_generators")
def test_generator_errors_are_wrapped() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(minimal(workload={"generator": "picky"}))
    assert err.value.path == "workload.params"


# --- bad files ----------------------------------------------------------------------------


def test_bad_corpus_is_large_enough() -> None:
    assert len(BAD_FILES) >= 20


@pytest.mark.parametrize("path", BAD_FILES, ids=[p.stem for p in BAD_FILES])
def test_bad_scenario_fails_at_the_expected_field(path: Path) -> None:
    match = re.search(r"^# expect: (.+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} lacks an '# expect:' line"
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    assert match.group(1).strip() in err.value.path
    assert err.value.file == str(path)


def test_error_message_names_file_path_expected_and_found() -> None:
    doc = minimal()
    doc["topology"]["links"][1]["delay_ms"] = "2ms"
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(doc, source="x.yaml")
    assert str(err.value) == (
        "x.yaml: topology.links[1].delay_ms: expected a finite number in [0, 60000], found '2ms'"
    )


def test_self_referencing_params_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ScenarioError, match="nested at most"):
        scenario_from_dict(
            minimal(
                workload={"generator": "bursty-pareto", "params": {"rate": 1, "mu": 1, "x": loop}}
            )
        )


def test_docker_node_volumes_are_parsed_and_round_trip() -> None:
    data = copy.deepcopy(MINIMAL)
    data["topology"]["nodes"][2].update(runtime="docker",
                                        volumes={"store": "/var/lib/cargo", "logs": "/logs"})
    node = scenario_from_dict(data).topology.node("edge")
    assert node.volumes == (("logs", "/logs"), ("store", "/var/lib/cargo"))
    shown = node.to_dict()
    assert shown["volumes"] == {"logs": "/logs", "store": "/var/lib/cargo"}
    again = copy.deepcopy(MINIMAL)
    again["topology"]["nodes"][2] = shown
    assert scenario_from_dict(again).topology.node("edge") == node
    assert "volumes" not in scenario_from_dict(MINIMAL).topology.node("edge").to_dict()


def test_task_timeout_defaults_to_the_duration_and_at_least_a_minute(tmp_path: Path):
    path = tmp_path / "s.yaml"
    bad = Path(__file__).parent / "bad_scenarios" / "task_timeout_zero.yaml"
    text = bad.read_text().replace("task_timeout: 0\n", "")
    path.write_text(text)
    assert load_scenario(path).task_timeout == 60.0
    assert load_scenario(path).with_overrides(duration=90).task_timeout == 90.0
    path.write_text(text + "task_timeout: 12.5\n")
    scenario = load_scenario(path)
    assert scenario.task_timeout == 12.5 and scenario.resolved()["task_timeout"] == 12.5
    assert scenario.with_overrides(task_timeout=3).task_timeout == 3.0
