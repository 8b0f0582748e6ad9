"""Armada experiment 1 (``armada-selection``): does the SDK pick the best node? As data.

The built-in scenario ``armada-selection`` puts the Armada control plane (Beacon,
Application Manager, Spinner) on a control node and a Captain on each of three edge
nodes and a cloud node; three users sit at different places of a heterogeneous WAN
(``topologies/armada-selection.yaml``). The scenario path (:mod:`testbed.systems.armada.
driver`) deploys the detector with one replica per node, checks that each replica runs
in its node's network namespace and CPU cgroup, measures the user x node latency matrix
(``matrix_samples`` frames from each user in turn straight to every replica), then lets
every user's SDK probe its candidates, pick and stream. The study files are
``studies/selection/<size>/``; :func:`metrics` scores each replication's picks against
its matrix (:func:`score_selection`), :func:`claims` judges claim A1 per replication.
Report: ``docs/results/armada/selection.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim
from testbed.systems.armada.verdicts import (
    Conclusion,
    count_of,
    replicated_claim,
    table_number,
    verdict,
)

#: A pick within this much of the best median is not counted as wrong, besides the
#: measured spread (see :func:`score_selection`).
REGRET_FLOOR_MS = 5.0


def matrix_table(samples: Mapping[str, Mapping[str, list[Mapping[str, float]]]]
                 ) -> dict[str, dict[str, dict[str, float]]]:
    """Per user and node: median, p10, p90 and mean of the end-to-end latency (ms), and
    the replica's median processing time, from the raw samples of every user."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for user, by_node in samples.items():
        table[user] = {}
        for node, rows in by_node.items():
            lat = np.array([r["latency_ms"] for r in rows])
            proc = np.array([r["processing_ms"] for r in rows])
            table[user][node] = {"n": len(rows), "median_ms": float(np.median(lat)),
                                 "p10_ms": float(np.percentile(lat, 10)),
                                 "p90_ms": float(np.percentile(lat, 90)),
                                 "mean_ms": float(lat.mean()),
                                 "processing_median_ms": float(np.median(proc))}
    return table


def score_selection(table: Mapping[str, Mapping[str, Mapping[str, float]]],
                    picks: Mapping[str, str | None]) -> dict[str, dict[str, Any]]:
    """Each user's best node (lowest median latency), the SDK's pick and its regret.

    ``correct`` is true when the pick is the best node, or its median is within the
    tolerance of the best's: ``REGRET_FLOOR_MS`` plus the upper spreads (p90 - median)
    of both cells, i.e. within what the measurement itself cannot tell apart.
    """
    scores: dict[str, dict[str, Any]] = {}
    for user, by_node in table.items():
        best = min(by_node, key=lambda n: by_node[n]["median_ms"])
        pick = picks.get(user)
        entry: dict[str, Any] = {"best": best, "best_ms": by_node[best]["median_ms"],
                                 "pick": pick, "pick_ms": None, "regret_ms": None,
                                 "tolerance_ms": None, "correct": False}
        if pick in by_node:
            cell, top = by_node[pick], by_node[best]
            tolerance = (REGRET_FLOOR_MS + (top["p90_ms"] - top["median_ms"])
                         + (cell["p90_ms"] - cell["median_ms"]))
            regret = cell["median_ms"] - top["median_ms"]
            entry.update(pick_ms=cell["median_ms"], regret_ms=regret, tolerance_ms=tolerance,
                         correct=pick == best or regret <= tolerance)
        scores[user] = entry
    return scores


PAPER_CLAIM = ("Users in both real-world and emulation environments identify the "
               "heterogeneity of the environment and select the best-performing node to "
               "offload to; User_C selects a farther node A because of the resource "
               "limitation of its nearest node C (Table 6 (b)).")


def probe_sentence(streams: Mapping[str, Mapping[str, Any]],
                   matrix: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """How many first-round probes took longer than the matrix median of the same user
    and node, and the reading that fits when most did (cold connections)."""
    pairs = []
    for user, stream in streams.items():
        node_of = {c["task_id"]: c["node_id"] for c in stream["candidates"]}
        for task, probe in stream["probe_ms"].items():
            cell = matrix.get(user, {}).get(node_of.get(task, ""))
            if probe is not None and cell is not None:
                pairs.append(probe > cell["median_ms"])
    if not pairs:
        return ""
    text = (f"{count_of(pairs)} first-round probes took longer than the matrix median of the "
            "same user and node")
    if 2 * sum(pairs) > len(pairs):
        return text + (": the first probe round opens its connections (one more round trip "
                       "and TCP slow start over the WAN paths).")
    return text + "."


SELECTION_RULE = ("two checks: every user's pick is its best node or within the tolerance "
                  "of it; and the user whose nearest node is resource-limited (uc, nearest "
                  "ec) picks another node that is faster for it than ec")


def avoids_nearest(scores: Mapping[str, Mapping[str, Any]],
                   matrix: Mapping[str, Mapping[str, Mapping[str, float]]],
                   user: str = "uc", nearest: str = "ec") -> bool:
    """Whether ``user`` picked a node other than ``nearest`` that is faster for it."""
    pick = scores.get(user, {}).get("pick")
    mine = matrix.get(user, {})
    near_ms = mine.get(nearest, {}).get("median_ms")
    pick_ms = mine.get(pick, {}).get("median_ms") if pick else None
    return (pick is not None and pick != nearest and near_ms is not None
            and pick_ms is not None and pick_ms < near_ms)


def selection_conclusion(scores: Mapping[str, Mapping[str, Any]],
                         matrix: Mapping[str, Mapping[str, Mapping[str, float]]],
                         user: str = "uc", nearest: str = "ec") -> Conclusion:
    """The Table 6 claim's verdict and sentences, from :func:`score_selection` and the
    latency matrix (median ms per user and node)."""
    correct = [u for u, s in scores.items() if s["correct"]]
    pick = scores.get(user, {}).get("pick")
    mine = matrix.get(user, {})
    near_ms = mine.get(nearest, {}).get("median_ms")
    pick_ms = mine.get(pick, {}).get("median_ms") if pick else None
    farther = avoids_nearest(scores, matrix, user, nearest)
    checks = selection_checks(scores, matrix, user, nearest)
    sentences = [f"{len(correct)} of {len(scores)} users picked their best node or one within "
                 "the tolerance (regret " + ", ".join(
                     f"{u} {s['regret_ms']:.1f} ms" for u, s in scores.items()
                     if s["regret_ms"] is not None) + ")."]
    if near_ms is not None:
        sentences.append(
            f"{user} picked {pick}"
            + (f" ({pick_ms:.1f} ms), {'faster' if farther else 'not faster'} than"
               if pick_ms is not None and pick != nearest else ", which is")
            + f" its nearest node {nearest} ({near_ms:.1f} ms).")
    return Conclusion(verdict(checks), SELECTION_RULE, tuple(sentences))


def selection_checks(scores: Mapping[str, Mapping[str, Any]],
                     matrix: Mapping[str, Mapping[str, Mapping[str, float]]],
                     user: str = "uc", nearest: str = "ec") -> dict[str, bool]:
    """The two checks of :data:`SELECTION_RULE`."""
    return {"every user picks its best node": all(s["correct"] for s in scores.values()),
            f"{user} avoids its limited nearest node": avoids_nearest(scores, matrix, user,
                                                                      nearest)}


SETUP = ("Set-up (`topologies/armada-selection.yaml`, `testbed/scenarios/armada-selection.yaml`):"
         " Beacon, Application Manager and Spinner on a control node; a Captain (process "
         "runtime) on edge nodes ea, eb (0.4 cores each), ec (0.04 cores) and a cloud node "
         "(0.5 cores, 25 ms one way from the WAN core). Users ua, ub, uc share a LAN with "
         "ea, eb, ec respectively (tier 1, one hop, 0.5 ms); the LANs reach each other over "
         "tier-2 ISP paths of 6 ms / 50 Mbit/s (A), 5 + 10 ms over two hops at 10 Mbit/s (B) "
         "and 4 ms / 20 Mbit/s (C). The detection task (HOG, 320x240 JPEG frames of "
         "`vtest.avi`) is deployed through the Beacon with a token, one replica per node.")


def replication_result(driver: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
                       ) -> dict[str, Any]:
    """One replication's matrix, scores, first probes, containment and streaming, from a
    cell's driver details and trace rows."""
    table = matrix_table(driver["matrix"])
    stream = driver["streams"][0]
    deployment = driver["deployments"][stream.get("deployment", 0)]
    scores = score_selection(table, stream["picks"])
    streaming = {}
    for user in table:
        mine = [r for r in rows if r["client"] == user]
        ok = [r for r in mine if r["outcome"] == "ok"]
        served: dict[str, int] = {}
        for r in ok:
            served[r["target"]] = served.get(r["target"], 0) + 1
        lat = np.array([float(r["latency_s"]) * 1e3 for r in ok])
        streaming[user] = {"frames": len(mine), "ok": len(ok), "served": served,
                           "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
                           "p95_ms": float(np.percentile(lat, 95)) if len(lat) else None,
                           "switches": stream["switches"].get(user, 1) - 1}
    return {"matrix": table, "scores": scores,
            "servers": [r["node_id"] for r in deployment["serving"]],
            "first_probes": stream.get("first_probes", {}), "streaming": streaming,
            "contained": {n: bool(c["same_netns"] and c["in_node_cgroup"])
                          for n, c in deployment["containment"].items()},
            "startup_s": deployment["startup_s"], "host": driver["host"]}


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (replication): :func:`replication_result`, the claim's checks
    and sentences, and the report's tables."""
    runs = []
    for result in results.values():
        for cell in sorted(result.finished(), key=lambda c: c.replication):
            found = replication_result(cell.metadata()["driver"],
                                       cell.traces().to_dict("records"))
            conclusion = selection_conclusion(found["scores"], found["matrix"])
            found.update(replication=cell.replication, degraded=cell.degraded,
                         checks=selection_checks(found["scores"], found["matrix"]),
                         sentences=[*conclusion.sentences,
                                    probe_sentence(found["first_probes"], found["matrix"])])
            runs.append(found)
    return {"size": size, "runs": runs, "tables": _tables(runs) if runs else []}


def _tables(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    servers = runs[0]["servers"]
    matrix_rows, probe_rows, stream_rows = [], [], []
    for run in runs:
        rep = str(run["replication"])
        for user, score in run["scores"].items():
            cells = []
            for node in servers:
                text = f"{run['matrix'][user][node]['median_ms']:.1f}"
                text = f"_{text}_" if node == score["best"] else text
                cells.append(f"**{text}**" if node == score["pick"] else text)
            matrix_rows.append([rep, user, *cells, score["best"], str(score["pick"]),
                                table_number(score["regret_ms"], 1),
                                table_number(score["tolerance_ms"], 1)])
        for user, probe in run["first_probes"].items():
            node_of = {c["task_id"]: c["node_id"] for c in probe["candidates"]}
            probe_rows.append([rep, user, ", ".join(node_of.values()), ", ".join(
                f"{node_of.get(t, t)} {v:.1f}" if v is not None else
                f"{node_of.get(t, t)} failed" for t, v in probe["probe_ms"].items())])
        for user, st in run["streaming"].items():
            stream_rows.append([rep, user, str(st["frames"]), str(st["ok"]), ", ".join(
                f"{t} {n}" for t, n in sorted(st["served"].items(), key=lambda x: -x[1])),
                table_number(st["p50_ms"], 1), table_number(st["p95_ms"], 1),
                str(st["switches"])])
    processing = ", ".join(
        f"{n} {np.median([r['matrix'][u][n]['processing_median_ms'] for r in runs for u in r['matrix']]):.1f}"
        for n in servers)
    contained = all(all(r["contained"].values()) for r in runs)
    idle = ", ".join(f"{r['host']['idle_share']:.0%}" for r in runs if r.get("host"))
    return [
        {"title": "End-to-end latency matrix (median ms, frames sent straight to each "
                  "replica)",
         "columns": ["replication", "user", *servers, "best", "SDK pick", "regret ms",
                     "tolerance ms"], "rows": matrix_rows,
         "note": (f"{SETUP} Every replica ran inside its node's network namespace and CPU "
                  f"cgroup (checked: {contained}). **Bold**: the node the user's SDK picked "
                  "(first query and probe round); _best_ = lowest median. Regret is the "
                  "picked node's median minus the best node's; a pick counts as correct "
                  f"when it is the best node or within the tolerance ({REGRET_FLOOR_MS:g} ms "
                  "plus both cells' p90 - median spread). Median processing time per frame "
                  f"on each node (ms, as the replica reports it): {processing}.")},
        {"title": "The SDK's first probe round (ms, cold connections)",
         "columns": ["replication", "user", "candidates (Application Manager)",
                     "probe latency"], "rows": probe_rows, "note": ""},
        {"title": "Streaming through the SDK",
         "columns": ["replication", "user", "frames", "ok", "served by", "p50 ms", "p95 ms",
                     "switches"], "rows": stream_rows,
         "note": f"Host CPU idle share over each run: {idle or '-'}."}]


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Claim A1 judged on every replication (:func:`selection_checks`)."""
    return [replicated_claim("A1", "every user selects its best-performing node, not the "
                             "nearest", SELECTION_RULE, PAPER_CLAIM, found["runs"])]
