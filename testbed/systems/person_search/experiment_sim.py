"""The simulator's person-search experiments: the paper's Fig. 3 and Fig. 4, and the grid.

:func:`fig3_table` (total response time of the three policies per movement and ``N``),
:func:`fig4_table` (the priority policy against ``w``) and :func:`grid_table` (the 2-D
grid beside the 1-D line with Eq. 7-8's compensation) are sweeps of the discrete-event
simulator :func:`testbed.sim.person_search.simulate` over many worlds; they are
experiment code, not part of the engine. :func:`run_simulation` computes all of them at
one size, under both readings of Eq. 7-8 in the accounting (``plain`` and
``compensated``), plus the priority policy under other closings of the paper's gaps
(``variants``) and each search run alone on idle servers (``alone``), into
``<out>/simulation.json``, which :func:`~testbed.systems.person_search.paper_reports.
write_simulation_report` turns into the report.

Pure: numpy only, no Mininet, aiohttp, docker or matplotlib.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.sim.person_search import isolated_analyses, policy_seed_for, run_stats, simulate
from testbed.systems.person_search.experiment import plan_for
from testbed.systems.person_search.model import ACCOUNTINGS, PriorityParams
from workloads.person_search import DEFAULTS, PersonSearch, SearchWorld, build_world

Progress = Callable[[str], None]
FIG3_POLICIES = ("priority", "random", "load-balance")
FIG4_WS = (0.001, 0.01, 0.1, 0.3, 1.0)
GRID_SIDES = (3, 5, 7, 10)
MOVEMENTS = ("normal", "straight")
REFERENCE_W = 0.001
RESULT_NAME = "simulation.json"
FORMAT = 1


# ------------------------------------------------------------------ the paper's tables


def _world_params(servers: int, movement: str, targets: int,
                  world: Mapping[str, Any] | None) -> dict[str, Any]:
    params = dict(world or {})
    params.update(servers=servers, movement=movement, targets=targets)
    return params


def fig3_table(servers: Iterable[int] = (10, 50, 100),
               movements: Iterable[str] = ("normal", "straight"),
               policies: Sequence[str] = FIG3_POLICIES, targets: int = 1000, seed: int = 0,
               *, world: Mapping[str, Any] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """The paper's Fig. 3: total response time of every policy per (movement, N).

    For each movement and server count one world (``person-search`` params ``world``
    plus ``servers``, ``movement``, ``targets``; built with ``seed``) is searched by every
    policy, so the policies face the same targets. ``options`` go to :func:`simulate`
    (``sharing``, ``accounting``, priority parameters such as ``w``: only the priority
    policy takes the latter). One row per run: ``movement``, ``servers``, ``policy``,
    ``total_response_s``, ``mean_analyses``, the fields of :func:`run_stats`,
    ``reduction_vs_random`` (``1 - total / total of random`` on the same world; None
    without a random run) and ``wall_s``.
    """
    priority_keys = set(PriorityParams.__dataclass_fields__) | {"params"}
    rows: list[dict[str, Any]] = []
    for movement in movements:
        for n in servers:
            params = _world_params(n, movement, targets, world)
            PersonSearch().validate(params)
            the_world = build_world(params, seed)
            tc = float(params.get("tc_s", DEFAULTS["tc_s"]))
            block = []
            for name in policies:
                own = options if name == "priority" else \
                    {k: v for k, v in options.items() if k not in priority_keys}
                began = time.perf_counter()
                run = simulate(the_world, name, seed, **{"tc": tc, **own})
                block.append({"movement": movement, "servers": n, "policy": name,
                              "total_response_s": run.total_response,
                              "mean_analyses": run.mean_analyses,
                              **run_stats(run, the_world),
                              "wall_s": time.perf_counter() - began})
            random_total = next((r["total_response_s"] for r in block
                                 if r["policy"] == "random"), None)
            for r in block:
                r["reduction_vs_random"] = None if random_total is None else \
                    1.0 - r["total_response_s"] / random_total
            rows += block
    return rows


def fig4_table(ws: Sequence[float] = FIG4_WS, servers: Iterable[int] = (10, 50, 100),
               movements: Iterable[str] = ("normal", "straight"), targets: int = 1000,
               seed: int = 0, *, reference: float = 0.001,
               world: Mapping[str, Any] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """The paper's Fig. 4: the priority policy's total response time against ``w``.

    Per (movement, N) one world as in :func:`fig3_table`, searched with each ``w`` of
    ``ws``; ``normalised`` is the total divided by the total at ``w = reference`` (which
    must be in ``ws``; the paper normalises to 0.001). ``options`` go to
    :func:`simulate` (not ``w``). One row per run: ``movement``, ``servers``, ``w``,
    ``total_response_s``, ``mean_analyses``, the fields of :func:`run_stats`,
    ``normalised``, ``wall_s``.
    """
    ws = [float(w) for w in ws]
    if reference not in ws:
        raise ValueError(f"reference w {reference!r} is not among ws {ws!r}")
    if "w" in options or "params" in options:
        raise ValueError("fig4_table sets w itself; pass other priority options only")
    rows: list[dict[str, Any]] = []
    for movement in movements:
        for n in servers:
            params = _world_params(n, movement, targets, world)
            PersonSearch().validate(params)
            the_world = build_world(params, seed)
            tc = float(params.get("tc_s", DEFAULTS["tc_s"]))
            block = []
            for w in ws:
                began = time.perf_counter()
                run = simulate(the_world, "priority", seed, **{"tc": tc, **options, "w": w})
                block.append({"movement": movement, "servers": n, "w": w,
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
               movements: Iterable[str] = ("normal", "straight"),
               policies: Sequence[str] = FIG3_POLICIES, targets: int = 1000, seed: int = 0,
               *, readings: Sequence[Reading] = GRID_READINGS,
               world: Mapping[str, Any] | None = None,
               **options: Any) -> list[dict[str, Any]]:
    """The 2-D grid, where the search area really grows in two dimensions, beside the 1-D
    line of the same ``N`` with and without Eq. 7-8's ``l_i`` compensation.

    For each movement and grid side ``side`` (``N = side^2`` servers), every reading of
    ``readings`` runs every policy on the world of its layout: ``layout: grid``
    (``side x side`` servers, 2-D normal movement, ``straight`` = +x) or ``layout: line``
    (``N`` servers in a row). The worlds of one (movement, N) are built with ``seed``, so
    the readings of one layout share their targets. ``options`` go to :func:`simulate`
    for every reading (priority parameters only to the priority policy; a reading's own
    ``priority`` options override them; ``accounting`` is the reading's). A run that two
    readings share (a baseline, which takes no priority options) is simulated once.

    One row per (movement, N, reading): ``movement``, ``servers``, ``side``, ``reading``
    (its label), ``layout``, ``accounting``, ``priority_options``, per policy
    ``total_response_s``, ``mean_analyses`` and ``reduction_vs_random`` (dicts keyed by
    policy name; the reduction is ``1 - total / total of random`` of the same row, None
    without a random run), ``end_share`` (share of targets whose ``T_R`` server is in the
    last column along x, where a straight mover stops) and ``wall_s`` (the runs made for
    the row).
    """
    if "accounting" in options:
        raise ValueError("grid_table takes the accounting from each reading")
    priority_keys = set(PriorityParams.__dataclass_fields__) | {"params"}
    rows: list[dict[str, Any]] = []
    for movement in movements:
        for side in sides:
            n = int(side) * int(side)
            worlds: dict[str, tuple[SearchWorld, float]] = {}
            done: dict[tuple[Any, ...], tuple[float, float]] = {}
            for reading in readings:
                if reading.layout not in worlds:
                    params = {**_world_params(n, movement, targets, world),
                              "layout": reading.layout}
                    PersonSearch().validate(params)
                    worlds[reading.layout] = (build_world(params, seed),
                                              float(params.get("tc_s", DEFAULTS["tc_s"])))
                the_world, tc = worlds[reading.layout]
                totals: dict[str, float] = {}
                analyses: dict[str, float] = {}
                wall = 0.0
                for name in policies:
                    own = {**options, **reading.priority} if name == "priority" else \
                        {k: v for k, v in options.items() if k not in priority_keys}
                    key = (reading.layout, reading.accounting, name, _frozen(own))
                    if key not in done:
                        began = time.perf_counter()
                        run = simulate(the_world, name, seed, **{
                            "tc": tc, **own, "accounting": reading.accounting})
                        wall += time.perf_counter() - began
                        done[key] = (run.total_response, run.mean_analyses)
                    totals[name], analyses[name] = done[key]
                random_total = totals.get("random")
                layout = the_world.layout
                last = the_world.holder[:, the_world.slots] % layout.side == layout.side - 1
                rows.append({
                    "movement": movement, "servers": n, "side": int(side),
                    "reading": reading.label, "layout": reading.layout,
                    "accounting": reading.accounting,
                    "priority_options": dict(reading.priority),
                    "total_response_s": totals, "mean_analyses": analyses,
                    "reduction_vs_random": {
                        k: None if random_total is None else 1.0 - v / random_total
                        for k, v in totals.items()},
                    "end_share": float(last.mean()), "wall_s": wall})
    return rows


@dataclasses.dataclass(frozen=True)
class SimSize:
    """What one size computes: ``targets`` searches per world, Fig. 3 and Fig. 4 at
    ``servers``, Fig. 4 over ``ws``, the grid at ``grid_sides`` (``N = side^2``)."""

    targets: int
    servers: tuple[int, ...]
    ws: tuple[float, ...]
    grid_sides: tuple[int, ...]


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

#: The priority policy with one of the paper's gaps closed another way (label, options
#: of :func:`simulate`).
VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("after-discovery", {"candidates": "after-discovery"}),
    ("response-time", {"compensation": "response-time"}),
    ("batch-load", {"sequential": False}),
)


# ------------------------------------------------------------------ one size of everything


def _reading_json(reading: Reading) -> dict[str, Any]:
    return {"label": reading.label, "layout": reading.layout,
            "accounting": reading.accounting, "priority": dict(reading.priority)}


def run_simulation(out: Path, size: str = "full", seed: int = 0,
                   progress: Progress = print) -> Path:
    """Compute every table of ``size`` and write ``out/simulation.json``; return ``out``.

    ``fig3``: :func:`fig3_table` under each accounting; ``fig4``: :func:`fig4_table`
    (normalised to ``w = 0.001``) under each accounting; ``grid``: :func:`grid_table`
    with :data:`REPORT_READINGS`; ``variants``: the priority policy with each of
    :data:`VARIANTS` on the Fig. 3 worlds, its reduction taken against that world's
    random run; ``alone``: the priority policy's analyses per search with each search
    alone on idle servers (:func:`isolated_analyses`). All runs use ``seed``.
    """
    plan = plan_for(size, SIM_SIZES)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    fig3: list[dict[str, Any]] = []
    fig4: list[dict[str, Any]] = []
    for accounting in ACCOUNTINGS:
        progress(f"== Fig. 3, {accounting} accounting: N in {plan.servers}, "
                 f"{plan.targets} targets")
        fig3 += [{**r, "accounting": accounting} for r in
                 fig3_table(plan.servers, MOVEMENTS, FIG3_POLICIES, plan.targets, seed,
                            accounting=accounting)]
        progress(f"== Fig. 4, {accounting} accounting: w in {plan.ws}")
        fig4 += [{**r, "accounting": accounting} for r in
                 fig4_table(plan.ws, plan.servers, MOVEMENTS, plan.targets, seed,
                            reference=REFERENCE_W, accounting=accounting)]
    progress(f"== 2-D grid: sides {plan.grid_sides}")
    grid = grid_table(plan.grid_sides, MOVEMENTS, FIG3_POLICIES, plan.targets, seed,
                      readings=REPORT_READINGS)
    progress("== priority variants and searches alone")
    random_total = {(r["accounting"], r["movement"], r["servers"]): r["total_response_s"]
                    for r in fig3 if r["policy"] == "random"}
    variants: list[dict[str, Any]] = []
    alone: list[dict[str, Any]] = []
    for movement in MOVEMENTS:
        for n in plan.servers:
            world = build_world({"servers": n, "movement": movement,
                                 "targets": plan.targets}, seed)
            for accounting in ACCOUNTINGS:
                for label, options in VARIANTS:
                    run = simulate(world, "priority", seed, accounting=accounting, **options)
                    base = random_total[accounting, movement, n]
                    variants.append({
                        "accounting": accounting, "movement": movement, "servers": n,
                        "variant": label, "options": options,
                        "total_response_s": run.total_response,
                        "mean_analyses": run.mean_analyses, **run_stats(run, world),
                        "reduction_vs_random": 1.0 - run.total_response / base})
            counts = isolated_analyses(world, "priority", seed)
            alone.append({"movement": movement, "servers": n, "policy": "priority",
                          "mean_analyses": float(counts.mean())})
    doc = {
        "format": FORMAT, "experiment": "person-search-sim", "size": size, "seed": seed,
        "params": {
            "targets": plan.targets, "servers": list(plan.servers),
            "movements": list(MOVEMENTS), "policies": list(FIG3_POLICIES),
            "accountings": list(ACCOUNTINGS), "ws": list(plan.ws),
            "reference_w": REFERENCE_W, "grid_sides": list(plan.grid_sides),
            "grid_readings": [_reading_json(r) for r in REPORT_READINGS],
            "variants": [{"label": k, "options": v} for k, v in VARIANTS],
            "world": {k: v for k, v in DEFAULTS.items() if k not in ("servers", "targets")},
            "priority": dataclasses.asdict(PriorityParams()),
            "sharing": "paper", "sequential": True, "policy_seed": policy_seed_for(seed),
        },
        "fig3": fig3, "fig4": fig4, "grid": grid, "variants": variants, "alone": alone,
        "wall_s": time.perf_counter() - began,
    }
    (out / RESULT_NAME).write_text(json.dumps(doc, indent=1))
    progress(f"wrote {out / RESULT_NAME} ({doc['wall_s']:.0f} s)")
    return out
