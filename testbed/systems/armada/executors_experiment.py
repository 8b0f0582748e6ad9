"""Armada on realistic nodes, emulated and simulated side by side (``armada-executors``).

The emulated scalability experiment gives nodes a twentieth of a core; this one runs
fewer nodes of a quarter or half a core (at most 1.5 of this machine's 2 cores over all
nodes, so users, control plane and link shaper keep the rest), where a detection takes
about what it takes on a whole core. The study file of each size
(``studies/executors/<size>/executors.yaml``, over ``executors.scenario.yaml``) runs
every fleet and replication as two cells, one per executor: the same fleet, trace,
users and seeds, every policy streaming from a settled replica set in turn.
Replication r is an independent fleet (fleet seed 2000 + r: ``seeds: {rule: sequence,
also: [build.params.seed]}``).

:func:`metrics` reads every cell; the report compares, per point and policy, the two executors' mean and p95 latency,
switches per user, scaling decisions during the stream, lost frames and herd share,
each a mean over replications with its 95 % t-interval, and the simulator's difference
from the emulation paired within a replication. It says whether the executors rank the
policies alike, and :func:`claims` judges Armada's scalability claim on each executor.
The emulation's fidelity guard marks the cells the host disturbed (the report's fidelity
section). Report:
``docs/results/armada/executors.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from testbed.analysis.stats import Interval, pm, replication_interval, side
from testbed.experiments.results import StudyResult
from testbed.reports.claim import Claim, Condition
from testbed.systems.armada.fleet_measure import measure_run
from testbed.systems.armada.paper_scale_experiment import BASELINES, SCALE_CLAIM, SDK, SPREAD
from testbed.systems.armada.verdicts import (
    Conclusion,
    beats_baselines,
    below_all,
)

EXECUTORS = ("emulation", "sim")
#: (metric key, what the report calls it, decimals) of every compared metric.
METRICS = (("mean_ms", "mean latency (ms)", 1), ("p95_ms", "p95 latency (ms)", 1),
           ("switches_per_user", "switches per user", 2),
           ("scaling", "scaling decisions", 1), ("lost", "lost frames", 1),
           ("herd_share", "herd share", 2))


@dataclasses.dataclass(frozen=True)
class Point:
    """One fleet: ``nodes`` edge nodes of ``cores`` cores each, ``users`` users."""

    nodes: int
    users: int
    cores: float

    def describe(self) -> str:
        return f"{self.nodes} nodes of {self.cores:g} cores, {self.users} users"


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Per finished cell (one fleet, replication and executor): the fleet, the policies
    whose replay failed, the fidelity guard's mark and what
    :func:`~testbed.systems.armada.fleet_measure.measure_run` gives per policy; and the
    report's tables (each fleet's executors side by side, how far apart they are)."""
    runs: list[dict[str, Any]] = []
    names: list[str] = []
    duration = None
    for result in results.values():
        names = names or list(result.study.policies)
        for cell in sorted(result.finished(), key=lambda c: (c.point, c.replication,
                                                             c.executor)):
            scenario = result.study.scenario(result.points[cell.point], cell.replication)
            fleet = scenario.raw["build"]["params"]
            duration = duration or float(fleet["duration"])
            runs.append({"point": {"nodes": int(fleet["nodes"]), "users": int(fleet["users"]),
                                   "cores": float(fleet["node_cores"][0])},
                         "replication": cell.replication, "executor": cell.executor,
                         "fleet_seed": int(fleet["seed"]),
                         "failed": cell.metadata().get("failed", []),
                         "degraded": cell.degraded, "policies": measure_run(cell.run)})
    doc: dict[str, Any] = {"size": size, "policies": names, "duration_s": duration,
                           "runs": runs}
    doc["tables"] = tables(doc)
    return doc


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


def sdk_checks(doc: Mapping[str, Any], executor: str, label: str) -> list[tuple[str, bool]]:
    """Per fleet whether ``label``'s mean is below both baselines' on ``executor``:
    paired within replications, both intervals of the difference below zero."""
    return [(point.describe(), below_all([
        paired(runs, label, "mean_ms", minus=_is(executor), of=_is(executor), other=b)
        for b in BASELINES])) for point, runs in by_point(doc).items()]


def sdk_conclusion(doc: Mapping[str, Any], executor: str, label: str) -> Conclusion:
    """Does ``label`` keep a lower mean than both baselines at every point on
    ``executor`` (:func:`sdk_checks`)?"""
    checks = sdk_checks(doc, executor, label)
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


# ------------------------------------------------------------------ tables


def tables(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's tables of :func:`metrics`' runs: each fleet's executors side by side,
    then how far apart the executors are (when both ran); none without runs."""
    if not doc["runs"]:
        return []
    names = doc["policies"]
    return [*(_fleet_table(point, found, names) for point, found in by_point(doc).items()),
            *_agreement_tables(doc, names)]


def _setup(doc: Mapping[str, Any]) -> str:
    names = doc["policies"]
    return ("Every number is a mean over replications (each an independent fleet, trace "
            "and seeds, run by both executors) ± the half-width of its 95 % t-interval, "
            "and `sim − emulation` is paired within a replication. Nodes of a quarter or "
            "half a core, a replica of the node's cores per node at most, auto-scaling on "
            "(3 users per replica); each policy streams "
            f"{doc['duration_s']:g} s at 1 fps from a settled replica set. "
            + (f"`armada-spread` is the SDK choosing at random among candidates that "
               f"probed within {SPREAD:.0%} of the fastest. " if "armada-spread" in names
               else "")
            + "What the simulator leaves out is listed in `docs/simulator.md`.")


def _fleet_table(point: Point, runs: Runs, names: Sequence[str]) -> dict[str, Any]:
    """One fleet: every policy's metrics on each executor and their paired difference;
    the note ranks the policies on each."""
    rows = [[f"`{label}`", what, pm(over(runs, "emulation", label, metric), digits),
             pm(over(runs, "sim", label, metric), digits),
             pm(sim_minus_emulation(runs, label, metric), digits)]
            for label in names for metric, what, digits in METRICS]
    emu_rank, sim_rank = ranking(runs, "emulation", names), ranking(runs, "sim", names)
    reps = len({r["replication"] for r in runs})
    return {"title": point.describe(), "columns": [
        "policy", "metric", "emulation", "simulator", "sim − emulation"], "rows": rows,
        "note": (f"{reps} replication(s). Policies by mean latency, emulation: "
                 f"{', '.join(emu_rank) or '-'}; simulator: {', '.join(sim_rank) or '-'}.")}


def _agreement_tables(doc: Mapping[str, Any], names: Sequence[str]) -> list[dict[str, Any]]:
    """How far apart the executors are (:func:`agreement`), with the setting's
    paragraph; none unless both executors ran."""
    if {r["executor"] for r in doc["runs"]} != set(EXECUTORS):
        return []
    found = agreement(doc, names)
    rel = sorted(abs(x) for x in found["relative"])
    if not rel:
        return []
    mean = sum(found["relative"]) / len(found["relative"])
    return [{"title": "How far apart the executors are", "columns": [
        "fleet", "policy", f"emulation: against `{REFERENCE}`",
        f"simulator: against `{REFERENCE}`"],
        "rows": [[where, f"`{label}`", emu, sim] for where, label, emu, sim in found["verdicts"]],
        "note": (
            f"{_setup(doc)} Over {len(rel)} (fleet, policy) pairs the simulator's mean "
            f"latency is on average {abs(mean):.0%} {'above' if mean >= 0 else 'below'} the "
            f"emulation's (median absolute difference {rel[len(rel) // 2]:.0%}, largest "
            f"{rel[-1]:.0%}). The two executors rank the policies in the same order at "
            f"{found['same_order']} of {found['points']} fleets and pick the same best "
            f"policy at {found['same_best']} of {found['points']}; a ranking by point "
            "estimates also orders policies whose intervals overlap. What a study would "
            f"conclude is each policy's paired difference from `{REFERENCE}`: lower, higher "
            "or tied by its 95 % interval. The executors reach the same conclusion for "
            f"{found['same_verdict']} of {len(found['verdicts'])} (fleet, policy) pairs.")}]


# ------------------------------------------------------------------ claims


def claims(found: Mapping[str, Any]) -> list[Claim]:
    """Fig. 9's claim for each SDK variant on each executor (:func:`sdk_conclusion`),
    judged only when both baselines ran."""
    names = found["policies"]
    if not set(BASELINES) <= set(names):
        return []
    ran = [e for e in EXECUTORS if any(r["executor"] == e for r in found["runs"])]
    out = []
    for executor in ran:
        for label in (n for n in names if n in SDK):
            judged = sdk_conclusion(found, executor, label)
            runs = [r for r in found["runs"] if r["executor"] == executor]
            reps = [len({r["replication"] for r in group if r["executor"] == executor})
                    for group in by_point({"runs": runs}).values()]
            out.append(Claim(
                f"realistic-{'emu' if executor == 'emulation' else 'sim'}-{label}",
                f"on realistic nodes ({executor}) `{label}` has a lower mean than "
                "geo-nearest and random at every fleet", rule=judged.rule, paper=SCALE_CLAIM,
                why=" ".join(judged.sentences),
                conditions=tuple(Condition(what, ok, executor)
                                 for what, ok in sdk_checks(found, executor, label)),
                replications=min(reps, default=None)))
    return out
