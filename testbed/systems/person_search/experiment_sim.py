"""The simulator's person-search experiments: Fig. 3, Fig. 4, the grid, and the straight movers.

:func:`fig3_table` (total response time of every policy per movement and ``N``),
:func:`fig4_table` (the priority policy against ``w``), :func:`grid_table` (the 2-D grid
beside the 1-D line with Eq. 7-8's compensation) and :func:`sensitivity_table` (straight
movement with a choice the paper leaves open made the other way) are sweeps of the
discrete-event simulator :func:`testbed.systems.person_search.sim.simulate`; they are experiment
code, not part of the engine. Each computes one world per point. :func:`run_simulation`
computes all of them at one size over ``world_seeds`` independent worlds per point (the
replications; :func:`world_seed` derives their seeds), under both readings of Eq. 7-8 in
the accounting (``plain`` and ``compensated``), plus the priority policy under other
closings of the paper's gaps (``variants``) and each search run alone on idle servers
(``alone``), into ``<out>/simulation.json``, which :func:`~testbed.systems.person_search.
paper_reports.write_simulation_report` turns into the report (means with 95 % t-intervals
across the world seeds).

The policies are compared by label (:data:`POLICY_SPECS`): the priority policy under each
candidate-set rule (``priority``: ``unanalysed``, the default; ``priority-after-discovery``:
``after-discovery``; :data:`~nodes.person_search.model.CANDIDATE_RULES`) and the
paper's two baselines.

Pure: numpy only, no Mininet, aiohttp, docker or matplotlib.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.person_search.model import (
    ACCOUNTINGS,
    CANDIDATE_RULE_TEXT,
    PriorityParams,
)
from testbed.experiments.sizes import size_plan
from testbed.systems.person_search.sim import (
    SearchRun,
    isolated_analyses,
    policy_seed_for,
    run_stats,
    simulate,
)
from workloads.person_search import DEFAULTS, PersonSearch, SearchWorld, build_world

Progress = Callable[[str], None]
#: The compared policies by label: the registered policy and its own options. The
#: priority policy runs under both candidate-set rules.
POLICY_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "priority": ("priority", {"candidates": "unanalysed"}),
    "priority-after-discovery": ("priority", {"candidates": "after-discovery"}),
    "random": ("random", {}),
    "load-balance": ("load-balance", {}),
}
#: Every compared label (the tables' default); the paper's three policies by name are
#: :data:`FIG3_POLICIES`
POLICY_LABELS = tuple(POLICY_SPECS)
FIG3_POLICIES = ("priority", "random", "load-balance")
PRIORITY_LABELS = tuple(k for k, (name, _) in POLICY_SPECS.items() if name == "priority")
FIG4_WS = (0.001, 0.01, 0.1, 0.3, 1.0)
GRID_SIDES = (3, 5, 7, 10)
MOVEMENTS = ("normal", "straight")
REFERENCE_W = 0.001
RESULT_NAME = "simulation.json"
FORMAT = 2
#: World seeds are 31-bit, like a study's replication seeds (``testbed/study/spec.py``)
SEED_MASK = 2**31 - 1
_PRIORITY_KEYS = set(PriorityParams.__dataclass_fields__) | {"params"}


# ------------------------------------------------------------------ policies and seeds


def policy_spec(label: str) -> tuple[str, dict[str, Any]]:
    """The registered policy and own options of ``label``; a bare registered name is
    itself without options."""
    name, options = POLICY_SPECS.get(label, (label, {}))
    return name, dict(options)


def rule_of(label: str) -> str | None:
    """The candidate-set rule a priority ``label`` runs under (None for a baseline)."""
    name, options = policy_spec(label)
    if name != "priority":
        return None
    return str(options.get("candidates", PriorityParams().candidates))


def world_seed(base: int, layout: str, movement: str, servers: int, replication: int) -> int:
    """The seed of replication ``replication``'s world at one point of the sweeps.

    The first four bytes of the sha256 of ``[base, {layout, movement, servers},
    replication]`` (as JSON), 31 bits: independent worlds per replication, the same
    world for every policy, accounting, ``w`` and reading of one point (so their
    differences are paired), and for every figure that visits the point.
    """
    point = {"layout": layout, "movement": movement, "servers": int(servers)}
    blob = json.dumps([int(base), point, int(replication)], sort_keys=True)
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:4], "big") & SEED_MASK


def _seed_at(seed: int, replication: int | None, layout: str, movement: str,
             servers: int) -> int:
    """``seed`` itself for a single table (``replication`` None), else the replication's."""
    if replication is None:
        return int(seed)
    return world_seed(seed, layout, movement, servers, replication)


def _world_params(servers: int, movement: str, targets: int,
                  world: Mapping[str, Any] | None) -> dict[str, Any]:
    params = dict(world or {})
    params.update(servers=servers, movement=movement, targets=targets)
    return params


def _build(params: Mapping[str, Any], seed: int) -> tuple[SearchWorld, float]:
    """The world of ``params`` with ``seed`` and its ``Tc``."""
    PersonSearch().validate(params)
    return build_world(params, seed), float(params.get("tc_s", DEFAULTS["tc_s"]))


def run_label(world: SearchWorld, label: str, seed: int, tc: float,
              options: Mapping[str, Any], **extra: Any) -> SearchRun:
    """:func:`simulate` of the policy ``label`` names on ``world``.

    ``options`` are the sweep's options (priority parameters reach only the priority
    policy); the label's own options (its candidate-set rule) come last, unless the
    options carry a whole ``params``; ``extra`` (``accounting``, ``start``, ...) goes to
    every policy.
    """
    name, own = policy_spec(label)
    if name == "priority":
        chosen = dict(options) if "params" in options else {**options, **own}
    else:
        chosen = {k: v for k, v in options.items() if k not in _PRIORITY_KEYS}
    return simulate(world, name, seed, **{"tc": tc, **chosen, **extra})


def end_groups(run: SearchRun, world: SearchWorld) -> dict[str, Any]:
    """The searches split by where their target is at ``T_R``: on the last server along x
    (where a straight mover that reaches the end of the region stops) or elsewhere.

    ``end_share`` is the share of the first group; ``mean_analyses_end`` and
    ``mean_analyses_rest`` each group's mean analyses per search (None when empty).
    """
    side = world.layout.side
    last = world.holder[:, world.slots] % side == side - 1
    rest = ~last
    return {"end_share": float(last.mean()),
            "mean_analyses_end": float(run.analyses[last].mean()) if last.any() else None,
            "mean_analyses_rest": float(run.analyses[rest].mean()) if rest.any() else None}


def _tagged(label: str, seed: int, replication: int | None) -> dict[str, Any]:
    return {"policy": label, "candidates": rule_of(label), "replication": replication,
            "world_seed": seed}


# ------------------------------------------------------------------ the paper's tables


def fig3_table(servers: Iterable[int] = (10, 50, 100),
               movements: Iterable[str] = MOVEMENTS,
               policies: Sequence[str] = POLICY_LABELS, targets: int = 1000, seed: int = 0,
               *, replication: int | None = None, world: Mapping[str, Any] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """The paper's Fig. 3: total response time of every policy per (movement, N).

    For each movement and server count one world (``person-search`` params ``world``
    plus ``servers``, ``movement``, ``targets``) is searched by every policy label of
    ``policies`` (:data:`POLICY_SPECS`), so the policies face the same targets. The world
    is built with ``seed``, or with :func:`world_seed` of ``seed`` when ``replication`` is
    given. ``options`` go to :func:`simulate` (``sharing``, ``accounting``, priority
    parameters such as ``w``: only the priority policy takes the latter). One row per
    run: ``movement``, ``servers``, ``policy`` (the label), ``candidates`` (its rule, None
    for a baseline), ``replication``, ``world_seed``, ``total_response_s``,
    ``mean_analyses``, the fields of :func:`run_stats` and :func:`end_groups`,
    ``reduction_vs_random`` (``1 - total / total of random`` on the same world; None
    without a random run) and ``wall_s``.
    """
    rows: list[dict[str, Any]] = []
    for movement in movements:
        for n in servers:
            wseed = _seed_at(seed, replication, "line", movement, n)
            the_world, tc = _build(_world_params(n, movement, targets, world), wseed)
            block = []
            for label in policies:
                began = time.perf_counter()
                run = run_label(the_world, label, wseed, tc, options)
                block.append({"movement": movement, "servers": n,
                              **_tagged(label, wseed, replication),
                              "total_response_s": run.total_response,
                              "mean_analyses": run.mean_analyses,
                              **run_stats(run, the_world), **end_groups(run, the_world),
                              "wall_s": time.perf_counter() - began})
            random_total = next((r["total_response_s"] for r in block
                                 if r["policy"] == "random"), None)
            for r in block:
                r["reduction_vs_random"] = None if random_total is None else \
                    1.0 - r["total_response_s"] / random_total
            rows += block
    return rows


def fig4_table(ws: Sequence[float] = FIG4_WS, servers: Iterable[int] = (10, 50, 100),
               movements: Iterable[str] = MOVEMENTS, targets: int = 1000,
               seed: int = 0, *, reference: float = REFERENCE_W,
               policies: Sequence[str] = PRIORITY_LABELS, replication: int | None = None,
               world: Mapping[str, Any] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """The paper's Fig. 4: the priority policy's total response time against ``w``.

    Per (movement, N) one world as in :func:`fig3_table`, searched by each priority label
    of ``policies`` (one per candidate-set rule) with each ``w`` of ``ws``; ``normalised``
    is the total divided by the same label's total at ``w = reference`` (which must be in
    ``ws``; the paper normalises to 0.001). ``options`` go to :func:`simulate` (not
    ``w``). One row per run: ``movement``, ``servers``, ``policy``, ``candidates``,
    ``replication``, ``world_seed``, ``w``, ``total_response_s``, ``mean_analyses``, the
    fields of :func:`run_stats`, ``normalised``, ``wall_s``.
    """
    ws = [float(w) for w in ws]
    if reference not in ws:
        raise ValueError(f"reference w {reference!r} is not among ws {ws!r}")
    if "w" in options or "params" in options:
        raise ValueError("fig4_table sets w itself; pass other priority options only")
    rows: list[dict[str, Any]] = []
    for movement in movements:
        for n in servers:
            wseed = _seed_at(seed, replication, "line", movement, n)
            the_world, tc = _build(_world_params(n, movement, targets, world), wseed)
            for label in policies:
                block = []
                for w in ws:
                    began = time.perf_counter()
                    run = run_label(the_world, label, wseed, tc, {**options, "w": w})
                    block.append({"movement": movement, "servers": n,
                                  **_tagged(label, wseed, replication), "w": w,
                                  "total_response_s": run.total_response,
                                  "mean_analyses": run.mean_analyses,
                                  **run_stats(run, the_world),
                                  "wall_s": time.perf_counter() - began})
                base = next(r["total_response_s"] for r in block if r["w"] == reference)
                for r in block:
                    r["normalised"] = r["total_response_s"] / base
                rows += block
    return rows


@dataclass(frozen=True)
class Reading:
    """One setting of :func:`grid_table`: a server ``layout`` (``grid`` or ``line``), an
    ``accounting`` (``plain`` or ``compensated``) and options of the priority policy
    (``priority``, e.g. ``{"compensation": "response-time"}``), named ``label``."""

    label: str
    layout: str
    accounting: str = "plain"
    priority: Mapping[str, Any] = field(default_factory=dict)


#: The grid as generated (2-D servers, 2-D movement) and the line of the same ``N`` with
#: plain accounting, with Eq. 7-8 in the accounting, and with Eq. 7-8 in Eq. 1.
GRID_READINGS = (
    Reading("grid", "grid"),
    Reading("line", "line"),
    Reading("line-compensated", "line", "compensated"),
    Reading("line-response-time", "line", priority={"compensation": "response-time"}),
)


def _frozen(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def grid_table(sides: Iterable[int] = GRID_SIDES,
               movements: Iterable[str] = MOVEMENTS,
               policies: Sequence[str] = POLICY_LABELS, targets: int = 1000, seed: int = 0,
               *, readings: Sequence[Reading] = GRID_READINGS,
               replication: int | None = None, world: Mapping[str, Any] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """The 2-D grid, where the search area really grows in two dimensions, beside the 1-D
    line of the same ``N`` with and without Eq. 7-8's ``l_i`` compensation.

    For each movement and grid side ``side`` (``N = side^2`` servers), every reading of
    ``readings`` runs every policy label on the world of its layout: ``layout: grid``
    (``side x side`` servers, 2-D normal movement, ``straight`` = +x) or ``layout: line``
    (``N`` servers in a row). The worlds of one (movement, N, layout) are built with
    ``seed`` (or its :func:`world_seed` for ``replication``), so the readings of one
    layout share their targets. ``options`` go to :func:`simulate` for every reading
    (priority parameters only to the priority policy; a reading's own ``priority``
    options override them, the label's candidate-set rule overrides both; ``accounting``
    is the reading's). A run that two readings share (a baseline, which takes no priority
    options) is simulated once.

    One row per (movement, N, reading): ``movement``, ``servers``, ``side``, ``reading``
    (its label), ``layout``, ``accounting``, ``priority_options``, ``replication``, per
    label ``total_response_s``, ``mean_analyses`` and ``reduction_vs_random`` (dicts keyed
    by label; the reduction is ``1 - total / total of random`` of the same row, None
    without a random run), ``world_seed`` (per layout), ``end_share`` (share of targets
    whose ``T_R`` server is in the last column along x, where a straight mover stops) and
    ``wall_s`` (the runs made for the row).
    """
    if "accounting" in options:
        raise ValueError("grid_table takes the accounting from each reading")
    rows: list[dict[str, Any]] = []
    for movement in movements:
        for side in sides:
            n = int(side) * int(side)
            worlds: dict[str, tuple[SearchWorld, float, int]] = {}
            done: dict[tuple[Any, ...], tuple[float, float]] = {}
            for reading in readings:
                if reading.layout not in worlds:
                    wseed = _seed_at(seed, replication, reading.layout, movement, n)
                    params = {**_world_params(n, movement, targets, world),
                              "layout": reading.layout}
                    worlds[reading.layout] = (*_build(params, wseed), wseed)
                the_world, tc, wseed = worlds[reading.layout]
                totals: dict[str, float] = {}
                analyses: dict[str, float] = {}
                wall = 0.0
                for label in policies:
                    name, own = policy_spec(label)
                    mine = {**options, **reading.priority, **own} if name == "priority" \
                        else {}
                    key = (reading.layout, reading.accounting, name, _frozen(mine))
                    if key not in done:
                        began = time.perf_counter()
                        run = run_label(the_world, label, wseed, tc,
                                        {**options, **reading.priority},
                                        accounting=reading.accounting)
                        wall += time.perf_counter() - began
                        done[key] = (run.total_response, run.mean_analyses)
                    totals[label], analyses[label] = done[key]
                random_total = totals.get("random")
                layout = the_world.layout
                last = the_world.holder[:, the_world.slots] % layout.side == layout.side - 1
                rows.append({
                    "movement": movement, "servers": n, "side": int(side),
                    "reading": reading.label, "layout": reading.layout,
                    "accounting": reading.accounting,
                    "priority_options": dict(reading.priority), "replication": replication,
                    "world_seed": wseed, "total_response_s": totals,
                    "mean_analyses": analyses,
                    "reduction_vs_random": {
                        k: None if random_total is None else 1.0 - v / random_total
                        for k, v in totals.items()},
                    "end_share": float(last.mean()), "wall_s": wall})
    return rows


@dataclass(frozen=True)
class Sensitivity:
    """A choice the paper leaves open that matters for straight movers, made the other way
    than in the figures: ``world`` params (e.g. ``boundary``) and options of
    :func:`simulate` (e.g. ``start``) that produce it, named ``label``. ``policies`` are
    the labels whose runs it can change (the others are the figures' runs)."""

    label: str
    text: str
    world: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    policies: tuple[str, ...] = (*PRIORITY_LABELS, "random")


#: Straight movers reflected at the ends of the line instead of stopped there (random's
#: runs change too: its targets' T_R servers move), and every search's first mu_L at the
#: continuous mu_0 instead of the T_0 server (random never reads mu_L: its runs stay).
SENSITIVITIES = (
    Sensitivity("reflect", "targets reflected at the ends of the line (boundary reflect) "
                           "instead of stopped there (clip)", world={"boundary": "reflect"}),
    Sensitivity("continuous-mu0", "the first mu_L at the target's continuous T_0 position "
                                  "mu_0 instead of its T_0 server",
                options={"start": "continuous"}, policies=PRIORITY_LABELS),
)


def sensitivity_table(servers: Iterable[int] = (10, 50, 100), targets: int = 1000,
                      seed: int = 0, *, movement: str = "straight",
                      sensitivities: Sequence[Sensitivity] = SENSITIVITIES,
                      accountings: Sequence[str] = ACCOUNTINGS,
                      replication: int | None = None) -> list[dict[str, Any]]:
    """The runs of :func:`fig3_table` that a :class:`Sensitivity` changes, redone with it.

    Per ``N`` the world is built with the seed :func:`fig3_table` uses for the same
    movement, ``N`` and replication (and the sensitivity's world params), so each row
    pairs with a Fig. 3 row; a policy a sensitivity cannot change is not rerun (the
    report takes its Fig. 3 run). One row per (N, sensitivity, accounting, label):
    ``movement``, ``servers``, ``sensitivity``, ``accounting``, ``policy``,
    ``candidates``, ``replication``, ``world_seed``, ``total_response_s``,
    ``mean_analyses`` and the fields of :func:`end_groups`.
    """
    rows: list[dict[str, Any]] = []
    for n in servers:
        wseed = _seed_at(seed, replication, "line", movement, n)
        for sens in sensitivities:
            params = {**_world_params(n, movement, targets, None), **sens.world}
            the_world, tc = _build(params, wseed)
            for accounting in accountings:
                for label in sens.policies:
                    run = run_label(the_world, label, wseed, tc, {}, accounting=accounting,
                                    **sens.options)
                    rows.append({"movement": movement, "servers": n,
                                 "sensitivity": sens.label, "accounting": accounting,
                                 **_tagged(label, wseed, replication),
                                 "total_response_s": run.total_response,
                                 "mean_analyses": run.mean_analyses,
                                 **end_groups(run, the_world)})
    return rows


@dataclasses.dataclass(frozen=True)
class SimSize:
    """What one size computes: ``targets`` searches per world, Fig. 3 and Fig. 4 at
    ``servers``, Fig. 4 over ``ws``, the grid at ``grid_sides`` (``N = side^2``), each
    point over ``world_seeds`` independent worlds (replications)."""

    targets: int
    servers: tuple[int, ...]
    ws: tuple[float, ...]
    grid_sides: tuple[int, ...]
    world_seeds: int = 10


SIM_SIZES = {
    "small": SimSize(targets=100, servers=(10, 50), ws=(0.001, 0.1, 0.3, 1.0),
                     grid_sides=(3, 5)),
    "full": SimSize(targets=1000, servers=(10, 50, 100),
                    ws=(0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 1.0),
                    grid_sides=(3, 5, 7, 10)),
}

#: The grid readings of the report: :data:`GRID_READINGS` and the priority policy with
#: ``w = 0.3`` on the grid and on the line.
REPORT_READINGS = (*GRID_READINGS,
                   Reading("grid-w0.3", "grid", priority={"w": 0.3}),
                   Reading("line-w0.3", "line", priority={"w": 0.3}))

#: The priority policy (candidate-set rule ``unanalysed``) with one other of the paper's
#: gaps closed another way (label, options of :func:`simulate`); the other candidate-set
#: rule is a policy of every table (``priority-after-discovery``).
VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("response-time", {"compensation": "response-time"}),
    ("batch-load", {"sequential": False}),
)


# ------------------------------------------------------------------ one size of everything


def _reading_json(reading: Reading) -> dict[str, Any]:
    return {"label": reading.label, "layout": reading.layout,
            "accounting": reading.accounting, "priority": dict(reading.priority)}


def _variants_and_alone(plan: SimSize, seed: int, replication: int,
                        fig3: Sequence[Mapping[str, Any]]
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Replication ``replication`` of the priority variants (against the random run of
    the same Fig. 3 world and accounting) and of each rule's searches run alone."""
    random_total = {(r["accounting"], r["movement"], r["servers"]): r["total_response_s"]
                    for r in fig3 if r["policy"] == "random"
                    and r["replication"] == replication}
    variants: list[dict[str, Any]] = []
    alone: list[dict[str, Any]] = []
    for movement in MOVEMENTS:
        for n in plan.servers:
            wseed = world_seed(seed, "line", movement, n, replication)
            world = build_world({"servers": n, "movement": movement,
                                 "targets": plan.targets}, wseed)
            for accounting in ACCOUNTINGS:
                for label, options in VARIANTS:
                    run = run_label(world, "priority", wseed, float(DEFAULTS["tc_s"]),
                                    options, accounting=accounting)
                    base = random_total[accounting, movement, n]
                    variants.append({
                        "accounting": accounting, "movement": movement, "servers": n,
                        "variant": label, "options": options, "replication": replication,
                        "world_seed": wseed, "total_response_s": run.total_response,
                        "mean_analyses": run.mean_analyses, **run_stats(run, world),
                        "reduction_vs_random": 1.0 - run.total_response / base})
            for label in PRIORITY_LABELS:
                counts = isolated_analyses(world, "priority", wseed,
                                           candidates=rule_of(label))
                alone.append({"movement": movement, "servers": n, "policy": label,
                              "replication": replication, "world_seed": wseed,
                              "mean_analyses": float(counts.mean())})
    return variants, alone


def _replication(plan: SimSize, seed: int, r: int, progress: Progress) -> dict[str, list]:
    """Every table of one replication ``r`` (each point's world seeded by :func:`world_seed`)."""
    out: dict[str, list] = {"fig3": [], "fig4": []}
    for accounting in ACCOUNTINGS:
        progress(f"== world seed {r + 1}/{plan.world_seeds}: Fig. 3 and Fig. 4, "
                 f"{accounting} accounting")
        out["fig3"] += [{**row, "accounting": accounting} for row in
                        fig3_table(plan.servers, MOVEMENTS, POLICY_LABELS, plan.targets, seed,
                                   replication=r, accounting=accounting)]
        out["fig4"] += [{**row, "accounting": accounting} for row in
                        fig4_table(plan.ws, plan.servers, MOVEMENTS, plan.targets, seed,
                                   reference=REFERENCE_W, replication=r,
                                   accounting=accounting)]
    progress(f"== world seed {r + 1}/{plan.world_seeds}: grid, variants, straight movers")
    out["grid"] = grid_table(plan.grid_sides, MOVEMENTS, POLICY_LABELS, plan.targets, seed,
                             readings=REPORT_READINGS, replication=r)
    out["variants"], out["alone"] = _variants_and_alone(plan, seed, r, out["fig3"])
    out["sensitivity"] = sensitivity_table(plan.servers, plan.targets, seed, replication=r)
    return out


def _quiet_replication(plan: SimSize, seed: int, r: int) -> dict[str, list]:
    """:func:`_replication` without progress lines (what a worker process runs)."""
    return _replication(plan, seed, r, lambda _line: None)


def _replications(plan: SimSize, seed: int, progress: Progress, jobs: int | None
                  ) -> Iterator[tuple[str, list]]:
    """Every replication's ``(table, rows)``, in replication order whatever finishes
    first, so the result does not depend on ``jobs``. The replications are independent
    worlds, so up to ``jobs`` (default: the CPU count) run at once in worker processes;
    one job runs them here."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, plan.world_seeds))
    if jobs == 1:
        for r in range(plan.world_seeds):
            yield from _replication(plan, seed, r, progress).items()
        return
    progress(f"== {plan.world_seeds} world seeds on {jobs} worker processes")
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(_quiet_replication, plan, seed, r)
                   for r in range(plan.world_seeds)]
        for r, future in enumerate(futures):
            tables = future.result()
            progress(f"== world seed {r + 1}/{plan.world_seeds} done")
            yield from tables.items()


def run_simulation(out: Path, size: str = "full", seed: int = 0,
                   progress: Progress = print, world_seeds: int | None = None,
                   jobs: int | None = None) -> Path:
    """Compute every table of ``size`` and write ``out/simulation.json``; return ``out``.

    Every table runs once per replication ``r`` in ``range(world_seeds)`` (default: the
    size's), each point's world seeded by :func:`world_seed` of ``seed`` (the base seed),
    the point and ``r``; every row records ``replication`` and ``world_seed``.
    ``fig3``: :func:`fig3_table` under each accounting; ``fig4``: :func:`fig4_table`
    (normalised to ``w = 0.001``) under each accounting; ``grid``: :func:`grid_table`
    with :data:`REPORT_READINGS`; ``variants``: the priority policy with each of
    :data:`VARIANTS` on the Fig. 3 worlds, its reduction taken against that world's
    random run; ``alone``: each priority label's analyses per search with each search
    alone on idle servers (:func:`isolated_analyses`); ``sensitivity``:
    :func:`sensitivity_table` on the straight Fig. 3 worlds. Up to ``jobs`` world seeds
    (default: the CPU count) compute at once in worker processes; the tables are the same
    for any ``jobs``.
    """
    plan = size_plan(size, SIM_SIZES)
    if world_seeds is not None:
        plan = dataclasses.replace(plan, world_seeds=int(world_seeds))
    if plan.world_seeds < 2:
        raise ValueError(f"world_seeds: expected at least 2 (an interval needs two), "
                         f"found {plan.world_seeds}")
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    tables: dict[str, list[dict[str, Any]]] = {k: [] for k in (
        "fig3", "fig4", "grid", "variants", "alone", "sensitivity")}
    for key, rows in _replications(plan, seed, progress, jobs):
        tables[key] += rows
    doc = {
        "format": FORMAT, "experiment": "person-search-sim", "size": size, "seed": seed,
        "params": {
            "targets": plan.targets, "servers": list(plan.servers),
            "movements": list(MOVEMENTS), "world_seeds": plan.world_seeds,
            "world_seed_rule": ("first 4 bytes of sha256 of [base seed, {layout, movement, "
                                "servers}, replication] as JSON, 31 bits"),
            "policies": {k: {"policy": n, "options": o} for k, (n, o) in POLICY_SPECS.items()},
            "candidate_rules": dict(CANDIDATE_RULE_TEXT),
            "accountings": list(ACCOUNTINGS), "ws": list(plan.ws),
            "reference_w": REFERENCE_W, "grid_sides": list(plan.grid_sides),
            "grid_readings": [_reading_json(r) for r in REPORT_READINGS],
            "variants": [{"label": k, "options": v} for k, v in VARIANTS],
            "sensitivities": [{"label": s.label, "text": s.text, "world": dict(s.world),
                               "options": dict(s.options), "policies": list(s.policies)}
                              for s in SENSITIVITIES],
            "world": {k: v for k, v in DEFAULTS.items() if k not in ("servers", "targets")},
            "priority": dataclasses.asdict(PriorityParams()),
            "sharing": "paper", "sequential": True,
            "policy_seed": "policy_seed_for(world seed)",
            "policy_seed_of_base": policy_seed_for(seed),
        },
        **tables,
        "wall_s": time.perf_counter() - began,
    }
    (out / RESULT_NAME).write_text(json.dumps(doc, indent=1))
    progress(f"wrote {out / RESULT_NAME} ({doc['wall_s']:.0f} s)")
    return out
