"""What a simulated person-search run did (:func:`run_stats`, :func:`end_groups`, each
search alone: :func:`isolated_analyses`), and the person-search modules' purity."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from testbed.systems.person_search.sim import (
    end_groups,
    isolated_analyses,
    run_stats,
    simulate,
)
from workloads.person_search import Layout, SearchWorld, build_world


def test_end_share_of_straight_movers() -> None:
    # 5 steps to the right on a 3x3 grid: every target ends in the last column
    world = build_world({"servers": 9, "targets": 20, "layout": "grid",
                         "movement": "straight"}, 0)
    groups = end_groups(simulate(world, "random", 0), world)
    assert groups["end_share"] == 1.0 and groups["mean_analyses_rest"] is None


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



PURE_MODULES = ("testbed.systems.person_search", "nodes.person_search.model",
                "nodes.person_search.policies",
                "testbed.systems.person_search.builders",
                "testbed.systems.person_search.deployment",
                "testbed.systems.person_search.driver",
                "testbed.systems.person_search.emulation_experiment",
                "testbed.systems.person_search.emulation_tables",
                "testbed.systems.person_search.emulation_claims",
                "testbed.systems.person_search.simulation_rows",
                "testbed.systems.person_search.simulation_tables",
                "testbed.systems.person_search.simulation_experiment",
                "testbed.systems.person_search.replicated", "testbed.systems.person_search.sim")


@pytest.mark.parametrize("module", PURE_MODULES)
def test_module_is_pure(module: str) -> None:
    code = (f"import sys, {module}; "
            "bad = [k for k in ('mininet', 'aiohttp', 'docker', 'requests', 'matplotlib') "
            "if k in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
