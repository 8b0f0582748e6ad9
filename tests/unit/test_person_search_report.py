"""Tests of the 2-D grid table, the run statistics and the simulation report of person search.

Tiny worlds for the tables; one ``small`` run of the report (a few seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from testbed.errors import TestbedError
from testbed.reports.claims_index import claims_path, read_claims
from testbed.systems.person_search.experiment_sim import (
    GRID_READINGS,
    POLICY_LABELS,
    REPORT_READINGS,
    RESULT_NAME,
    SIM_SIZES,
    Reading,
    SimSize,
    _replications,
    grid_table,
    policy_spec,
    run_simulation,
    world_seed,
)
from testbed.systems.person_search.paper_reports import write_simulation_report
from testbed.systems.person_search.sim import isolated_analyses, run_stats, simulate
from workloads.person_search import Layout, SearchWorld, build_world


def _without_wall(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


# --- grid_table ------------------------------------------------------------------------------


def test_grid_table_shape_and_order() -> None:
    rows = grid_table(sides=(2, 3), targets=12, seed=1)
    labels = [r.label for r in GRID_READINGS]
    assert [(r["movement"], r["servers"], r["reading"]) for r in rows] == \
        [(m, s * s, label) for m in ("normal", "straight") for s in (2, 3) for label in labels]
    for r in rows:
        assert r["side"] ** 2 == r["servers"]
        assert set(r["total_response_s"]) == set(POLICY_LABELS)
        assert set(r["mean_analyses"]) == set(POLICY_LABELS)
        assert 0.0 <= r["end_share"] <= 1.0
    by = {r["reading"]: r for r in rows[:len(labels)]}
    assert (by["grid"]["layout"], by["grid"]["accounting"]) == ("grid", "plain")
    assert (by["line-compensated"]["layout"], by["line-compensated"]["accounting"]) == \
        ("line", "compensated")
    assert by["line-response-time"]["priority_options"] == {"compensation": "response-time"}


def test_grid_table_is_deterministic() -> None:
    one = grid_table(sides=(3,), movements=("normal",), targets=15, seed=4)
    two = grid_table(sides=(3,), movements=("normal",), targets=15, seed=4)
    assert _without_wall(one) == _without_wall(two)
    other = grid_table(sides=(3,), movements=("normal",), targets=15, seed=5)
    assert _without_wall(one) != _without_wall(other)


def test_grid_table_reductions_come_from_the_totals() -> None:
    for r in grid_table(sides=(2, 3), targets=10, seed=2):
        totals = r["total_response_s"]
        for policy, reduction in r["reduction_vs_random"].items():
            assert reduction == pytest.approx(1.0 - totals[policy] / totals["random"])
        assert r["reduction_vs_random"]["random"] == 0.0


def test_grid_table_runs_are_the_simulator_runs() -> None:
    rows = {r["reading"]: r for r in grid_table(sides=(3,), movements=("normal",),
                                                targets=12, seed=3)}
    grid_world = build_world({"servers": 9, "layout": "grid", "targets": 12}, 3)
    line_world = build_world({"servers": 9, "layout": "line", "targets": 12}, 3)
    for label in POLICY_LABELS:
        name, options = policy_spec(label)
        assert rows["grid"]["total_response_s"][label] == \
            simulate(grid_world, name, 3, **options).total_response
        assert rows["line"]["total_response_s"][label] == \
            simulate(line_world, name, 3, **options).total_response
    assert rows["line-response-time"]["total_response_s"]["priority"] == \
        simulate(line_world, "priority", 3, compensation="response-time").total_response
    # the baselines take no priority options: the same runs as on the plain line
    for policy in ("random", "load-balance"):
        assert rows["line-response-time"]["total_response_s"][policy] == \
            rows["line"]["total_response_s"][policy]
        # they analyse only T_5 items from T_L = 0: every analysis costs l = 9 Tc, and the
        # whole schedule scales by 9
        assert rows["line-compensated"]["total_response_s"][policy] == \
            pytest.approx(9.0 * rows["line"]["total_response_s"][policy])


def test_grid_table_options_and_readings() -> None:
    rows = grid_table(sides=(2,), movements=("straight",), policies=("priority",), targets=5,
                      readings=(Reading("g", "grid", priority={"w": 0.3}),), w=0.01)
    assert len(rows) == 1
    assert rows[0]["reduction_vs_random"] == {"priority": None}
    world = build_world({"servers": 4, "layout": "grid", "targets": 5,
                         "movement": "straight"}, 0)
    assert rows[0]["total_response_s"]["priority"] == \
        simulate(world, "priority", 0, w=0.3).total_response
    with pytest.raises(ValueError, match="accounting"):
        grid_table(sides=(2,), targets=5, accounting="compensated")


def test_end_share_of_straight_movers() -> None:
    # 5 steps to the right on a 3x3 grid: every target ends in the last column
    rows = grid_table(sides=(3,), movements=("straight",), targets=20,
                      readings=(Reading("grid", "grid"),))
    assert rows[0]["end_share"] == 1.0


# --- run_stats and isolated_analyses ---------------------------------------------------------


def static_world(servers: int, where: list[int], slots: int = 5) -> SearchWorld:
    """A line of ``servers`` where target k stays on server ``where[k]`` at every slot."""
    holder = np.array([[s] * (slots + 1) for s in where], dtype=np.int64)
    start = np.array([[float(s), 0.0] for s in where])
    return SearchWorld(layout=Layout("line", servers), slots=slots, start=start, holder=holder)


def test_run_stats_static_target() -> None:
    # The static priority search walks T1..T5 on its own server: 4 past hits, 1 T_R hit.
    world = static_world(3, [1])
    stats = run_stats(simulate(world, "priority", 0, accounting="compensated"), world)
    assert stats == {"mean_past": 4.0, "mean_past_misses": 0.0, "mean_tr_misses": 0.0,
                     "mean_factor": 1.0, "factor_one_share": 1.0, "mean_concurrency": 1.0,
                     "total_analyses": 5, "makespan_s": 50.0}
    random = run_stats(simulate(world, "random", 0, accounting="compensated"), world)
    assert random["mean_past"] == 0.0 and random["mean_factor"] == 9.0
    assert random["factor_one_share"] == 0.0


@pytest.mark.parametrize("policy", ("priority", "random", "load-balance"))
def test_run_stats_add_up(policy: str) -> None:
    params = {"servers": 10, "targets": 40, "movement": "straight"}
    world = build_world(params, 6)
    run = simulate(world, policy, 6)
    stats = run_stats(run, world)
    # every search ends with exactly one T_R analysis that contains its target
    assert run.mean_analyses == pytest.approx(stats["mean_past"] + stats["mean_tr_misses"] + 1)
    assert stats["mean_past_misses"] <= stats["mean_past"]
    assert stats["mean_concurrency"] == pytest.approx(float((run.a_queue + 1).mean()))
    assert stats["total_analyses"] == run.total_analyses


def test_isolated_analyses() -> None:
    assert isolated_analyses(static_world(3, [1, 1, 0]), "priority").tolist() == [5, 5, 5]
    # random ignores the load and draws from per-search streams: alone or not, the same
    world = build_world({"servers": 20, "targets": 30}, 2)
    assert isolated_analyses(world, "random", 2).tolist() == \
        simulate(world, "random", 2).analyses.tolist()


# --- the report ------------------------------------------------------------------------------


def test_replications_in_worker_processes_equal_the_serial_ones() -> None:
    """World seeds computed two at a time in worker processes give the tables, rows and
    order one process gives."""
    plan = SimSize(targets=20, servers=(10,), ws=(0.001, 0.1), grid_sides=(3,),
                   world_seeds=2)
    lines: list[str] = []
    def timeless(found):  # every row but its own compute time
        return [(key, [{k: v for k, v in row.items() if k != "wall_s"} for row in rows])
                for key, rows in found]

    serial = timeless(_replications(plan, 5, lambda _line: None, jobs=1))
    parallel = timeless(_replications(plan, 5, lines.append, jobs=2))
    assert parallel == serial
    assert {r["replication"] for key, rows in serial if key == "fig3" for r in rows} == {0, 1}
    assert any("2 worker processes" in line for line in lines)


def test_simulation_report_small(tmp_path: Path) -> None:
    seeds = 2  # the size's 10 world seeds take minutes; the report's shape is the same
    out = run_simulation(tmp_path / "sim", "small", progress=lambda _line: None,
                         world_seeds=seeds)
    assert out == tmp_path / "sim"
    doc = json.loads((out / RESULT_NAME).read_text())
    params = doc["params"]
    assert doc["size"] == "small" and params["targets"] == 100
    assert SIM_SIZES["small"].world_seeds >= 10 and SIM_SIZES["full"].world_seeds >= 10
    assert params["world_seeds"] == seeds
    assert params["servers"] == [10, 50] and params["priority"]["w"] == 0.001
    # accountings x movements x N x labels, per world seed
    assert len(doc["fig3"]) == 2 * 2 * 2 * len(POLICY_LABELS) * seeds
    assert len(doc["fig4"]) == 2 * 2 * 2 * 2 * len(params["ws"]) * seeds
    assert len(doc["grid"]) == 2 * len(params["grid_sides"]) * len(REPORT_READINGS) * seeds
    assert {r["accounting"] for r in doc["fig3"]} == {"plain", "compensated"}
    assert len(doc["alone"]) == 2 * 2 * 2 * seeds
    assert {r["sensitivity"] for r in doc["sensitivity"]} == {"reflect", "continuous-mu0"}
    for r in doc["fig4"]:
        if r["w"] == 0.001:
            assert r["normalised"] == 1.0
    # world seeds: one per (layout, movement, N) and replication, shared by its policies
    fig3 = doc["fig3"]
    for r in fig3:
        assert r["world_seed"] == world_seed(0, "line", r["movement"], r["servers"],
                                             r["replication"])
    assert len({r["world_seed"] for r in fig3}) == 2 * 2 * seeds

    report = write_simulation_report(out, tmp_path / "docs" / "simulation.md",
                                     "testbed experiment person-search --size small")
    text = report.read_text()
    recorded = read_claims(claims_path(report))
    assert [c["key"] for c in recorded["claims"]] == ["P1", "P2", "P3", "P4", "P5", "P6"]
    assert all(f"### {c['section']}" in text and c["verdict"] for c in recorded["claims"])
    assert "## Verdicts" in text
    for png in ("simulation-fig3.png", "simulation-fig4.png", "simulation-grid.png"):
        assert (report.parent / png).stat().st_size > 1000
        assert f"]({png})" in text
    for needle in ("## Fig. 3", "## Fig. 4", "## 2-D grid", "95 %", "6 %", "1.6x", "7.7x",
                   "| 0.3 |", "none was tuned",
                   "`testbed experiment person-search --size small`", "k_i + 1",
                   "What leaves the candidate set", "two readings",
                   "## Straight movement at small N", "change with reflect",
                   f"n = {seeds} world seeds", " ± ", "priority-after-discovery"):
        assert needle in text, needle
    assert "nan" not in text.lower().split()
    # every table says how many world seeds stand behind its numbers: a column of
    # its own, or in the header of each column of numbers
    lines = text.splitlines()
    headers = [line for k, line in enumerate(lines)
               if line.startswith("|") and not lines[k - 1].startswith("|")]
    assert len(headers) >= 8
    for header in headers:
        assert "world seeds" in header, header


def test_unknown_size(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="--size"):
        run_simulation(tmp_path, "medium")


PURE_MODULES = ("testbed.systems.person_search", "nodes.person_search.model",
                "nodes.person_search.policies",
                "testbed.systems.person_search.builders",
                "testbed.systems.person_search.deployment",
                "testbed.systems.person_search.driver",
                "testbed.systems.person_search.experiment",
                "testbed.systems.person_search.experiment_sim",
                "testbed.systems.person_search.experiment_emulation",
                "testbed.systems.person_search.paper_reports",
                "testbed.systems.person_search.sim_report",
                "testbed.systems.person_search.replicated", "testbed.systems.person_search.sim")


@pytest.mark.parametrize("module", PURE_MODULES)
def test_module_is_pure(module: str) -> None:
    code = (f"import sys, {module}; "
            "bad = [k for k in ('mininet', 'aiohttp', 'docker', 'requests', 'matplotlib') "
            "if k in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
