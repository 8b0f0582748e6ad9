"""Armada experiment 2 (``armada-scalability``): latency as users and edge nodes grow,
as data.

Average end-to-end latency as users and edge nodes grow, with the Application Manager's
auto-scaling on: the Armada SDK (probing with a frame, and with a small request) against
the geo-nearest-only and random baselines, all four on the same bring-up, deployment and
frame trace, one after the other, each from a settled replica set, in an order rotated
from point to point (``order: rotate``). The study files are
``studies/scalability/<size>/``; :func:`metrics` reads each cell's run
(:func:`scalability_point`), :func:`claims` judges claim A2 for each SDK variant.
Report: ``docs/results/armada/scalability.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim, Condition
from testbed.systems.armada.fleet import REPROBE_S, latency_stats
from testbed.systems.armada.fleet_report import fleet_json, fleet_setup, trace_rows
from testbed.systems.armada.verdicts import (
    Conclusion,
    count_of,
    lower_or_higher,
    names,
    plural,
    rose_or_fell,
    table_number,
    verdict,
)

SELECTION_POLICIES = ("armada", "armada-light", "geo-nearest", "random")
#: The two SDK variants (frame and small probes) and the two baselines of Fig. 9.
SDK = ("armada", "armada-light")
BASELINES = ("geo-nearest", "random")


def scalability_point(run: Path) -> dict[str, Any]:
    """Per policy latency statistics of one scalability run (from its traces), in the
    order the run streamed the policies."""
    fleet = fleet_json(run)
    rows = trace_rows(run)
    by_policy = {}
    for k, stream in enumerate(fleet["streams"]):
        mine = [r for r in rows if r["policy"] == stream["policy"]]
        by_policy[stream["policy"]] = {
            **latency_stats(mine), **spread(mine, stream), **replica_times(mine),
            **co_switches(run, k, stream["policy"]), "order": k,
            "scale_up_ready_s": scale_up_ready_s(stream),
            "replicas": sum(r["status"] == "running" for r in stream["replicas_after"]),
            "scaled_during": [e.get("action") for e in stream.get("scaling_during", [])],
            "scaled_reasons": sorted({str(e.get("reason")) for e in stream.get("scaling_during", [])})}
    dep = fleet["deployment"]
    return {"nodes": fleet["fleet"]["nodes"], "users": fleet["fleet"]["users"],
            "fps": fleet["fleet"]["fps"], "policies": by_policy, "host": fleet["host"],
            "startup_s": dep["startup_s"], "all_min_running_s": dep["all_min_running_s"],
            "settle_s": dep["settle_s"], "replicas_settled": len(dep["settled"])}


def replica_times(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Mean processing and queueing time at the replica of a stream's ok frames (ms)."""
    ok = [r for r in rows if r["outcome"] == "ok"]
    found: dict[str, float | None] = {}
    for part in ("service", "wait"):
        values = [float(r[f"{part}_s"]) for r in ok if r.get(f"{part}_s") is not None]
        found[f"{part}_ms"] = float(np.mean(values) * 1e3) if values else None
    return found


def scale_up_ready_s(stream: Mapping[str, Any]) -> list[float]:
    """For each replica the Application Manager added during a stream and that was
    serving after it: seconds from the scaling decision to the replica serving."""
    ready = {r["task_id"]: r.get("ready_at") for r in stream.get("replicas_after", [])}
    return [ready[e["task_id"]] - e["t"] for e in stream.get("scaling_during", [])
            if e.get("action") == "up" and ready.get(e.get("task_id"))]


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
    """Which policies' streams made the Application Manager scale up, how often, how
    long the added replicas took to serve, and the latency with and without them."""
    ups = {k: sum(p["policies"][k].get("scaled_during", []).count("up") for p in points)
           for k in SELECTION_POLICIES}
    with_up = {k: sum("up" in p["policies"][k].get("scaled_during", []) for p in points)
               for k in SELECTION_POLICIES}
    if not any(ups.values()):
        return []
    reasons = sorted({r for p in points for k in SELECTION_POLICIES
                      for r in p["policies"][k].get("scaled_reasons", [])})
    most = max(SELECTION_POLICIES, key=lambda k: ups[k])
    ties = [k for k in SELECTION_POLICIES if ups[k] == ups[most]]
    ready = [t for p in points for k in SELECTION_POLICIES
             for t in p["policies"][k].get("scale_up_ready_s", [])]
    lines = [(
        "Every policy started from the same settled replica set, so a scale-up during a "
        "stream was caused by that stream (the Application Manager's recorded reasons: "
        + (", ".join(f"`{r}`" for r in reasons) or "none recorded") + "): "
        + "; ".join(f"`{k}` {ups[k]} replicas added over {with_up[k]} of {len(points)} points"
                    for k in SELECTION_POLICIES)
        + (f". `{most}`'s streams added the most." if len(ties) == 1 else
           f". {names([f'`{k}`' for k in ties])} added the most, as many each.")
        + " Above 75 % utilisation the Application Manager adds a replica"
        + (f"; the added replicas took {min(ready):.0f}-{max(ready):.0f} s from the "
           f"decision to serving ({len(ready)} measured)." if ready else
           "; no added replica was serving by the stream's end."))]
    lines += [_scaled_latency(points, most)] if with_up[most] else []
    return [" ".join(t for t in lines if t), ""]


def _scaled_latency(points: Sequence[Mapping[str, Any]], policy: str) -> str:
    """``policy``'s mean latency at the points where its stream scaled up, against
    the points where it did not, each beside the best other policy's mean there."""
    def ratio(p: Mapping[str, Any]) -> float | None:
        own = p["policies"][policy]["mean_ms"]
        others = [p["policies"][k]["mean_ms"] for k in SELECTION_POLICIES if k != policy
                  and p["policies"][k]["mean_ms"] is not None]
        return own / min(others) if own is not None and others else None

    scaled = [ratio(p) for p in points if "up" in p["policies"][policy].get("scaled_during", [])]
    calm = [ratio(p) for p in points if "up" not in p["policies"][policy].get("scaled_during", [])]
    scaled, calm = [r for r in scaled if r], [r for r in calm if r]
    if not scaled or not calm:
        return ""
    a, b = float(np.median(scaled)), float(np.median(calm))
    return (f"Against the best other policy of the same point, `{policy}`'s mean was "
            f"{a:.1f} times as high (median) at the {plural(len(scaled), 'point')} where its "
            f"stream scaled up and {b:.1f} times at the {len(calm)} where it did not: "
            f"{'higher' if a > b else 'not higher'} at the points with scale-ups.")


def _values(points: Sequence[Mapping[str, Any]], policies: Sequence[str],
            key: str) -> list[float]:
    return [p["policies"][k][key] for p in points for k in policies
            if p["policies"][k].get(key) is not None]


def _span(values: Sequence[float], fmt: str) -> str:
    """``12%-44%``: the range of ``values`` in ``fmt``."""
    return f"{min(values):{fmt}}-{max(values):{fmt}}"


def herding_sentence(crowded: Sequence[Mapping[str, Any]]) -> str:
    """At the crowded points, whether the SDK concentrated its frames on one replica
    more than geo-nearest did, and whether its users moved more (the wording follows
    the numbers)."""
    if not crowded:
        return ""
    sdk = _values(crowded, SDK, "busiest_share")
    geo = _values(crowded, ("geo-nearest",), "busiest_share")
    moves = _values(crowded, SDK, "switches_per_user")
    geo_moves = _values(crowded, ("geo-nearest",), "switches_per_user")
    if not (sdk and geo and moves and geo_moves):
        return ""
    least = min(p["users"] for p in crowded)
    share = lower_or_higher(max(sdk), max(geo), 0.005, (
        "a smaller share of the frames on one replica than",
        "a larger share of the frames on one replica than",
        "the same share of the frames on one replica as"))
    switched = lower_or_higher(float(np.mean(moves)), float(np.mean(geo_moves)), 0.05,
                               ("fewer", "more", "as many"))
    return (f"At the points with {least} users or more the SDK's busiest node served "
            f"{_span(sdk, '.0%')} of the frames, geo-nearest's {_span(geo, '.0%')}: at its "
            f"most concentrated the SDK put {share} geo-nearest did. Its users switched {_span(moves, '.1f')} times per user in one "
            f"stream against {_span(geo_moves, '.1f')} for geo-nearest (which moves only "
            f"when its nearest replica changes): {switched} switches on average.")


def together_sentence(busy: Sequence[Mapping[str, Any]]) -> str:
    """At the busiest points, how often the SDK's users moved along with others
    against chance; the herding reading only when it is above chance everywhere."""
    streams = [p["policies"][k] for p in busy for k in SDK
               if p["policies"][k].get("co_switches") and p["policies"][k].get("co_switches_chance")]
    if not streams:
        return ""
    ratios = [b["co_switches"] / b["co_switches_chance"] for b in streams]
    least = min(p["users"] for p in busy)
    rounds = least * 2.0 / float(np.mean(REPROBE_S))
    text = (f"With {least} users or more the SDK's users moved along with others "
            f"{_span(ratios, '.1f')} times as often as chance, above chance in "
            f"{count_of([r > 1 for r in ratios])} streams")
    if min(ratios) > 1:
        return (text + ": users whose re-probes fall in the same few seconds see the same "
                "fast replica and move to it together, so its load rises for all of them at "
                f"once. With {least} users re-probing every {REPROBE_S[0]:g}-"
                f"{REPROBE_S[1]:g} s, about {rounds:.1f} re-probe rounds fall in any 2 s.")
    return text + (": no sign that they moved together." if max(ratios) <= 1 else
                   ": moving together shows in some streams only.")


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
    herd = herding_sentence([p for p in points if p["users"] >= 10])
    lines += ["", herd] if herd else []
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
    together = together_sentence([p for p in points if p["users"] >= 20])
    lines += ["", together] if together else []
    return lines + [""]


def startup_sentence(points: Sequence[Mapping[str, Any]]) -> str:
    """The range of the deployments' start-up times (request to first replica serving)."""
    times = [p["startup_s"] for p in points if p.get("startup_s") is not None]
    if not times:
        return ""
    return (f"From the deployment request to the first replica serving took "
            f"{min(times):.1f}-{max(times):.1f} s over {plural(len(times), 'bring-up')} (a "
            "replica starts by importing OpenCV and warming its detector inside its node's "
            "CPU limit).")


def point_label(point: Mapping[str, Any], several: bool = False) -> str:
    """``20n/10u``: a point's edge nodes and users (and its replication when a study
    has several)."""
    label = f"{point['nodes']}n/{point['users']}u"
    return f"{label} (replication {point['replication']})" if several else label


def _beats(point: Mapping[str, Any], policy: str, others: Sequence[str]) -> bool:
    """Whether ``policy``'s mean latency at ``point`` is below every one of ``others``'."""
    pol = point["policies"]
    mine = pol[policy]["mean_ms"]
    return mine is not None and all(pol[o]["mean_ms"] is None or mine < pol[o]["mean_ms"]
                                    for o in others)


def _others(policy: str) -> list[str]:
    """The selection policies but ``policy``."""
    return [k for k in SELECTION_POLICIES if k != policy]


def _sweep(points: Sequence[Mapping[str, Any]], axis: str) -> list[Mapping[str, Any]]:
    """The longest sweep along ``axis`` (users or nodes): the points sharing the other
    coordinate, the most of them (the larger value on ties), ordered along ``axis``."""
    other = "nodes" if axis == "users" else "users"
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for p in points:
        groups.setdefault(p[other], []).append(p)
    if not groups:
        return []
    best = max(groups, key=lambda v: (len(groups[v]), v))
    return sorted(groups[best], key=lambda p: p[axis])


def growth_sentence(points: Sequence[Mapping[str, Any]], policy: str, axis: str) -> str:
    """How ``policy``'s mean changed along the longest ``axis`` sweep, against each
    baseline's (the comparison words follow the numbers)."""
    sweep = [p for p in _sweep(points, axis)
             if all(p["policies"][k]["mean_ms"] is not None for k in (policy, *BASELINES))]
    if len(sweep) < 2:
        return ""
    first, last = sweep[0], sweep[-1]
    growth = {k: last["policies"][k]["mean_ms"] / first["policies"][k]["mean_ms"]
              for k in (policy, *BASELINES)}
    fixed = "edge nodes" if axis == "users" else "users"
    parts = []
    for k in (policy, *BASELINES):
        a, b = first["policies"][k]["mean_ms"], last["policies"][k]["mean_ms"]
        parts.append(f"`{k}`'s mean {rose_or_fell(a, b)} from {a:.0f} to {b:.0f} ms "
                     f"({growth[k]:.1f}x)")
    smaller = [k for k in BASELINES if growth[policy] < growth[k]]
    return (f"At {first['nodes' if axis == 'users' else 'users']} {fixed}, from "
            f"{first[axis]} to {last[axis]} {axis}: " + "; ".join(parts)
            + (f"; the factor was smaller for `{policy}` than for "
               + names([f"`{k}`" for k in smaller]) if smaller else
               f"; the factor was smaller for `{policy}` than for neither baseline") + ".")


def scalability_conclusion(points: Sequence[Mapping[str, Any]], policy: str) -> Conclusion:
    """The Fig. 9 claim for one SDK variant: at each point, a lower mean latency than
    both baselines; and how its mean grew along the sweeps."""
    judged = [p for p in points if p["policies"][policy]["mean_ms"] is not None]
    checks = {p.get("label") or point_label(p): _beats(p, policy, BASELINES) for p in judged}
    per_base = "; ".join(
        f"`{b}` at {count_of([_beats(p, policy, (b,)) for p in judged])}" for b in BASELINES)
    sentences = [(f"`{policy}` had a lower mean latency than both baselines at "
                  f"{count_of(list(checks.values()))} points (it beat {per_base}).")]
    sentences += [t for t in (growth_sentence(points, policy, "users"),
                              growth_sentence(points, policy, "nodes")) if t]
    baselines = names([f"`{b}`'s" for b in BASELINES])
    return Conclusion(verdict(checks), (
        f"holds at a point (named nodes n / users u) when `{policy}`'s mean latency is "
        f"below {baselines} there; holds when it does at every point"), tuple(sentences))


def probe_cost_sentence(points: Sequence[Mapping[str, Any]]) -> str:
    """What the frame probes cost against the small ones, from the two SDK variants'
    means and their frames' processing and queueing at the replicas."""
    from nodes.armada.selection import TOPN

    if not points:
        return ""
    fps = points[0]["fps"]
    both = [p for p in points if all(p["policies"][k]["mean_ms"] is not None for k in SDK)]
    extra = TOPN / float(np.mean(REPROBE_S)) / fps
    text = (f"`armada` probes with a real frame: {TOPN} candidates probed every "
            f"{REPROBE_S[0]:g}-{REPROBE_S[1]:g} s add {extra:.0%} to the detection work of a "
            f"{fps:g} fps stream, which the baselines do not pay. `armada-light` is the same "
            "SDK probing with a small request (a 64x128 crop, one HOG window, about 2 KB): "
            "it times a real request end to end, so it still measures the network and the "
            "queue, but not the full processing time of a frame.")
    if not both:
        return text
    light = [p["policies"]["armada-light"]["mean_ms"] < p["policies"]["armada"]["mean_ms"]
             for p in both]
    times = {k: [_values(both, (k,), f"{part}_ms") for part in ("service", "wait")] for k in SDK}
    text += (f" Here `armada-light` had the lower mean of the two at {count_of(light)} "
             f"points, so the frame probes cost "
             f"{'more' if sum(light) * 2 > len(light) else 'no more'} than the small ones "
             "at most points.")
    if all(all(v) for v in times.values()):
        text += (" Averaged over the points, a frame of `armada`'s streams spent "
                 f"{np.mean(times['armada'][0]):.0f} ms in processing and "
                 f"{np.mean(times['armada'][1]):.0f} ms queued at its replica, one of "
                 f"`armada-light`'s {np.mean(times['armada-light'][0]):.0f} and "
                 f"{np.mean(times['armada-light'][1]):.0f} ms.")
    return text


SCALE_CLAIM = ("Armada scales: as users and edge nodes increase, users keep a low average "
               "end-to-end latency thanks to performance-aware selection and auto-scaling, "
               "better than geo-proximity-only and random selection (Fig. 9).")


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (one point and replication): :func:`scalability_point`, and
    the report's tables (latency, herding, moving together, start-up)."""
    points, setup = [], ""
    for result in results.values():
        for cell in sorted(result.finished(), key=lambda c: (c.point, c.replication)):
            setup = setup or fleet_setup(cell.run)
            point = scalability_point(cell.run)
            point.update(replication=cell.replication, degraded=cell.degraded)
            points.append(point)
    several = len({p["replication"] for p in points}) > 1
    for point in points:  # a degraded cell is judged, and named so wherever it shows
        point["label"] = point_label(point, several) + (" (degraded)" if point["degraded"]
                                                        else "")
    return {"size": size, "points": points,
            "tables": [_latency_table(points, setup), *_herding_tables(points),
                       _startup_table(points)] if points else []}


def _ms(value: float | None, best: float | None = None) -> str:
    """A mean in whole ms, bold when it is the point's ``best``."""
    text = table_number(value)
    return f"**{text}**" if value is not None and value == best else text


def _latency_table(points: Sequence[Mapping[str, Any]], setup: str) -> dict[str, Any]:
    """Mean (best in bold) and p95 per policy and point, frames lost, scaling, order;
    ``setup`` (the fleet's paragraph) heads the note."""
    rows = []
    for p in points:
        pol = p["policies"]
        means = [pol[k]["mean_ms"] for k in SELECTION_POLICIES]
        best = min((m for m in means if m is not None), default=None)
        scaled = "; ".join(f"{k} {_scale_summary(pol[k].get('scaled_during', []))}"
                           for k in SELECTION_POLICIES if pol[k].get("scaled_during")) or "none"
        order = " > ".join(sorted(SELECTION_POLICIES, key=lambda k: pol[k].get("order", 0)))
        rows.append([p["label"], str(pol["armada"]["replicas"]),
                     *[_ms(m, best) for m in means],
                     " / ".join(_ms(pol[k]["p95_ms"]) for k in SELECTION_POLICIES),
                     " / ".join(str(pol[k]["lost"]) for k in SELECTION_POLICIES),
                     scaled, order])
    note = " ".join(t for t in (probe_cost_sentence(points), *_scaling_sentence(points)) if t)
    return {"title": "Mean end-to-end latency (ms) per policy", "columns": [
        "point (edge nodes n / users u)", "replicas", *SELECTION_POLICIES,
        "p95 ms (" + " / ".join(SELECTION_POLICIES) + ")",
        "frames lost (" + " / ".join(SELECTION_POLICIES) + ")",
        "scaling during the stream", "order"], "rows": rows,
        "note": (setup + " Policies: `armada` (the SDK, probing with a frame), `armada-light` (the "
                 "SDK, probing with a small request), `geo-nearest` and `random` (no "
                 "probes; they list the running replicas every 5-7 s). " + note).strip()}


def _herding_tables(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Where the frames went (the busiest node's share, switches per user) and whether
    the SDK's users moved together (against chance)."""
    spread_rows = [[p["label"], *[
        f"{p['policies'][k]['busiest_share']:.2f} / {p['policies'][k]['switches_per_user']:.1f}"
        if p["policies"][k]["busiest_share"] is not None
        and p["policies"][k]["switches_per_user"] is not None else "-"
        for k in SELECTION_POLICIES]] for p in points]
    together_rows = []
    for p in points:
        pol = p["policies"]
        together_rows.append([p["label"], " / ".join(str(pol[k].get("reprobe_switches"))
                                                     for k in SDK),
                              *[f"{pol[k]['co_switches']:.1f} ({pol[k]['co_switches_chance']:.1f})"
                                if pol[k].get("co_switches") is not None else "-" for k in SDK]])
    herd = herding_sentence([p for p in points if p["users"] >= 10])
    together = together_sentence([p for p in points if p["users"] >= 20])
    return [
        {"title": "Herding: where the frames went", "columns": [
            "point", *SELECTION_POLICIES], "rows": spread_rows,
         "note": ("Per policy: the busiest node's share of the ok frames / switches per user "
                  "(the first pick counts as one, so 1.0 means no user moved). "
                  + herd).strip()},
        {"title": "Moving together", "columns": [
            "point", "re-probe switches (" + " / ".join(SDK) + ")",
            *[f"others moving along: {k} (chance)" for k in SDK]], "rows": together_rows,
         "note": ("From the users' event logs: after a periodic re-probe moved a user, how "
                  "many other users moved to the same replica within 2 s, against the count "
                  "expected if the same switches were spread uniformly over their time span "
                  "and their target replicas (chance). " + together).strip()}]


def _startup_table(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each bring-up: request to the first replica serving, to the first three, and the
    settled replica set."""
    return {"title": "Deployment start-up", "columns": [
        "point", "first replica serving (s)", "first three serving (s)",
        "replicas after settling", "settling (s)"],
        "rows": [[p["label"], f"{p['startup_s']:.1f}", f"{p['all_min_running_s']:.1f}",
                  str(p["replicas_settled"]), f"{p['settle_s']:.1f}"] for p in points],
        "note": startup_sentence(points)}


def _fewest_replications(points: Sequence[Mapping[str, Any]]) -> int | None:
    """The fewest replications behind any (nodes, users) point of ``points``."""
    per: dict[tuple[int, int], int] = {}
    for p in points:
        per[(p["nodes"], p["users"])] = per.get((p["nodes"], p["users"]), 0) + 1
    return min(per.values()) if per else None


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Claim A2 for each SDK variant (:func:`scalability_conclusion`): a lower mean
    latency than both baselines at every point."""
    points = found["points"]
    out = []
    for k in SDK:
        judged = [p for p in points if p["policies"][k]["mean_ms"] is not None]
        conclusion = scalability_conclusion(points, k)
        lowest = count_of([_beats(p, k, _others(k)) for p in points])
        out.append(Claim(
            f"A2 ({k})", f"`{k}` keeps a lower mean latency than the baselines as users and "
                         "nodes grow",
            rule=conclusion.rule, paper=SCALE_CLAIM,
            conditions=tuple(Condition(p["label"], _beats(p, k, BASELINES)) for p in judged),
            why=" ".join([*conclusion.sentences,
                          f"It had the lowest mean of the four at {lowest} points."]),
            replications=_fewest_replications(judged)))
    return out
