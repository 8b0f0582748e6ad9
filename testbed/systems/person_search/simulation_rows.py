"""The simulator's person-search studies read back into the experiment's tables of rows.

Each study file of ``studies/simulation/<size>/`` runs the ``person-search`` scenario on
the simulator; one cell is one world (a point's replication), every policy entry of the
study one replay on it, and the simulator records each replay's numbers in the cell's
``metadata.json`` (``driver.replays``: totals, :func:`~testbed.systems.person_search.sim.
run_stats`, :func:`~testbed.systems.person_search.sim.end_groups`, and with
``isolated`` each search run alone). :func:`study_rows` turns the cells back into the
tables the report and the claims index (one row per world seed and point):

* ``fig3``: per accounting, movement, N and compared policy, with its reduction
  against random on the same world (study ``fig3``);
* ``fig4``: per accounting, movement, N, priority policy and ``w``, the total
  ``normalised`` to the same world's total at ``w = 0.001`` (study ``fig4``);
* ``grid``: per movement, N and reading (a layout, an accounting and options of the
  priority policy), every policy's total, analyses and reduction (studies ``grid`` and
  ``grid-compensated``);
* ``variants``: the priority policy with another of the paper's gaps closed, against the
  same world's random run (``fig3``'s entries ``response-time`` and ``batch-load``);
* ``alone``: each priority policy's analyses per search with every search alone on idle
  servers (``fig3``'s ``isolated`` entries, plain accounting);
* ``sensitivity``: the straight movers reflected at the ends (study ``reflect``) or
  starting from the continuous ``mu_0`` (study ``mu0``).

Numbers come from the replay records as the simulator wrote them (never re-summed from
trace rows), so a table is the same floats whoever computes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from nodes.person_search.model import PriorityParams, split_run_options
from testbed.experiments.results import Cell, StudyResult

#: The compared policies of Fig. 3 by label; both priority labels differ only in their
#: candidate-set rule (``priority`` is the default rule ``unanalysed``)
POLICY_LABELS = ("priority", "priority-after-discovery", "random", "load-balance")
PRIORITY_LABELS = POLICY_LABELS[:2]
#: Fig. 3's other priority entries: one gap of the paper closed another way
VARIANTS = ("response-time", "batch-load")
#: The grid readings and the policy entry each priority label reads in it (``+<suffix>``;
#: baselines take no priority options, so every reading of a layout shares them)
GRID_READINGS: tuple[tuple[str, str, str, str], ...] = (
    # label, layout, accounting, suffix of the priority entries
    ("grid", "grid", "plain", ""),
    ("line", "line", "plain", ""),
    ("line-compensated", "line", "compensated", ""),
    ("line-response-time", "line", "plain", "+response-time"),
    ("grid-w0.3", "grid", "plain", "+w=0.3"),
    ("line-w0.3", "line", "plain", "+w=0.3"),
)
SENSITIVITIES = {"reflect": "reflect", "mu0": "continuous-mu0"}
_STAT_KEYS = ("mean_past", "mean_past_misses", "mean_tr_misses", "mean_factor",
              "factor_one_share", "mean_concurrency", "total_analyses", "makespan_s")
_END_KEYS = ("end_share", "mean_analyses_end", "mean_analyses_rest")


def cell_settings(result: StudyResult, cell: Cell) -> dict[str, Any]:
    """The ``build.params`` a cell ran with: the study's scenario, its ``set:`` and the
    cell's grid values."""
    return dict(result.cell_doc(cell)["build"]["params"])


def _cells(result: StudyResult) -> Iterator[tuple[dict[str, Any], int, int,
                                                   dict[str, dict[str, Any]]]]:
    """Each finished cell: its settings, replication, world seed and replays by label."""
    for cell in sorted(result.finished(), key=lambda c: (c.point, c.replication)):
        replays = {r["policy"]: r for r in cell.metadata()["driver"]["replays"]}
        yield cell_settings(result, cell), cell.replication, int(cell.record["seed"]), replays


def _rule(replay: Mapping[str, Any]) -> str | None:
    if replay["policy_name"] != "priority":
        return None
    own = split_run_options(replay["policy_params"])[0]
    return str(own.get("candidates", PriorityParams().candidates))


def _head(s: Mapping[str, Any], rep: int, seed: int) -> dict[str, Any]:
    return {"movement": s["movement"], "servers": s["servers"], "replication": rep,
            "world_seed": seed}


def _stats(replay: Mapping[str, Any]) -> dict[str, Any]:
    return {k: replay[k] for k in _STAT_KEYS}


def _fig3(result: StudyResult, rows: dict[str, list[dict[str, Any]]]) -> None:
    for s, rep, seed, replays in _cells(result):
        random_total = replays["random"]["total_response_s"] if "random" in replays else None

        def reduction(total: float, base: float | None = random_total) -> float | None:
            return None if base is None else 1.0 - total / base

        for label in POLICY_LABELS:
            r = replays.get(label)
            if r is None:
                continue
            rows["fig3"].append({
                "movement": s["movement"], "servers": s["servers"], "policy": label,
                "candidates": _rule(r), "replication": rep, "world_seed": seed,
                "total_response_s": r["total_response_s"], "mean_analyses": r["mean_analyses"],
                **_stats(r), **{k: r[k] for k in _END_KEYS},
                "reduction_vs_random": reduction(r["total_response_s"]),
                "accounting": s["accounting"]})
            if "alone_mean_analyses" in r and s["accounting"] == "plain":
                rows["alone"].append({**_head(s, rep, seed), "policy": label,
                                      "mean_analyses": r["alone_mean_analyses"]})
        for variant in VARIANTS:
            r = replays.get(variant)
            if r is None or random_total is None:
                continue
            own, run = split_run_options(r["policy_params"])
            rows["variants"].append({
                "accounting": s["accounting"], "movement": s["movement"],
                "servers": s["servers"], "variant": variant, "options": own or run,
                "replication": rep, "world_seed": seed,
                "total_response_s": r["total_response_s"], "mean_analyses": r["mean_analyses"],
                **_stats(r), "reduction_vs_random": reduction(r["total_response_s"])})


def _fig4(result: StudyResult, rows: dict[str, list[dict[str, Any]]]) -> None:
    for s, rep, seed, replays in _cells(result):
        for label in PRIORITY_LABELS:
            mine = sorted(((float(r["policy_params"]["w"]), r) for r in replays.values()
                           if r["policy"].startswith(label + "+w=")), key=lambda x: x[0])
            base = next((r["total_response_s"] for w, r in mine if w == 0.001), None)
            for w, r in mine:
                rows["fig4"].append({
                    **_head(s, rep, seed), "policy": label, "candidates": _rule(r), "w": w,
                    "total_response_s": r["total_response_s"],
                    "mean_analyses": r["mean_analyses"], **_stats(r),
                    "normalised": None if base is None else r["total_response_s"] / base,
                    "accounting": s["accounting"]})


def _grid(results: Mapping[str, StudyResult], rows: dict[str, list[dict[str, Any]]]) -> None:
    worlds: dict[tuple[Any, ...], tuple[int, dict[str, dict[str, Any]]]] = {}
    for name in ("grid", "grid-compensated"):
        if name in results:
            for s, rep, seed, replays in _cells(results[name]):
                key = (s["layout"], s["accounting"], s["movement"], s["servers"], rep)
                worlds[key] = (seed, replays)
    done = sorted({k[2:] for k in worlds})
    for movement, n, rep in done:
        for label, layout, accounting, suffix in GRID_READINGS:
            found = worlds.get((layout, accounting, movement, n, rep))
            if found is None:
                continue
            seed, replays = found
            chosen = {p: replays.get(p + suffix if p in PRIORITY_LABELS else p)
                      for p in POLICY_LABELS}
            if any(r is None for r in chosen.values()):
                continue
            totals = {p: r["total_response_s"] for p, r in chosen.items()}
            random_total = totals.get("random")
            priority = split_run_options(chosen["priority"]["policy_params"])[0]
            priority.pop("candidates", None)
            rows["grid"].append({
                "movement": movement, "servers": n, "side": _side(n), "reading": label,
                "layout": layout, "accounting": accounting, "priority_options": priority,
                "replication": rep, "world_seed": seed, "total_response_s": totals,
                "mean_analyses": {p: r["mean_analyses"] for p, r in chosen.items()},
                "reduction_vs_random": {p: None if random_total is None else
                                        1.0 - v / random_total for p, v in totals.items()},
                "end_share": chosen["random"]["end_share"]})


def _side(n: int) -> int:
    """The side of the grid whose ``N`` the point has (the line's points share it)."""
    return math.isqrt(n)


def _sensitivity(results: Mapping[str, StudyResult],
                 rows: dict[str, list[dict[str, Any]]]) -> None:
    for name, label in SENSITIVITIES.items():
        if name not in results:
            continue
        for s, rep, seed, replays in _cells(results[name]):
            for policy, r in replays.items():
                rows["sensitivity"].append({
                    **_head(s, rep, seed), "sensitivity": label,
                    "accounting": s["accounting"], "policy": policy, "candidates": _rule(r),
                    "total_response_s": r["total_response_s"],
                    "mean_analyses": r["mean_analyses"], **{k: r[k] for k in _END_KEYS}})


def study_rows(results: Mapping[str, StudyResult]) -> dict[str, list[dict[str, Any]]]:
    """The tables of rows of every study that ran (see the module docstring)."""
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in (
        "fig3", "fig4", "grid", "variants", "alone", "sensitivity")}
    if "fig3" in results:
        _fig3(results["fig3"], rows)
    if "fig4" in results:
        _fig4(results["fig4"], rows)
    _grid(results, rows)
    _sensitivity(results, rows)
    return rows
