"""Context-based person search in emulation beside the simulator (``person-search``).

For every ``N`` of the size and every movement model, the experiment builds the
``person-search`` scenario (:func:`~testbed.systems.person_search.builders.
person_search_line`: a cloud node running the search coordinator, ``N`` edge nodes each
running an edge data server behind its own WAN link with a seeded one-way delay of 1-5
ms) and runs it twice through :func:`testbed.runner.run_scenario`: in emulation (the
system's driver loads the ground truth into the edge servers and asks the coordinator
to run every search under each policy, over real HTTP, compressed by the scenario's
``time_scale``) and in the discrete-event simulator, on the same materialised world
with the same policy seeds. Each emulated total response time thus has its simulated
twin, and :func:`run_emulation` tabulates both, with their discrepancy and where the
wall time went, into ``<out>/person_search.json`` for
:func:`~testbed.systems.person_search.paper_reports.write_emulation_report`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed.systems.person_search.experiment import plan_for
from testbed.systems.person_search.experiment_sim import MOVEMENTS, POLICY_LABELS, policy_spec

Progress = Callable[[str], None]
RESULT_NAME = "person_search.json"


@dataclasses.dataclass(frozen=True)
class SearchSize:
    """What one ``--size`` of the emulated experiment runs."""

    servers: tuple[int, ...]
    targets: int
    #: model seconds per wall second, one per entry of ``servers``: more servers run more
    #: analyses at once, so a larger N gets a gentler compression to keep the request
    #: rate the coordinator (one Python process) must sustain in the hundreds per second
    time_scales: tuple[float, ...]
    movements: tuple[str, ...] = MOVEMENTS
    #: the compared policy labels (both candidate-set rules of the priority policy)
    policies: tuple[str, ...] = POLICY_LABELS
    seed: int = 0

    def __post_init__(self) -> None:
        """Refuse a plan without one time scale per server count."""
        if len(self.time_scales) != len(self.servers):
            raise ValueError(f"time_scales: expected one per entry of servers "
                             f"{self.servers}, found {self.time_scales}")

    def time_scale(self, servers: int) -> float:
        """The compression used with ``servers`` edge servers."""
        return self.time_scales[self.servers.index(servers)]


SIZES = {"small": SearchSize(servers=(10,), targets=100, time_scales=(200.0,)),
         "full": SearchSize(servers=(10, 50), targets=1000, time_scales=(500.0, 100.0))}


def point_name(servers: int, movement: str) -> str:
    """The folder of one (N, movement) point: ``n010-normal``."""
    return f"n{servers:03d}-{movement}"


def policy_entry(label: str) -> str | dict[str, Any]:
    """The scenario's policy entry of a compared ``label``
    (:data:`~testbed.systems.person_search.experiment_sim.POLICY_SPECS`): the bare name,
    or ``{name, label, params}`` (the priority policy with its candidate-set rule)."""
    name, params = policy_spec(label)
    if name == label and not params:
        return name
    return {"name": name, "label": label, "params": params}


def point_document(servers: int, movement: str, plan: SearchSize) -> dict[str, Any]:
    """The scenario document of one point: the ``person-search`` builder and its params,
    and every compared policy as a scenario policy entry (:func:`policy_entry`)."""
    return {"name": "person-search",
            "build": {"builder": "person-search",
                      "params": {"servers": servers, "targets": plan.targets,
                                 "movement": movement, "time_scale": plan.time_scale(servers),
                                 "seed": plan.seed}},
            "policies": [policy_entry(label) for label in plan.policies]}


def compare(servers: int, movement: str, emulated: Mapping[str, Any],
            simulated: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each policy's emulated replay beside its simulated twin (``metadata.json`` of the
    two runs of one point): totals, analyses, makespans, discrepancy, overheads, and the
    policy entry and reading of the paper the replay ran under."""
    sims = {(r["policy"], r["repetition"]): r for r in simulated["driver"]["replays"]}
    time_scale = emulated["driver"]["time_scale"]
    out = []
    for e in emulated["driver"]["replays"]:
        s = sims[e["policy"], e["repetition"]]
        overhead = {k: e[k] for k in ("round_trip_overhead_ms_mean", "analysis_ms_mean",
                                      "round_trip_overhead_ms_p95", "timer_lateness_ms_mean",
                                      "decision_us_mean")}
        out.append({"servers": servers, "movement": movement, "policy": e["policy"],
                    **{k: e[k] for k in ("policy_name", "policy_params", "reading") if k in e},
                    "time_scale": time_scale, "repetition": e["repetition"],
                    "policy_seed": e["policy_seed"], "targets": e["targets"],
                    "emulated_total_s": e["total_response_s"],
                    "simulated_total_s": s["total_response_s"],
                    "discrepancy": e["total_response_s"] / s["total_response_s"] - 1.0,
                    "emulated_analyses": e["total_analyses"],
                    "simulated_analyses": s["total_analyses"],
                    "emulated_makespan_s": e["model_makespan_s"],
                    "simulated_makespan_s": s["makespan_s"], "wall_s": e["wall_s"],
                    "all_found": e["all_found"], "analyses": e["analyses"], **overhead})
    return out


def run_emulation(size: str, out: Path, progress: Progress = print,
                  ledger_root: Path | None = None) -> Path:
    """Every (N, movement) point of ``size`` in emulation and in the simulator
    (``out/<point>/emulation`` and ``out/<point>/sim``, standard results folders); the
    comparison table in ``out/person_search.json``."""
    from testbed.runner import run_scenario
    from testbed.scenario.loader import scenario_from_dict
    from testbed.systems.person_search.driver import combined_host

    plan = plan_for(size, SIZES)
    out.mkdir(parents=True, exist_ok=True)
    points = []
    for n in plan.servers:
        progress(f"== {n} edge servers, {plan.targets} searches")
        results: list[dict[str, Any]] = []
        hosts: list[dict[str, Any]] = []
        runs: dict[str, dict[str, str]] = {}
        for movement in plan.movements:
            name = point_name(n, movement)
            scenario = scenario_from_dict(point_document(n, movement, plan),
                                          source=f"<person-search N={n} {movement}>")
            folders = {executor: run_scenario(scenario, out / name / executor, executor,
                                              progress, ledger_root)
                       for executor in ("emulation", "sim")}
            meta = {e: json.loads((f / "metadata.json").read_text())
                    for e, f in folders.items()}
            point = compare(n, movement, meta["emulation"], meta["sim"])
            results += point
            hosts += [r["host"] for r in meta["emulation"]["driver"]["replays"]]
            runs[movement] = {e: str(f.relative_to(out)) for e, f in folders.items()}
            for r in point:
                progress(f"  {movement}/{r['policy']}: total {r['emulated_total_s']:.0f} s "
                         f"emulated, {r['simulated_total_s']:.0f} s simulated "
                         f"({r['discrepancy']:+.1%}), {r['wall_s']:.1f} s wall")
        host = combined_host(hosts)
        if host is not None:
            progress(f"host CPU idle {host['idle_share']:.0%}"
                     + (" - SATURATED" if host["saturated"] else ""))
        points.append({"servers": n, "time_scale": plan.time_scale(n),
                       "targets": plan.targets, "results": results, "host": host,
                       "runs": runs})
    table = {"size": size, "plan": dataclasses.asdict(plan), "points": points}
    (out / RESULT_NAME).write_text(json.dumps(table, indent=1))
    return out
