"""Armada experiment 3 part 1 in emulation at its small size: failover without downtime.

The node serving the SDK user is crashed through the harness mid-stream (12 s at 5 fps,
crash 5 s in). The SDK keeps connections to its other candidates and resends the frame
that met the dead node at once, so no frame is lost and the serving node changes.

Gap tolerances, from six runs while writing this test (five small, one full; frame
period 200 ms). With no frame lost, consecutive completions are one period apart plus the
difference of the two frames' latencies.

* At the failover (the last completion before the first frame served by another node, to
  that frame): measured 216-228 ms, i.e. the failover frame paid about 20 ms for the
  refused connection and the farther node. The baseline, which loses that frame, measured
  431-448 ms (about two periods). Bound: 1.5 periods (300 ms), halfway between.
* Largest gap over the whole stream: measured 280-360 ms, always about 2.3 s after the
  crash, not at it: the Spinner declares the node dead and re-places its replica on the
  failover node, whose start (importing OpenCV) competes with the serving replica within
  the node's 0.4 cores (frame latencies up to 213 ms). Bound: one period plus 400 ms
  (600 ms), two and a half times the largest measured excess (160 ms), since that bump
  depends on the host's load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from testbed.systems.armada.failover_experiment import failover_metrics, run_failover
from workloads.trace import read_trace

pytestmark = pytest.mark.emulation


@pytest.fixture(scope="module")
def failover_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_failover("small", tmp_path_factory.mktemp("armada") / "run",
                        progress=lambda _line: None)


def test_sdk_loses_no_frame_and_moves_off_the_crashed_node(failover_run: Path) -> None:
    failover = json.loads((failover_run / "failover.json").read_text())
    crash, sdk = failover["crash"], failover["clients"]["ua"]
    victim = crash["node"]  # the node that served ua's latest frame: ea unless probes
    assert victim in sdk["served_before"]  # ... of a loaded machine said otherwise
    assert crash["task_killed_by"].startswith("captain")  # died with its Captain
    assert sdk["lost"] == 0 and sdk["ok"] == sdk["frames"] > 0, sdk["lost_frames"]
    assert sdk["served_after"] and victim not in sdk["served_after"]
    # Immediate failover vs waiting for the dead node: the SDK's request timeout is 5 s,
    # so a client that waited would show gaps of seconds. Measured here: 77-90 ms to the
    # next node and gaps of 216-360 ms at 5 fps; the bound leaves room for a loaded
    # machine while still telling the two behaviours apart.
    bound = 2.0
    assert sdk["to_other_node_s"] is not None and sdk["to_other_node_s"] < bound, sdk
    assert sdk["failover_gap_s"] is not None and sdk["failover_gap_s"] < bound, sdk
    assert sdk["largest_gap_s"] < bound, sdk
    # The baseline keeps the Beacon's first candidate until it fails. That candidate is
    # the least utilised replica, then the nearest (nodes/armada/selection.py): ea, unless
    # ua's frames already loaded ea's replica when ub asked. On the crashed node the
    # baseline met the dead node with a frame it could not resend; elsewhere it lost none.
    base = failover["clients"]["ub"]
    first = crash["baseline_was_on"]
    assert base["served_before"] == [first], base
    if first == victim:
        assert base["lost"] >= 1 and victim not in base["served_after"], base
    else:
        assert base["lost"] == 0 and base["served_after"] == [first], base


def test_every_frame_has_a_row_naming_its_node(failover_run: Path) -> None:
    tasks, _ = read_trace(failover_run / "trace")
    df = read_traces(failover_run)
    assert (df.kind == "frame").all()
    assert sorted(df.task_id) == sorted(t.task_id for t in tasks)
    sdk = df[df.client == "ua"]
    assert (sdk.outcome == "ok").all()
    assert set(sdk.target) <= {"ea", "eb", "ec"}
    failover = json.loads((failover_run / "failover.json").read_text())
    crash = failover["crash"]
    again = failover_metrics(sdk.to_dict("records"), crash["at"], crash["node"],
                             crash["at"] + crash["task_ended_after_s"])
    assert again["largest_gap_s"] == pytest.approx(failover["clients"]["ua"]["largest_gap_s"])
    meta = json.loads((failover_run / "metadata.json").read_text())
    assert meta["teardown_errors"] == []


def test_failover_metrics_counts_gaps_and_losses() -> None:
    rows = [{"frame_index": i, "outcome": "ok", "target": "a" if i < 2 else "b",
             "dispatch_wall": 9.95 + 0.2 * i, "response_wall": 10.0 + 0.2 * i,
             "latency_s": 0.05} for i in range(4)]
    rows[2] = {"frame_index": 2, "outcome": "error", "target": "a"}
    found = failover_metrics(rows, crash_at=10.25, crashed="a")
    assert found["lost"] == 1 and found["lost_frames"] == [2]
    assert found["largest_gap_s"] == pytest.approx(0.4)
    assert found["to_other_node_s"] == pytest.approx(0.35)
    assert found["failover_gap_s"] == pytest.approx(0.4)
    assert found["served_before"] == ["a"] and found["served_after"] == ["b"]
