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
import hashlib
import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed.experiments.sizes import size_plan

Progress = Callable[[str], None]
RESULT_NAME = "person_search.json"
MOVEMENTS = ("normal", "straight")
#: The compared policies by label: the registered policy and its own options (the
#: simulator's studies name the same entries, ``studies/search.scenario.yaml``)
POLICY_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "priority": ("priority", {"candidates": "unanalysed"}),
    "priority-after-discovery": ("priority", {"candidates": "after-discovery"}),
    "random": ("random", {}),
    "load-balance": ("load-balance", {}),
}
POLICY_LABELS = tuple(POLICY_SPECS)
#: World seeds are 31-bit, like a study's replication seeds (``testbed/study/spec.py``)
SEED_MASK = 2**31 - 1


def policy_spec(label: str) -> tuple[str, dict[str, Any]]:
    """The registered policy and own options of ``label``."""
    name, options = POLICY_SPECS.get(label, (label, {}))
    return name, dict(options)


def world_seed(base: int, layout: str, movement: str, servers: int, replication: int) -> int:
    """The seed of replication ``replication``'s world at one point: the first four
    bytes of the sha256 of ``[base, {layout, movement, servers}, replication]`` (as
    JSON), 31 bits; the seed the simulator's studies give the same point and replication
    (``seeds: {over: {layout, movement, servers}}``)."""
    point = {"layout": layout, "movement": movement, "servers": int(servers)}
    blob = json.dumps([int(base), point, int(replication)], sort_keys=True)
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:4], "big") & SEED_MASK


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
    #: independent worlds per (N, movement) point, seeded as the simulator's report
    #: seeds its replications (:func:`world_seed` of ``seed``), so replication r here is
    #: replication r's world there
    world_seeds: int = 1

    def __post_init__(self) -> None:
        """Refuse a plan without one time scale per server count."""
        if len(self.time_scales) != len(self.servers):
            raise ValueError(f"time_scales: expected one per entry of servers "
                             f"{self.servers}, found {self.time_scales}")

    def time_scale(self, servers: int) -> float:
        """The compression used with ``servers`` edge servers."""
        return self.time_scales[self.servers.index(servers)]


SIZES = {"small": SearchSize(servers=(10,), targets=100, time_scales=(200.0,)),
         "full": SearchSize(servers=(10, 50), targets=1000, time_scales=(500.0, 100.0),
                            world_seeds=10)}


def point_name(servers: int, movement: str) -> str:
    """The folder of one (N, movement) point: ``n010-normal``."""
    return f"n{servers:03d}-{movement}"


def policy_entry(label: str) -> str | dict[str, Any]:
    """The scenario's policy entry of a compared ``label``
    (:data:`POLICY_SPECS`): the bare name,
    or ``{name, label, params}`` (the priority policy with its candidate-set rule)."""
    name, params = policy_spec(label)
    if name == label and not params:
        return name
    return {"name": name, "label": label, "params": params}


def replication_seed(plan: SearchSize, servers: int, movement: str, replication: int) -> int:
    """The world seed of one replication of a point: ``plan.seed`` itself for a plan of
    one world (the worlds of results written before replications), else the simulator
    report's seed of that replication's world."""
    if plan.world_seeds == 1:
        return plan.seed
    return world_seed(plan.seed, "line", movement, servers, replication)


def point_document(servers: int, movement: str, plan: SearchSize,
                   seed: int | None = None) -> dict[str, Any]:
    """The scenario document of one point: the ``person-search`` builder and its params
    (the world seeded by ``seed``, default ``plan.seed``), and every compared policy as a
    scenario policy entry (:func:`policy_entry`)."""
    return {"name": "person-search",
            "build": {"builder": "person-search",
                      "params": {"servers": servers, "targets": plan.targets,
                                 "movement": movement, "time_scale": plan.time_scale(servers),
                                 "seed": plan.seed if seed is None else seed}},
            "policies": [policy_entry(label) for label in plan.policies]}


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
        overhead = {k: e[k] for k in ("round_trip_overhead_ms_mean", "analysis_ms_mean",
                                      "round_trip_overhead_ms_p95", "timer_lateness_ms_mean",
                                      "decision_us_mean")}
        out.append({"servers": servers, "movement": movement, "policy": e["policy"],
                    "replication": replication, "world_seed": seed,
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


def _run_once(scenario: Any, folder: Path, executor: str, progress: Progress,
              ledger_root: Path | None) -> Path:
    """``scenario`` run into ``folder`` by ``executor``, unless an earlier attempt
    finished it there (its ``metadata.json`` written last); what a stopped attempt left
    is removed first."""
    from testbed.runner import run_scenario

    if (folder / "metadata.json").is_file():
        progress(f"  {folder}: finished before, kept")
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    return run_scenario(scenario, folder, executor, progress, ledger_root)


def run_emulation(size: str, out: Path, progress: Progress = print,
                  ledger_root: Path | None = None) -> Path:
    """Every (N, movement) point of ``size``, once per world seed, in emulation and in
    the simulator (``out/<point>/w<rr>/emulation`` and ``.../sim``, standard results
    folders); the comparison table in ``out/person_search.json``, a row per point,
    world seed and policy. Re-run into the same ``out``, it keeps every run an earlier
    attempt finished."""
    from testbed.scenario.loader import scenario_from_dict
    from testbed.systems.person_search.driver import combined_host

    plan = size_plan(size, SIZES)
    out.mkdir(parents=True, exist_ok=True)
    points = []
    for n in plan.servers:
        progress(f"== {n} edge servers, {plan.targets} searches")
        results: list[dict[str, Any]] = []
        hosts: list[dict[str, Any]] = []
        runs: dict[str, list[dict[str, Any]]] = {}
        for movement in plan.movements:
            name = point_name(n, movement)
            runs[movement] = []
            for r in range(plan.world_seeds):
                seed = replication_seed(plan, n, movement, r)
                folder = out / name / f"w{r:02d}"
                scenario = scenario_from_dict(
                    point_document(n, movement, plan, seed),
                    source=f"<person-search N={n} {movement} world seed {seed}>")
                folders = {executor: _run_once(scenario, folder / executor, executor,
                                               progress, ledger_root)
                           for executor in ("emulation", "sim")}
                meta = {e: json.loads((f / "metadata.json").read_text())
                        for e, f in folders.items()}
                point = compare(n, movement, meta["emulation"], meta["sim"], r, seed)
                results += point
                hosts += [x["host"] for x in meta["emulation"]["driver"]["replays"]]
                runs[movement].append({"replication": r, "world_seed": seed,
                                       **{e: str(f.relative_to(out))
                                          for e, f in folders.items()}})
                for row in point:
                    progress(f"  {movement} world {r + 1}/{plan.world_seeds}/{row['policy']}: "
                             f"total {row['emulated_total_s']:.0f} s emulated, "
                             f"{row['simulated_total_s']:.0f} s simulated "
                             f"({row['discrepancy']:+.1%}), {row['wall_s']:.1f} s wall")
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
