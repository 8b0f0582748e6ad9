"""Person search in emulation (``person-search-emulation``): the searches over real HTTP
beside their simulated twins, as data.

The study file (``studies/emulation/<size>/emulation.yaml``) runs the
``search.scenario.yaml`` world on both executors: each point (N, movement) and
replication is one emulated cell (a coordinator and a process per edge server, real
HTTP, shaped links) and its simulated twin (the same world, policy entries and policy
seeds: the study's sim cell of the same point and replication). The worlds are the
simulator's studies' (their seeds hash the same layout, movement and N), and each world
seed also seeds the links' delays (``seeds.also``).

:func:`twin_rows` pairs every emulated replay with its twin (:func:`compare`);
:func:`metrics` adds the report's tables (:mod:`.emulation_tables`) and :func:`claims`
judges again, on the emulated totals, the two of the paper's claims an emulation can
test (:mod:`.emulation_claims`; none with fewer than two worlds). Report:
``docs/results/person-search/emulation.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim
from testbed.systems.person_search.emulation_claims import judge_emulated
from testbed.systems.person_search.emulation_tables import row_reading, setup, tables
from testbed.systems.person_search.simulation_rows import cell_settings

STUDY = "emulation"
_OVERHEADS = ("round_trip_overhead_ms_mean", "analysis_ms_mean", "round_trip_overhead_ms_p95",
              "timer_lateness_ms_mean", "decision_us_mean")


def compare(servers: int, movement: str, emulated: Mapping[str, Any],
            simulated: Mapping[str, Any], replication: int = 0,
            seed: int | None = None) -> list[dict[str, Any]]:
    """Each policy's emulated replay beside its simulated twin (``metadata.json`` of the
    two runs of one point): totals, analyses, makespans, discrepancy, overheads, and the
    policy entry and reading of the paper the replay ran under."""
    sims = {(r["policy"], r["repetition"]): r for r in simulated["driver"]["replays"]}
    time_scale = emulated["driver"]["time_scale"]
    out = []
    for e in emulated["driver"]["replays"]:
        s = sims[e["policy"], e["repetition"]]
        out.append({"servers": servers, "movement": movement, "policy": e["policy"],
                    "replication": replication, "world_seed": seed,
                    **{k: e[k] for k in ("policy_name", "policy_params", "reading")},
                    "time_scale": time_scale, "repetition": e["repetition"],
                    "policy_seed": e["policy_seed"], "targets": e["targets"],
                    "emulated_total_s": e["total_response_s"],
                    "simulated_total_s": s["total_response_s"],
                    "discrepancy": e["total_response_s"] / s["total_response_s"] - 1.0,
                    "emulated_analyses": e["total_analyses"],
                    "simulated_analyses": s["total_analyses"],
                    "emulated_makespan_s": e["model_makespan_s"],
                    "simulated_makespan_s": s["makespan_s"], "wall_s": e["wall_s"],
                    "all_found": e["all_found"], "analyses": e["analyses"],
                    **{k: e[k] for k in _OVERHEADS}})
    return out


def twin_rows(result: StudyResult) -> tuple[list[dict[str, Any]], list[str]]:
    """Every sound emulated cell's replays beside its simulated twin's, and the cells left
    out (degraded by the fidelity guard, or without a finished twin)."""
    twins = {(c.point, c.replication): c for c in result.finished("sim")}
    rows: list[dict[str, Any]] = []
    left_out: list[str] = []
    for cell in sorted(result.finished("emulation"), key=lambda c: (c.point, c.replication)):
        twin = twins.get((cell.point, cell.replication))
        what = f"{cell.record.get('label')} replication {cell.replication}"
        if cell.degraded or twin is None:
            left_out.append(what + (" (degraded)" if cell.degraded else " (no sim twin)"))
            continue
        s = cell_settings(result, cell)
        rows += compare(int(s["servers"]), str(s["movement"]), cell.metadata(),
                        twin.metadata(), cell.replication, int(cell.record["seed"]))
    return rows, left_out


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """The compared rows, the cells left out, the report's set-up and tables."""
    result = results.get(STUDY)
    if result is None:
        return {"size": size, "rows": [], "left_out": []}
    rows, left_out = twin_rows(result)
    doc: dict[str, Any] = {"size": size, "rows": rows, "left_out": left_out}
    if rows:
        scales = {r["servers"]: r["time_scale"] for r in rows}
        doc["setup"] = setup(rows, scales)
        doc["tables"] = tables(rows)
    return doc


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """P1 and P3 on the emulated totals, per priority policy (none with fewer than two
    worlds, P3 none with one N)."""
    return judge_emulated(found.get("rows") or [], row_reading)
