"""Armada experiment 3 part 2 (``armada-failures``): edge nodes failing one by one, as
data.

Ten static users while edge nodes crash one by one; after each failure, the average
latency and how many users are still served at the edge, for the SDK and for the
Edge-to-Cloud baseline (the same failure order and trace, each from a fresh deployment
on the restored fleet). The study files are ``studies/failures/<size>/`` (the seeded
order of :func:`failure_order` written out); :func:`metrics` reads each cell's run
(:func:`failure_intervals` per policy), :func:`claims` judges claim A4 per replication.
Report: ``docs/results/armada/failures.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim
from testbed.systems.armada.fleet import intervals
from testbed.systems.armada.fleet_report import fleet_json, trace_rows
from testbed.systems.armada.verdicts import (
    Conclusion,
    count_of,
    ms,
    names,
    plural,
    replicated_claim,
    verdict,
)

# ------------------------------------------------------------------ failures


FAIL_POLICIES = ("armada", "edge-to-cloud")


def failure_order(nodes: Sequence[str], count: int, seed: int) -> list[str]:
    """Which edge nodes fail, in order (seeded)."""
    rng = np.random.default_rng([seed, 17])
    return [nodes[i] for i in rng.permutation(len(nodes))[:count]]


def failure_intervals(run: Path, policy: str | None = None) -> list[dict[str, Any]]:
    """Per interval (before the first failure, after each) of ``policy``'s stream (the
    run's first when None): latency, users at the edge and what served them
    (:func:`phase_details`)."""
    fleet = fleet_json(run)
    stream = next(s for s in fleet["streams"] if policy in (None, s["policy"]))
    applied = stream["applied"]
    cuts = [a["at"] for a in applied]
    users = [f"u{j + 1:02d}" for j in range(fleet["fleet"]["users"])]
    rows = [r for r in trace_rows(run) if r["policy"] == stream["policy"]]
    found = intervals(rows, cuts, users)
    start = stream.get("start_at", min((r["dispatch_wall"] for r in rows), default=0.0))
    spans = list(zip([start, *cuts], [*cuts, start + stream["duration_s"]], strict=True))
    cut = [-math.inf, *cuts, math.inf]  # frames are split as :func:`intervals` splits them
    ends = [a.get("replicas") for a in applied] + [stream["replicas_after"]]
    for k, entry in enumerate(found):
        entry["failed"] = [a["target"] for a in applied[:k]]
        part = [r for r in rows if cut[k] <= r["dispatch_wall"] < cut[k + 1]]
        entry.update(phase_details(part, users, *spans[k], ends[k],
                                   stream.get("host_samples")))
    return found


def serving_nodes(rows: Sequence[Mapping[str, Any]],
                  users: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per node that answered frames: the users it served most of the frames of, its
    ok frames, and their mean processing and queueing at its replica (ms)."""
    ok = [r for r in rows if r["outcome"] == "ok"]
    mostly: dict[str, str] = {}
    for user in users:
        mine = [r["target"] for r in ok if r["client"] == user]
        if mine:
            mostly[user] = max(sorted(set(mine)), key=mine.count)
    found = {}
    for node in sorted({r["target"] for r in ok}):
        part = [r for r in ok if r["target"] == node]
        found[node] = {"users": sum(n == node for n in mostly.values()), "frames": len(part),
                       "service_ms": _mean_ms(part, "service_s"),
                       "wait_ms": _mean_ms(part, "wait_s")}
    return found


def _mean_ms(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key) is not None
              and not math.isnan(float(r[key]))]
    return float(np.mean(values) * 1e3) if values else None


def latency_parts(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Mean network (with any failover), queueing and processing time of ok frames (ms):
    the parts a frame's latency splits into (``docs/traces.md``)."""
    ok = [r for r in rows if r["outcome"] == "ok"]
    return {f"{part}_ms": _mean_ms(ok, f"{part}_s") for part in ("network", "wait", "service")}


def replicas_at_end(view: Sequence[Mapping[str, Any]] | None, start: float,
                    end: float) -> dict[str, Any]:
    """From the replica view at an interval's end: replicas not yet running there
    (``starting``: placing, starting or pending) and those that became ready during the
    interval; None for both when the run did not record the view."""
    if view is None:
        return {"starting": None, "ready_during": None}
    return {"starting": [{"task_id": r["task_id"], "node_id": r["node_id"],
                          "status": r["status"]} for r in view
                         if r["status"] in ("pending", "placing", "starting")],
            "ready_during": [{"task_id": r["task_id"], "node_id": r["node_id"],
                              "after_s": r["ready_at"] - start} for r in view
                             if r.get("ready_at") and start <= r["ready_at"] < end]}


def mean_idle(samples: Sequence[Sequence[float]] | None, start: float,
              end: float) -> float | None:
    """The host's mean CPU idle share over the samples taken in ``[start, end)``."""
    inside = [idle for wall, idle in samples or () if start <= wall < end]
    return float(np.mean(inside)) if inside else None


def phase_details(rows: Sequence[Mapping[str, Any]], users: Sequence[str], start: float,
                  end: float, view: Sequence[Mapping[str, Any]] | None,
                  host_samples: Sequence[Sequence[float]] | None) -> dict[str, Any]:
    """What explains one interval's latency: the serving nodes with their users and
    replica times, the latency's parts, the replicas starting at its end or ready
    during it, and the host's idle share."""
    return {"start": start, "end": end, "serving": serving_nodes(rows, users),
            **latency_parts(rows), **replicas_at_end(view, start, end),
            "host_idle": mean_idle(host_samples, start, end)}


FAIL_CLAIM = ("As edge nodes fail one by one, Armada keeps most users served at the edge "
              "(labels such as 8/10) with a lower average latency than the Edge-to-Cloud "
              "approach, whose users fall back to the cloud (Fig. 10 (b)).")
FAIL_RULE = ("each check holds when it holds after every failure: Armada has at least as "
             "many users served at the edge as Edge-to-Cloud, a lower mean latency than it, "
             "and more than half of the users at the edge")


# ------------------------------------------------------------------ computed text


def failing_sentence(order: Sequence[str], edge_nodes: Sequence[str],
                     interval_s: float) -> str:
    """How many edge nodes fail out of how many, in which order, and what remains."""
    left = [n for n in edge_nodes if n not in order]
    return (f"{len(order)} of {len(edge_nodes)} edge nodes fail, one every {interval_s:g} s "
            f"in the seeded order {', '.join(order)}, leaving {len(left)} edge node"
            f"{'' if len(left) == 1 else 's'} ({names(left)}) and the cloud.")


def _mean_lower(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether phase ``a``'s mean is below ``b``'s (a phase without answers is worst)."""
    if a["mean_ms"] is None:
        return False
    return b["mean_ms"] is None or a["mean_ms"] < b["mean_ms"]


def failures_conclusion(result: Mapping[str, Any], edge_nodes: Sequence[str]) -> Conclusion:
    """The Fig. 10 (b) claim's verdict and sentences, from the per-interval results."""
    sdk, base = result["policies"]["armada"], result["policies"]["edge-to-cloud"]
    users = result["plan"]["users"]
    after = range(1, len(sdk))
    edge = [sdk[k]["users_at_edge"] >= base[k]["users_at_edge"] for k in after]
    lower = [_mean_lower(sdk[k], base[k]) for k in after]
    most = [2 * sdk[k]["users_at_edge"] > users for k in after]
    checks = failures_checks(result)
    last_s, last_b = sdk[-1], base[-1]
    return Conclusion(verdict(checks), FAIL_RULE, (
        failing_sentence(result["order"], edge_nodes, result["plan"]["interval_s"]),
        (f"After {count_of(edge)} failures Armada had at least as many users served at the "
         f"edge as Edge-to-Cloud (after the last: {last_s['users_at_edge']}/{users} against "
         f"{last_b['users_at_edge']}/{users}); its mean latency was "
         f"{'lower' if _mean_lower(last_s, last_b) else 'not lower'} after the last failure "
         f"({ms(last_s['mean_ms'])} against {ms(last_b['mean_ms'])}) and lower after "
         f"{count_of(lower)} failures; it kept more than half of the users at the edge after "
         f"{count_of(most)}.")))


def _phase_name(phase: Mapping[str, Any]) -> str:
    """``before any failure`` or ``once e03 had failed (2 down)``."""
    failed = phase["failed"]
    if not failed:
        return "before any failure"
    return f"once {failed[-1]} had failed ({len(failed)} down)"


def _users_per_node(phase: Mapping[str, Any]) -> str:
    """``e01 4, e05 3``: users served mostly by each node, most first."""
    serving = phase.get("serving") or {}
    ranked = sorted((n for n in serving if serving[n]["users"]),
                    key=lambda n: (-serving[n]["users"], n))
    return ", ".join(f"{n} {serving[n]['users']}" for n in ranked) or "none"


PARTS = {"service_ms": "processing at the replica", "wait_ms": "queueing at the replica",
         "network_ms": "the network (with any failover)"}


def _parts_sentence(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """How each part of the mean latency changed between two phases, and which part
    changed most."""
    known = [k for k in PARTS if a.get(k) is not None and b.get(k) is not None]
    if not known:
        return "The run did not record the parts of the latency."
    largest = max(known, key=lambda k: abs(b[k] - a[k]))
    return ("Per frame, " + ", ".join(f"{PARTS[k]} went from {a[k]:.0f} to {b[k]:.0f} ms"
                                      for k in known)
            + f": {PARTS[largest]} changed most ({b[largest] - a[largest]:+.0f} ms).")


def _slowest_sentence(phase: Mapping[str, Any]) -> str | None:
    """The serving node with the longest processing in a phase, against the others."""
    serving = {n: v for n, v in (phase.get("serving") or {}).items()
               if v["service_ms"] is not None}
    if len(serving) < 2:
        return None
    node = max(serving, key=lambda n: serving[n]["service_ms"])
    others = [v for n, v in serving.items() if n != node]
    rest = sum(v["service_ms"] * v["frames"] for v in others) / sum(v["frames"] for v in others)
    return (f"In the earlier phase {node} processed its frames slowest: "
            f"{serving[node]['service_ms']:.0f} ms on average over "
            f"{serving[node]['frames']} frames ({plural(serving[node]['users'], 'user')}), against "
            f"{rest:.0f} ms on the other serving nodes.")


def _starting_sentence(phase: Mapping[str, Any], nxt: Mapping[str, Any]) -> str | None:
    """Replicas not yet running at the end of a phase, or ready during it, and whether
    the next failure took the node of one that was starting."""
    if phase.get("starting") is None:
        return "The run did not record the replica set at the earlier phase's end."
    starting, ready = phase["starting"], phase["ready_during"] or []
    if not starting and not ready:
        return "No replica was starting during the earlier phase."
    parts = []
    if starting:
        killed = nxt["failed"][-1] if nxt["failed"] else None
        hit = [r["task_id"] for r in starting if r["node_id"] == killed]
        parts.append("At the end of the earlier phase " + ", ".join(
            f"{r['task_id']} on {r['node_id'] or 'no node'} was {r['status']}"
            for r in starting)
            + (f"; the next failure, {killed}, took {', '.join(hit)} with it" if hit else ""))
    if ready:
        parts.append("During the earlier phase " + ", ".join(
            f"{r['task_id']} became ready on {r['node_id']} {r['after_s']:.1f} s in"
            for r in ready))
    return ". ".join(parts) + "."


def _host_sentence(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    if a.get("host_idle") is None or b.get("host_idle") is None:
        return None
    return (f"The host's CPU was {a['host_idle']:.0%} idle in the earlier phase and "
            f"{b['host_idle']:.0%} in the later one.")


def dip_sentences(label: str, phases: Sequence[Mapping[str, Any]]) -> list[str]:
    """For each failure after which ``label``'s mean latency fell: the fall and what the
    run measured about it (latency parts, users per serving node, the slowest node,
    replicas starting, the host); else that the mean never fell."""
    means = [p["mean_ms"] for p in phases]
    falls = [k for k in range(1, len(phases)) if means[k] is not None
             and means[k - 1] is not None and means[k] < means[k - 1]]
    if not falls:
        return [f"{label}'s mean latency never fell as nodes failed ("
                + ", ".join(ms(m) for m in means) + ")."]
    found = []
    for k in falls:
        a, b = phases[k - 1], phases[k]
        found += [(f"{label}'s mean latency fell from {ms(a['mean_ms'])} {_phase_name(a)} "
                   f"to {ms(b['mean_ms'])} {_phase_name(b)}, although one more edge node "
                   "was down."), _parts_sentence(a, b),
                  (f"Users per serving node (the node that answered most of a user's frames) "
                   f"went from {_users_per_node(a)} to {_users_per_node(b)}.")]
        found += [t for t in (_slowest_sentence(a), _starting_sentence(a, b),
                              _host_sentence(a, b)) if t]
    return found


def _phase_rows(phases: Sequence[Mapping[str, Any]], nodes: int) -> list[list[str]]:
    """One table row per phase of a policy: what served it and why it was as fast."""
    def replicas(found: list[dict[str, Any]] | None, key: str) -> str:
        if found is None:
            return "not recorded"
        return ", ".join(f"{r['task_id']} on {r['node_id'] or '-'}"
                         + (f" ({r['status']})" if key == "status" else
                            f" ({r['after_s']:.1f} s)") for r in found) or "none"

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    return [[", ".join(p["failed"]) or "none", str(nodes - len(p["failed"])),
             _users_per_node(p),
             f"{num(p.get('service_ms'))} / {num(p.get('wait_ms'))} / {num(p.get('network_ms'))}",
             replicas(p.get("starting"), "status"), replicas(p.get("ready_during"), "after"),
             "-" if p.get("host_idle") is None else f"{p['host_idle']:.0%}"]
            for p in phases]


PHASE_NOTE = ("Per phase: the users each node served most of the frames of; the mean "
              "processing / queueing at the replica / network part of an answered frame; "
              "replicas not yet running at the phase's end and replicas that became ready "
              "during it (seconds into the phase), from the replica view the harness took "
              "just before each failure and after the stream; the host's mean CPU idle "
              "share.")


def _edge_nodes(run: Path) -> list[str]:
    """The edge nodes of a fleet run, by name."""
    return sorted(n for n, tier in fleet_json(run)["tiers"].items() if tier == "edge")


def replication_result(run: Path) -> dict[str, Any]:
    """One replication's result (the run both policies streamed in): the failure order,
    the plan (users, nodes, interval) and per policy :func:`failure_intervals`."""
    fleet = fleet_json(run)
    applied = fleet["streams"][0]["applied"]
    return {"order": [a["target"] for a in applied],
            "plan": {"users": fleet["fleet"]["users"], "nodes": fleet["fleet"]["nodes"],
                     "fps": fleet["fleet"]["fps"],
                     "interval_s": applied[0]["offset_s"] if applied
                     else fleet["streams"][0]["duration_s"]},
            "policies": {p: failure_intervals(run, p) for p in FAIL_POLICIES},
            "edge_nodes": _edge_nodes(run), "host": fleet["host"],
            "startup_s": fleet["deployment"]["startup_s"]}


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (replication): :func:`replication_result`, the claim's checks
    and sentences (with the dips of each policy's mean), and the report's tables."""
    runs, after, phases = [], [], []
    for result in results.values():
        for cell in sorted(result.finished(), key=lambda c: c.replication):
            found = replication_result(cell.run)
            conclusion = failures_conclusion(found, found["edge_nodes"])
            found.update(replication=cell.replication, degraded=cell.degraded,
                         checks=failures_checks(found),
                         sentences=[*conclusion.sentences,
                                    *dip_sentences("Armada", found["policies"]["armada"]),
                                    *dip_sentences("Edge-to-Cloud",
                                                   found["policies"]["edge-to-cloud"])])
            runs.append(found)
            users = found["plan"]["users"]
            for k in range(len(found["order"]) + 1):
                cells = [str(cell.replication),
                         ", ".join(found["policies"][FAIL_POLICIES[0]][k]["failed"]) or "none"]
                for policy in FAIL_POLICIES:
                    e = found["policies"][policy][k]
                    cells += [ms(e["mean_ms"]), f"{e['users_at_edge']}/{users}", str(e["lost"])]
                after.append(cells)
            for policy in FAIL_POLICIES:
                phases += [[str(cell.replication), policy, *row] for row in
                           _phase_rows(found["policies"][policy], found["plan"]["nodes"])]
    return {"size": size, "runs": runs, "tables": [
        {"title": "After each failure", "columns": [
            "replication", "failed so far",
            *[f"{p}: {c}" for p in FAIL_POLICIES for c in ("mean", "users at edge",
                                                           "frames lost")]],
         "rows": after,
         "note": ("A user counts as served at the edge in an interval when most of its "
                  "frames sent in that interval were answered by an edge node; intervals "
                  "are cut at the instants the harness crashed each node. Edge-to-Cloud: "
                  "each user sends to the replica on its geo-nearest edge node and, once a "
                  "frame fails there, to the cloud for good; the SDK re-selects among the "
                  "remaining edge replicas and the cloud by probing.")},
        {"title": "What served each phase", "columns": [
            "replication", "policy", "failed so far", "edge nodes up",
            "users per serving node", "processing / queueing / network ms",
            "not running at the end", "ready during", "host idle"],
         "rows": phases, "note": PHASE_NOTE}]}


def failures_checks(result: Mapping[str, Any]) -> dict[str, bool]:
    """The claim's three checks on one replication (:func:`failures_conclusion`'s)."""
    sdk, base = result["policies"]["armada"], result["policies"]["edge-to-cloud"]
    users = result["plan"]["users"]
    after = range(1, len(sdk))
    return {"at least as many users at the edge":
            all(sdk[k]["users_at_edge"] >= base[k]["users_at_edge"] for k in after),
            "lower mean latency": all(_mean_lower(sdk[k], base[k]) for k in after),
            "most users at the edge": all(2 * sdk[k]["users_at_edge"] > users for k in after)}


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Claim A4: every check of every replication."""
    return [replicated_claim("A4", "as edge nodes fail one by one, users stay served at the "
                             "edge with lower latency than Edge-to-Cloud", FAIL_RULE,
                             FAIL_CLAIM, found["runs"])]