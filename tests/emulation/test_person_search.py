"""Person search in emulation: real HTTP between a coordinator and ten edge data servers
over shaped links, beside the simulator on the same worlds.

One run: ``testbed experiment person-search-emulation`` at its small size, as a
researcher runs it (two worlds, one per movement, each a ``testbed run`` cell in emulation
and its twin in the simulator). Every emulated cell must write the standard results
folder, end every search on the item that really holds its target, and the random
policy (whose choices do not depend on timing) must analyse exactly the items the
simulator does; the emulated totals must stay near the simulated ones, the servers keep
the paper's response rule, and the report compare both executors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.analysis.traces import read_traces
from testbed.systems.person_search.builders import edge_name
from tests.emulation import experiment_run
from workloads.person_search import read_ground_truth

pytestmark = pytest.mark.emulation
POLICIES = ("priority", "priority-after-discovery", "random", "load-balance")
TARGETS = 100


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    report = tmp_path_factory.mktemp("report")
    with experiment_run("person-search-emulation", report) as out:
        yield out, report


def _rows(searched: tuple[Path, Path]) -> list[dict[str, Any]]:
    return json.loads((searched[0] / "metrics.json").read_text())["rows"]


def _cells(searched: tuple[Path, Path], executor: str) -> list[Path]:
    cells = []
    for cell in sorted((searched[0] / "emulation" / "cells").iterdir()):
        record = json.loads((cell / "cell.json").read_text())
        assert record["status"] == "ok", record
        if record["executor"] == executor:
            cells.append(cell / "run")
    return cells


def test_every_emulated_cell_is_a_standard_run_of_the_searches(
        searched: tuple[Path, Path]) -> None:
    runs = _cells(searched, "emulation")
    assert len(runs) == 2  # one world per movement
    for folder in runs:
        for name in ("metadata.json", "summary.json", "traces.parquet", "traces.csv",
                     "trace/person_search.json"):
            assert (folder / name).exists(), name
        meta = json.loads((folder / "metadata.json").read_text())
        assert meta["executor"] == "emulation" and meta["teardown_errors"] == []
        assert meta["driver"]["time_scale"] == 200
        assert meta["shaping_backend"] in ("netem", "userspace")
        world = read_ground_truth(folder / "trace")
        df = read_traces(folder)
        assert len(df) == world.targets * len(POLICIES) == TARGETS * len(POLICIES)
        for policy in POLICIES:
            rows = df[df.policy == policy].sort_values("task_id")
            assert list(rows["item"].astype(int)) == \
                [world.required_item(k) for k in range(world.targets)]
            assert list(rows["target"]) == \
                [edge_name(int(world.holder[k, world.slots])) for k in range(world.targets)]
            assert (rows["latency_s"] > 0).all() and (rows["network_s"] > 0).all()


def test_every_search_finds_the_item_holding_its_target(searched: tuple[Path, Path]) -> None:
    rows = _rows(searched)
    assert len(rows) == 2 * len(POLICIES)
    for r in rows:
        assert r["targets"] == TARGETS
        assert r["all_found"], f"{r['movement']}/{r['policy']}: a search ended on a wrong item"


def test_random_choices_do_not_depend_on_timing(searched: tuple[Path, Path]) -> None:
    # Each search draws from its own stream, so emulation and simulation analyse the
    # same items however the answers interleave.
    for r in _rows(searched):
        if r["policy"] == "random":
            assert r["emulated_analyses"] == r["simulated_analyses"], r


def test_emulated_totals_stay_near_the_simulated_ones(searched: tuple[Path, Path]) -> None:
    for r in _rows(searched):
        # round trips of 20-30 ms against analyses of Tc x k (50 ms x about 10) wall
        assert abs(r["discrepancy"]) < 0.3, r
        assert r["round_trip_overhead_ms_mean"] > 0, r


def test_servers_keep_the_papers_response_rule(searched: tuple[Path, Path]) -> None:
    for r in _rows(searched):
        # an analysis lasts Tc x factor x (k + 1) from its admission, within timer error
        assert -0.5 < r["timer_lateness_ms_mean"] < 5.0, r


def test_the_report_compares_both_executors(searched: tuple[Path, Path]) -> None:
    text = (searched[1] / "emulation.md").read_text()
    assert "| 10 | normal | priority |" in text and "| 10 | straight | random |" in text
    assert "off the simulated ones" in text
    assert "All 2 emulated cells passed the fidelity guard" in text
    assert not (searched[1] / "emulation.claims.json").exists()  # one world: no verdict
