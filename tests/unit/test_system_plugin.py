"""A system defined in the test tree plugs into the generic harness with no edit to it.

The ``echo`` system (``tests/testsystem/``) registers a program with its params
validator, a generator, two policies, a scenario builder, an emulation driver and a
simulator. Here it runs end to end through ``testbed run`` in the simulator (no root);
``tests/emulation/test_system_plugin.py`` runs it in emulation.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from testbed.cli import listing, main
from testbed.errors import ScenarioError
from testbed.registry import get_system, register
from testbed.scenario import load_scenario, scenario_from_dict
from tests.testsystem import SCENARIO, SYSTEM, register_echo


@pytest.mark.usefixtures("echo")
def test_cli_runs_the_new_system_in_the_simulator(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    assert main(["run", SCENARIO, "--out", str(tmp_path / "run")]) == 0
    folder = tmp_path / "run"
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["system"] == "echo" and meta["executor"] == "sim"
    assert meta["scenario"]["services"][1]["params"] == {"service_ms": 5.0}
    summary = json.loads((folder / "summary.json").read_text())
    # first: always e1, 2 x 2 ms + 5 ms; round-robin alternates e1 and e2 (2 x 4 + 5)
    assert summary["policies"]["first"]["mean_ms"] == pytest.approx(9.0)
    assert summary["policies"]["round-robin"]["mean_ms"] == pytest.approx(11.0)
    assert (folder / "traces.parquet").is_file() and (folder / "trace" / "trace.csv").is_file()
    # the system's own row kind and column, registered with it, are in the standard file
    df = read_traces(folder)
    assert set(df["kind"]) == {"ping"} and df["echo_seq"].notna().all()
    assert sorted(p.name for p in folder.glob("*.png"))
    assert "round-robin" in capsys.readouterr().out


@pytest.mark.usefixtures("echo")
def test_the_plugin_fixture_honours_the_scenario_default_executor(run_scenario) -> None:
    run = run_scenario(SCENARIO, duration=1)
    assert run.metadata["executor"] == "sim"
    assert set(run.traces["policy"]) == {"first", "round-robin"}


@pytest.mark.usefixtures("echo")
def test_list_shows_what_the_system_registers() -> None:
    found = listing()
    assert {"name": "first", "system": "echo", "description": "always the first server"} \
        in found["policies"]
    assert any(g["name"] == "echo-pings" and g["system"] == "echo" for g in found["generators"])


@pytest.mark.usefixtures("echo")
def test_builder_params_are_checked_at_load_time(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(SCENARIO).read_text().replace("servers: 2", "servers: 9"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(bad))
    assert err.value.path == "build.params.servers"
    assert "an integer in [1, 8]" in str(err.value)
    bad.write_text(Path(SCENARIO).read_text().replace("builder: echo-star", "builder: nope"))
    with pytest.raises(ScenarioError, match="one of the scenario builders .*echo-star"):
        load_scenario(str(bad))


@pytest.mark.usefixtures("echo")
def test_program_params_and_policies_are_the_systems() -> None:
    doc = load_scenario(SCENARIO).raw
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({**doc, "policies": ["jsq"]})
    assert err.value.path == "policies[0]" and "echo policies broken, first, round-robin" in str(err.value)
    built = load_scenario(SCENARIO).resolved()
    built["services"][0]["params"] = {"service_ms": 0}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(built)
    assert err.value.path == "services[0].params.service_ms"


def test_a_system_without_a_simulator_refuses_the_sim_executor(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    remove = register(replace(SYSTEM, simulate=None))
    try:
        assert get_system("echo").executors == ("emulation",)
        assert main(["run", SCENARIO, "--out", str(tmp_path / "r")]) == 2
    finally:
        remove()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the echo system has no simulator" in err
    assert not (tmp_path / "r").exists()


def test_an_unregistered_system_is_unknown_to_the_loader() -> None:
    with pytest.raises(ScenarioError, match="one of the scenario builders") as err:
        load_scenario(SCENARIO)
    assert err.value.path == "build.builder"
    remove = register_echo()
    try:
        built = load_scenario(SCENARIO).resolved()
    finally:
        remove()
    with pytest.raises(ScenarioError, match="one of the scenario builders") as err:
        scenario_from_dict(built)  # the resolved form keeps its build:
    assert err.value.path == "build.builder"
    written_out = {k: v for k, v in built.items() if k != "build"}
    with pytest.raises(ScenarioError, match="a program registered by a system") as err:
        scenario_from_dict(written_out)
    assert err.value.path == "services[0].program"


@pytest.mark.usefixtures("echo")
def test_a_failing_policy_loses_only_itself(tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    """``broken`` raises on each client's third ping: ``testbed run`` keeps the policies
    before and after it, names it with its error, and exits 1."""
    out = tmp_path / "run"
    code = main(["run", SCENARIO, "--policies", "first,broken,round-robin",
                 "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err
    assert "1 replay(s) failed: broken (repetition 0)" in err and str(out) in err
    assert set(read_traces(out)["policy"]) == {"first", "round-robin"}
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["policies"]) == ["first", "round-robin"]
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["failed"] == [{"policy": "broken", "repetition": 0,
                               "error": "RuntimeError: broken: fails on a client's third ping"}]
    assert sorted(p.name for p in out.glob("*.png"))
