"""The churn report's counting, on a hand-made event log and replica views.

The log has a node that leaves and rejoins (e01), one that leaves for good (e02), one
that leaves, rejoins and leaves again (e03), and one that crashes (e04). Replicas:
det-1 stays on e01, which came back (not stranded); det-2 moves from e02 to e05 keeping
its id (a re-placement); det-3 disappears with e03 and det-5 is new in its place (a
re-placement); det-4 is still reported running on e04, which crashed and is gone
(stranded). The old counting called det-1 stranded, missed det-4 and counted one
re-placement (det-5's new id) instead of two.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.systems.armada import churn_experiment

APPLIED = [{"offset_s": o, "action": a, "target": t, "at": 1000.0 + o, "error": None}
           for o, a, t in ((5.0, "leave", "e01"), (6.0, "leave", "e02"), (7.0, "leave", "e03"),
                           (12.0, "join", "e01"), (14.0, "join", "e03"),
                           (18.0, "leave", "e03"), (20.0, "crash", "e04"))]
BEFORE = {"det-1": "e01", "det-2": "e02", "det-3": "e03", "det-4": "e04"}
AFTER = {"det-1": "e01", "det-2": "e05", "det-4": "e04", "det-5": "e06"}


def _replica(task: str, node: str, status: str = "running") -> dict[str, Any]:
    return {"task_id": task, "node_id": node, "status": status, "ready_at": 990.0,
            "utilisation": 0.3}


def _rows() -> list[dict[str, Any]]:
    """Two users, one frame a second for 30 s, every frame answered in 40 ms."""
    return [{"client": u, "dispatch_wall": 1000.0 + t, "response_wall": 1000.04 + t,
             "target": "e05", "tier": "edge", "outcome": "ok", "latency_s": 0.04}
            for u in ("u01", "u02") for t in range(30)]


@pytest.fixture
def churn_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A churn results folder written by hand: fleet.json, metadata.json, and traces
    (the rows :func:`trace_rows` would read)."""
    fleet = {"fleet": {"nodes": 6, "users": 2, "fps": 1.0, "node_cores": [0.1, 0.12],
                       "replica_cpu": 0.1, "users_per_replica": 3, "frame": [240, 180]},
             "deployment": {"settled": [_replica(t, n) for t, n in BEFORE.items()]},
             "streams": [{"policy": "armada", "duration_s": 30.0, "start_at": 1000.0,
                          "applied": APPLIED,
                          "replicas_after": [_replica(t, n) for t, n in AFTER.items()],
                          "scaling_during": [], "scaling_after": []}],
             "host": {"idle_share": 0.8, "saturated": False}}
    (tmp_path / "fleet.json").write_text(json.dumps(fleet))
    (tmp_path / "metadata.json").write_text(json.dumps({
        "started": 1000.0, "machine": {"cpus": 2, "kernel": "test"},
        "shaping_backend": "userspace", "size": "small"}))
    monkeypatch.setattr(churn_experiment, "trace_rows", lambda run: _rows())
    return tmp_path


def test_nodes_are_gone_only_when_their_last_departure_was_not_followed_by_a_join() -> None:
    assert churn_experiment.departed_nodes(APPLIED) == ["e01", "e02", "e03", "e04"]
    assert churn_experiment.rejoined_nodes(APPLIED) == ["e01"]
    assert churn_experiment.gone_at_end(APPLIED) == ["e02", "e03", "e04"]
    failed = [{**APPLIED[0], "offset_s": 25.0, "action": "leave", "error": "refused"}]
    assert churn_experiment.rejoined_nodes(APPLIED + failed) == ["e01"]  # errors do not count


def test_replica_changes_count_moves_and_stand_ins_and_strand_only_on_gone_nodes() -> None:
    changes = churn_experiment.replica_changes(BEFORE, AFTER, APPLIED)
    assert changes.moved == {"det-2": ("e02", "e05")}
    assert changes.lost == ("det-3",) and changes.replacing == {"det-5": "det-3"}
    assert changes.re_placements == 2
    assert changes.stranded == ("det-4",)  # det-1's node rejoined
    assert changes.displaced == ("det-1", "det-2", "det-3", "det-4")
    assert [changes.fate(t) for t in changes.displaced] == ["back", "moved", "replaced",
                                                            "stranded"]
    assert changes.unreplaced == ()


def test_a_scale_down_is_not_a_loss_and_extra_new_replicas_are_not_stand_ins() -> None:
    after = {**AFTER, "det-6": "e05"}
    changes = churn_experiment.replica_changes(BEFORE, after, APPLIED, scaled_down=["det-3"])
    assert changes.lost == () and changes.replacing == {}
    assert changes.new_other == ("det-5", "det-6") and changes.removed_other == ("det-3",)
    assert changes.re_placements == 1  # det-2's move only
    assert changes.fate("det-3") == "removed"


def test_task_ids_pair_in_creation_order() -> None:
    before = {"det-9": "e02", "det-10": "e02"}
    after = {"det-12": "e01", "det-11": "e03"}
    leave = [{"offset_s": 1.0, "action": "leave", "target": "e02", "error": None}]
    changes = churn_experiment.replica_changes(before, after, leave)
    assert changes.replacing == {"det-11": "det-9", "det-12": "det-10"}


def test_churn_result_uses_the_new_definitions(churn_run: Path) -> None:
    res = churn_experiment.churn_result(churn_run)
    assert res["left"] == ["e01", "e02", "e03", "e04"]
    assert res["rejoined"] == ["e01"] and res["gone"] == ["e02", "e03", "e04"]
    assert res["changes"].stranded == ("det-4",)
    assert res["changes"].re_placements == 2


def test_churn_metrics_and_claim_strand_only_on_gone_nodes_and_count_moves(
        churn_run: Path) -> None:
    """Through the experiment's metric and claim functions, on the hand-made run as a
    study's one cell: the replica table says what became of each displaced replica."""
    cell = SimpleNamespace(run=churn_run, replication=0, degraded=False)
    result = SimpleNamespace(finished=lambda: [cell])
    found = churn_experiment.metrics({"churn": result}, "small")
    (run,) = found["runs"]
    assert run["re_placements"] == 2 and run["stranded"] == ["det-4"]
    replicas = next(t for t in found["tables"] if t["title"] == "Replicas")
    text = replicas["rows"][0][1]
    assert "1 stranded on a node gone at the end (det-4)" in text
    assert "det-2 from e02 to e05" in text and "det-3 by det-5" in text
    assert "1 back on a node that rejoined (det-1)" in text
    assert "did not come back" not in text and "placed anew" not in text
    (claim,) = churn_experiment.claims(found)
    assert claim.key == "A5" and claim.replications == 1
    assert claim.verdict == "holds only for service continuous (no frame lost)"


def test_churn_verdict_follows_the_counts(churn_run: Path) -> None:
    res = churn_experiment.churn_result(churn_run)
    stranded = churn_experiment.churn_conclusion(res)
    assert stranded.verdict == "holds only for service continuous (no frame lost)"
    clean = {**res, "changes": churn_experiment.replica_changes(
        BEFORE, {k: v for k, v in AFTER.items() if k != "det-4"} | {"det-6": "e05"},
        APPLIED)}
    assert clean["changes"].stranded == ()
    assert churn_experiment.churn_conclusion(clean).verdict == "holds"
    lossy = {**clean, "all": {**clean["all"], "lost": 3}}
    found = churn_experiment.churn_conclusion(lossy)
    assert found.verdict == "holds only for replicas re-deployed"
    assert "3 of 60 frames were lost" in found.paragraph()
    untouched = {**lossy, "changes": churn_experiment.replica_changes(
        {"det-1": "e06"}, {"det-1": "e06"}, APPLIED)}
    found = churn_experiment.churn_conclusion(untouched)
    assert found.verdict == "fails"  # the only check left (no frame lost) failed
    assert "did not exercise re-placement" in found.paragraph()
