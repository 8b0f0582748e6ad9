"""Scheduled events on time or flagged, without root: the event log's line, the fidelity
guard's judgement of event lateness, the pre-run cost warning, and the scheduler's
lanes on a stand-in topology whose actions only record when they ran."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.analysis import fidelity
from testbed.emulation.events import (
    COST_MARGIN,
    EventScheduler,
    cost_warnings,
    lanes,
    warning_text,
)
from testbed.event_log import (
    APPLIED,
    FIELDS,
    NOT_APPLIED,
    lateness_model_s,
    log_line,
)
from testbed.scenario.loader import scenario_from_dict
from testbed.scenario.model import Event, Scenario

SCENARIO = Path(__file__).resolve().parents[1] / "emulation" / "scenarios" / "events-on-time.yaml"


def scenario(**changes: Any) -> Scenario:
    """The issue's scenario (crash e2 at 10, e3's link at 15, e2 joins at 20; 30 s at
    time_scale 20), with top-level keys replaced."""
    doc = yaml.safe_load(SCENARIO.read_text())
    doc.update(changes)
    return scenario_from_dict(doc, source=str(SCENARIO))


def line(policy: str, at: float, applied: float | None, outcome: str = APPLIED,
         action: str = "join", ended: float | None = None, repetition: int = 0
         ) -> dict[str, Any]:
    """A log line of an event due at model time ``at`` that took effect at ``applied``
    (model time; the replay's model time 0 is wall instant 1000, time_scale 20)."""
    start, scale = 1000.0, 20.0

    def wall(model: float | None) -> float | None:
        return None if model is None else start + model / scale

    return log_line(policy, repetition, Event(at=at, action=action, target="e2"), start,
                    scale, wall(applied), outcome, ended_wall=wall(ended))


# ----- the log line ------------------------------------------------------------------

def test_a_line_has_every_field_in_model_and_wall_time() -> None:
    event = Event(at=15.0, action="link_change", target="e3-s1", params={"delay_ms": 10})
    got = log_line("jsq", 1, event, start_at=1000.0, time_scale=20, applied_wall=1000.76,
                   outcome=APPLIED)
    assert tuple(got) == FIELDS
    assert got["policy"] == "jsq" and got["repetition"] == 1
    assert got["action"] == "link_change" and got["target"] == "e3-s1"
    assert got["params"] == {"delay_ms": 10} and got["at"] == 15.0
    assert got["due_wall"] == pytest.approx(1000.75)
    assert got["applied_model"] == pytest.approx(15.2)
    assert lateness_model_s(got) == pytest.approx(0.2)
    json.dumps(got)


def test_an_event_the_replay_ended_before_is_late_by_how_long_it_had_been_due() -> None:
    never = line("jsq", 20.0, None, NOT_APPLIED, ended=26.5)
    assert never["applied_model"] is None and never["applied_wall"] is None
    assert never["ended_model"] == pytest.approx(26.5)
    assert lateness_model_s(never) == pytest.approx(6.5)
    not_yet = line("jsq", 29.0, None, NOT_APPLIED, ended=28.0)
    assert lateness_model_s(not_yet) == 0.0  # not due yet when the replay ended
    assert lateness_model_s(line("jsq", 20.0, None, "failed: boom")) is None


def test_a_prepared_join_says_when_its_node_was_ready() -> None:
    got = log_line("random", 0, Event(at=20.0, action="join", target="e2"), 1000.0, 20,
                   1001.0, APPLIED, prepared_wall=1000.8)
    assert got["prepared_model"] == pytest.approx(16.0)


# ----- the judgement -----------------------------------------------------------------

def test_the_allowance_is_one_model_second_or_one_percent_of_the_duration() -> None:
    thresholds = fidelity.Thresholds()
    assert thresholds.event_allowance(30) == pytest.approx(0.3)
    assert thresholds.event_allowance(600) == 1.0


def judged(lines: list[dict[str, Any]], allowed: float = 0.3) -> dict[str, Any]:
    return fidelity.judge({"event_lateness": fidelity.event_lateness(lines, allowed)})


def test_events_on_time_degrade_nothing() -> None:
    lines = [line(p, at, at + 0.05, action=a) for p in ("random", "jsq")
             for at, a in ((10, "crash"), (15, "link_change"), (20, "join"))]
    measure = fidelity.event_lateness(lines, 0.3)
    assert measure["count"] == 6 and measure["applied"] == 6 and measure["late"] == 0
    assert measure["max_model_s"] == pytest.approx(0.05)
    verdict = judged(lines)
    assert not verdict["degraded"] and verdict["degraded_policies"] == {}


def test_a_late_event_in_one_policys_replays_marks_that_policy() -> None:
    lines = [line("random", 20, 20.1), line("jsq", 20, 46.5)]
    verdict = judged(lines)
    assert not verdict["degraded"]
    why = verdict["degraded_policies"]["jsq"]
    assert "join e2 at 20 model s (policy jsq, repetition 0) 26.50 model s late" in why
    assert "0.3 model s" in why
    assert "random" not in verdict["degraded_policies"]


def test_late_events_in_every_policys_replays_degrade_the_run() -> None:
    lines = [line("random", 10, 31.6, action="crash"),
             line("jsq", 20, None, NOT_APPLIED, ended=30.5),
             line("jsq", 15, None, "failed: link e3-s1 is gone", action="link_change")]
    verdict = judged(lines)
    assert verdict["degraded"] and verdict["degraded_policies"] == {}
    (reason,) = verdict["reasons"]
    assert reason.startswith("3 event(s) late by more than 0.3 model s or not applied")
    assert "link_change e2 at 15 model s (policy jsq, repetition 0) failed: link e3-s1" in reason
    assert "crash e2 at 10 model s (policy random, repetition 0) 21.60 model s late" in reason
    assert "not applied: the replay ended 10.50 model s after it was due" in reason


def test_late_events_add_to_a_policys_dispatch_lag_reason() -> None:
    lag = {"count": 2, "p50_ms": 1, "p99_ms": 50, "max_ms": 50,
           "by_policy": {"jsq": {"count": 1, "p50_ms": 50, "p99_ms": 50, "max_ms": 50},
                         "random": {"count": 1, "p50_ms": 1, "p99_ms": 1, "max_ms": 1}}}
    events = fidelity.event_lateness([line("random", 20, 20.0), line("jsq", 20, 25.0)], 0.3)
    verdict = fidelity.judge({"dispatch_lag": lag, "event_lateness": events})
    why = verdict["degraded_policies"]["jsq"]
    assert why.startswith("dispatch lag p99 50.00 ms") and "5.00 model s late" in why


def test_only_the_latest_events_are_listed() -> None:
    lines = [line("jsq", 1.0, 1.0 + k, repetition=k) for k in range(30)]
    measure = fidelity.event_lateness(lines, 0.3)
    assert measure["late"] == 29 and len(measure["late_events"]) == fidelity.MAX_LATE_LISTED
    assert measure["late_events"][0]["late_model_s"] == pytest.approx(29)
    assert "and 26 more" in judged(lines)["reasons"][0]


def test_no_lines_no_measure() -> None:
    assert fidelity.event_lateness([], 0.3) is None


# ----- the warning before the run -----------------------------------------------------

def test_a_join_too_close_to_its_crash_is_warned_about_with_the_numbers() -> None:
    costs = {"service_start_s": {"e2": 0.25}, "container_start_s": {"e2": 0.10}}
    (warning,) = cost_warnings(scenario(), costs, allowed_model_s=0.3)
    assert warning["target"] == "e2" and warning["after"] == {"action": "crash", "at": 10.0}
    assert warning["cost_s"] == pytest.approx(0.35)
    assert warning["expected_s"] == pytest.approx(0.35 * COST_MARGIN)
    assert warning["window_s"] == pytest.approx(0.5)
    assert warning["late_model_s"] == pytest.approx(0.35 * COST_MARGIN * 20 - 10)
    assert warning["max_time_scale"] == pytest.approx(10.3 / (0.35 * COST_MARGIN))
    text = warning_text([warning], 20)
    assert text.startswith("warning: at time_scale 20 1 event(s) cannot be prepared in time")
    assert "join e2 at 20 model s" in text and "crash at 10" in text


def test_a_join_with_room_to_prepare_is_not_warned_about() -> None:
    costs = {"service_start_s": {"e2": 0.06}, "container_start_s": {}}
    assert cost_warnings(scenario(), costs, allowed_model_s=0.3) == []
    assert warning_text([], 20) is None


# ----- the scheduler's lanes (a stand-in topology) ------------------------------------

class Stand:
    """What :class:`EventScheduler` calls on a topology, recording when: a crash takes
    ``crash_s``, a join's preparation ``prepare_s``; everything else is instant."""

    def __init__(self, scenario: Scenario, crash_s: float = 0.0, prepare_s: float = 0.0
                 ) -> None:
        self.scenario = scenario
        self.crash_s, self.prepare_s = crash_s, prepare_s
        self.down: set[str] = set()
        self.calls: list[tuple[str, str, float]] = []
        self.lock = threading.Lock()

    def note(self, what: str, target: str) -> None:
        with self.lock:
            self.calls.append((what, target, time.time()))

    def event_effect(self, event: Event) -> None:
        if event.action == "crash":
            time.sleep(self.crash_s)
            self.down.add(event.target)
        self.note(event.action, event.target)

    def join_pending(self, node: str) -> bool:
        return node in self.down

    def join_cost_s(self, node: str) -> float:
        return self.prepare_s

    def can_prepare_join(self, node: str) -> bool:
        return True

    def prepare_join(self, node: str) -> None:
        self.note("prepare", node)
        time.sleep(self.prepare_s)

    def commit_join(self, node: str) -> None:
        self.down.discard(node)
        self.note("commit", node)


def run_lanes(stand: Stand, tmp_path: Path, run_for: float) -> tuple[float, list[dict]]:
    records: list[dict[str, Any]] = []
    start_at = time.time() + 0.05
    scheduler = EventScheduler(stand, start_at, "jsq", 0, tmp_path / "events.jsonl",
                               records).start()
    time.sleep(max(0.0, start_at + run_for - time.time()))  # the replay's length
    scheduler.stop()
    return start_at, records


def test_events_are_grouped_per_target_in_schedule_order() -> None:
    got = lanes(scenario().events)
    assert {k: [i for i, _ in v] for k, v in got.items()} == {"e2": [0, 2], "e3-s1": [1]}


@pytest.mark.timing
def test_a_slow_crash_delays_no_other_target_and_a_join_is_prepared_ahead(
        tmp_path: Path) -> None:
    # time_scale 20: crash at 0.5 s wall taking 0.2 s, link change at 0.75, join at 1.0
    stand = Stand(scenario(), crash_s=0.2, prepare_s=0.1)
    start_at, records = run_lanes(stand, tmp_path, run_for=1.2)
    at = {what: when - start_at for what, _, when in stand.calls}
    assert at["link_change"] == pytest.approx(0.75, abs=0.02)
    assert at["prepare"] < 1.0 - 0.1  # ready before the join was due
    assert at["commit"] == pytest.approx(1.0, abs=0.02)
    assert [(r["action"], r["outcome"]) for r in records] == [
        ("crash", APPLIED), ("link_change", APPLIED), ("join", APPLIED)]
    assert records[0]["applied_model"] == pytest.approx(10 + 0.2 * 20, abs=0.4)
    assert records[2]["prepared_model"] < 20.0


def test_stop_cancels_what_is_not_due_and_logs_one_line_per_event(tmp_path: Path) -> None:
    stand = Stand(scenario(time_scale=1))  # events at 10, 15 and 20 s of wall time
    _, records = run_lanes(stand, tmp_path, run_for=0.1)
    assert stand.calls == []
    assert [r["outcome"] for r in records] == [NOT_APPLIED] * 3
    assert all(r["applied_model"] is None and 0 < r["ended_model"] < 1 for r in records)
    written = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert written == records


def test_an_action_that_raises_is_logged_failed_and_its_lane_goes_on(tmp_path: Path) -> None:
    class Broken(Stand):
        def event_effect(self, event: Event) -> None:
            if event.action == "crash":
                raise RuntimeError("no such node")
            super().event_effect(event)

    stand = Broken(scenario(time_scale=200))  # events at 50, 75 and 100 ms
    _, records = run_lanes(stand, tmp_path, run_for=0.15)
    assert [r["outcome"] for r in records] == ["failed: no such node", APPLIED, APPLIED]
