"""``testbed run`` on a built-in Armada scenario: the generic path end to end.

``armada-failover`` through :func:`testbed.runner.run_scenario`: two users on ea's LAN
stream 12 s of frames at 5 fps, once through the Armada SDK and once through the
server-reconnect client, and the scenario's event crashes ea 5 s into each stream. Each
policy starts from a fresh deployment (one replica per node), so both meet the same
failure. The test checks the standard results folder and what the run must show: every
frame of the trace accounted for in both replays, the crash applied at its instant, the
crashed node serving nothing afterwards, and the SDK losing no frame through it. The
same run is what an ``armada-failover`` study cell holds, so the experiment's metric
function is checked on it too. The run is a ``testbed`` process watched by
:mod:`tests.emulation.secret_watch`, so the same run shows that the secret its services
present to each other reaches no file, log or command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from testbed.scenario import load_scenario
from testbed.systems.armada import failover_experiment as failover
from testbed.systems.armada.failover_experiment import failover_metrics
from tests.emulation.secret_watch import Observed, assert_secret_kept, watched_run
from workloads.trace import read_trace

pytestmark = pytest.mark.emulation
POLICIES = ("armada", "server-reconnect")


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Observed, Path]:
    """``testbed run armada-failover`` under the secret watch: what it showed, and its
    results folder."""
    assert load_scenario("armada-failover").policies == POLICIES
    return watched_run(tmp_path_factory.mktemp("armada-run"), "armada-failover")


@pytest.fixture(scope="module")
def run(watched: tuple[Observed, Path]) -> Path:
    seen, out = watched
    assert seen.returncode == 0, seen.output
    return out


def test_the_run_secret_reaches_no_file_log_or_command_line(
        watched: tuple[Observed, Path]) -> None:
    assert_secret_kept(*watched)


def test_the_results_folder_is_the_standard_one(run: Path) -> None:
    for name in ("metadata.json", "summary.json", "traces.parquet", "traces.csv",
                 "trace/trace.csv", "trace/trace.json", "cdf_all.png"):
        assert (run / name).is_file(), name
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["system"] == "armada" and meta["executor"] == "emulation"
    assert meta["teardown_errors"] == []
    summary = json.loads((run / "summary.json").read_text())["policies"]
    assert set(summary) == set(POLICIES)
    assert all(s["n"] == s["n_ok"] + s["n_failed"] > 0 for s in summary.values())


def test_every_policy_replays_every_frame_of_the_trace(run: Path) -> None:
    tasks, _ = read_trace(run / "trace")
    df = read_traces(run)
    assert (df.kind == "frame").all() and set(df.policy) == set(POLICIES)
    for policy in POLICIES:
        mine = df[df.policy == policy]
        assert sorted(zip(mine.client, mine.task_id)) == sorted(
            (t.client, t.task_id) for t in tasks), policy


def test_each_policy_meets_the_same_crash_on_a_fresh_deployment(run: Path) -> None:
    driver = json.loads((run / "metadata.json").read_text())["driver"]
    assert len(driver["deployments"]) == len(POLICIES)
    for deployed in driver["deployments"]:
        assert sorted(r["node_id"] for r in deployed["replicas"]) == ["ea", "eb", "ec"]
    df = read_traces(run)
    for stream in driver["streams"]:
        (crash,) = stream["applied"]
        assert (crash["action"], crash["target"], crash["error"]) == ("crash", "ea", None)
        assert crash["at"] - stream["start_at"] == pytest.approx(5.0, abs=0.5)
        assert not [r for r in stream["replicas_after"]
                    if r["node_id"] == "ea" and r["status"] == "running"]
        mine = df[df.policy == stream["policy"]]
        late = mine[(mine.outcome == "ok") & (mine.dispatch_wall > crash["at"] + 1.0)]
        assert len(late) and "ea" not in set(late.target), stream["policy"]


def _armada_stream(driver: dict) -> dict:
    """The armada policy's stream; skips the test when the host was saturated during it:
    the claims are about Armada, not a contended host."""
    stream = next(s for s in driver["streams"] if s["policy"] == "armada")
    if stream["host"]["saturated"]:
        pytest.skip(f"the host was saturated during the stream (CPU idle "
                    f"{stream['host']['idle_share']:.0%}): latencies include contention")
    return stream


def test_the_sdk_loses_no_frame_through_the_crash(run: Path) -> None:
    stream = _armada_stream(json.loads((run / "metadata.json").read_text())["driver"])
    crash_at = stream["applied"][0]["at"]
    df = read_traces(run)
    for user, rows in df[df.policy == "armada"].groupby("client"):
        found = failover_metrics(rows.to_dict("records"), crash_at, "ea")
        assert found["lost"] == 0 and found["ok"] == found["frames"] > 0, (
            user, found, stream["host"])
        assert found["served_after"] and "ea" not in found["served_after"], (user, found)


def test_the_failover_experiments_metrics_and_claim_read_the_run(run: Path) -> None:
    """``armada-failover``'s study cells are this scenario's runs: its metric function
    scores every user under both policies. Immediate failover against waiting for the
    dead node: the SDK's request timeout is 5 s, so a client that waited would show gaps
    of seconds; measured here 77-90 ms to the next node and gaps of 216-360 ms at 5 fps,
    and the bound leaves room for a loaded machine while still telling them apart."""
    meta = json.loads((run / "metadata.json").read_text())
    _armada_stream(meta["driver"])
    found = failover.replication_result(meta["driver"], read_traces(run).to_dict("records"),
                                        5.0)
    assert set(found["policies"]) == set(POLICIES)
    bound = 2.0
    for user, sdk in found["policies"]["armada"]["users"].items():
        assert sdk["to_other_node_s"] is not None and sdk["to_other_node_s"] < bound, sdk
        assert sdk["failover_gap_s"] is not None and sdk["failover_gap_s"] < bound, sdk
        assert sdk["largest_gap_s"] < bound, (user, sdk)
    # server-reconnect keeps one node until it fails: on the crashed node it met the dead
    # node with a frame it could not resend; elsewhere it lost none.
    for user, base in found["policies"]["server-reconnect"]["users"].items():
        if base["on_crashed"]:
            assert base["lost"] >= 1 and "ea" not in base["served_after"], (user, base)
        else:
            assert base["lost"] == 0, (user, base)
    checks, sentences = failover._judged(found)
    assert len(checks) == 3 * 2 and sentences[0] == "ua:"
    assert checks["ua: no frame lost"] and checks["ub: no frame lost"]
