"""``testbed compare A B``: two runs or two studies, B - A per policy with its interval."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.analysis.compare_folders import compare_folders, format_folders
from testbed.analysis.stats import RUN_AS_CONFIGURED, STEADY_STATE, TOO_SHORT
from testbed.errors import TestbedError
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario
from testbed.study.run import run_study
from testbed.study.spec import study_from_dict

PROJECT = Path(__file__).resolve().parents[2]


def sim_run(folder: Path, seed: int, duration: float = 40) -> Path:
    scenario = load_scenario("continuum").with_overrides(duration=duration, seed=seed)
    return run_scenario(scenario, out=folder, executor="sim", progress=lambda _l: None,
                        plots=False)


def study(folder: Path, seed: int, replications: int = 3) -> Path:
    doc = {"study": "cmp", "scenario": "continuum", "executors": ["sim"],
           "policies": ["random", "jsq"], "replications": replications, "seed": seed,
           "grid": {"duration": [30], "workload.params.rate": [1.0, 2.0]}}
    return run_study(study_from_dict(doc), folder, serial=True, progress=lambda _l: None)


def test_two_runs_of_one_trace_pair_task_by_task(tmp_path: Path) -> None:
    a = sim_run(tmp_path / "a", seed=2, duration=2000)
    b = sim_run(tmp_path / "b", seed=2, duration=2000)
    other = sim_run(tmp_path / "c", seed=3, duration=2000)
    same = compare_folders(a, b)
    assert same["same_trace"] and [r["policy"] for r in same["rows"]] == ["jsq", "random"]
    for row in same["rows"]:  # the simulator is deterministic: identical runs
        assert row["diff_ms"] == 0 and row["a_ms"] == row["b_ms"]
        assert row["method"].startswith("paired batch means")
        assert row["estimand"] == STEADY_STATE
    assert same["rows"][0]["ci_ms"] == [0, 0]
    apart = compare_folders(a, other)
    assert not apart["same_trace"] and apart["degraded"] == []
    for row in apart["rows"]:
        assert row["method"].startswith("different traces")
        # the difference is always the difference of the two numbers shown
        assert row["diff_ms"] == pytest.approx(row["b_ms"] - row["a_ms"])
    jsq, random = apart["rows"]
    low, high = jsq["ci_ms"]
    assert low < jsq["diff_ms"] < high
    # random overloads the continuum: its queue only grows, there is no steady state
    assert random["ci_ms"] is None and TOO_SHORT in random["method"]
    text = format_folders(apart)
    assert text.splitlines()[0] == f"A: {a}" and "B - A" in text
    assert f"estimand: {STEADY_STATE}" in text


def test_a_degraded_side_is_named(tmp_path: Path) -> None:
    import json

    a = sim_run(tmp_path / "a", seed=2)
    b = sim_run(tmp_path / "b", seed=2)
    meta = json.loads((b / "metadata.json").read_text())
    meta["fidelity"] = {"degraded": True, "reasons": ["event crash e2 at 10 model s late"],
                        "degraded_policies": {}}
    (b / "metadata.json").write_text(json.dumps(meta))
    found = compare_folders(a, b)
    expected = f"{b}: warning: degraded emulation: event crash e2 at 10 model s late"
    assert found["degraded"] == [expected]
    assert f"degraded: {b}: warning" in format_folders(found)


def test_two_studies_pair_replications_with_the_same_seed(tmp_path: Path) -> None:
    a = study(tmp_path / "a", seed=1)
    again = study(tmp_path / "again", seed=1)
    other = study(tmp_path / "other", seed=2)
    paired = compare_folders(a, again)
    assert len(paired["rows"]) == 4  # 2 points x 2 policies
    assert all(r["method"] == "paired t across 3 replications (same seeds)" and
               r["diff_ms"] == 0 and r["estimand"] == RUN_AS_CONFIGURED
               for r in paired["rows"])
    welch = compare_folders(a, other)
    for row in welch["rows"]:
        assert row["method"] == "Welch t, 3 and 3 replications"
        assert row["ci_ms"][0] < row["diff_ms"] < row["ci_ms"][1]
        assert "workload.params.rate" in row and row["executor"] == "sim"


def test_folders_of_different_kinds_or_grids_are_refused(tmp_path: Path) -> None:
    run = sim_run(tmp_path / "run", seed=2)
    st = study(tmp_path / "st", seed=1, replications=1)
    with pytest.raises(TestbedError, match="compare two runs or two studies"):
        compare_folders(run, st)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TestbedError, match="expected a run folder"):
        compare_folders(tmp_path / "empty", run)


def test_compare_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    a = sim_run(tmp_path / "a", seed=2)
    b = sim_run(tmp_path / "b", seed=3)
    shell = (f"{sys.executable} -m testbed.cli compare {a} {b} | head -1; "
             f"{sys.executable} -m testbed.cli compare {a} | head -1")
    res = subprocess.run(["bash", "-c", shell], cwd=PROJECT, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.stdout.splitlines() == [f"A: {a}", res.stdout.splitlines()[1]]
    assert res.stdout.splitlines()[1].startswith("baseline jsq (default: first policy by name)")
    assert "Traceback" not in res.stderr, res.stderr
