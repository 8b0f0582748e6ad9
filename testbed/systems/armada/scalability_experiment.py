"""Armada experiment 2 (``armada-scalability``): latency as users and edge nodes grow.

Average end-to-end latency as users (1..30) and edge nodes (3..20) grow, with the
Application Manager's auto-scaling on: the Armada SDK (probing with a frame, and with a
small request) against the geo-nearest-only and random baselines, all four on the same
bring-up, deployment and frame trace, one after the other, each from a settled replica
set. Every run also records the deployment start-up time. Report:
``docs/results/armada/scalability.md``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.experiments.emulated import host_line, report_header, save_figure
from testbed.systems.armada.builders import Fleet
from testbed.systems.armada.control import Progress, size_plan
from testbed.systems.armada.fleet import (
    SMALL_NODES,
    TINY_NODES,
    latency_stats,
    run_fleet,
)
from testbed.systems.armada.fleet_report import fleet_json, fleet_setup, startup_rows, trace_rows

SELECTION_POLICIES = ("armada", "armada-light", "geo-nearest", "random")


# ------------------------------------------------------------------ scalability


@dataclasses.dataclass(frozen=True)
class ScaleSize:
    users_sweep: tuple[int, ...]
    users_sweep_nodes: int
    nodes_sweep: tuple[int, ...]
    nodes_sweep_users: int
    duration_s: float
    fps: float = 1.0
    node_cores: tuple[float, ...] = SMALL_NODES

    def points(self) -> list[tuple[int, int]]:
        """(nodes, users) of every run, each once."""
        found = [(self.users_sweep_nodes, u) for u in self.users_sweep]
        found += [(n, self.nodes_sweep_users) for n in self.nodes_sweep]
        return sorted(set(found))


SCALE_SIZES = {
    "small": ScaleSize(users_sweep=(1, 4), users_sweep_nodes=3, nodes_sweep=(3, 5),
                       nodes_sweep_users=4, duration_s=8.0),
    "full": ScaleSize(users_sweep=(1, 5, 10, 20, 30), users_sweep_nodes=20,
                      nodes_sweep=(3, 5, 10, 20), nodes_sweep_users=10, duration_s=20.0,
                      node_cores=TINY_NODES),
}


def run_scalability(size: str, out: Path, progress: Progress = print,
                    ledger_root: Path | None = None) -> Path:
    """Every (nodes, users) point of ``size``: one bring-up, the three selection policies
    streaming in turn; results in ``out/n{nodes}-u{users}``, the table in ``scalability.json``."""
    plan = size_plan(size, SCALE_SIZES)
    out.mkdir(parents=True, exist_ok=True)
    points = []
    for i, (nodes, users) in enumerate(plan.points()):
        order = rotated(SELECTION_POLICIES, i)
        progress(f"== {nodes} edge nodes, {users} users; order {', '.join(order)}")
        run = out / f"n{nodes:02d}-u{users:02d}"
        run_fleet(Fleet(nodes=nodes, users=users, fps=plan.fps, node_cores=plan.node_cores,
                        duration=plan.duration_s),
                  order, run, "armada-scalability", size, progress, ledger_root)
        points.append(scalability_point(run))
    table = {"size": size, "plan": dataclasses.asdict(plan), "points": points}
    (out / "scalability.json").write_text(json.dumps(table, indent=1))
    return out


def rotated(items: Sequence[str], shift: int) -> tuple[str, ...]:
    """``items`` rotated left by ``shift``: point ``i`` of a sweep streams the policies in
    this order, so no policy is always first on a fresh deployment."""
    k = shift % len(items)
    return (*items[k:], *items[:k])


def scalability_point(run: Path) -> dict[str, Any]:
    """Per policy latency statistics of one scalability run (from its traces)."""
    fleet = fleet_json(run)
    rows = trace_rows(run)
    by_policy = {}
    for k, stream in enumerate(fleet["streams"]):
        mine = [r for r in rows if r["policy"] == stream["policy"]]
        by_policy[stream["policy"]] = {
            **latency_stats(mine), **spread(mine, stream),
            **co_switches(run, k, stream["policy"]), "order": k,
            "replicas": sum(r["status"] == "running" for r in stream["replicas_after"]),
            "scaled_during": [e.get("action") for e in stream.get("scaling_during", [])],
            "scaled_reasons": sorted({str(e.get("reason")) for e in stream.get("scaling_during", [])})}
    return {"run": run.name, "nodes": fleet["fleet"]["nodes"], "users": fleet["fleet"]["users"],
            "policies": by_policy, "host": fleet["host"],
            "startup_s": fleet["deployment"]["startup_s"],
            "replicas_settled": len(fleet["deployment"]["settled"])}


def spread(rows: Sequence[Mapping[str, Any]], stream: Mapping[str, Any]) -> dict[str, Any]:
    """How one stream's frames spread over the replicas (the herding check): the share
    of ok frames served by the busiest node, the nodes used, and the switches per user
    (first pick included: 1.0 means no user ever moved)."""
    served = [r["target"] for r in rows if r["outcome"] == "ok"]
    counts = {t: served.count(t) for t in set(served)}
    switches = stream.get("switches", {})
    return {"busiest_share": max(counts.values()) / len(served) if served else None,
            "nodes_used": len(counts),
            "switches_per_user": (sum(switches.values()) / len(switches)) if switches else None}


def co_switches(run: Path, k: int, policy: str, window_s: float = 2.0) -> dict[str, Any]:
    """Do users move together? For every switch a periodic re-probe made in stream ``k``
    (from the users' event logs in ``run/work``): how many other users switched to the
    same replica within ``window_s``; and what that count would be if the same switches
    were spread uniformly over their time span and over the replicas they went to."""
    events = []
    for path in sorted((run / "work").glob(f"result-{k}-{policy}-*.json")):
        for e in json.loads(path.read_text())["events"]:
            d = e["detail"]
            if e["kind"] == "switch" and d.get("reason") == "probe" and d.get("source"):
                events.append((e["t"], d["target"], path.name))
    if len(events) < 2:
        return {"reprobe_switches": len(events), "co_switches": None, "co_switches_chance": None}
    together = [sum(1 for t2, g2, u2 in events if g2 == g and u2 != u and abs(t2 - t) <= window_s)
                for t, g, u in events]
    span = max(t for t, _, _ in events) - min(t for t, _, _ in events)
    targets = len({g for _, g, _ in events})
    chance = (len(events) - 1) * min(1.0, 2 * window_s / span if span > 0 else 1.0) / targets
    return {"reprobe_switches": len(events), "co_switches": sum(together) / len(events),
            "co_switches_chance": chance}


def _scale_summary(actions: Sequence[str]) -> str:
    """``['up', 'up', 'down']`` -> ``'2 up, 1 down'``."""
    return ", ".join(f"{actions.count(a)} {a}" for a in dict.fromkeys(actions))


def _scaling_sentence(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """Which policies' streams made the Application Manager scale up, and how often."""
    ups = {k: sum(p["policies"][k].get("scaled_during", []).count("up") for p in points)
           for k in SELECTION_POLICIES}
    with_up = {k: sum("up" in p["policies"][k].get("scaled_during", []) for p in points)
               for k in SELECTION_POLICIES}
    if not any(ups.values()):
        return []
    reasons = sorted({r for p in points for k in SELECTION_POLICIES
                      for r in p["policies"][k].get("scaled_reasons", [])})
    return [(
        "Every policy started from the same settled replica set, so a scale-up during a "
        "stream was caused by that stream (the Application Manager's recorded reasons: "
        + (", ".join(f"`{r}`" for r in reasons) or "none recorded") + "): "
        + "; ".join(f"`{k}` {ups[k]} replicas added over {with_up[k]} of {len(points)} points"
                    for k in SELECTION_POLICIES)
        + ". Above 75 % utilisation the Application Manager adds a replica; on nodes of a "
        "few hundredths of a core a new replica takes about a minute of the node's CPU to "
        "start (importing OpenCV under the quota), which the replicas already serving on "
        "that node lose meanwhile. The frame probes' extra work pushes utilisation over the "
        "threshold, and the stream then pays for the start-ups."), ""]


def _herding_section(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """Do the SDK's users herd onto the replicas that probed fastest? The busiest node's
    share of frames and the switches per user, per point and policy."""
    if not all("busiest_share" in p["policies"][k] for p in points for k in SELECTION_POLICIES):
        return []  # a run from before these were recorded
    lines = ["## Herding: where the frames went", "",
             ("Per policy: the busiest node's share of the ok frames / switches per user "
              "(the first pick counts as one, so 1.0 means no user moved)."), "",
             "| edge nodes | users | " + " | ".join(SELECTION_POLICIES) + " |",
             "|---|---|" + "---|" * len(SELECTION_POLICIES)]
    for p in points:
        pol = p["policies"]
        lines.append(f"| {p['nodes']} | {p['users']} | " + " | ".join(
            f"{pol[k]['busiest_share']:.2f} / {pol[k]['switches_per_user']:.1f}"
            if pol[k]["busiest_share"] is not None and pol[k]["switches_per_user"] is not None
            else "-" for k in SELECTION_POLICIES) + " |")
    crowded = [p for p in points if p["users"] >= 10]
    sdk = [p["policies"][k]["busiest_share"] for p in crowded for k in ("armada", "armada-light")]
    geo = [p["policies"]["geo-nearest"]["busiest_share"] for p in crowded]
    moves = [p["policies"][k]["switches_per_user"] for p in crowded
             for k in ("armada", "armada-light")]
    geo_moves = [p["policies"]["geo-nearest"]["switches_per_user"] for p in crowded]
    if sdk and geo and moves and geo_moves:
        lines += ["", (
            f"At the points with 10 users or more the SDK's busiest node served "
            f"{min(sdk):.0%}-{max(sdk):.0%} of the frames, geo-nearest's {min(geo):.0%}-"
            f"{max(geo):.0%}: over a whole stream the SDK does not pile its users onto one "
            f"replica. Its users do move much more: {min(moves):.1f}-{max(moves):.1f} "
            f"switches per user in one stream against {min(geo_moves):.1f}-"
            f"{max(geo_moves):.1f} for geo-nearest (which moves only when its nearest "
            "replica changes).")]
    lines += ["", ("Moving together, measured from the users' event logs: after a periodic "
                   "re-probe moved a user, how many other users moved to the same replica "
                   "within 2 s, against the count expected if the same switches were spread "
                   "uniformly over their time span and their target replicas (chance)."), "",
              ("| edge nodes | users | re-probe switches (armada / armada-light) | "
               "others moving along: armada (chance) | armada-light (chance) |"),
              "|---|---|---|---|---|"]
    for p in points:
        pol = p["policies"]
        cells = [f"{pol[k]['co_switches']:.1f} ({pol[k]['co_switches_chance']:.1f})"
                 if pol[k].get("co_switches") is not None else "-"
                 for k in ("armada", "armada-light")]
        lines.append(f"| {p['nodes']} | {p['users']} | {pol['armada'].get('reprobe_switches')} / "
                     f"{pol['armada-light'].get('reprobe_switches')} | " + " | ".join(cells) + " |")
    busy = [p["policies"][k] for p in points if p["users"] >= 20
            for k in ("armada", "armada-light") if p["policies"][k].get("co_switches")]
    if busy:
        ratios = [b["co_switches"] / b["co_switches_chance"] for b in busy]
        lines += ["", (
            f"With 20 users or more the SDK's users moved along with others "
            f"{min(ratios):.1f}-{max(ratios):.1f} times as often as chance: users whose "
            "re-probes fall in the same few seconds see the same fast replica and move to "
            "it together, so its load rises for all of them at once. The 5-7 s jitter spreads the "
            "probes, but with 20-30 users several still fall in every 2 s.")]
    return lines + [""]


def _plot_scalability(table: Mapping[str, Any], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = table["plan"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sweeps = (("users", "users_sweep", "users_sweep_nodes", "nodes", "edge nodes"),
              ("nodes", "nodes_sweep", "nodes_sweep_users", "users", "users"))
    for ax, (axis, values, fixed_key, other, other_name) in zip(axes, sweeps, strict=True):
        for policy in SELECTION_POLICIES:
            xs, ys = [], []
            for point in sorted(table["points"], key=lambda p: p[axis]):
                if point[axis] in plan[values] and point[other] == plan[fixed_key]:
                    mean = point["policies"][policy]["mean_ms"]
                    if mean is not None:
                        xs.append(point[axis])
                        ys.append(mean)
            ax.plot(xs, ys, "o-", label=policy)
        ax.set_xlabel(axis)
        ax.set_ylabel("mean end-to-end latency (ms)")
        ax.set_title(f"{plan[fixed_key]} {other_name}", fontsize=10)
        ax.legend(fontsize=8)
    return save_figure(fig, png)


SCALE_CLAIM = ("Armada scales: as users and edge nodes increase, users keep a low average "
               "end-to-end latency thanks to performance-aware selection and auto-scaling, "
               "better than geo-proximity-only and random selection (Fig. 9).")


def write_scalability_report(out: Path, report: Path, command: str) -> Path:
    """The Markdown report of a ``run_scalability`` folder, with its plot."""
    table = json.loads((out / "scalability.json").read_text())
    points = sorted(table["points"], key=lambda p: (p["nodes"], p["users"]))
    first = out / points[0]["run"]
    png = _plot_scalability(table, report.with_name("scalability.png"))
    plan = table["plan"]
    lines = report_header("Armada experiment 2: scalability (`armada-scalability`)", command, first,
                    f"{plan['duration_s']:g} s of streaming per policy at {plan['fps']:g} fps "
                    "per user; the four policies stream one after the other on the same "
                    "deployment and frame trace, each from a settled replica set (the users "
                    "registered, no scaling for 6 s), in an order rotated from point to point.")
    lines += [fleet_setup(first), "",
              ("Policies: `armada` (the SDK, probing with a frame), `armada-light` (the SDK, "
               "probing with a small request), `geo-nearest` and `random` (no probes; they "
               "list the running replicas every 5-7 s)."), "",
              "## Mean end-to-end latency (ms) per policy", "",
              "| edge nodes | users | replicas | " + " | ".join(SELECTION_POLICIES)
              + " | frames lost (" + " / ".join(SELECTION_POLICIES) + ") "
              + "| scaling during the stream | order |",
              "|---|---|---|" + "---|" * len(SELECTION_POLICIES) + "---|---|---|"]
    wins = 0
    for p in points:
        pol = p["policies"]
        means = [pol[k]["mean_ms"] for k in SELECTION_POLICIES]
        best = min((m for m in means if m is not None), default=None)
        wins += best is not None and best in means[:2]  # either SDK variant
        cells = [("-" if m is None else (f"**{m:.0f}**" if m == best else f"{m:.0f}"))
                 for m in means]
        lost = " / ".join(str(pol[k]["lost"]) for k in SELECTION_POLICIES)
        scaled = "; ".join(f"{k} {_scale_summary(pol[k].get('scaled_during', []))}"
                           for k in SELECTION_POLICIES if pol[k].get("scaled_during")) or "none"
        order = " > ".join(sorted(SELECTION_POLICIES, key=lambda k: pol[k].get("order", 0)))
        lines.append(f"| {p['nodes']} | {p['users']} | {pol['armada']['replicas']} | "
                     + " | ".join(cells) + f" | {lost} | {scaled} | {order} |")
    lines += ["", f"![mean latency against users and nodes]({png.name})", "",
              "p95 (ms): " + "; ".join(
                  f"{p['nodes']}n/{p['users']}u " + ", ".join(
                      f"{k} {p['policies'][k]['p95_ms']:.0f}" for k in SELECTION_POLICIES
                      if p["policies"][k]["p95_ms"] is not None) for p in points) + ".", "",
              *_herding_section(points),
              "## Deployment start-up", "",
              *startup_rows({p["run"]: out / p["run"] for p in points}), "",
              ("A replica starts by importing OpenCV and warming its detector inside a node "
               "of a few hundredths of a core, so start-up time is dominated by the node's "
               "CPU limit, not by the control plane."), "",
              "## Host fidelity", "",
              host_line({p["run"]: p["host"] for p in points}), "",
              "## The paper's claim beside ours", "",
              "| paper (seed, Fig. 9) | this run |", "|---|---|",
              (f"| {SCALE_CLAIM} | the SDK (either probe) had the lowest mean at {wins} of "
               f"{len(points)} points (bold: lowest per row). |"), "",
              ("The seed gives no numbers for Fig. 9, so only the qualitative claim is "
               "compared. `armada` probes with a real frame: 3 candidates probed every 5-7 s "
               "add about half the detection work of a 1 fps stream, which the baselines do "
               "not pay, and on nodes of a few hundredths of a core (whose CPU quota "
               "serves a frame at full speed until the period's quota is spent, then makes "
               "it wait for the next 100 ms period) that extra work costs far more than its "
               "share. `armada-light` is the same SDK probing with a small request (a "
               "64x128 crop, one HOG window, about 2 KB): it times a real request end to "
               "end, so it still measures the network and the queue, but not the full "
               "processing time of a frame."), "",
              *_scaling_sentence(points)]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    return report
