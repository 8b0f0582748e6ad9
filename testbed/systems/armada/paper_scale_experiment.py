"""Armada at paper scale in the simulator (``armada-paper-scale``): latency as users and
edge nodes grow, on nodes of whole cores.

The emulated scalability experiment has to give each node a twentieth of a core to fit
on this machine; here the fleet is what the paper describes, dedicated servers and
volunteer machines of whole cores (:data:`NODE_CORES`), with the Application Manager's
auto-scaling on, and it grows to 200 edge nodes and 1000 users. Every point is a
``testbed run --executor sim`` of an ``armada-fleet`` scenario (``host_cores: null``:
a fleet for the simulator only), replayed by the SDK (frame probes and small probes),
the SDK spreading near-equal candidates (``armada-spread``: ``near_equal``
:data:`SPREAD`), geo-nearest and random, all on the same fleet, trace and seeds. Each
replication is an independent fleet (layout, users, trace and clients' seeds from the
replication's seed); numbers are means over replications with 95 % t-intervals, and a
comparison between policies is paired within a replication.

Herding (users moving together after re-probes) is measured from the users' switch
events (:func:`~testbed.systems.armada.fleet_measure.herd_share`). Report:
``docs/results/armada/paper-scale.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.analysis.stats import pm, replication_interval, side
from testbed.systems.armada.fleet_measure import HERD_MIN, HERD_WINDOW_S, measure_run
from testbed.systems.armada.verdicts import (
    Conclusion,
    beats_baselines,
    below_all,
    record_claims,
)

Progress = Callable[[str], None]
NODE_CORES = (1.0, 2.0, 4.0)  # volunteer machines and dedicated servers, whole cores
SPREAD = 0.2
POLICIES: tuple[Any, ...] = ("armada", "armada-light",
                             {"name": "armada", "label": "armada-spread",
                              "params": {"near_equal": SPREAD}},
                             "geo-nearest", "random")
LABELS = ("armada", "armada-light", "armada-spread", "geo-nearest", "random")
SDK = ("armada", "armada-light", "armada-spread")
BASELINES = ("geo-nearest", "random")
#: Node density kept as the fleet grows: the fleet's side grows as sqrt(nodes).
KM_PER_SQRT_NODE = 4.0


@dataclasses.dataclass(frozen=True)
class PaperScaleSize:
    """The sweeps of one size: users at a fixed fleet, nodes at fixed users."""

    users_sweep: tuple[int, ...]
    users_sweep_nodes: int
    nodes_sweep: tuple[int, ...]
    nodes_sweep_users: int
    duration_s: float
    replications: int


SIZES = {
    "small": PaperScaleSize((10, 30), 10, (10, 20), 20, duration_s=20.0, replications=2),
    "full": PaperScaleSize((10, 50, 100, 250, 500, 1000), 100, (10, 25, 50, 100, 200), 500,
                           duration_s=60.0, replications=5),
}


def fleet_params(nodes: int, users: int, seed: int, duration_s: float) -> dict[str, Any]:
    """The ``armada-fleet`` params of one point and replication."""
    return {"nodes": nodes, "users": users, "seed": seed, "node_cores": list(NODE_CORES),
            "replica_cpu": 1.0, "users_per_replica": 3,
            "span_km": round(KM_PER_SQRT_NODE * math.sqrt(nodes), 3),
            "duration": duration_s, "host_cores": None}


def points(size: PaperScaleSize) -> list[tuple[str, int, int]]:
    """Every (sweep, nodes, users) of a size."""
    return ([("users", size.users_sweep_nodes, u) for u in size.users_sweep]
            + [("nodes", n, size.nodes_sweep_users) for n in size.nodes_sweep])


def run_paper_scale(size: str, out: Path, progress: Progress = print) -> Path:
    """Every point and replication of ``size`` through ``testbed run --executor sim``
    into ``out/<sweep>-n<nodes>-u<users>/r<k>``; ``out/paper_scale.json`` gathers them.
    A rerun into the same ``out`` keeps the runs that finished."""
    from testbed.experiments.sizes import size_plan
    from testbed.runner import run_scenario
    from testbed.scenario import scenario_from_dict

    plan: PaperScaleSize = size_plan(size, SIZES)
    found: list[dict[str, Any]] = []
    for sweep, nodes, users in points(plan):
        for r in range(plan.replications):
            folder = out / f"{sweep}-n{nodes:03d}-u{users:04d}" / f"r{r}"
            if not (folder / "metadata.json").exists():
                if folder.exists():
                    shutil.rmtree(folder)
                scenario = scenario_from_dict({
                    "name": f"armada-paper-scale-{sweep}", "policies": list(POLICIES),
                    "executor": {"default": "sim"},
                    "build": {"builder": "armada-fleet",
                              "params": fleet_params(nodes, users, 1000 + r, plan.duration_s)}},
                    source=f"<armada-paper-scale {sweep} {nodes} nodes {users} users r{r}>")
                progress(f"{sweep}: {nodes} nodes, {users} users, replication {r}")
                run_scenario(scenario, out=folder, executor="sim", progress=progress,
                             plots=False)
            found.append({"sweep": sweep, "nodes": nodes, "users": users, "replication": r,
                          "run": str(folder.relative_to(out)),
                          "policies": measure_run(folder)})
    (out / "paper_scale.json").write_text(json.dumps(
        {"size": size, "plan": dataclasses.asdict(plan), "points": found}, indent=1))
    return out


# ------------------------------------------------------------------ report


def _key(p: Mapping[str, Any]) -> tuple[str, int, int]:
    return (p["sweep"], p["nodes"], p["users"])


def _over(rows: Sequence[Mapping[str, Any]], label: str, metric: str) -> Any:
    values = [r["policies"][label][metric] for r in rows
              if r["policies"].get(label, {}).get(metric) is not None]
    return replication_interval(values) if values else None


def _paired(rows: Sequence[Mapping[str, Any]], label: str, other: str,
            metric: str = "mean_ms") -> Any:
    """``label`` minus ``other`` for ``metric`` (mean latency by default), paired within
    replications."""
    diffs = [r["policies"][label][metric] - r["policies"][other][metric] for r in rows
             if r["policies"].get(label, {}).get(metric) is not None
             and r["policies"].get(other, {}).get(metric) is not None]
    return replication_interval(diffs) if diffs else None


#: A herd share from which the report asks whether herding costs latency.
HERDED = 0.3


def herding_lines(doc: Mapping[str, Any]) -> list[str]:
    """The herding section: per point the SDK's herd share, the spread's paired change
    of it and of the mean latency, and how many points the spread improves."""
    lines = ["## Herding and the spread", "",
             ("Herd share: the share of a stream's switches made within "
              f"{HERD_WINDOW_S:g} s of at least {HERD_MIN - 1} other users' switches onto "
              "the same replica. `armada-spread − armada` is paired within a replication."),
             "", ("| nodes | users | `armada` herd share | `armada-spread − armada` herd "
             "share | `armada-spread − armada` mean (ms) |"), "|---|---|---|---|---|"]
    fewer = faster = 0
    groups = _groups(doc)
    for (_, nodes, users), rows in sorted(groups.items(), key=lambda kv: kv[0][1:]):
        herd = _paired(rows, "armada-spread", "armada", "herd_share")
        mean = _paired(rows, "armada-spread", "armada")
        fewer += side(herd) == "lower"
        faster += side(mean) == "lower"
        lines.append(f"| {nodes} | {users} | {pm(_over(rows, 'armada', 'herd_share'), 2)} | "
                     f"{pm(herd, 2)} | {pm(mean)} |")
    shares = {(n, u): _over(rows, "armada", "herd_share") for (_, n, u), rows in groups.items()}
    known = {k: v.estimate for k, v in shares.items() if v is not None and v.estimate is not None}
    lines += [""]
    if known:
        most = max(known, key=lambda k: known[k])
        least = min(known, key=lambda k: known[k])
        lines.append(
            f"`armada`'s herd share ranges from {known[least]:.2f} ({least[0]} nodes, "
            f"{least[1]} users) to {known[most]:.2f} ({most[0]} nodes, {most[1]} users). "
            f"The spread lowers it, with the interval below zero, at {fewer} of "
            f"{len(groups)} points, and lowers the mean latency at {faster} of "
            f"{len(groups)}.")
        herded = [k for k, v in known.items() if v >= HERDED]
        slower = [k for k in herded if side(_paired(
            next(rows for (_, n, u), rows in groups.items() if (n, u) == k),
            "armada", "geo-nearest")) == "higher"]
        lines.append(
            f"At the {len(herded)} points where `armada`'s herd share is at least "
            f"{HERDED:g}, its mean latency is above geo-nearest's (paired interval above "
            f"zero) at {len(slower)}"
            + (f": {', '.join(f'{n} nodes / {u} users' for n, u in sorted(slower))}."
               if slower else "."))
    return lines + [""]


def _groups(doc: Mapping[str, Any]) -> dict[tuple[str, int, int], list[Mapping[str, Any]]]:
    out: dict[tuple[str, int, int], list[Mapping[str, Any]]] = {}
    for p in doc["points"]:
        out.setdefault(_key(p), []).append(p)
    return out


def conclusion(doc: Mapping[str, Any], label: str) -> Conclusion:
    """Does ``label`` keep a lower mean than both baselines at every point? Paired
    intervals across replications decide each point."""
    checks = [(f"{nodes} nodes / {users} users ({sweep} sweep)",
               below_all([_paired(rows, label, b) for b in BASELINES]))
              for (sweep, nodes, users), rows in _groups(doc).items()]
    return beats_baselines(label, checks)


def write_paper_scale_report(out: Path, report: Path, command: str) -> Path:
    """``paper-scale.md``: both sweeps, every policy, with intervals; the claim judged."""
    doc = json.loads((out / "paper_scale.json").read_text())
    groups = _groups(doc)
    reps = doc["plan"]["replications"]
    lines = ["# Armada at paper scale (simulator)", "",
             (f"Generated by `{command}` (size `{doc['size']}`, {reps} replications per "
              "point, each an independent fleet; every number is a mean over replications "
              "± the half-width of its 95 % t-interval). Nodes of "
              f"{', '.join(f'{c:g}' for c in NODE_CORES)} cores (volunteer machines and "
              "dedicated servers), replicas of one core with one detection worker, "
              "auto-scaling on (3 users per replica, at most as many replicas as nodes); "
              f"`armada-spread` is the SDK choosing at random among candidates that probed "
              f"within {SPREAD:.0%} of the fastest. Replica times come from the measured "
              "calibration (`calibration.md`); what the simulator leaves out is listed in "
              "`docs/simulator.md`."), ""]
    for sweep, what in (("users", "users"), ("nodes", "edge nodes")):
        lines += [f"## Latency as {what} grow", "",
                  "| nodes | users | " + " | ".join(f"`{p}` mean (ms)" for p in LABELS)
                  + " | `armada` p95 (ms) | lost frames (armada) | herd share (armada / "
                    "armada-spread) | switches per user (armada) |",
                  "|" + "---|" * (len(LABELS) + 6)]
        for (s, nodes, users), rows in groups.items():
            if s != sweep:
                continue
            lines.append(
                f"| {nodes} | {users} | "
                + " | ".join(pm(_over(rows, p, "mean_ms")) for p in LABELS)
                + f" | {pm(_over(rows, 'armada', 'p95_ms'))} | "
                f"{pm(_over(rows, 'armada', 'lost_share'), 1, 100.0)} % | "
                f"{pm(_over(rows, 'armada', 'herd_share'), 2)} / "
                f"{pm(_over(rows, 'armada-spread', 'herd_share'), 2)} | "
                f"{pm(_over(rows, 'armada', 'switches_per_user'), 1)} |")
        lines.append("")
    lines += herding_lines(doc)
    judged = [(label, conclusion(doc, label)) for label in SDK]
    lines += ["## Conclusion", "",
              ("Claim (seed 000, Fig. 9): as users and edge nodes increase, Armada keeps "
               "users' average latency lower than geo-proximity and random selection."), ""]
    for label, found in judged:
        lines += [f"- `{label}`: {found.paragraph()}"]
    lines += ["", "## Reproduce", "", f"`{command}`", ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    record_claims(report, command, [
        (f"scale-sim-{label}", (f"at paper scale (simulated) `{label}` has a lower mean than "
                               "geo-nearest and random at every point"), found)
        for label, found in judged])
    return report
