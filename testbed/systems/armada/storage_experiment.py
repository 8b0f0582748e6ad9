"""Armada's storage layer (``armada-storage``): Cargo selection, consistency and a Cargo
failure under the face-recognition workloads, as data.

The study files (``studies/storage/<size>/``) run the ``armada-storage`` build
(``studies/storage/storage.scenario.yaml``, the storage driver of
:mod:`testbed.systems.armada.driver`):

* ``storage.yaml``: each workload (read-only, write-only, read-then-write; the small
  size only the last) a point, on which the three storage policies replay the same
  trace: ``nearest`` (Cargos nearest
  the application, strong consistency), ``random`` (Cargos drawn at random, strong) and
  ``eventual`` (nearest, eventual consistency);
* ``fault.yaml``: the read-then-write workload through ``nearest`` while the Cargo of
  the first site, the replica nearest the serving task, crashes a third of the way in.

:func:`metrics` turns each replication's trace rows (the task's read and write times,
each including the connection to the Cargo) and the driver's record (allocations,
replication lag, losses, restorations, the read-back of every acknowledged write from
every replica) into numbers, one per replication with its interval across them;
:func:`claims` judges the two properties the paper's design asks of the storage layer
(data near its users is faster to reach; a Cargo's failure loses nothing). The paper's
text ends before its storage results, so no number of its own is compared. Report:
``docs/results/armada/storage.md`` (``storage-docker.md`` with ``--cargo-runtime
docker``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis.stats import pm, replication_interval
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim, Condition
from testbed.systems.armada.verdicts import table_number

SELECTION, FAULT = "storage", "fault"
NEAREST, RANDOM, EVENTUAL = "nearest", "random", "eventual"
WRITES = ("write", "read-write")  # the workloads that write


def stream_numbers(rows: pd.DataFrame) -> dict[str, Any]:
    """One policy's stream of one run: frames, answered and failed frames, the task's
    read and write times (mean and p95, ms), recognised reads, acknowledged writes and
    distinct identities written."""
    ok = rows[rows["outcome"] == "ok"]

    def of(column: str) -> np.ndarray:
        return ok[column].dropna().to_numpy(dtype=float)

    reads, writes = of("read_ms"), of("write_ms")
    return {"frames": len(rows), "ok": len(ok), "failed": int(len(rows) - len(ok)),
            "read_mean": float(reads.mean()) if reads.size else None,
            "read_p95": float(np.percentile(reads, 95)) if reads.size else None,
            "write_mean": float(writes.mean()) if writes.size else None,
            "write_p95": float(np.percentile(writes, 95)) if writes.size else None,
            "recognised": int(ok["recognised"].fillna(0).sum()),
            "writes": int(writes.size),
            "written": int(ok[ok["write_ms"].notna()]["key"].nunique())}


def isp_delays(scenario: Mapping[str, Any]) -> dict[str, float | None]:
    """Each Cargo's one-way ISP delay (ms): the delay of the link from its site switch
    to the WAN core, read from the scenario a run recorded."""
    links = scenario["topology"]["links"]

    def other(link: Mapping[str, Any], name: str) -> str:
        return str(link["b"] if link["a"] == name else link["a"])

    to_wan = {other(lk, "wan"): float(lk.get("delay_ms", 0.0))
              for lk in links if "wan" in (lk["a"], lk["b"])}
    cargos = {s["node"] for s in scenario["services"] if s["program"] == "armada.cargo"}
    return {cargo: to_wan.get(other(lk, cargo))
            for lk in links for cargo in cargos & {lk["a"], lk["b"]}}


def _cargos(replay: Mapping[str, Any]) -> list[str]:
    return [r["cargo_id"] for r in replay["deployment"]["allocation"]["replicas"]]


def selection_runs(result: StudyResult) -> list[dict[str, Any]]:
    """Per finished cell of the selection study: its workload, replication, each
    policy's :func:`stream_numbers`, Cargos and replication-lag samples (ms)."""
    runs = []
    for cell in sorted(result.finished(), key=lambda c: (c.point, c.replication)):
        meta, frame = cell.metadata(), cell.traces()
        replays = {r["policy"]: r for r in meta["driver"]["replays"]}
        delays = isp_delays(meta["scenario"])
        policies = {}
        for policy, replay in replays.items():
            policies[policy] = {
                **stream_numbers(frame[frame["policy"] == policy]),
                "cargos": [[c, delays.get(c)] for c in _cargos(replay)],
                "lag_ms": [x * 1e3 for lag in replay["replication_lag"].values()
                           for x in lag["samples"]],
                "readback": replay["readback"]}
        runs.append({"mode": meta["scenario"]["workload"]["params"]["mode"],
                     "replication": cell.replication, "degraded": cell.degraded,
                     "policies": policies})
    return runs


def fault_runs(result: StudyResult) -> list[dict[str, Any]]:
    """Per finished cell of the fault study: the stream's numbers, which Cargo was lost
    and which served the task, the restorations and the read-back."""
    runs = []
    for cell in sorted(result.finished(), key=lambda c: c.replication):
        meta, frame = cell.metadata(), cell.traces()
        for replay in meta["driver"]["replays"]:
            runs.append({
                "replication": cell.replication, "degraded": cell.degraded,
                "policy": replay["policy"],
                **stream_numbers(frame[frame["policy"] == replay["policy"]]),
                "cargos": _cargos(replay), "serving_cargo": replay["serving_cargo"],
                "lost": [x["target"] for x in replay["lost"]],
                "lost_at_s": [x["at"] for x in replay["lost"]],
                "restores": replay["restores"], "readback": replay["readback"],
                "ready_after": [r["cargo_id"] for r in replay["replicas_after"]
                                if r["state"] == "ready"],
                "event_errors": replay["event_errors"]})
    return runs


def across(runs: Sequence[Mapping[str, Any]], key: str) -> Any:
    """The interval across replications of ``key`` (runs without it left out)."""
    values = [run[key] for run in runs if run.get(key) is not None]
    return replication_interval(values, bounded=True) if values else None


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Every replication's numbers of both studies, and the report's tables."""
    selection = selection_runs(results[SELECTION]) if SELECTION in results else []
    fault = fault_runs(results[FAULT]) if FAULT in results else []
    tables = []
    if selection:
        tables += [selection_table(selection), lag_table(selection)]
    if fault:
        tables.append(fault_table(fault))
    return {"size": size, "selection": selection, "fault": fault, "tables": tables}


def _by_mode_policy(selection: Sequence[Mapping[str, Any]]
                    ) -> dict[tuple[str, str], list[dict[str, Any]]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in selection:
        for policy, numbers in run["policies"].items():
            grouped.setdefault((run["mode"], policy), []).append(numbers)
    return grouped


def selection_table(selection: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per workload and policy: the Cargos, and the task's read and write times with
    their intervals across replications."""
    rows = []
    for (mode, policy), runs in sorted(_by_mode_policy(selection).items()):
        cargos = "; ".join(sorted({", ".join(f"{c} ({table_number(d, 1)})" for c, d in
                                             run["cargos"]) for run in runs}))
        rows.append([mode, policy, cargos, str(len(runs)),
                     f"{sum(r['ok'] for r in runs)}/{sum(r['frames'] for r in runs)}",
                     pm(across(runs, "read_mean")), pm(across(runs, "read_p95")),
                     pm(across(runs, "write_mean")), pm(across(runs, "write_p95")),
                     str(sum(r["recognised"] for r in runs)),
                     str(sum(r["written"] for r in runs))])
    return {"title": "Cargo selection and consistency, per workload and policy",
            "columns": ["workload", "policy", "Cargos (one-way ISP delay ms)",
                        "replications", "frames ok", "read mean ms", "read p95 ms",
                        "write mean ms", "write p95 ms", "recognised", "written"],
            "rows": rows,
            "note": ("The task's read and write times, each including a fresh connection "
                     "to the Cargo; a task reads from its nearest replica, a strong write "
                     "waits for every live replica and an eventual one for the nearest. "
                     "Mean and p95 are per replication, then the mean and its t-interval "
                     "across replications; frames, recognised reads and written "
                     "identities are summed over them. nearest: the Cargos nearest the "
                     "application, strong; random: Cargos drawn at random, strong; "
                     "eventual: nearest, eventual consistency.")}


def lag_table(selection: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Cargos' measured replication lag of eventual writes: how stale a read from
    another replica may be."""
    rows = []
    for run in selection:
        lags = run["policies"].get(EVENTUAL, {}).get("lag_ms", [])
        if lags:
            p50, p95 = np.percentile(lags, [50, 95])
            rows.append([run["mode"], str(run["replication"]), str(len(lags)),
                         f"{p50:.1f}", f"{p95:.1f}", f"{max(lags):.1f}"])
    return {"title": "Staleness of eventual reads",
            "columns": ["workload", "replication", "writes", "lag p50 ms", "lag p95 ms",
                        "lag max ms"], "rows": rows,
            "note": ("From a write's acknowledgement by the nearest replica to the last "
                     "replica confirming it, as the Cargos measured it: a read from "
                     "another replica within that window may miss the write.")}


def fault_table(fault: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per replication: the lost Cargo, what the application saw, what was read back
    and when the replication factor was restored."""
    rows = []
    for run in fault:
        rb = run["readback"]
        restored = "; ".join(f"{r['cargo_id']} {r['since_lost_s']:.1f} s after the loss "
                             f"(copy {r['copy_s']:.2f} s, {r['records']} records)"
                             for r in run["restores"]) or "-"
        rows.append([str(run["replication"]), ", ".join(run["lost"]) or "-",
                     str(run["serving_cargo"]), f"{run['ok']}/{run['frames']}",
                     str(run["failed"]), str(run["written"]),
                     f"{rb['found']}/{rb['expected']} ({rb['replicas']} replicas)",
                     restored, table_number(run["write_mean"], 1),
                     table_number(run["write_p95"], 1)])
    return {"title": "A Cargo crashed mid-workload",
            "columns": ["replication", "crashed", "serving Cargo", "frames ok", "failed",
                        "acknowledged writes", "read back", "restored",
                        "write mean ms", "write p95 ms"], "rows": rows,
            "note": ("Read-then-write through nearest storage (strong). The crash kills "
                     "every process of the Cargo's node; a strong write in flight waits "
                     "until the Cargo Manager declares the Cargo dead and drops it from "
                     "the replicas' peer lists, and a request to the dead Cargo fails "
                     "over to the next replica in the storage SDK. Read back: every "
                     "acknowledged write, from every ready replica after the "
                     "restoration, compared with its descriptor.")}


# ------------------------------------------------------------------ claims

NEAR_CLAIM = ("Cargos chosen near the application give it faster writes than Cargos "
              "chosen at random")
NEAR_PAPER = ("The Cargo manages the local heterogeneous storage resources and persists "
              "data on the edge supporting low-latency access for nearby users; the "
              "evaluation explores the effects of the Cargo selection strategy.")
NEAR_RULE = ("per workload that writes and per replication, nearest's mean strong write "
             "time is below random's")
FAULT_CLAIM = "a Cargo's failure costs the application no operation and loses no write"
FAULT_PAPER = ("Armada must ensure the fault tolerance for Armada users in the presence of "
               "high node churn; the Cargo manager selects three Cargos for three data "
               "replicas and the evaluation explores storage fault tolerance.")
FAULT_RULE = ("a replication passes when all four hold: the crashed Cargo was the one "
              "serving the task; no frame failed; every acknowledged write was read back "
              "from every ready replica; three ready replicas, the crashed one not among "
              "them, after a recorded restoration")


def near_conditions(selection: Sequence[Mapping[str, Any]]) -> list[Condition]:
    """:data:`NEAR_RULE` per workload that writes and replication."""
    out = []
    for run in selection:
        near, rand = run["policies"].get(NEAREST), run["policies"].get(RANDOM)
        if run["mode"] not in WRITES or near is None or rand is None:
            continue
        ok = None not in (near["write_mean"], rand["write_mean"]) \
            and near["write_mean"] < rand["write_mean"]
        out.append(Condition(f"{run['mode']} (replication {run['replication']})", bool(ok),
                             "emulation"))
    return out


def fault_conditions(run: Mapping[str, Any]) -> dict[str, bool]:
    """:data:`FAULT_RULE`'s checks for one replication of the fault study."""
    rb = run["readback"]
    return {"the serving Cargo crashed": bool(run["lost"])
            and run["lost"] == [run["serving_cargo"]],
            "no frame failed": run["failed"] == 0 and run["frames"] > 0,
            "every acknowledged write on every replica": run["written"] > 0
            and rb["found"] == rb["expected"] == run["written"] * rb["replicas"],
            "three replicas restored": len(run["ready_after"]) >= 3
            and not set(run["lost"]) & set(run["ready_after"])
            and [r["lost"] for r in run["restores"]] == run["lost"]}


def _ratio_sentence(selection: Sequence[Mapping[str, Any]]) -> str:
    grouped = _by_mode_policy(selection)
    parts = []
    for op in ("read", "write"):
        ratios = []
        for mode in sorted({m for m, _ in grouped}):
            near = across(grouped.get((mode, NEAREST), []), f"{op}_mean")
            rand = across(grouped.get((mode, RANDOM), []), f"{op}_mean")
            if near is not None and rand is not None and near.estimate:
                ratios.append(rand.estimate / near.estimate)
        if ratios:
            parts.append(f"{op}s {min(ratios):.2f}-{max(ratios):.2f} times")
    if not parts:
        return ""
    return ("Random's mean time against nearest's, over the workloads: " + ", ".join(parts)
            + ". A task reads from its nearest replica and a strong write waits for all "
            "three, so reads follow the closest Cargo of the three and writes the farthest.")


def _fault_sentence(run: Mapping[str, Any]) -> str:
    rb = run["readback"]
    restored = ", ".join(f"on {r['cargo_id']} {r['since_lost_s']:.1f} s after it was "
                         f"declared dead" for r in run["restores"]) or "never"
    missed = [what for what, ok in fault_conditions(run).items() if not ok]
    return (f"Replication {run['replication']}: {', '.join(run['lost']) or 'no Cargo'} "
            f"crashed {', '.join(f'{t:g}' for t in run['lost_at_s'])} s in while "
            f"{run['serving_cargo']} served the task; {run['failed']} of {run['frames']} "
            f"frames failed, {rb['found']} of {rb['expected']} acknowledged copies read "
            f"back from {rb['replicas']} replicas; restored {restored}."
            + (f" Not met: {', '.join(missed)}." if missed else ""))


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """S1 (:data:`NEAR_RULE`) on the selection study, S2 (:data:`FAULT_RULE`) on the
    fault study; a study the size did not run leaves its claim not run."""
    selection, fault = found["selection"], found["fault"]
    near = near_conditions(selection)
    conditions = tuple(Condition(f"replication {run['replication']}",
                                 all(fault_conditions(run).values()), "emulation")
                       for run in fault)
    return [
        Claim("S1", NEAR_CLAIM, rule=NEAR_RULE, paper=NEAR_PAPER, conditions=tuple(near),
              why=_ratio_sentence(selection),
              replications=len({r["replication"] for r in selection}) or None),
        Claim("S2", FAULT_CLAIM, rule=FAULT_RULE, paper=FAULT_PAPER, conditions=conditions,
              why=" ".join(_fault_sentence(run) for run in fault),
              replications=len(fault) or None)]
