"""Person search in emulation: real HTTP between a coordinator and ten edge data servers
over shaped links, beside the simulator on the same worlds.

Two runs, one fixture each. The built-in scenario through ``run_scenario`` (the generic
``testbed run`` path with the system's driver) must write the standard results folder,
end every search on the item that really holds its target and stay near its simulated
twin. The experiment at its small size (both movements, each point a ``testbed run`` in
emulation and one in the simulator) must show that the random policy (whose choices do
not depend on timing) analyses exactly the items the simulator does, that the emulated
totals stay near the simulated ones, that the servers keep the paper's response rule,
and that its traces and report are complete.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.analysis.traces import read_traces
from testbed.pytest_plugin import ScenarioRun
from testbed.systems.person_search.builders import edge_name
from testbed.systems.person_search.experiment_emulation import (
    RESULT_NAME,
    SIZES,
    point_name,
    run_emulation,
)
from testbed.systems.person_search.paper_reports import write_emulation_report
from workloads.person_search import read_ground_truth

pytestmark = pytest.mark.emulation
PLAN = SIZES["small"]
POLICIES = ("priority", "random", "load-balance")


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_emulation("small", tmp_path_factory.mktemp("search") / "run",
                         progress=lambda _line: None)


def _results(out: Path) -> list[dict]:
    table = json.loads((out / RESULT_NAME).read_text())
    return [r for p in table["points"] for r in p["results"]]


def test_builtin_scenario_runs_through_the_generic_path(run_scenario) -> None:
    # the built-in scenario as shipped, compressed harder (Tc = 20 ms) to keep it short
    run: ScenarioRun = run_scenario("person-search", time_scale=500)
    folder = run.folder
    for name in ("metadata.json", "summary.json", "traces.parquet", "traces.csv",
                 "trace/person_search.json", *(f"cdf_{p}.png" for p in POLICIES)):
        assert (folder / name).exists(), name
    meta = run.metadata
    assert meta["executor"] == "emulation" and meta["teardown_errors"] == []
    assert meta["scenario"]["time_scale"] == 500 and meta["driver"]["time_scale"] == 500
    assert meta["shaping_backend"] in ("netem", "userspace")
    world = read_ground_truth(folder / "trace")
    df = run.traces
    assert len(df) == world.targets * len(POLICIES)
    assert set(run.summary["policies"]) == set(POLICIES)
    for policy in POLICIES:
        rows = df[df.policy == policy].sort_values("task_id")
        assert list(rows["item"].astype(int)) == \
            [world.required_item(k) for k in range(world.targets)]
        assert list(rows["target"]) == \
            [edge_name(int(world.holder[k, world.slots])) for k in range(world.targets)]
        assert (rows["latency_s"] > 0).all() and (rows["network_s"] > 0).all()
    replays = {r["policy"]: r for r in meta["driver"]["replays"]}
    assert all(r["all_found"] for r in replays.values())
    assert replays["random"]["total_analyses"] == int((df[df.policy == "random"].step + 1).sum())


def test_every_search_finds_the_item_holding_its_target(searched: Path) -> None:
    results = _results(searched)
    assert len(results) == len(PLAN.servers) * len(PLAN.movements) * len(PLAN.policies)
    for r in results:
        assert r["targets"] == PLAN.targets
        assert r["all_found"], f"{r['movement']}/{r['policy']}: a search ended on a wrong item"


def test_random_choices_do_not_depend_on_timing(searched: Path) -> None:
    # Each search draws from its own stream, so emulation and simulation analyse the
    # same items however the answers interleave.
    for r in _results(searched):
        if r["policy"] == "random":
            assert r["emulated_analyses"] == r["simulated_analyses"], r


def test_emulated_totals_stay_near_the_simulated_ones(searched: Path) -> None:
    for r in _results(searched):
        # round trips of 20-30 ms against analyses of Tc x k (50 ms x about 10) wall
        assert abs(r["discrepancy"]) < 0.3, r
        assert r["round_trip_overhead_ms_mean"] > 0, r


def test_servers_keep_the_papers_response_rule(searched: Path) -> None:
    for r in _results(searched):
        # an analysis lasts Tc x factor x (k + 1) from its admission, within timer error
        assert -0.5 < r["timer_lateness_ms_mean"] < 5.0, r


def test_traces_have_one_row_per_search_and_the_report_compares(searched: Path,
                                                                 tmp_path: Path) -> None:
    for movement in PLAN.movements:
        point = searched / point_name(PLAN.servers[0], movement) / "w00"  # world seed 0
        for executor in ("emulation", "sim"):
            df = read_traces(point / executor)
            assert len(df) == PLAN.targets * len(PLAN.policies)
            assert set(df["kind"]) == {"search"}
            assert (df["latency_s"] > 0).all()
            meta = json.loads((point / executor / "metadata.json").read_text())
            assert meta["executor"] == executor
            assert (point / executor / "trace" / "person_search.json").exists()
        meta = json.loads((point / "emulation" / "metadata.json").read_text())
        assert meta["teardown_errors"] == []
    report = write_emulation_report(searched, tmp_path / "emulation.md", "test")
    text = report.read_text()
    assert "| 10 | normal | priority |" in text and "| 10 | straight | random |" in text
    assert "Where emulation and simulation differ" in text
    assert (tmp_path / "emulation.png").stat().st_size > 0


def test_rows_name_their_world_and_a_rerun_keeps_every_finished_run(searched: Path) -> None:
    before = (searched / RESULT_NAME).read_text()
    for r in _results(searched):
        assert r["replication"] in range(PLAN.world_seeds) and r["world_seed"] == PLAN.seed
    lines: list[str] = []
    run_emulation("small", searched, progress=lines.append)
    kept = [line for line in lines if "finished before, kept" in line]
    assert len(kept) == 2 * len(PLAN.movements) * PLAN.world_seeds  # both executors
    assert (searched / RESULT_NAME).read_text() == before
