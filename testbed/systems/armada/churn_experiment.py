"""Armada experiment 4 (``armada-churn``): volunteer nodes leave and rejoin.

Volunteer nodes leave (services stopped, links down) and some rejoin on a seeded
schedule during one SDK stream, at least 30 % of the nodes; continuity per user and the
replicas the control plane re-placed. Report: ``docs/results/armada/churn.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.experiments.emulated import host_line, report_header
from testbed.systems.armada.builders import Fleet, volunteer_nodes
from testbed.systems.armada.control import Progress, size_plan
from testbed.systems.armada.fleet import (
    SMALL_NODES,
    Action,
    largest_gaps,
    latency_stats,
    run_fleet,
)
from testbed.systems.armada.fleet_report import fleet_json, fleet_setup, trace_rows

# ------------------------------------------------------------------ churn


@dataclasses.dataclass(frozen=True)
class ChurnSize:
    nodes: int
    users: int
    duration_s: float
    leave_share: float
    rejoin_share: float
    fps: float = 1.0
    node_cores: tuple[float, ...] = SMALL_NODES


CHURN_SIZES = {"small": ChurnSize(nodes=6, users=6, duration_s=30.0, leave_share=0.34,
                                  rejoin_share=0.5),
               "full": ChurnSize(nodes=12, users=12, duration_s=90.0, leave_share=0.42,
                                 rejoin_share=0.6, node_cores=(0.08, 0.09, 0.1))}


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


def run_churn(size: str, out: Path, progress: Progress = print,
              ledger_root: Path | None = None) -> Path:
    """Volunteer churn during one SDK stream (module docstring)."""
    plan = size_plan(size, CHURN_SIZES)
    fleet = Fleet(nodes=plan.nodes, users=plan.users, fps=plan.fps, volunteer_share=0.67,
                  node_cores=plan.node_cores, duration=plan.duration_s)
    volunteers = volunteer_nodes(fleet)
    actions = churn_schedule(fleet.edge_names, volunteers, plan.duration_s, plan.leave_share,
                             plan.rejoin_share, fleet.seed)
    progress("churn: " + ", ".join(f"{a.action} {a.target} at {a.offset_s:g} s" for a in actions))
    run_fleet(fleet, ["armada"], out, "armada-churn", size, progress, ledger_root,
              events=actions)
    return out


def churn_result(run: Path) -> dict[str, Any]:
    """Continuity per user and what the control plane did about the churn."""
    fleet = fleet_json(run)
    rows = trace_rows(run)
    stream = fleet["streams"][0]
    gaps = largest_gaps(rows)
    users = sorted({r["client"] for r in rows})
    per_user = {u: {**latency_stats([r for r in rows if r["client"] == u]),
                    "largest_gap_s": gaps.get(u)} for u in users}
    left = sorted({a["target"] for a in stream["applied"] if a["action"] == "leave"})
    before = {r["task_id"]: r["node_id"] for r in fleet["deployment"]["settled"]}
    after = [r for r in stream["replicas_after"] if r["status"] == "running"]
    return {"nodes": fleet["fleet"]["nodes"], "left": left,
            "left_share": len(left) / fleet["fleet"]["nodes"],
            "applied": stream["applied"], "per_user": per_user, "all": latency_stats(rows),
            "replicas_before": before,
            "replicas_after": {r["task_id"]: r["node_id"] for r in after},
            "replaced": sorted(t for t in {r["task_id"] for r in after} if t not in before),
            "on_left_nodes_after": sorted(r["task_id"] for r in after
                                          if r["node_id"] in left),
            "scaling": stream["scaling_after"], "host": fleet["host"],
            "duration_s": stream["duration_s"], "fps": fleet["fleet"]["fps"]}


CHURN_CLAIM = ("Armada handles dense, volatile volunteer nodes: when nodes leave, replicas "
               "are re-deployed on the remaining nodes and the client SDK keeps service "
               "continuous.")


def write_churn_report(out: Path, report: Path, command: str) -> Path:
    """The Markdown report of a ``run_churn`` folder."""
    res = churn_result(out)
    period = 1.0 / res["fps"]
    lines = report_header("Armada experiment 4: volunteer churn (`armada-churn`)", command, out,
                    f"{len(res['per_user'])} users stream for {res['duration_s']:g} s at "
                    f"{res['fps']:g} fps through the SDK while volunteer nodes leave "
                    "(Captain stopped, links down) and some rejoin (links up, Captain "
                    "restarted and registered again) on a seeded schedule.")
    lines += [fleet_setup(out), "", "## Schedule", "",
              "| s into the stream | action | node |", "|---|---|---|"]
    lines += [f"| {a['offset_s']:g} | {a['action']} | {a['target']} |" for a in res["applied"]]
    lines += ["", (f"{len(res['left'])} of {res['nodes']} nodes left "
                   f"({res['left_share']:.0%})."), "",
              "## Continuity per user", "",
              f"| user | frames | ok | lost | mean ms | p95 ms | largest gap s (period {period:g}) |",
              "|---|---|---|---|---|---|---|"]
    for user, s in res["per_user"].items():
        gap = "-" if s["largest_gap_s"] is None else f"{s['largest_gap_s']:.2f}"
        mean = "-" if s["mean_ms"] is None else f"{s['mean_ms']:.0f}"
        p95 = "-" if s["p95_ms"] is None else f"{s['p95_ms']:.0f}"
        lines.append(f"| {user} | {s['frames']} | {s['ok']} | {s['lost']} | {mean} | {p95} | "
                     f"{gap} |")
    lines += ["", "## Replicas", "",
              ("Before the stream: " + ", ".join(f"{t} on {n}" for t, n in
                                                  sorted(res["replicas_before"].items()))
               + ". After: " + ", ".join(f"{t} on {n}" for t, n in
                                         sorted(res["replicas_after"].items()))
               + f". New replicas placed during the churn: {', '.join(res['replaced']) or 'none'}"
               f"; running replicas left on nodes that left and did not come back: "
               f"{', '.join(res['on_left_nodes_after']) or 'none'}."), "",
              "## Host fidelity", "", host_line({"churn": res["host"]}), "",
              "## The paper's claim beside ours", "",
              "| paper (seed) | this run |", "|---|---|",
              (f"| {CHURN_CLAIM} | {res['all']['lost']} of {res['all']['frames']} frames lost; "
               f"largest gap over all users "
               f"{max((s['largest_gap_s'] or 0) for s in res['per_user'].values()):.2f} s "
               f"against a {period:g} s frame period; {len(res['replaced'])} replicas placed "
               "anew |"), ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    return report
