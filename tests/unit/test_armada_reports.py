"""The Armada reports' computed conclusions: for each claim, two hand-made metric sets
whose verdicts differ, and the wording that follows the numbers; and the edge-failures
report's explanation of a latency dip, from a hand-made record."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.systems.armada import failures_experiment as fx
from testbed.systems.armada.failover_experiment import failover_conclusion
from testbed.systems.armada.load_experiment import claims as load_claims
from testbed.systems.armada.load_experiment import load_conclusion, load_episodes
from testbed.systems.armada.scalability_experiment import claims as scalability_claims
from testbed.systems.armada.scalability_experiment import (
    herding_sentence,
    scalability_conclusion,
    together_sentence,
)
from testbed.systems.armada.selection_experiment import selection_conclusion
from testbed.systems.armada.verdicts import lower_or_higher, verdict

# ------------------------------------------------------------------ helpers


def test_verdict_names_what_holds() -> None:
    assert verdict({"a": True, "b": True}) == "holds"
    assert verdict({"a": False, "b": False}) == "fails"
    assert verdict({"a": True, "b": False, "c": True}) == "holds only for a, c"
    assert verdict({}) == "fails"
    assert lower_or_higher(1.0, 2.0) == "lower" and lower_or_higher(2.0, 1.0) == "higher"
    assert lower_or_higher(1.0, 1.04, 0.05) == "the same"


# ------------------------------------------------------------------ scalability


def _point(nodes: int, users: int, means: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {"nodes": nodes, "users": users, "run": f"n{nodes:02d}-u{users:02d}",
            "policies": {k: {"mean_ms": m, **extra.get(k, {})} for k, m in means.items()}}


def _means(armada: float, light: float, geo: float, rand: float) -> dict[str, float]:
    return {"armada": armada, "armada-light": light, "geo-nearest": geo, "random": rand}


SDK_WINS = [_point(20, 1, _means(20, 22, 60, 70)), _point(20, 10, _means(30, 35, 80, 90)),
            _point(20, 30, _means(40, 45, 150, 160)), _point(3, 10, _means(50, 55, 90, 95))]
SDK_LOSES = [_point(20, 1, _means(30, 20, 25, 40)), _point(20, 10, _means(120, 60, 70, 100)),
             _point(20, 30, _means(330, 190, 100, 310)), _point(3, 10, _means(1191, 83, 58, 107))]


def test_scalability_verdict_and_growth_follow_the_means() -> None:
    good = scalability_conclusion(SDK_WINS, "armada")
    assert good.verdict == "holds"
    text = good.paragraph()
    assert "lower mean latency than both baselines at 4 of 4 points" in text
    assert "`armada`'s mean rose from 20 to 40 ms (2.0x)" in text
    assert "the factor was smaller for `armada` than for `geo-nearest` and `random`" in text
    bad = scalability_conclusion(SDK_LOSES, "armada")
    assert bad.verdict == "fails"
    text = bad.paragraph()
    assert "at 0 of 4 points" in text
    assert "the factor was smaller for `armada` than for neither baseline" in text
    light = scalability_conclusion(SDK_LOSES, "armada-light")
    assert light.verdict == "holds only for 20n/1u, 20n/10u"


def test_scalability_claims_judge_each_variant_per_point_and_replication() -> None:
    def labelled(points: list[dict[str, Any]], replication: int) -> list[dict[str, Any]]:
        return [{**p, "replication": replication,
                 "label": f"{p['nodes']}n/{p['users']}u (replication {replication})"}
                for p in points]

    (armada, light) = scalability_claims({"points": labelled(SDK_WINS, 0)})
    assert (armada.key, armada.verdict, armada.replications) == ("A2 (armada)", "holds", 1)
    assert "It had the lowest mean of the four at 4 of 4 points." in armada.why
    assert light.verdict == "holds"
    mixed = labelled(SDK_WINS, 0) + labelled(SDK_LOSES, 1)
    (armada, light) = scalability_claims({"points": mixed})
    assert armada.replications == 2 and len(armada.conditions) == 8
    assert armada.verdict.startswith("holds only for 20n/1u (replication 0), ")
    assert "(replication 1)" not in armada.verdict
    assert scalability_claims({"points": []})[0].verdict == "not run"


def test_scalability_tables_hold_every_point_and_policy() -> None:
    from testbed.systems.armada import scalability_experiment as sx

    def full(point: dict[str, Any], k: int) -> dict[str, Any]:
        pol = {name: {**p, "p95_ms": 2 * p["mean_ms"], "lost": k, "replicas": 3,
                      "scaled_during": ["up"] if name == "random" else [], "order": j,
                      "busiest_share": 0.5, "switches_per_user": 1.5, "reprobe_switches": 2,
                      "co_switches": 1.0, "co_switches_chance": 0.5, "service_ms": 20.0,
                      "wait_ms": 3.0}
               for j, (name, p) in enumerate(point["policies"].items())}
        return {**point, "policies": pol, "fps": 1.0, "label": sx.point_label(point),
                "startup_s": 3.0 + k, "all_min_running_s": 6.0, "settle_s": 6.2,
                "replicas_settled": 3}

    points = [full(p, k) for k, p in enumerate(SDK_WINS)]
    latency = sx._latency_table(points, "Set-up.")
    assert [r[0] for r in latency["rows"]] == ["20n/1u", "20n/10u", "20n/30u", "3n/10u"]
    assert latency["rows"][0][2:6] == ["**20**", "22", "60", "70"]
    order = "armada > armada-light > geo-nearest > random"
    assert latency["rows"][1][-2:] == ["random 1 up", order]
    assert latency["note"].startswith("Set-up. Policies:")
    herding, together = sx._herding_tables(points)
    assert herding["rows"][0] == ["20n/1u", *["0.50 / 1.5"] * 4]
    assert together["rows"][0] == ["20n/1u", "2 / 2", "1.0 (0.5)", "1.0 (0.5)"]
    assert "above chance in 2 of 2 streams" in together["note"]  # the 30-user point's SDKs
    startup = sx._startup_table(points)
    assert startup["rows"][3] == ["3n/10u", "6.0", "6.0", "3", "6.2"]
    assert "took 3.0-6.0 s over 4 bring-ups" in startup["note"]


def test_herding_wording_flips_with_the_shares() -> None:
    def crowded(sdk_share: float, geo_share: float, sdk_moves: float) -> list[dict[str, Any]]:
        extra = {k: {"busiest_share": s, "switches_per_user": m} for k, s, m in (
            ("armada", sdk_share, sdk_moves), ("armada-light", sdk_share, sdk_moves),
            ("geo-nearest", geo_share, 1.0), ("random", 0.5, 3.0))}
        return [_point(20, 10, _means(1, 1, 1, 1), **extra)]

    spread = herding_sentence(crowded(0.2, 0.4, 3.0))
    assert "a smaller share of the frames on one replica than geo-nearest" in spread
    assert "more switches on average" in spread
    piled = herding_sentence(crowded(0.6, 0.4, 1.0))
    assert "a larger share of the frames on one replica than geo-nearest" in piled
    assert "as many switches on average" in piled


def test_moving_together_reads_as_herding_only_above_chance() -> None:
    def busy(co: float) -> list[dict[str, Any]]:
        extra = {k: {"co_switches": co, "co_switches_chance": 1.0} for k in
                 ("armada", "armada-light")}
        return [_point(20, 20, _means(1, 1, 1, 1), **extra)]

    above = together_sentence(busy(2.0))
    assert "2.0-2.0 times as often as chance" in above and "move to it together" in above
    below = together_sentence(busy(0.5))
    assert "no sign that they moved together" in below and "together," not in below


# ------------------------------------------------------------------ edge failures


def _phase(failed: list[str], at_edge: int, mean: float | None) -> dict[str, Any]:
    return {"failed": failed, "users_at_edge": at_edge, "mean_ms": mean}


def _result(sdk: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    return {"plan": {"nodes": 6, "users": 10, "interval_s": 15.0},
            "order": ["e04", "e03", "e06", "e02", "e01"],
            "policies": {"armada": sdk, "edge-to-cloud": base}}


ORDER = ["e04", "e03", "e06", "e02", "e01"]
EDGE = ["e01", "e02", "e03", "e04", "e05", "e06"]


def _phases(at_edge: list[int], means: list[float]) -> list[dict[str, Any]]:
    return [_phase(ORDER[:k], e, m) for k, (e, m) in enumerate(zip(at_edge, means, strict=True))]


def test_failures_states_how_many_nodes_fail_out_of_how_many() -> None:
    assert fx.failing_sentence(ORDER, EDGE, 15.0) == (
        "5 of 6 edge nodes fail, one every 15 s in the seeded order e04, e03, e06, e02, "
        "e01, leaving 1 edge node (e05) and the cloud.")


def test_failures_verdict_follows_the_intervals() -> None:
    sdk = _phases([10, 10, 10, 10, 10, 10], [18, 22, 31, 55, 24, 39])
    base = _phases([10, 8, 6, 5, 4, 2], [15, 44, 60, 72, 99, 103])
    good = fx.failures_conclusion(_result(sdk, base), EDGE)
    assert good.verdict == "holds"
    assert "After 5 of 5 failures Armada had at least as many users" in good.paragraph()
    worse = _phases([10, 7, 5, 4, 3, 1], [18, 50, 70, 80, 99, 120])
    bad = fx.failures_conclusion(_result(worse, base), EDGE)
    assert bad.verdict == "fails"
    assert "its mean latency was not lower after the last failure" in bad.paragraph()
    assert "at the edge after 1 of 5." in bad.paragraph()  # most users: 7/10 once only


def test_dip_sentences_say_when_the_mean_never_fell() -> None:
    rising = _phases([10] * 3, [15, 44, 60])
    assert fx.dip_sentences("Edge-to-Cloud", rising) == [
        "Edge-to-Cloud's mean latency never fell as nodes failed (15 ms, 44 ms, 60 ms)."]


# A hand-made failures run: three edge nodes and a cloud, four users, e03 then e02 crash
# at 10 s and 20 s. After e03 fails its replica det-3 is re-placed on e02 and is still
# starting there when e02 fails; e02 processes slowly meanwhile. After e02 fails, every
# user is on e01, whose replica is not shared with a start-up: the mean falls.
START = 1000.0
SERVING = {  # phase -> user -> (node, service, wait, network) seconds
    0: {"u01": ("e01", .020, .002, .008), "u02": ("e01", .020, .002, .008),
        "u03": ("e02", .020, .002, .008), "u04": ("e03", .020, .002, .008)},
    1: {"u01": ("e01", .020, .002, .008), "u02": ("e01", .020, .002, .008),
        "u03": ("e02", .090, .010, .010), "u04": ("e02", .090, .010, .010)},
    2: {u: ("e01", .025, .005, .010) for u in ("u01", "u02", "u03", "u04")},
}


def _frames() -> list[dict[str, Any]]:
    rows = []
    for phase, users in SERVING.items():
        for user, (node, service, wait, network) in users.items():
            for t in range(10):
                sent = START + 10 * phase + t + 0.1
                latency = service + wait + network
                rows += [{"policy": policy, "client": user, "dispatch_wall": sent,
                             "response_wall": sent + latency, "target": node, "tier": "edge",
                             "outcome": "ok", "latency_s": latency, "service_s": service,
                             "wait_s": wait, "network_s": network}
                         for policy in fx.FAIL_POLICIES]
    return rows


def _replica(task: str, node: str, status: str = "running",
             ready: float | None = 990.0) -> dict[str, Any]:
    return {"task_id": task, "node_id": node, "status": status, "ready_at": ready,
            "utilisation": 0.5}


@pytest.fixture
def failures_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One fleet run in which both policies streamed, written by hand (both get the
    same record: the text for one policy is what is checked)."""
    applied = [
        {"offset_s": 10.0, "action": "crash", "target": "e03", "at": START + 10, "error": None,
         "replicas": [_replica("det-1", "e01"), _replica("det-2", "e02"),
                      _replica("det-3", "e03"), _replica("det-4", "cloud")]},
        {"offset_s": 20.0, "action": "crash", "target": "e02", "at": START + 20, "error": None,
         "replicas": [_replica("det-1", "e01"), _replica("det-2", "e02"),
                      _replica("det-3", "e02", "starting", None), _replica("det-4", "cloud")]}]
    after = [_replica("det-1", "e01"), _replica("det-2", "e01", ready=START + 26.0),
             _replica("det-3", "e01", ready=START + 28.0), _replica("det-4", "cloud")]
    fleet = {"fleet": {"nodes": 3, "users": 4, "fps": 1.0, "node_cores": [0.12, 0.18],
                       "replica_cpu": 0.06, "users_per_replica": 3, "frame": [240, 180]},
             "tiers": {"ctl": "control", "e01": "edge", "e02": "edge", "e03": "edge",
                       "cloud": "cloud"},
             "deployment": {"startup_s": 2.0, "all_min_running_s": 4.0, "settle_s": 8.0,
                            "settled": after[:1]},
             "streams": [{"policy": policy, "duration_s": 30.0, "start_at": START,
                          "applied": applied, "replicas_after": after,
                          "host_samples": [[START + 5, 0.8], [START + 15, 0.5],
                                           [START + 25, 0.85]]}
                         for policy in fx.FAIL_POLICIES],
             "host": {"idle_share": 0.7, "saturated": False}}
    (tmp_path / "fleet.json").write_text(json.dumps(fleet))
    monkeypatch.setattr(fx, "trace_rows", lambda run: _frames())
    return tmp_path


def test_failure_intervals_record_what_served_each_phase(failures_run: Path) -> None:
    first, middle, last = fx.failure_intervals(failures_run, "armada")
    assert [p["mean_ms"] for p in (first, middle, last)] == pytest.approx([30, 70, 40])
    assert middle["serving"]["e02"] == {"users": 2, "frames": 20,
                                        "service_ms": pytest.approx(90),
                                        "wait_ms": pytest.approx(10)}
    assert middle["starting"] == [{"task_id": "det-3", "node_id": "e02", "status": "starting"}]
    assert last["starting"] == [] and [r["task_id"] for r in last["ready_during"]] == [
        "det-2", "det-3"]
    assert middle["host_idle"] == pytest.approx(0.5)


def test_failures_metrics_and_claim_explain_the_dip_from_their_measurements(
        failures_run: Path) -> None:
    """Through the experiment's metric and claim functions, on the hand-made run as a
    study's one cell."""
    cell = SimpleNamespace(run=failures_run, replication=0, degraded=False)
    found = fx.metrics({"failures": SimpleNamespace(finished=lambda: [cell])}, "small")
    (run,) = found["runs"]
    assert run["order"] == ["e03", "e02"] and run["plan"]["interval_s"] == 10.0
    text = " ".join(run["sentences"])
    assert "2 of 3 edge nodes fail, one every 10 s in the seeded order e03, e02, leaving 1 " \
           "edge node (e01) and the cloud." in text
    assert ("Armada's mean latency fell from 70 ms once e03 had failed (1 down) to 40 ms "
            "once e02 had failed (2 down), although one more edge node was down.") in text
    assert "processing at the replica changed most (-30 ms)" in text
    assert "went from e01 2, e02 2 to e01 4" in text
    assert ("In the earlier phase e02 processed its frames slowest: 90 ms on average over "
            "20 frames (2 users), against 20 ms on the other serving nodes.") in text
    assert ("At the end of the earlier phase det-3 on e02 was starting; the next failure, "
            "e02, took det-3 with it.") in text
    assert "The host's CPU was 50% idle in the earlier phase and 85% in the later one." in text
    phases = next(t for t in found["tables"] if t["title"] == "What served each phase")
    assert ["0", "armada", "e03", "2", "e01 2, e02 2", "55 / 6 / 9",
            "det-3 on e02 (starting)", "none", "50%"] in phases["rows"]
    (claim,) = fx.claims(found)
    assert claim.key == "A4" and claim.replications == 1
    # both policies got the same record: as many at the edge, never lower, most at edge
    assert claim.verdict == ("holds only for at least as many users at the edge, most users "
                             "at the edge")


# ------------------------------------------------------------------ background load


def _episode(moved: float | None, loaded: float | None, after: float | None) -> dict[str, Any]:
    return {"node": "e01", "start": 0.0, "end": 15.0, "moved_after_s": moved,
            "moved_to": None if moved is None else "e02", "mean_before_ms": 20.0,
            "mean_on_loaded_ms": loaded, "mean_after_move_ms": after}


def test_load_verdict_and_bound_follow_the_episodes() -> None:
    good = load_conclusion([_episode(3.1, 180, 32), _episode(1.7, 333, 12)], fps=1.0)
    assert good.verdict == "holds"
    assert "Every move came within 3.1 s, inside the longest re-probe period plus one " \
           "frame period (8 s)" in good.paragraph()
    bad = load_conclusion([_episode(9.5, 180, 200), _episode(None, 300, None)], fps=1.0)
    assert bad.verdict == "fails"
    text = bad.paragraph()
    assert "in 1 of 2 episodes, after 9.5 s" in text
    assert "faster after the move than on the loaded node in 0 of 1 episodes" in text
    assert "1 move of 1 took longer (9.5 s) than" in text


def test_load_episodes_and_claim_from_hand_made_frames() -> None:
    """u01 is served by e01 until 2.5 s into a load episode on e01 (4-14 s), then by e02,
    faster: the episode moved after 2.5 s and the claim holds; a second replication whose
    user never moved makes it hold only for the first episode."""
    def frame(t: float, target: str, ms: float, client: str = "u01") -> dict[str, Any]:
        return {"client": client, "outcome": "ok", "dispatch_wall": t, "target": target,
                "latency_s": ms / 1e3}

    applied = [{"at": 4.0, "action": "load", "target": "e01"},
               {"at": 14.0, "action": "load", "target": "e01"}]
    rows = [frame(t, "e01", 20.0) for t in (0.5, 1.5, 2.5, 3.5)]
    rows += [frame(t, "e01", 300.0) for t in (4.5, 5.5, 6.0)]
    rows += [frame(t, "e02", 30.0) for t in (6.5, 7.5, 8.5)] + [frame(5.0, "e03", 1.0, "u02")]
    (moved,) = load_episodes(applied, rows)
    assert moved["moved_after_s"] == pytest.approx(2.5) and moved["moved_to"] == "e02"
    assert moved["mean_before_ms"] == pytest.approx(20.0)
    assert moved["mean_on_loaded_ms"] == pytest.approx(300.0)
    assert moved["mean_after_move_ms"] == pytest.approx(30.0)
    (stayed,) = load_episodes(applied, [r for r in rows if r["target"] != "e02"])
    assert stayed["moved_after_s"] is None
    found = {"runs": [{"replication": 0, "fps": 1.0, "episodes": [moved]},
                      {"replication": 1, "fps": 1.0, "episodes": [stayed]}]}
    (claim,) = load_claims(found)
    assert claim.key == "A6" and claim.replications == 2
    assert claim.verdict == "holds only for episode 1"
    assert "in 1 of 2 episodes, after 2.5 s" in claim.why


# ------------------------------------------------------------------ failover and selection


def _client(lost: int, gap_s: float, other_s: float | None) -> dict[str, Any]:
    return {"frames": 200, "lost": lost, "largest_gap_s": gap_s, "to_other_node_s": other_s}


def test_failover_metrics_counts_gaps_and_losses() -> None:
    from testbed.systems.armada.failover_experiment import failover_metrics

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


def test_failover_replications_pair_each_user_across_the_policies() -> None:
    from testbed.systems.armada import failover_experiment as fo

    def frames(policy: str, user: str, lost: bool) -> list[dict[str, Any]]:
        rows = []
        for i in range(10):  # 5 fps, the crash of a at 11.0
            t = 10.0 + 0.2 * i
            node = "a" if t < 11.0 else "b"
            ok = not (lost and 11.0 <= t < 11.2)
            rows.append({"policy": policy, "client": user, "frame_index": i,
                         "outcome": "ok" if ok else "error", "target": node,
                         "dispatch_wall": t, "response_wall": t + 0.03, "latency_s": 0.03})
        return rows

    streams = [{"policy": p, "start_at": 10.0, "replicas_after": [],
                "applied": [{"action": "crash", "target": "a", "at": 11.0}]}
               for p in ("armada", "server-reconnect")]
    rows = [*frames("armada", "ua", False), *frames("armada", "ub", False),
            *frames("server-reconnect", "ua", True), *frames("server-reconnect", "ub", True)]
    found = fo.replication_result({"streams": streams, "host": {}}, rows, 5.0)
    ua = found["policies"]["armada"]["users"]["ua"]
    assert ua["lost"] == 0 and ua["on_crashed"] and ua["served_after"] == ["b"]
    assert found["policies"]["server-reconnect"]["users"]["ub"]["lost"] == 1
    checks, _ = fo._judged(found)
    assert all(checks.values()) and len(checks) == 6
    found.update(replication=0, checks=checks, sentences=[])
    (claim,) = fo.claims({"runs": [found]})
    assert (claim.key, claim.verdict, claim.replications) == ("A3", "holds", 1)
    table = fo._table([found])
    assert table["rows"][0][:5] == ["0", "armada", "ua", "10", "0"]
    assert "a 1.00 s in" in table["note"]


def test_failover_verdict_follows_the_losses_and_gaps() -> None:
    good = failover_conclusion(_client(0, 0.274, 0.192), _client(1, 0.444, 0.418), 0.2, True)
    assert good.verdict == "holds"
    assert "The SDK lost 0 of 200 frames and its largest gap between answers was 274 ms " \
           "(1.4 frame periods of 200 ms)" in good.paragraph()
    bad = failover_conclusion(_client(2, 1.2, 1.1), _client(1, 0.444, 0.418), 0.2, True)
    assert bad.verdict == "fails"
    apart = failover_conclusion(_client(0, 0.274, 0.192), _client(1, 0.444, 0.418), 0.2,
                                False)
    assert apart.verdict == "holds only for no frame lost, no gap beyond two frame periods"
    assert "did not meet the same failure" in apart.paragraph()


def test_selection_verdict_follows_the_picks() -> None:
    matrix = {"uc": {"ea": {"median_ms": 30.0}, "ec": {"median_ms": 90.0}}}
    right = {"ua": {"correct": True, "regret_ms": 0.0, "pick": "ea"},
             "uc": {"correct": True, "regret_ms": 0.0, "pick": "ea"}}
    assert selection_conclusion(right, matrix).verdict == "holds"
    assert "uc picked ea (30.0 ms), faster than its nearest node ec (90.0 ms)" in \
        selection_conclusion(right, matrix).paragraph()
    wrong = {"ua": {"correct": False, "regret_ms": 40.0, "pick": "eb"},
             "uc": {"correct": False, "regret_ms": 60.0, "pick": "ec"}}
    found = selection_conclusion(wrong, matrix)
    assert found.verdict == "fails"
    assert "0 of 2 users picked their best node" in found.paragraph()
    assert "uc picked ec, which is its nearest node ec (90.0 ms)" in found.paragraph()


def _selection_driver(uc_pick: str) -> dict[str, Any]:
    """Hand-made driver details of one armada-selection cell: each user is fastest on its
    own LAN's node but uc, whose node ec is slow; ``uc_pick`` is uc's SDK pick."""
    base = {"ua": {"ea": 20, "eb": 60, "ec": 70, "cloud": 80},
            "ub": {"ea": 60, "eb": 25, "ec": 75, "cloud": 85},
            "uc": {"ea": 40, "eb": 65, "ec": 300, "cloud": 90}}
    matrix = {u: {n: [{"latency_ms": ms + d, "processing_ms": 200.0 if n == "ec" else 18.0,
                       "queue_ms": 0.0} for d in (0.0, 1.0, 2.0)] for n, ms in row.items()}
              for u, row in base.items()}
    serving = [{"task_id": f"det-{i}", "node_id": n, "url": f"http://{n}"}
               for i, n in enumerate(("ea", "eb", "ec", "cloud"))]
    return {"matrix": matrix, "host": {"idle_share": 0.6},
            "deployments": [{"serving": serving, "startup_s": 3.0, "containment": {
                n: {"same_netns": True, "in_node_cgroup": True} for n in base["ua"]}}],
            "streams": [{"deployment": 0, "picks": {"ua": "ea", "ub": "eb", "uc": uc_pick},
                         "switches": {"ua": 1, "ub": 2, "uc": 1},
                         "first_probes": {"uc": {"candidates": [
                             {"task_id": "det-0", "node_id": "ea"},
                             {"task_id": "det-2", "node_id": "ec"}],
                             "probe_ms": {"det-0": 45.0, "det-2": None}}}}]}


def test_selection_metrics_score_each_replication_and_the_claim_counts_them() -> None:
    from testbed.systems.armada import selection_experiment as sel

    rows = [{"client": u, "outcome": "ok", "target": t, "latency_s": 0.02}
            for u, t in (("ua", "ea"), ("ub", "eb"), ("ub", "ea"), ("uc", "ea"))]
    good = sel.replication_result(_selection_driver("ea"), rows)
    assert all(s["correct"] for s in good["scores"].values())
    assert good["scores"]["uc"]["best"] == "ea" and good["contained"]["ec"] is True
    assert good["streaming"]["ub"] == {"frames": 2, "ok": 2, "served": {"eb": 1, "ea": 1},
                                       "p50_ms": 20.0, "p95_ms": 20.0, "switches": 1}
    bad = sel.replication_result(_selection_driver("ec"), rows)
    runs = []
    for k, found in enumerate((good, bad)):
        found.update(replication=k, checks=sel.selection_checks(found["scores"],
                                                                found["matrix"]),
                     sentences=[])
        runs.append(found)
    (claim,) = sel.claims({"runs": runs})
    assert claim.key == "A1" and claim.replications == 2
    assert claim.verdict == ("holds only for every user picks its best node (replication 0), "
                             "uc avoids its limited nearest node (replication 0)")
    matrix, probes, streaming = sel._tables(runs)
    assert matrix["columns"][2:6] == ["ea", "eb", "ec", "cloud"]
    assert matrix["rows"][2][:6] == ["0", "uc", "**_41.0_**", "66.0", "301.0", "91.0"]
    assert "ec 200.0" in matrix["note"] and "(checked: True)" in matrix["note"]
    assert probes["rows"][0] == ["0", "uc", "ea, ec", "ea 45.0, ec failed"]
    assert streaming["rows"][1][4] == "eb 1, ea 1"


def test_scaling_sentence_names_the_policy_that_scaled_most() -> None:
    from testbed.systems.armada.scalability_experiment import _scaling_sentence

    def points(ups: dict[str, int]) -> list[dict[str, Any]]:
        found = []
        for k, means in enumerate((_means(300, 100, 90, 120), _means(60, 70, 80, 90))):
            extra = {p: {"scaled_during": ["up"] * n if k == 0 else [],
                         "scaled_reasons": ["load"] if n and k == 0 else [],
                         "scale_up_ready_s": [40.0] * n if k == 0 else []}
                     for p, n in ups.items()}
            found.append(_point(20, 10 * (k + 1), means, **extra))
        return found

    frames = _scaling_sentence(points({"armada": 3, "armada-light": 1, "geo-nearest": 0,
                                       "random": 0}))[0]
    assert "`armada` 3 replicas added over 1 of 2 points" in frames
    assert "`armada`'s streams added the most." in frames
    assert "the added replicas took 40-40 s from the decision to serving (4 measured)" in frames
    assert "3.3 times as high (median) at the 1 point where its stream scaled up and 0.9 " \
           "times at the 1 where it did not: higher at the points with scale-ups" in frames
    light = _scaling_sentence(points({"armada": 0, "armada-light": 2, "geo-nearest": 0,
                                      "random": 0}))[0]
    assert "`armada-light`'s streams added the most." in light
    assert _scaling_sentence(points({k: 0 for k in ("armada", "armada-light", "geo-nearest",
                                                    "random")})) == []


def test_the_harness_records_the_replica_view_before_each_action() -> None:
    import time

    from testbed.systems.armada.fleet import Action, apply_actions

    class Topo:
        def __init__(self) -> None:
            self.events: list[str] = []

        def event_effect(self, event: Any) -> None:
            self.events.append(f"{event.action} {event.target}")

    views = iter([[_replica("det-1", "e01")], RuntimeError("beacon down")])

    def replicas() -> list[dict[str, Any]]:
        view = next(views)
        if isinstance(view, Exception):
            raise view
        return view

    topo = Topo()
    applied = apply_actions(topo, [Action(0.0, "crash", "e01"), Action(0.01, "crash", "e02")],
                            time.time(), {}, replicas)
    assert topo.events == ["crash e01", "crash e02"]
    assert applied[0]["replicas"] == [_replica("det-1", "e01")]
    assert applied[1]["replicas"] is None and "beacon down" in applied[1]["replicas_error"]
    assert "replicas" not in apply_actions(topo, [Action(0.0, "crash", "e03")], time.time(),
                                           {})[0]


def test_a_streams_applied_actions_become_event_log_lines_the_guard_judges() -> None:
    from testbed.analysis.fidelity import event_lateness
    from testbed.event_log import lateness_model_s
    from testbed.systems.armada.fleet import event_lines

    start = 1000.0
    applied = [{"offset_s": 2.0, "action": "crash", "target": "e01", "asked": "serving:u1",
                "params": {}, "at": 1002.0, "done": 1002.05, "error": None},
               {"offset_s": 4.0, "action": "load", "target": "e02", "asked": "e02",
                "params": {"cpu": 0.5}, "at": 1005.5, "done": 1005.6, "error": None},
               {"offset_s": 6.0, "action": "crash", "target": None, "asked": "serving:u9",
                "params": {}, "at": 1006.0, "done": None,
                "error": "serving:u9 names no node at 6 s"}]
    lines = event_lines(applied, "armada", 1, start, time_scale=1.0)
    assert [(x["action"], x["target"], x["at"]) for x in lines] == [
        ("crash", "e01", 2.0), ("load", "e02", 4.0), ("crash", "serving:u9", 6.0)]
    assert [x["policy"] for x in lines] == ["armada"] * 3 and lines[0]["repetition"] == 1
    assert lateness_model_s(lines[0]) == pytest.approx(0.05)
    assert lateness_model_s(lines[1]) == pytest.approx(1.6)
    assert lines[2]["outcome"].startswith("failed: serving:u9 names no node")
    assert lines[2]["applied_model"] is None
    judged = event_lateness(lines, allowed_model_s=1.0)
    assert judged["late"] == 2 and judged["applied"] == 2 and judged["failed"] == 1
