"""The offloading experiment's metric function: its studies read into the metrics the
claims judge and the report shows.

:func:`metrics` is what ``testbed experiment offloading`` calls with every study of the
size (:class:`testbed.experiments.results.StudyResult`, by study file name); the
numbers themselves are :mod:`testbed.systems.offloading.metrics`', the measurement
tables :mod:`testbed.systems.offloading.tables`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from testbed.experiments.results import StudyResult
from testbed.systems.offloading.metrics import (
    ALL_POLICIES,
    FAMILIES,
    POLICY_ENTRIES,
    Point,
    network_offsets,
    point_metrics,
    sweep_x,
)
from testbed.systems.offloading.tables import measurement_tables


def _fidelity_entry(point: str, replication: int, record: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """What the report says about one emulated cell's fidelity."""
    return {"point": point, "replication": replication,
            "degraded": bool(record.get("degraded")),
            "reasons": list(record.get("reasons") or []),
            "degraded_policies": dict(record.get("degraded_policies") or {})}


def study_points(results: Mapping[str, StudyResult]
                 ) -> tuple[list[Point], dict[tuple[str, str], list[pd.DataFrame]],
                            list[dict[str, Any]], dict[str, Any]]:
    """Every study's points (sorted by sweep, then x), the traces of each (executor,
    point name)'s finished replications, the emulated cells' fidelity entries and the
    emulated low-load run (its point, traces and RTT probes) the offsets come from."""
    points: list[Point] = []
    frames: dict[tuple[str, str], list[pd.DataFrame]] = {}
    fidelity: list[dict[str, Any]] = []
    low: dict[str, Any] = {}
    order: dict[str, int] = {}
    for result in results.values():
        analysis = dict(result.study.analysis)
        sweep = str(analysis.get("sweep", result.name))
        order.setdefault(sweep, len(order))
        for point in result.points:
            scenario = result.study.scenario(point, 0)
            x, name = sweep_x(sweep, scenario)
            points.append(Point(sweep, x, scenario, name, tuple(result.study.executors),
                                analysis))
            for executor in result.study.executors:
                cells = sorted(result.finished(executor, point.index),
                               key=lambda c: c.replication)
                frames[(executor, name)] = [c.traces() for c in cells]
                if executor != "emulation":
                    continue
                for cell in cells:
                    fidelity.append(_fidelity_entry(name, cell.replication, cell.record))
                if sweep == "load" and cells and (not low or x < low["x"]):
                    rtt = ((cells[0].metadata().get("fidelity") or {}).get("measures")
                           or {}).get("rtt") or []
                    low = {"x": x, "name": name, "scenario": scenario,
                           "frame": frames[(executor, name)][0], "probes": rtt}
    points.sort(key=lambda p: (order[p.experiment], p.x))
    return points, frames, fidelity, low


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """The experiment's metrics (what :mod:`testbed.systems.offloading.claim_checks`
    judges and :mod:`testbed.systems.offloading.tables` shows): per point, executor and
    policy the pooled metrics over its replications' tasks (descriptive), the
    differences to ``hybrid`` on mean and p95 (``vs_hybrid``: t across replications, or
    batch means of one) and every :data:`INTERVAL_KEYS` metric across replications and
    paired with ``hybrid``. Degraded emulated cells are kept (the experiment reports the
    paper's grid) and listed under ``fidelity``."""
    points, frames, fidelity, low = study_points(results)
    executors = sorted({e for p in points for e in p.executors}, key=lambda e: e != "sim")
    machine = next((c.metadata().get("machine") for r in results.values()
                    for c in r.finished()), None) or {}
    out: dict[str, Any] = {
        "size": {"name": size, "replications": max(
            (r.study.replications for r in results.values()
             if dict(r.study.analysis).get("sweep") == "load"), default=1)},
        "executors": executors, "policies": list(ALL_POLICIES),
        "policy_entries": dict(POLICY_ENTRIES),
        "families": {k: list(v) for k, v in FAMILIES.items()},
        "machine": {"cpus": machine.get("cpus")}, "fidelity": fidelity, "points": []}
    offsets = None
    if low:
        offsets = network_offsets(low["scenario"], low["probes"], low["frame"])
        out["offsets"] = {"from": low["name"], "per_tier": offsets}
    for point in points:
        found = {e: frames.get((e, point.name), []) for e in point.executors}
        if not all(found.values()):
            out.setdefault("incomplete", []).append(
                f"{point.name}: no replication finished on "
                + ", ".join(e for e, f in found.items() if not f))
            continue
        out["points"].append(point_metrics(point, found, offsets))
    out["tables"] = measurement_tables(out)
    return out


