"""Armada at paper scale in the simulator (``armada-paper-scale``): latency as users and
edge nodes grow, on nodes of whole cores.

The emulated scalability experiment has to give each node a twentieth of a core to fit
on this machine; here the fleet is what the paper describes, dedicated servers and
volunteer machines of whole cores (:data:`NODE_CORES`), with the Application Manager's
auto-scaling on, and it grows to 200 edge nodes and 1000 users. The study files
(``studies/paper_scale/<size>/``: a users sweep and a nodes sweep over the scenario
``studies/paper_scale/paper-scale.scenario.yaml``, ``host_cores: null``: a fleet for the
simulator only) run every point in the simulator, replayed by the SDK (frame probes and
small probes), the SDK spreading near-equal candidates (``armada-spread``:
``near_equal`` :data:`SPREAD`), geo-nearest and random, all on the same fleet, trace and
seeds. Replication r is an independent fleet (``seeds: {rule: sequence, also:
[build.params.seed]}``: fleet seed 1000 + r at every point); :func:`metrics` gives means
over replications with 95 % t-intervals, a comparison between policies paired within a
replication, and :func:`claims` judges Fig. 9's claim for each SDK variant.

Herding (users moving together after re-probes) is measured from the users' switch
events (:func:`~testbed.systems.armada.fleet_measure.herd_share`). Report:
``docs/results/armada/paper-scale.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.analysis.stats import pm, replication_interval, side
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim, Condition
from testbed.systems.armada.fleet_measure import HERD_MIN, HERD_WINDOW_S, measure_run
from testbed.systems.armada.verdicts import (
    Conclusion,
    beats_baselines,
    below_all,
)

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


def fleet_params(nodes: int, users: int, seed: int, duration_s: float) -> dict[str, Any]:
    """The ``armada-fleet`` params of one point and replication (what the study files'
    scenario, ``studies/paper_scale/paper-scale.scenario.yaml``, sets with their
    values)."""
    return {"nodes": nodes, "users": users, "seed": seed, "node_cores": list(NODE_CORES),
            "replica_cpu": 1.0, "users_per_replica": 3,
            "span_km": round(KM_PER_SQRT_NODE * math.sqrt(nodes), 3),
            "duration": duration_s, "host_cores": None}


# ------------------------------------------------------------------ metrics


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


def _groups(doc: Mapping[str, Any]) -> dict[tuple[str, int, int], list[Mapping[str, Any]]]:
    out: dict[tuple[str, int, int], list[Mapping[str, Any]]] = {}
    for p in doc["points"]:
        out.setdefault(_key(p), []).append(p)
    return out


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (one point and replication of a sweep, the study's
    ``analysis: {sweep}``) what :func:`~testbed.systems.armada.fleet_measure.measure_run`
    gives per policy; and the report's tables (latency per sweep, herding)."""
    found = []
    for result in results.values():
        sweep = str(dict(result.study.analysis).get("sweep", result.name))
        for cell in sorted(result.finished(), key=lambda c: (c.point, c.replication)):
            scenario = result.study.scenario(result.points[cell.point], cell.replication)
            fleet = scenario.raw["build"]["params"]
            found.append({"sweep": sweep, "nodes": int(fleet["nodes"]),
                          "users": int(fleet["users"]), "replication": cell.replication,
                          "fleet_seed": int(fleet["seed"]), "policies": measure_run(cell.run)})
    doc = {"size": size, "points": found}
    doc["tables"] = [*(_latency_table(doc, sweep) for sweep in ("users", "nodes")
                       if any(p["sweep"] == sweep for p in found)),
                     _herding_table(doc)] if found else []
    return doc


def _latency_table(doc: Mapping[str, Any], sweep: str) -> dict[str, Any]:
    """One sweep: every policy's mean latency per point, and the SDK's tail, losses,
    herding and switches; means across replications with their intervals."""
    rows = []
    for (s, nodes, users), group in _groups(doc).items():
        if s != sweep:
            continue
        rows.append([str(nodes), str(users), str(len(group)),
                     *(pm(_over(group, p, "mean_ms")) for p in LABELS),
                     pm(_over(group, "armada", "p95_ms")),
                     f"{pm(_over(group, 'armada', 'lost_share'), 1, 100.0)} %",
                     " / ".join(pm(_over(group, k, "herd_share"), 2)
                                for k in ("armada", "armada-spread")),
                     pm(_over(group, "armada", "switches_per_user"), 1)])
    what = "users" if sweep == "users" else "edge nodes"
    return {"title": f"Latency as {what} grow", "columns": [
        "nodes", "users", "replications", *(f"`{p}` mean (ms)" for p in LABELS),
        "`armada` p95 (ms)", "lost frames (armada)",
        "herd share (armada / armada-spread)", "switches per user (armada)"],
        "rows": rows, "note": (
            "Every number is a mean over replications (each an independent fleet, trace "
            "and clients' seeds, the same for every policy) ± the half-width of its 95 % "
            f"t-interval. Nodes of {', '.join(f'{c:g}' for c in NODE_CORES)} cores "
            "(volunteer machines and dedicated servers), replicas of one core with one "
            "detection worker, auto-scaling on (3 users per replica, at most as many "
            "replicas as nodes); `armada-spread` is the SDK choosing at random among "
            f"candidates that probed within {SPREAD:.0%} of the fastest. Replica times "
            "come from the measured calibration (`calibration.md`); what the simulator "
            "leaves out is listed in `docs/simulator.md`.")}


#: A herd share from which the report asks whether herding costs latency.
HERDED = 0.3


def _herding_table(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Per point the SDK's herd share, the spread's paired change of it and of the mean
    latency, and (in the note) how many points the spread improves and whether the
    herded points cost latency against geo-nearest."""
    groups = _groups(doc)
    rows = [[f"{nodes} nodes / {users} users ({sweep} sweep)",
             pm(_over(group, "armada", "herd_share"), 2),
             pm(_paired(group, "armada-spread", "armada", "herd_share"), 2),
             pm(_paired(group, "armada-spread", "armada"))]
            for (sweep, nodes, users), group in groups.items()]
    return {"title": "Herding and the spread", "columns": [
        "point", "`armada` herd share", "`armada-spread − armada` herd share",
        "`armada-spread − armada` mean (ms)"], "rows": rows,
        "note": herding_note(groups)}


def herding_note(groups: Mapping[tuple[str, int, int], Sequence[Mapping[str, Any]]]) -> str:
    """What the herding table shows, computed from it: the range of the SDK's herd
    share, at how many points the spread lowers it and the mean latency, and whether
    the SDK's latency is above geo-nearest's where it herds."""
    text = (f"Herd share: the share of a stream's switches made within {HERD_WINDOW_S:g} s "
            f"of at least {HERD_MIN - 1} other users' switches onto the same replica. "
            "`armada-spread − armada` is paired within a replication.")
    shares = {key: _over(rows, "armada", "herd_share") for key, rows in groups.items()}
    known = {k: v.estimate for k, v in shares.items()
             if v is not None and v.estimate is not None}
    if not known:
        return text
    fewer = sum(side(_paired(rows, "armada-spread", "armada", "herd_share")) == "lower"
                for rows in groups.values())
    faster = sum(side(_paired(rows, "armada-spread", "armada")) == "lower"
                 for rows in groups.values())
    most, least = max(known, key=known.__getitem__), min(known, key=known.__getitem__)
    herded = [k for k, v in known.items() if v >= HERDED]
    slower = [k for k in herded if side(_paired(groups[k], "armada", "geo-nearest")) == "higher"]
    return (f"{text} `armada`'s herd share ranges from {known[least]:.2f} ({least[1]} nodes, "
            f"{least[2]} users) to {known[most]:.2f} ({most[1]} nodes, {most[2]} users). The "
            f"spread lowers it, with the interval below zero, at {fewer} of {len(groups)} "
            f"points, and lowers the mean latency at {faster} of {len(groups)}. At the "
            f"{len(herded)} points where `armada`'s herd share is at least {HERDED:g}, its "
            "mean latency is above geo-nearest's (paired interval above zero) at "
            f"{len(slower)}" + (": " + ", ".join(f"{n} nodes / {u} users" for _, n, u in slower)
                                if slower else "") + ".")


# ------------------------------------------------------------------ claims

SCALE_CLAIM = ("As users and edge nodes increase, Armada keeps users' average latency lower "
               "than geo-proximity and random selection (seed 000, Fig. 9).")


def _point_name(key: tuple[str, int, int]) -> str:
    sweep, nodes, users = key
    return f"{nodes} nodes / {users} users ({sweep} sweep)"


def conclusion(doc: Mapping[str, Any], label: str) -> Conclusion:
    """Does ``label`` keep a lower mean than both baselines at every point? Paired
    intervals across replications decide each point."""
    checks = [(_point_name(key), below_all([_paired(rows, label, b) for b in BASELINES]))
              for key, rows in _groups(doc).items()]
    return beats_baselines(label, checks)


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """The Fig. 9 claim at paper scale for each SDK variant (:func:`conclusion`), its
    conditions the points of both sweeps."""
    groups = _groups(found)
    out = []
    for label in SDK:
        judged = conclusion(found, label)
        out.append(Claim(
            f"scale-sim-{label}", f"at paper scale (simulated) `{label}` has a lower mean "
                                  "than geo-nearest and random at every point",
            rule=judged.rule, paper=SCALE_CLAIM, why=" ".join(judged.sentences),
            conditions=tuple(Condition(_point_name(key), below_all(
                [_paired(rows, label, b) for b in BASELINES]))
                for key, rows in groups.items()),
            replications=min((len(rows) for rows in groups.values()), default=None)))
    return out
