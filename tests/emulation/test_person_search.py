"""Person search in emulation at its small size: real HTTP between a coordinator and ten
edge data servers over shaped links, beside the simulator on the same worlds.

The experiment runs once (fixture); the tests check what it must show: every search
ends on the item that really holds its target, the random policy (whose choices do not
depend on timing) analyses exactly the items the simulator does, the emulated totals
stay near the simulated ones, the servers keep the paper's response rule, and the
traces and the report are complete.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.experiments.person_search import SIZES, run_person_search, write_emulation_report
from testbed.traces import read_traces

pytestmark = pytest.mark.emulation
PLAN = SIZES["small"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_person_search("small", tmp_path_factory.mktemp("search") / "run",
                             progress=lambda _line: None)


def _results(out: Path) -> list[dict]:
    table = json.loads((out / "person_search.json").read_text())
    return [r for p in table["points"] for r in p["results"]]


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
    run = searched / f"n{PLAN.servers[0]:03d}"
    df = read_traces(run)
    assert len(df) == PLAN.targets * len(PLAN.movements) * len(PLAN.policies)
    assert set(df["kind"]) == {"search"}
    assert (df["latency_s"] > 0).all()
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["executor"] == "emulation" and meta["teardown_errors"] == []
    assert (run / "trace-normal" / "person_search.json").exists()
    report = write_emulation_report(searched, tmp_path / "emulation.md", "test")
    text = report.read_text()
    assert "| 10 | normal | priority |" in text and "| 10 | straight | random |" in text
    assert "Where emulation and simulation differ" in text
    assert (tmp_path / "emulation.png").stat().st_size > 0
