"""Scheduled events on time in every replay, or flagged (issue 31, part 1).

The scenario (``scenarios/events-on-time.yaml``): four tier servers, policies random
and jsq, time_scale 20; e2 crashes at 10 model s, e3's link slows at 15, e2 joins at
20. Each replay logs one line per event in ``work/events.jsonl``; the fidelity guard
judges their lateness against 0.3 model s (1 % of the 30 s duration).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.emulation

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "events-on-time.yaml"
ALLOWED_MODEL_S = 0.3


def variant(tmp_path: Path, docker: bool = False, **changes: Any) -> Path:
    """The scenario file with e2 on the docker runtime and/or top-level keys replaced."""
    doc = yaml.safe_load(SCENARIO.read_text())
    if docker:
        next(n for n in doc["topology"]["nodes"] if n["name"] == "e2")["runtime"] = "docker"
    doc.update(changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def event_lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "work" / "events.jsonl").read_text()
            .splitlines()]


def assert_on_time_in_every_replay(run: Any, repetitions: int, crash_at: float = 10.0,
                                   join_at: float = 20.0) -> list[dict[str, Any]]:
    """One line per event, policy and repetition, each applied within the allowance;
    the fidelity guard saw no late event."""
    lines = event_lines(run.folder)
    expected = [(policy, rep, action, at) for rep in range(repetitions)
                for policy in ("random", "jsq")
                for action, at in (("crash", crash_at), ("link_change", 15.0),
                                   ("join", join_at))]
    assert [(x["policy"], x["repetition"], x["action"], x["at"]) for x in lines] == expected
    for x in lines:
        assert x["outcome"] == "applied", x
        assert 0 <= x["applied_model"] - x["at"] <= ALLOWED_MODEL_S, x
        if x["action"] == "join":  # prepared behind the gate before it was due
            assert x["prepared_model"] < x["at"], x
    verdict = run.metadata["fidelity"]
    measure = verdict["measures"]["event_lateness"]
    assert measure["count"] == len(expected) and measure["late"] == 0
    assert measure["allowed_model_s"] == pytest.approx(ALLOWED_MODEL_S)
    assert not any("event(s)" in why for why in [*verdict["reasons"],
                                                  *verdict["degraded_policies"].values()])
    return lines


@pytest.mark.timing
def test_events_are_on_time_in_every_replay_and_the_joined_node_serves_only_when_due(
        run_scenario: Any) -> None:
    run = run_scenario(str(SCENARIO), repetitions=2)
    assert_on_time_in_every_replay(run, repetitions=2)
    e2 = run.traces[run.traces.target == "e2"]
    while_down = e2[(e2.dispatch_model > 10.5) & (e2.dispatch_model < 19.5)]
    assert len(while_down), "no task was sent to e2 while it was down"
    # the gate: e2's services ran from its prepared_model on, yet nothing reached them
    assert (while_down.outcome != "ok").all(), while_down[["policy", "dispatch_model"]]
    assert (e2[e2.dispatch_model > 21].outcome == "ok").all()


@pytest.mark.timing
def test_a_docker_node_crashes_and_joins_on_time(run_scenario, tmp_path: Path) -> None:
    # A container restart and a fresh interpreter take 0.5 - 0.7 s on the project's VM
    # (more on a busy host), and the harness prepares a join only when twice that fits
    # between crash and join; at time_scale 20 the 0.5 s of the base scenario do not
    # fit: the run warns and flags that (docs/fidelity.md). Here, at time_scale 10, they
    # have 2 s (1 s at time_scale 20 fitted only when the start took under 0.5 s).
    events = [{"at": 5, "action": "crash", "target": "e2"},
              {"at": 15, "action": "link_change", "target": "e3-s1",
               "params": {"delay_ms": 10}},
              {"at": 25, "action": "join", "target": "e2"}]
    lines: list[str] = []
    run = run_scenario(str(variant(tmp_path, docker=True, events=events, time_scale=10)),
                       progress=lines.append)
    assert run.metadata["hosts"]["e2"]["runtime"] == "docker"
    assert run.metadata["event_timing"]["costs"]["container_start_s"]["e2"] > 0
    assert run.metadata["event_timing"]["warnings"] == []
    assert not any("cannot be prepared in time" in line for line in lines)
    assert_on_time_in_every_replay(run, repetitions=1, crash_at=5.0, join_at=25.0)


def test_a_join_due_with_its_crash_is_late_warned_about_and_flags_the_run(
        run_scenario, tmp_path: Path) -> None:
    # Due at the crash's own instant, the join cannot be prepared ahead: it takes
    # effect a service start (tens of ms of wall time, about 1 model s) late.
    events = [{"at": 10, "action": "crash", "target": "e2"},
              {"at": 10, "action": "join", "target": "e2"}]
    lines: list[str] = []
    run = run_scenario(str(variant(tmp_path, policies=["jsq"], events=events)),
                       progress=lines.append)
    (warning_at,) = [i for i, x in enumerate(lines) if "cannot be prepared in time" in x]
    assert "join e2 at 10 model s" in lines[warning_at]
    assert warning_at < next(i for i, x in enumerate(lines) if x.startswith("  jsq"))
    (warned,) = run.metadata["event_timing"]["warnings"]
    assert warned["target"] == "e2" and warned["window_s"] == 0
    crash, join = event_lines(run.folder)
    assert crash["action"] == "crash" and crash["outcome"] == "applied"
    assert join["outcome"] == "applied" and join["prepared_model"] >= join["at"]
    late = join["applied_model"] - join["at"]
    assert late > ALLOWED_MODEL_S
    verdict = run.metadata["fidelity"]
    assert verdict["degraded"]  # its only policy was hit: the run is
    assert any(f"join e2 at 10 model s (policy jsq, repetition 0) {late:.2f} model s late"
               in why for why in verdict["reasons"]), verdict["reasons"]
    assert any("degraded emulation" in x and "join e2" in x for x in lines)
