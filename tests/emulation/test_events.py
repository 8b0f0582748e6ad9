"""Scheduled events change the emulated network mid-run, and every policy starts afresh."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.emulation

CHANGE_AT, CRASH_AT, DURATION = 20.0, 40.0, 60.0


def _scenario(tmp_path: Path) -> Path:
    doc = {
        "name": "events",
        "seed": 3,
        "topology": {
            "nodes": [{"name": "c1", "role": "client"}, {"name": "sw", "role": "switch"},
                      {"name": "srv", "role": "server", "tier": "edge"}],
            "links": [{"a": "c1", "b": "sw", "delay_ms": 1},
                      {"a": "srv", "b": "sw", "delay_ms": 2}],
        },
        "services": [{"name": "edge", "program": "tier_server", "node": "srv",
                      "params": {"workers": 8, "mu": 2.0}}],
        "workload": {"generator": "bursty-pareto", "params": {"rate": 3.0, "mu": 2.0}},
        "policies": ["jsq", "random"],
        "duration": DURATION,
        "time_scale": 20,
        "events": [
            {"at": CHANGE_AT, "action": "link_change", "target": "srv-sw",
             "params": {"delay_ms": 15}},
            {"at": CRASH_AT, "action": "crash", "target": "srv"},
        ],
    }
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.timing
def test_link_change_and_crash_apply_on_schedule(run_scenario, tmp_path: Path) -> None:
    run = run_scenario(str(_scenario(tmp_path)))
    df = run.traces
    margin = 2.0  # model seconds around each event, for tasks in flight
    for policy in ("jsq", "random"):
        rows = df[df.policy == policy]
        before = rows[rows.dispatch_model < CHANGE_AT - margin]
        slowed = rows[(rows.dispatch_model > CHANGE_AT + margin)
                      & (rows.dispatch_model < CRASH_AT - margin)]
        after_crash = rows[rows.dispatch_model > CRASH_AT + margin]
        assert len(before) and len(slowed) and len(after_crash)
        # Restored between policies: the second policy starts with the original link
        # and a live server again.
        assert (before.outcome == "ok").all()
        # 2 x (1 + 2) ms round trip; a new connection's handshake adds one more.
        assert before.network_s.median() < 0.010, before.network_s.median()
        # 2 x (1 + 15) ms round trip once the server's link is slowed.
        assert (slowed.outcome == "ok").all()
        assert (slowed.network_s > 0.031).all(), slowed.network_s.min()
        # The crashed server answers nothing; each failure is a row, none is lost.
        assert (after_crash.outcome != "ok").all()
        assert after_crash.error.notna().all()
