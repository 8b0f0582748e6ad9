"""Policy entries in scenarios and studies: ``{name, label, params}`` beside bare names,
checked by the loader, labels in traces and tables, params in ``metadata.json``, and the
same entries on the simulator and in studies (the emulation's dispatchers take them in
``tests/emulation/test_scenarios.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from testbed.errors import ScenarioError
from testbed.runner import run_scenario
from testbed.scenario import load_scenario, scenario_from_dict
from testbed.scenario.model import PolicyEntry
from testbed.study.run import run_study
from testbed.study.spec import study_from_dict

CAPACITY = {"name": "random", "label": "random-capacity", "params": {"weights": "capacity"}}
SPILL = {"name": "edge-first", "label": "edge-spill",
         "params": {"spill": "queue-threshold", "threshold": 2}}


def continuum(policies: list[Any], **changes: Any) -> Any:
    data = load_scenario("continuum").resolved()
    data.update({"duration": 60.0, "policies": policies, **changes})
    return scenario_from_dict(data, source="s.yaml")


def test_entries_keep_name_label_and_params_and_round_trip() -> None:
    scenario = continuum(["random", CAPACITY, SPILL])
    assert scenario.policies == ("random", "random-capacity", "edge-spill")
    assert scenario.policy_entry("random-capacity") == PolicyEntry(
        "random-capacity", "random", {"weights": "capacity"})
    assert scenario.policy_entry("random") == PolicyEntry("random", "random", {})
    resolved = scenario.resolved()
    assert resolved["policies"] == ["random", CAPACITY, SPILL]
    assert scenario_from_dict(resolved) == scenario
    # an override by label keeps its entry; a name adds the bare policy
    narrowed = scenario.with_overrides(policies=["edge-spill", "jsq"])
    assert narrowed.policy_entry("edge-spill").params == SPILL["params"]
    assert narrowed.policies == ("edge-spill", "jsq")


@pytest.mark.parametrize(("policies", "path", "expected"), [
    ([{"name": "random", "params": {"weights": "speed"}}], "policies[0].params.weights",
     "one of uniform, capacity"),
    ([{"name": "random", "params": {"seed": 3}}], "policies[0].params.seed",
     "parameters of random"),
    ([CAPACITY, {**SPILL, "label": "random-capacity"}], "policies[1]",
     "a policy label not listed before"),
    (["jsq", {"name": "jsq"}], "policies[1]", "a policy label not listed before"),
    ([{"name": "random", "label": "jsq"}], "policies[0].label",
     "not another policy's name"),
    ([{"name": "random", "label": "a/b"}], "policies[0].label", "a label matching"),
    ([{"name": "nope"}], "policies[0].name", "one of the offloading policies"),
    ([{"label": "x"}], "policies[0].name", "required"),
    ([{"name": "jsq", "colour": 1}], "policies[0].colour", "one of the keys"),
    ([{"name": "jsq", "params": [1]}], "policies[0].params", "a mapping"),
])
def test_bad_entries_name_file_field_and_expectation(policies: list[Any], path: str,
                                                     expected: str) -> None:
    with pytest.raises(ScenarioError) as err:
        continuum(policies)
    assert err.value.file == "s.yaml"
    assert err.value.path == path, str(err.value)
    assert expected in err.value.expected, str(err.value)


def test_a_system_without_policy_parameters_takes_no_params_and_no_other_label(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from testbed import registry

    data = load_scenario("armada-selection").resolved()
    name = data["policies"][0]
    # Armada without its policy_params hook: a system whose policies take nothing
    monkeypatch.setitem(registry._REGISTERED, "armada",
                        replace(registry.get_system("armada"), policy_params=None))
    for entry, path in (({"name": name, "params": {"x": 1}}, "policies[0].params.x"),
                        ({"name": name, "label": "other"}, "policies[0].label")):
        with pytest.raises(ScenarioError) as err:
            scenario_from_dict({**data, "policies": [entry]}, source="p.yaml")
        assert err.value.path == path, str(err.value)
    same = scenario_from_dict({**data, "policies": [{"name": name}]})
    assert same.policies == (name,)


def test_labels_name_traces_and_params_reach_the_simulated_policy(tmp_path: Path) -> None:
    scenario = continuum(["random", CAPACITY])
    folder = run_scenario(scenario, out=tmp_path / "run", executor="sim",
                          progress=lambda _l: None, plots=False)
    traces = pd.read_parquet(folder / "traces.parquet")
    assert set(traces["policy"]) == {"random", "random-capacity"}
    share = traces.groupby("policy")["tier"].apply(lambda s: (s == "local").mean())
    # uniform sends about a third of the tasks to each local tier; capacity about 1/33
    assert share["random"] > 0.2 and share["random-capacity"] < 0.1, share
    summary = json.loads((folder / "summary.json").read_text())
    assert set(summary["policies"]) == {"random", "random-capacity"}
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["policy_entries"]["random-capacity"] == {
        "name": "random", "params": {"weights": "capacity"}}
    assert meta["scenario"]["policies"][1] == CAPACITY


def test_a_study_takes_entries_and_labels_its_rows(tmp_path: Path) -> None:
    doc = {"study": "entries", "scenario": "continuum", "executors": ["sim"],
           "policies": ["random", CAPACITY], "baseline": "random-capacity",
           "replications": 2, "seed": 4, "grid": {"duration": [20]}}
    study = study_from_dict(doc)
    assert study.policies == ("random", "random-capacity")
    out = run_study(study, tmp_path / "s", serial=True, progress=lambda _l: None)
    table = pd.read_parquet(out / "summary.parquet")
    assert set(table["policy"]) == {"random", "random-capacity"}
    base = table[table["policy"] == "random-capacity"]
    assert (base["diff_vs_baseline_ms"] == 0).all()
    about = json.loads((out / "study.json").read_text())
    assert about["policy_entries"] == ["random", CAPACITY]
    with pytest.raises(ScenarioError) as err:
        study_from_dict({**doc, "policies": [{**CAPACITY, "params": {"weights": 1}}]},
                        source="study.yaml")
    assert (err.value.file, err.value.path) == ("study.yaml", "policies[0].params.weights")
