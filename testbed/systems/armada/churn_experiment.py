"""Armada experiment 4 (``armada-churn``): volunteer nodes leave and rejoin, as data.

Volunteer nodes leave (services stopped, links down) and some rejoin on a seeded
schedule during one SDK stream, at least 30 % of the nodes; continuity per user and the
replicas the control plane re-placed. The study files are ``studies/churn/<size>/``
(the schedule of :func:`churn_schedule` written out); :func:`metrics` reads each cell's
run (:func:`churn_result`), :func:`claims` judges claim A5 per replication. Report:
``docs/results/armada/churn.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim
from testbed.systems.armada.fleet import Action, largest_gaps, latency_stats
from testbed.systems.armada.fleet_report import fleet_json, trace_rows
from testbed.systems.armada.verdicts import Conclusion, names, plural, replicated_claim, verdict

# ------------------------------------------------------------------ churn


def churn_schedule(nodes: Sequence[str], volunteers: Sequence[str], duration_s: float,
                   leave_share: float, rejoin_share: float, seed: int) -> list[Action]:
    """Seeded leave / join actions: ``ceil(leave_share * len(nodes))`` volunteer nodes
    leave at instants uniform in [15 %, 60 %] of the run; ``rejoin_share`` of them come
    back 20-35 % of the run later. Raises when there are too few volunteers."""
    count = math.ceil(leave_share * len(nodes) - 1e-9)
    if count > len(volunteers):
        raise TestbedError(f"churn: {count} of {len(nodes)} nodes must leave but only "
                           f"{len(volunteers)} are volunteers")
    rng = np.random.default_rng([seed, 29])
    leaving = [volunteers[i] for i in rng.permutation(len(volunteers))[:count]]
    actions = []
    back = set(leaving[:math.floor(rejoin_share * count)])
    for node in leaving:
        at = round(float(rng.uniform(0.15, 0.6)) * duration_s, 2)
        actions.append(Action(at, "leave", node))
        if node in back:
            actions.append(Action(round(at + float(rng.uniform(0.2, 0.35)) * duration_s, 2),
                                  "join", node))
    return sorted(actions, key=lambda a: a.offset_s)


# ------------------------------------------------------------------ what the churn did

#: Actions that take a node away during a stream, and the one that brings it back.
DEPARTURES = ("leave", "crash")
RETURNS = ("join",)
#: Replica states that occupy a node (a ``pending`` replica has none).
ON_A_NODE = ("placing", "starting", "running")


def _node_actions(applied: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The departures and returns that were applied (no error), in the order applied."""
    return sorted((a for a in applied if not a.get("error")
                   and a["action"] in DEPARTURES + RETURNS), key=lambda a: a["offset_s"])


def departed_nodes(applied: Sequence[Mapping[str, Any]]) -> list[str]:
    """Nodes that left or crashed at least once during the stream, in order."""
    return list(dict.fromkeys(a["target"] for a in _node_actions(applied)
                              if a["action"] in DEPARTURES))


def present_at_end(applied: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """Per node that departed or returned: whether it is there at the end of the
    stream, which its last departure or return decides (a node that left and rejoined
    is there; one that rejoined and left again is not)."""
    state: dict[str, bool] = {}
    for a in _node_actions(applied):
        state[a["target"]] = a["action"] in RETURNS
    return state


def gone_at_end(applied: Sequence[Mapping[str, Any]]) -> list[str]:
    """Nodes that left or crashed and had not rejoined by the end of the stream."""
    present = present_at_end(applied)
    return [n for n in departed_nodes(applied) if not present[n]]


def rejoined_nodes(applied: Sequence[Mapping[str, Any]]) -> list[str]:
    """Nodes that left or crashed and were back by the end of the stream."""
    present = present_at_end(applied)
    return [n for n in departed_nodes(applied) if present[n]]


def _task_key(task_id: str) -> tuple[str, int]:
    """Order task ids by creation: ``det-9`` before ``det-10``."""
    stem, _, number = task_id.rpartition("-")
    return (stem, int(number)) if number.isdigit() else (task_id, -1)


@dataclasses.dataclass(frozen=True)
class ReplicaChanges:
    """How a stream changed the replica set, between the views before and after it.

    A replica is *displaced* when it was, before the stream, on a node that left or
    crashed during it. A *re-placement* is a replica found on another node after the
    stream than before (same id: ``moved``), or a new replica standing in for one that
    disappeared with a departed node and that no scale-down removed (``replacing``: one
    new replica, in creation order, per such loss). A replica is *stranded* when it is,
    after the stream, on a node gone at the end (departed and not rejoined)."""

    displaced: tuple[str, ...]
    moved: Mapping[str, tuple[str, str]]
    lost: tuple[str, ...]
    replacing: Mapping[str, str]
    new_other: tuple[str, ...]
    removed_other: tuple[str, ...]
    stranded: tuple[str, ...]

    @property
    def re_placements(self) -> int:
        """Moves plus new replicas standing in for lost ones."""
        return len(self.moved) + len(self.replacing)

    @property
    def unreplaced(self) -> tuple[str, ...]:
        """Replicas lost with their node that no new replica stands in for."""
        covered = set(self.replacing.values())
        return tuple(t for t in self.lost if t not in covered)

    def fate(self, task_id: str) -> str:
        """What became of a displaced replica: ``stranded`` (on a node gone at the end,
        even after a move), ``moved``, ``replaced``, ``unreplaced``, ``removed`` (by a
        scale-down) or ``back`` (on its node again, which had rejoined)."""
        if task_id in self.stranded:
            return "stranded"
        if task_id in self.moved:
            return "moved"
        if task_id in self.replacing.values():
            return "replaced"
        if task_id in self.lost:
            return "unreplaced"
        return "removed" if task_id in self.removed_other else "back"


def replica_changes(before: Mapping[str, str], after: Mapping[str, str],
                    applied: Sequence[Mapping[str, Any]],
                    scaled_down: Sequence[str] = ()) -> ReplicaChanges:
    """:class:`ReplicaChanges` from the replica views ``before`` and ``after`` the
    stream (task id -> node), the applied actions and the replicas the Application
    Manager removed by scaling down during the stream."""
    departed, gone = set(departed_nodes(applied)), set(gone_at_end(applied))
    removed = sorted((t for t in before if t not in after), key=_task_key)
    lost = tuple(t for t in removed if before[t] in departed and t not in scaled_down)
    new = sorted((t for t in after if t not in before), key=_task_key)
    replacing = dict(zip(new, lost, strict=False))
    return ReplicaChanges(
        displaced=tuple(sorted((t for t, n in before.items() if n in departed), key=_task_key)),
        moved={t: (before[t], after[t]) for t in sorted(before, key=_task_key)
               if t in after and after[t] != before[t]},
        lost=lost, replacing=replacing,
        new_other=tuple(t for t in new if t not in replacing),
        removed_other=tuple(t for t in removed if t not in lost),
        stranded=tuple(sorted((t for t, n in after.items() if n in gone), key=_task_key)))


def churn_result(run: Path) -> dict[str, Any]:
    """Continuity per user and what the control plane did about the churn."""
    fleet = fleet_json(run)
    rows = trace_rows(run)
    stream = fleet["streams"][0]
    gaps = largest_gaps(rows)
    users = sorted({r["client"] for r in rows})
    per_user = {u: {**latency_stats([r for r in rows if r["client"] == u]),
                    "largest_gap_s": gaps.get(u)} for u in users}
    applied = stream["applied"]
    left = departed_nodes(applied)
    before = {r["task_id"]: r["node_id"] for r in fleet["deployment"]["settled"]}
    placed = [r for r in stream["replicas_after"] if r["status"] in ON_A_NODE and r["node_id"]]
    after = {r["task_id"]: r["node_id"] for r in placed}
    down = [e["task_id"] for e in stream.get("scaling_during", [])
            if e.get("action") == "down" and e.get("task_id")]
    return {"nodes": fleet["fleet"]["nodes"], "left": left,
            "left_share": len(left) / fleet["fleet"]["nodes"],
            "rejoined": rejoined_nodes(applied), "gone": gone_at_end(applied),
            "applied": applied, "per_user": per_user, "all": latency_stats(rows),
            "replicas_before": before, "replicas_after": after,
            "status_after": {r["task_id"]: r["status"] for r in placed},
            "changes": replica_changes(before, after, applied, down),
            "scaling": stream["scaling_after"], "host": fleet["host"],
            "duration_s": stream["duration_s"], "fps": fleet["fleet"]["fps"]}


CHURN_CLAIM = ("Armada handles dense, volatile volunteer nodes: when nodes leave, replicas "
               "are re-deployed on the remaining nodes and the client SDK keeps service "
               "continuous.")
CHURN_RULE = ("replicas re-deployed when no replica is stranded and every replica lost "
              "with a departed node has a new replica standing in for it, left out when no "
              "replica was on a departed node; service continuous when no frame is lost")
FATES = {"moved": "moved to another node, same id",
         "replaced": "replaced, a new replica standing in",
         "back": "back on a node that rejoined",
         "removed": "removed by a scale-down",
         "stranded": "stranded on a node gone at the end",
         "unreplaced": "lost without a replacement"}


def _fate_detail(changes: ReplicaChanges, task: str) -> str:
    """``det-3 from e02 to e06``, ``det-1 by det-8`` or the id alone."""
    if task in changes.moved:
        return f"{task} from {changes.moved[task][0]} to {changes.moved[task][1]}"
    by = [new for new, old in changes.replacing.items() if old == task]
    return f"{task} by {by[0]}" if by else task


def _fates_sentence(changes: ReplicaChanges) -> str:
    """What became of each replica that was on a departed node, counted by fate."""
    if not changes.displaced:
        return ("No replica was on a node that left, so the churn did not exercise "
                "re-placement.")
    groups: dict[str, list[str]] = {}
    for task in changes.displaced:
        groups.setdefault(changes.fate(task), []).append(_fate_detail(changes, task))
    parts = [f"{len(found)} {FATES[fate]} ({', '.join(found)})"
             for fate, found in sorted(groups.items(), key=lambda g: list(FATES).index(g[0]))]
    others = [t for t in changes.moved if t not in changes.displaced]
    return (f"Of the {plural(len(changes.displaced), 'replica')} on nodes that departed: "
            + "; ".join(parts) + "."
            + (f" {len(others)} more moved from nodes that stayed." if others else "")
            + f" In all {plural(changes.re_placements, 're-placement')}"
            + (f"; {plural(len(changes.stranded), 'replica')} stranded "
               f"({names(list(changes.stranded))})" if changes.stranded
               else "; no replica stranded") + ".")


def _gap_sentence(res: Mapping[str, Any]) -> str:
    """Frames lost and the largest gap between answered frames, against the period."""
    period = 1.0 / res["fps"]
    gaps = {u: s["largest_gap_s"] for u, s in res["per_user"].items()
            if s["largest_gap_s"] is not None}
    lost = f"{res['all']['lost']} of {res['all']['frames']} frames were lost"
    if not gaps:
        return lost + "; no user had two answered frames."
    worst = max(gaps, key=lambda u: gaps[u])
    within = sum(g <= 2 * period for g in gaps.values())
    return (f"{lost}; the largest gap between a user's answered frames was "
            f"{gaps[worst]:.2f} s ({worst}, {gaps[worst] / period:.1f} frame periods), and "
            f"{within} of {len(gaps)} users never waited more than two frame periods.")


def churn_conclusion(res: Mapping[str, Any]) -> Conclusion:
    """The churn claim's verdict and sentences, computed from :func:`churn_result`."""
    changes: ReplicaChanges = res["changes"]
    checks = churn_checks(res)
    nodes = (f"{len(res['left'])} of {res['nodes']} nodes left or crashed "
             f"({res['left_share']:.0%}); {len(res['rejoined'])} of them rejoined "
             f"({names(res['rejoined'])}) and {len(res['gone'])} were gone at the end "
             f"({names(res['gone'])}).")
    return Conclusion(verdict(checks), CHURN_RULE,
                      (nodes, _fates_sentence(changes), _gap_sentence(res)))


def _view(replicas: Mapping[str, str], status: Mapping[str, str] | None = None) -> str:
    """``det-1 on e01, det-3 on e02 (starting)``, in creation order."""
    status = status or {}
    return ", ".join(f"{t} on {replicas[t]}"
                     + (f" ({status[t]})" if status.get(t, "running") != "running" else "")
                     for t in sorted(replicas, key=_task_key)) or "none"


def _replica_text(res: Mapping[str, Any]) -> str:
    """The two replica views, the nodes' state at the end and what became of each
    displaced replica."""
    ch: ReplicaChanges = res["changes"]
    return (f"Before the stream: {_view(res['replicas_before'])}. After: "
            f"{_view(res['replicas_after'], res['status_after'])}. Nodes back by the end: "
            f"{names(res['rejoined'])}; gone at the end: {names(res['gone'])}. "
            + _fates_sentence(ch)
            + (f" New replicas beyond the stand-ins: {', '.join(ch.new_other)}."
               if ch.new_other else "")
            + (f" Removed from nodes that stayed or by a scale-down: "
               f"{', '.join(ch.removed_other)}." if ch.removed_other else ""))


DEFINITIONS = (
    "Counted between the replica views before and after the stream: a replica is "
    "*displaced* when it was on a node that left or crashed during the stream; a "
    "*re-placement* is a replica on another node after the stream than before (same id), "
    "or a new replica standing in for one that disappeared with a departed node without a "
    "scale-down removing it (one per such loss, in creation order); a replica is "
    "*stranded* when it is on a node gone at the end (its last leave or crash not followed "
    "by a join).")


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (replication): :func:`churn_result` of its run with the claim's
    checks and sentences, and the report's tables (schedule, continuity per user,
    replicas)."""
    runs, schedule, users, replicas = [], [], [], []
    for result in results.values():
        for cell in sorted(result.finished(), key=lambda c: c.replication):
            res = churn_result(cell.run)
            found = churn_conclusion(res)
            changes: ReplicaChanges = res["changes"]
            r = cell.replication
            runs.append({"replication": r, "degraded": cell.degraded, "nodes": res["nodes"],
                         "left": res["left"], "left_share": res["left_share"],
                         "rejoined": res["rejoined"], "gone": res["gone"],
                         "lost": res["all"]["lost"], "frames": res["all"]["frames"],
                         "re_placements": changes.re_placements,
                         "stranded": list(changes.stranded),
                         "unreplaced": list(changes.unreplaced),
                         "displaced": list(changes.displaced),
                         "checks": churn_checks(res), "sentences": list(found.sentences),
                         "host_idle_share": res["host"]["idle_share"]})
            schedule += [[str(r), f"{a['offset_s']:g}", a["action"], a["target"]]
                         for a in res["applied"]]
            period = 1.0 / res["fps"]
            for user, st in res["per_user"].items():
                users.append([str(r), user, str(st["frames"]), str(st["ok"]), str(st["lost"]),
                              _ms(st["mean_ms"]), _ms(st["p95_ms"]),
                              "-" if st["largest_gap_s"] is None else
                              f"{st['largest_gap_s']:.2f} ({st['largest_gap_s'] / period:.1f})"])
            replicas.append([str(r), _replica_text(res)])
    return {"size": size, "runs": runs, "tables": [
        {"title": "Schedule", "columns": ["replication", "s into the stream", "action", "node"],
         "rows": schedule, "note": ""},
        {"title": "Continuity per user", "columns": [
            "replication", "user", "frames", "ok", "lost", "mean ms", "p95 ms",
            "largest gap s (frame periods)"], "rows": users, "note": ""},
        {"title": "Replicas", "columns": ["replication", "what the control plane did"],
         "rows": replicas, "note": DEFINITIONS}]}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def churn_checks(res: Mapping[str, Any]) -> dict[str, bool]:
    """The claim's checks on one run: service continuous and, when a replica was on a
    departed node, replicas re-deployed."""
    changes: ReplicaChanges = res["changes"]
    checks = {"service continuous (no frame lost)": res["all"]["lost"] == 0}
    if changes.displaced:
        checks = {"replicas re-deployed": not changes.stranded and not changes.unreplaced,
                  **checks}
    return checks


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Claim A5: every check of every replication."""
    return [replicated_claim("A5", "under volunteer churn the replicas are re-deployed and "
                             "the service continues", CHURN_RULE, CHURN_CLAIM, found["runs"])]