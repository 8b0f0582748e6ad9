"""Armada on realistic nodes, emulated and simulated side by side (``armada-executors``).

The emulated scalability experiment gives nodes a twentieth of a core; this one runs
fewer nodes of a quarter or half a core (at most 1.5 of this machine's 2 cores over all
nodes, so users, control plane and link shaper keep the rest), where a detection takes
about what it takes on a whole core. Every point and replication is one ``armada-fleet``
scenario run twice, by ``testbed run --executor emulation`` and ``--executor sim``: the
same fleet, trace, users and seeds, every policy of :data:`POLICIES` streaming from a
settled replica set in turn. Each replication is an independent fleet (layout, users'
places, trace and clients' seeds from the replication's seed).

The report compares, per point and policy, the two executors' mean and p95 latency,
switches per user, scaling decisions during the stream, lost frames and herd share,
each a mean over replications with its 95 % t-interval, and the simulator's difference
from the emulation paired within a replication. It says whether the executors rank the
policies alike, and judges Armada's scalability claim on each executor. The emulation's
fidelity guard says which runs the host disturbed. Report:
``docs/results/armada/executors.md``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.analysis.stats import Interval, pm, replication_interval, side
from testbed.systems.armada.fleet_measure import measure_run
from testbed.systems.armada.paper_scale_experiment import BASELINES, SDK, SPREAD
from testbed.systems.armada.paper_scale_experiment import POLICIES as PAPER_POLICIES
from testbed.systems.armada.verdicts import (
    Conclusion,
    beats_baselines,
    below_all,
    record_claims,
)

Progress = Callable[[str], None]
EXECUTORS = ("emulation", "sim")
POLICIES = PAPER_POLICIES
#: (metric key, what the report calls it, decimals) of every compared metric.
METRICS = (("mean_ms", "mean latency (ms)", 1), ("p95_ms", "p95 latency (ms)", 1),
           ("switches_per_user", "switches per user", 2),
           ("scaling", "scaling decisions", 1), ("lost", "lost frames", 1),
           ("herd_share", "herd share", 2))
SEED_BASE = 2000


@dataclasses.dataclass(frozen=True)
class Point:
    """One fleet: ``nodes`` edge nodes of ``cores`` cores each, ``users`` users."""

    nodes: int
    users: int
    cores: float

    @property
    def key(self) -> str:
        return f"n{self.nodes}-u{self.users:02d}-c{self.cores:g}"

    def describe(self) -> str:
        return f"{self.nodes} nodes of {self.cores:g} cores, {self.users} users"


@dataclasses.dataclass(frozen=True)
class ExecutorsSize:
    """The fleets, stream length, replications and policies of one size."""

    points: tuple[Point, ...]
    duration_s: float
    replications: int
    policies: tuple[Any, ...]


SIZES = {
    "small": ExecutorsSize((Point(3, 3, 0.25),), duration_s=6.0, replications=2,
                           policies=("armada", "geo-nearest")),
    "medium": ExecutorsSize((Point(3, 3, 0.25), Point(6, 9, 0.25)), duration_s=20.0,
                            replications=3, policies=POLICIES),
    "full": ExecutorsSize((Point(3, 3, 0.25), Point(3, 9, 0.25), Point(6, 9, 0.25),
                           Point(3, 9, 0.5)), duration_s=30.0, replications=5,
                          policies=POLICIES),
}


def labels(policies: Sequence[Any]) -> list[str]:
    """The policy labels of a size, in order."""
    return [p if isinstance(p, str) else p.get("label", p["name"]) for p in policies]


def fleet_params(point: Point, seed: int, duration_s: float) -> dict[str, Any]:
    """The ``armada-fleet`` params of one point and replication: one replica of the
    node's cores per node at most, auto-scaling on (3 users per replica)."""
    return {"nodes": point.nodes, "users": point.users, "seed": seed,
            "node_cores": [point.cores], "replica_cpu": point.cores,
            "users_per_replica": 3, "duration": duration_s}


def scenario_of(point: Point, replication: int, plan: ExecutorsSize) -> Any:
    """The scenario both executors run for one point and replication."""
    from testbed.scenario import scenario_from_dict

    seed = SEED_BASE + replication
    return scenario_from_dict(
        {"name": f"armada-executors-{point.key}", "seed": seed,
         "policies": list(plan.policies),
         "build": {"builder": "armada-fleet",
                   "params": fleet_params(point, seed, plan.duration_s)}},
        source=f"<armada-executors {point.describe()} r{replication}>")


def _fidelity(folder: Path) -> dict[str, Any]:
    meta = json.loads((folder / "metadata.json").read_text())
    found = meta.get("fidelity") or {}
    return {"degraded": bool(found.get("degraded")), "reasons": found.get("reasons", []),
            "degraded_policies": found.get("degraded_policies", {})}


def run_executors(size: str, out: Path, progress: Progress = print,
                  executors: Sequence[str] = EXECUTORS) -> Path:
    """Every point and replication of ``size`` on each of ``executors`` into
    ``out/<point>/r<k>/<executor>``; ``out/executors.json`` gathers what each run gives.
    A rerun into the same ``out`` keeps the runs that finished; a run with a failed
    policy keeps the others (its failures are listed)."""
    from testbed.experiments.sizes import size_plan
    from testbed.replays import RunIncomplete
    from testbed.runner import run_scenario

    plan: ExecutorsSize = size_plan(size, SIZES)
    found: list[dict[str, Any]] = []
    for point in plan.points:
        for r in range(plan.replications):
            for executor in executors:
                folder = out / point.key / f"r{r}" / executor
                if not (folder / "metadata.json").exists():
                    if folder.exists():
                        shutil.rmtree(folder)
                    progress(f"{point.describe()}, replication {r}: {executor}")
                    try:
                        run_scenario(scenario_of(point, r, plan), out=folder,
                                     executor=executor, progress=progress, plots=False)
                    except RunIncomplete as exc:
                        progress(f"  incomplete: {exc}")
                meta = json.loads((folder / "metadata.json").read_text())
                found.append({"point": dataclasses.asdict(point), "replication": r,
                              "executor": executor, "run": str(folder.relative_to(out)),
                              "failed": meta.get("failed", []),
                              "fidelity": _fidelity(folder) if executor == "emulation"
                              else None,
                              "policies": measure_run(folder)})
    (out / "executors.json").write_text(json.dumps(
        {"size": size, "executors": list(executors), "plan": dataclasses.asdict(plan),
         "runs": found}, indent=1))
    return out


# ------------------------------------------------------------------ analysis


Runs = Sequence[Mapping[str, Any]]


def _point(run: Mapping[str, Any]) -> Point:
    return Point(**run["point"])


def by_point(doc: Mapping[str, Any]) -> dict[Point, list[Mapping[str, Any]]]:
    """The runs of each point, in the plan's order."""
    out: dict[Point, list[Mapping[str, Any]]] = {}
    for run in doc["runs"]:
        out.setdefault(_point(run), []).append(run)
    return out


def _value(run: Mapping[str, Any], label: str, metric: str) -> float | None:
    value = run["policies"].get(label, {}).get(metric)
    return None if value is None else float(value)


def over(runs: Runs, executor: str, label: str, metric: str) -> Interval | None:
    """``metric`` of ``label`` on ``executor``: the interval across replications."""
    values = [v for run in runs if run["executor"] == executor
              if (v := _value(run, label, metric)) is not None]
    return replication_interval(values) if values else None


def paired(runs: Runs, label: str, metric: str, minus: Callable[[Mapping[str, Any]], bool],
           of: Callable[[Mapping[str, Any]], bool], other: str | None = None
           ) -> Interval | None:
    """``of``'s ``label`` minus ``minus``'s (``other`` label, default the same) for
    ``metric``, paired within a replication."""
    by_rep: dict[int, dict[str, float | None]] = {}
    for run in runs:
        if of(run):
            by_rep.setdefault(run["replication"], {})["a"] = _value(run, label, metric)
        if minus(run):
            by_rep.setdefault(run["replication"], {})["b"] = _value(run, other or label,
                                                                     metric)
    diffs = [v["a"] - v["b"] for v in by_rep.values()
             if v.get("a") is not None and v.get("b") is not None]
    return replication_interval(diffs) if diffs else None


def _is(executor: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda run: run["executor"] == executor


def sim_minus_emulation(runs: Runs, label: str, metric: str) -> Interval | None:
    """The simulator's ``metric`` minus the emulation's, paired within a replication."""
    return paired(runs, label, metric, minus=_is("emulation"), of=_is("sim"))


def ranking(runs: Runs, executor: str, names: Sequence[str]) -> list[str]:
    """The policies from lowest to highest mean latency on ``executor``."""
    means = {n: over(runs, executor, n, "mean_ms") for n in names}
    return sorted((n for n, i in means.items() if i is not None and i.estimate is not None),
                  key=lambda n: means[n].estimate)  # type: ignore[union-attr]


def sdk_conclusion(doc: Mapping[str, Any], executor: str, label: str) -> Conclusion:
    """Does ``label`` keep a lower mean than both baselines at every point on
    ``executor``? Paired within replications, a point counts when both intervals of the
    difference lie below zero."""
    checks = [(point.describe(), below_all([
        paired(runs, label, "mean_ms", minus=_is(executor), of=_is(executor), other=b)
        for b in BASELINES])) for point, runs in by_point(doc).items()]
    fleets = "emulated" if executor == "emulation" else "simulated"
    return beats_baselines(label, checks, f"On the {fleets} fleets ", join="; ")


REFERENCE = "geo-nearest"  # what each policy is compared with on both executors


def against_reference(runs: Runs, executor: str, label: str) -> Interval | None:
    """``label``'s mean latency minus :data:`REFERENCE`'s on ``executor``, paired."""
    return paired(runs, label, "mean_ms", minus=_is(executor), of=_is(executor),
                  other=REFERENCE)


def agreement(doc: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """How far the simulator is from the emulation: per (point, policy) the relative
    difference of the mean latency; per point whether the two executors rank the
    policies alike and pick the same best one; and per (point, policy other than the
    reference) whether both executors find it lower, higher or tied against the
    reference (:func:`side`), which is what a study would conclude from either."""
    rel: list[float] = []
    same_order, same_best, points = 0, 0, 0
    verdicts: list[tuple[str, str, str, str]] = []  # point, policy, emulation, simulator
    for point, runs in by_point(doc).items():
        for label in names:
            emu, sim = over(runs, "emulation", label, "mean_ms"), over(runs, "sim", label,
                                                                     "mean_ms")
            if emu is not None and sim is not None and emu.estimate:
                rel.append((sim.estimate - emu.estimate) / emu.estimate)  # type: ignore[operator]
            if label != REFERENCE and REFERENCE in names:
                verdicts.append((point.describe(), label,
                                 side(against_reference(runs, "emulation", label)),
                                 side(against_reference(runs, "sim", label))))
        emu_rank, sim_rank = ranking(runs, "emulation", names), ranking(runs, "sim", names)
        if emu_rank and sim_rank:
            points += 1
            same_order += emu_rank == sim_rank
            same_best += emu_rank[0] == sim_rank[0]
    return {"relative": rel, "points": points, "same_order": same_order,
            "same_best": same_best, "verdicts": verdicts,
            "same_verdict": sum(v[2] == v[3] for v in verdicts)}


# ------------------------------------------------------------------ report


def _fidelity_line(doc: Mapping[str, Any]) -> str:
    emulated = [r for r in doc["runs"] if r["executor"] == "emulation"]
    if not emulated:
        return "No emulated run."
    degraded = [r for r in emulated if r["fidelity"] and r["fidelity"]["degraded"]]
    partly = [r for r in emulated if r["fidelity"] and not r["fidelity"]["degraded"]
              and r["fidelity"]["degraded_policies"]]
    return (f"Fidelity guard: {len(degraded)} of {len(emulated)} emulated runs degraded"
            + (f" ({'; '.join(sorted({x for r in degraded for x in r['fidelity']['reasons']}))})"
               if degraded else "")
            + (f", {len(partly)} with degraded policies" if partly else "") + ".")


def _machine_line(out: Path, doc: Mapping[str, Any]) -> str:
    """When and where the runs were made (the first run's metadata)."""
    if not doc["runs"]:
        return ""
    meta = json.loads((out / doc["runs"][0]["run"] / "metadata.json").read_text())
    when = time.strftime("%Y-%m-%d", time.gmtime(meta["started"]))
    shaping = meta.get("shaping_backend")
    return (f"Measured on {when} ({meta['machine']['cpus']} cores, kernel "
            f"{meta['machine']['kernel']}"
            + (f", {shaping} link shaping" if shaping else "") + ").")


def write_executors_report(out: Path, report: Path, command: str) -> Path:
    """``executors.md``: per fleet and policy the two executors side by side, how far
    they are apart, and Armada's claim judged on each."""
    doc = json.loads((out / "executors.json").read_text())
    plan = doc["plan"]
    names = labels(plan["policies"])
    reps = plan["replications"]
    executors = doc["executors"]
    lines = ["# Armada on realistic nodes: emulation and simulator side by side", "",
             (f"Generated by `{command}` (size `{doc['size']}`, {reps} replications per "
              "fleet, each an independent fleet, trace and seeds run by both executors; "
              "every number is a mean over replications ± the half-width of its 95 % "
              "t-interval, and `sim − emulation` is paired within a replication). Nodes "
              "of a quarter or half a core, a replica of the node's cores per node at "
              "most, auto-scaling on (3 users per replica); each policy streams "
              f"{plan['duration_s']:g} s at 1 fps from a settled replica set. "
              + (f"`armada-spread` is the SDK choosing at random among candidates that "
                 f"probed within {SPREAD:.0%} of the fastest. "
                 if "armada-spread" in names else "")
              + "What the simulator leaves out is listed in `docs/simulator.md`."), "",
             _machine_line(out, doc), _fidelity_line(doc), ""]
    groups = by_point(doc)
    for point, runs in groups.items():
        lines += [f"## {point.describe()}", "",
                  "| policy | metric | emulation | simulator | sim − emulation |",
                  "|---|---|---|---|---|"]
        for label in names:
            for metric, what, digits in METRICS:
                lines.append(
                    f"| `{label}` | {what} | "
                    f"{pm(over(runs, 'emulation', label, metric), digits)} | "
                    f"{pm(over(runs, 'sim', label, metric), digits)} | "
                    f"{pm(sim_minus_emulation(runs, label, metric), digits)} |")
        emu_rank, sim_rank = ranking(runs, "emulation", names), ranking(runs, "sim", names)
        lines += ["", (f"Policies by mean latency, emulation: {', '.join(emu_rank) or '-'}; "
                      f"simulator: {', '.join(sim_rank) or '-'}."), ""]
    lines += ["## How far apart the executors are", ""]
    if set(EXECUTORS) <= set(executors):
        found = agreement(doc, names)
        rel = sorted(abs(x) for x in found["relative"])
        if rel:
            mean = sum(found["relative"]) / len(found["relative"])
            lines += [
                (f"Over {len(rel)} (fleet, policy) pairs the simulator's mean latency is on "
                 f"average {abs(mean):.0%} {'above' if mean >= 0 else 'below'} the "
                 f"emulation's (median absolute difference {rel[len(rel) // 2]:.0%}, "
                 f"largest {rel[-1]:.0%}). The two executors rank the policies in the same "
                 f"order at {found['same_order']} of {found['points']} fleets and pick the "
                 f"same best policy at {found['same_best']} of {found['points']}; a ranking "
                 "by point estimates also orders policies whose intervals overlap. What a "
                 f"study would conclude is each policy's paired difference from "
                 f"`{REFERENCE}`: lower, higher or tied by its 95 % interval. The executors "
                 f"reach the same conclusion for {found['same_verdict']} of "
                 f"{len(found['verdicts'])} (fleet, policy) pairs:"), "",
                "| fleet | policy | emulation | simulator |", "|---|---|---|---|"]
            lines += [f"| {where} | `{label}` | {emu} | {sim} |"
                      for where, label, emu, sim in found["verdicts"]]
            lines.append("")
    else:
        lines += [f"Only {', '.join(executors)} ran: nothing to compare.", ""]
    sdk = [label for label in names if label in SDK]
    judged = [(executor, label, sdk_conclusion(doc, executor, label))
              for executor in executors for label in sdk
              if set(BASELINES) <= set(names)]
    if judged:
        lines += ["## Conclusion", "",
                  ("Claim (seed 000, Fig. 9): as users and edge nodes increase, Armada keeps "
                   "users' average latency lower than geo-proximity and random selection."),
                  ""]
        lines += [f"- {executor}, `{label}`: {found.paragraph()}"
                  for executor, label, found in judged]
        lines.append("")
    lines += ["## Reproduce", "", f"`{command}`", ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    if judged:
        record_claims(report, command, [
            (f"realistic-{'emu' if executor == 'emulation' else 'sim'}-{label}",
             (f"on realistic nodes ({executor}) `{label}` has a lower mean than geo-nearest "
              "and random at every fleet"), found)
            for executor, label, found in judged])
    return report
