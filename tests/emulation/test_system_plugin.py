"""The test tree's ``echo`` system in emulation: real hosts, links and HTTP, through the
generic ``testbed run`` path with no edit to the harness (see
``tests/unit/test_system_plugin.py`` for the simulator)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from testbed.replays import RunIncomplete
from testbed.runner import run_scenario
from testbed.scenario import load_scenario
from tests.testsystem import SCENARIO

pytestmark = pytest.mark.emulation


@pytest.mark.usefixtures("echo")
def test_the_new_system_runs_in_emulation(run_scenario) -> None:
    run = run_scenario(SCENARIO, executor="emulation")
    assert run.metadata["system"] == "echo" and run.metadata["executor"] == "emulation"
    df = run.traces
    assert set(df["outcome"]) == {"ok"}
    assert set(df["kind"]) == {"ping"} and df["echo_seq"].notna().all()
    assert set(df[df["policy"] == "first"]["target"]) == {"echo1"}
    assert set(df[df["policy"] == "round-robin"]["target"]) == {"echo1", "echo2"}
    # e2's link is 2 ms longer one-way than e1's, so each round trip 4 ms longer; a ping
    # opens a fresh TCP connection (handshake, then the exchange): two round trips, 8 ms
    p50 = df.groupby("target")["latency_s"].median() * 1000
    assert 6.0 < p50["echo2"] - p50["echo1"] < 12.0


@pytest.mark.usefixtures("echo")
def test_a_failing_policy_in_emulation_keeps_the_others(tmp_path: Path) -> None:
    """``broken`` raises on each client's third ping in the emulated replay: the run
    restores the network, replays ``first`` after it and writes what finished."""
    scenario = load_scenario(SCENARIO).with_overrides(policies=["broken", "first"])
    out = tmp_path / "run"
    with pytest.raises(RunIncomplete, match=r"broken \(repetition 0\)"):
        run_scenario(scenario, out=out, executor="emulation", progress=lambda _l: None)
    df = read_traces(out)
    assert set(df["policy"]) == {"first"} and set(df["outcome"]) == {"ok"}
    meta = json.loads((out / "metadata.json").read_text())
    assert [f["policy"] for f in meta["failed"]] == ["broken"]
    assert "third ping" in meta["failed"][0]["error"]
    assert meta["teardown_errors"] == []
