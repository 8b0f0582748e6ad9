"""Studies end to end on the simulator: cells, the Parquet dataset, the summary table,
resuming after a kill, failed policies and cells, and a real Dask ``LocalCluster``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from testbed.analysis.stats import RUN_AS_CONFIGURED, STEADY_STATE
from testbed.study.cells import CELL_FILE, plan_cells
from testbed.study.run import (
    StudyIncomplete,
    finish_study,
    prepare_study,
    run_cells,
    run_study,
)
from testbed.study.spec import load_study, study_from_dict
from testbed.study.summary import COLUMNS

PROJECT = Path(__file__).resolve().parents[2]
GRID = {"workload.params.rate": [1.0, 2.0]}


def study_doc(**extra: Any) -> dict[str, Any]:
    """Two loads x 2 replications of a 20-model-second continuum on the simulator."""
    doc: dict[str, Any] = {"study": "sweep", "scenario": "continuum", "executors": ["sim"],
                           "policies": ["random", "jsq"], "baseline": "random",
                           "replications": 2, "seed": 3, "grid": GRID}
    doc.update(extra)
    doc.setdefault("grid", {})
    doc["grid"] = {**doc["grid"], "duration": [20]}
    return doc


def mtimes(folder: Path) -> dict[str, int]:
    """Every file under the cells and traces folders with its modification time."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns
            for sub in ("cells", "traces") for p in (folder / sub).rglob("*") if p.is_file()}


def test_a_study_writes_cells_dataset_and_summary(tmp_path: Path) -> None:
    study = study_from_dict(study_doc())
    out = run_study(study, tmp_path / "s", serial=True, progress=lambda _l: None)
    about = json.loads((out / "study.json").read_text())
    assert about["grid"] == ["workload.params.rate", "duration"] and about["replications"] == 2
    cells = sorted((out / "cells").iterdir())
    assert len(cells) == 4 and all((c / CELL_FILE).exists() for c in cells)
    traces = pd.read_parquet(out / "traces")  # one dataset over every cell's file
    assert len(list((out / "traces").glob("*.parquet"))) == 4
    assert {"cell", "executor", "replication", "point", "workload.params.rate",
            "duration"} <= set(traces.columns)
    assert traces.groupby("workload.params.rate")["replication"].nunique().tolist() == [2, 2]
    # each replication is its own trace; every policy of a replication replays the same one
    arrivals = {}
    for (point, rep, policy), rows in traces.groupby(["point", "replication", "policy"]):
        arrivals.setdefault((point, rep), []).append(
            tuple(rows.sort_values("task_id")["arrival_model"].round(9)))
    assert all(len(set(v)) == 1 for v in arrivals.values())  # same trace for each policy
    assert arrivals[(0, 0)][0] != arrivals[(0, 1)][0]  # independent replications
    for name in ("summary.csv", "summary.parquet"):
        table = pd.read_csv(out / name) if name.endswith("csv") else pd.read_parquet(out / name)
        assert list(table.columns) == ["workload.params.rate", "duration", *COLUMNS]
        assert len(table) == 4  # 2 points x 1 executor x 2 policies
    table = pd.read_parquet(out / "summary.parquet")
    assert (table["replications"] == 2).all()
    assert (table["mean_ci_low_ms"] <= table["mean_ms"]).all()
    assert (table["mean_ms"] <= table["mean_ci_high_ms"]).all()
    base = table[table["policy"] == "random"]
    assert (base["diff_vs_baseline_ms"] == 0).all()
    assert table["method"].str.contains("t across 2 replications").all()
    # the summary's mean is the mean of the replications' means, from the dataset
    point = traces[(traces["workload.params.rate"] == 2.0) & (traces["policy"] == "jsq")
                   & (traces["outcome"] == "ok")]
    per_rep_means = point.groupby("replication")["latency_s"].mean() * 1000
    row = table[(table["workload.params.rate"] == 2.0) & (table["policy"] == "jsq")]
    assert row["mean_ms"].item() == pytest.approx(per_rep_means.mean(), rel=1e-9)


def test_rerun_does_nothing_and_resume_runs_only_what_is_missing(tmp_path: Path) -> None:
    study = study_from_dict(study_doc())
    out = run_study(study, tmp_path / "s", serial=True, progress=lambda _l: None)
    before = mtimes(out)
    outputs = {name: (out / name).stat().st_mtime_ns
               for name in ("summary.csv", "summary.parquet", "report.html")}
    lines: list[str] = []
    run_study(study, out, serial=True, progress=lines.append)
    assert "4 finished before, 0 to run" in lines[0]
    assert mtimes(out) == before  # a finished cell's files are never rewritten
    assert {n: (out / n).stat().st_mtime_ns for n in outputs} == outputs  # nothing new
    assert any(line.startswith("baseline: random") for line in lines)  # still shown
    # what a kill leaves: one cell without its record, a half-written traces file
    victim = min((out / "cells").iterdir())
    (victim / CELL_FILE).unlink()
    (out / "traces" / "stray.parquet.tmp").write_bytes(b"half")
    lines.clear()
    run_study(study, out, serial=True, progress=lines.append)
    assert "3 finished before, 1 to run" in lines[0] and "removed 3 leftover" in lines[0]
    assert not (out / "traces" / "stray.parquet.tmp").exists()
    after = mtimes(out)
    untouched = {k: v for k, v in before.items() if victim.name not in k}
    assert {k: after[k] for k in untouched} == untouched


def test_sigkill_mid_study_then_resume_gives_the_uninterrupted_result(tmp_path: Path) -> None:
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump(study_doc(replications=3)))
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "study", str(file),
                             "--serial", "--out", str(out)], cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("cells 2/"):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    finished = len(list(out.glob("cells/*/" + CELL_FILE)))
    assert 2 <= finished < 6
    resumed = subprocess.run([sys.executable, "-m", "testbed.cli", "study", str(file),
                              "--serial", "--out", str(out)], cwd=PROJECT,
                             capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{finished} finished before, {6 - finished} to run" in resumed.stdout
    fresh = run_study(load_study(file), tmp_path / "fresh", serial=True,
                      progress=lambda _l: None)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "summary.parquet"),
                                  pd.read_parquet(fresh / "summary.parquet"))


def test_a_failing_policy_keeps_the_rest_of_its_cell(tmp_path: Path, echo: None) -> None:
    from tests.testsystem import SCENARIO

    doc = {"study": "broken", "scenario": SCENARIO, "executors": ["sim"],
           "policies": ["first", "broken"], "baseline": "first", "replications": 2}
    study = study_from_dict(doc)
    with pytest.raises(StudyIncomplete, match="policies failed: broken"):
        run_study(study, tmp_path / "s", serial=True, progress=lambda _l: None)
    records = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("cells/*/cell.json")]
    assert len(records) == 2 and {r["status"] for r in records} == {"incomplete"}
    assert all(r["failed"][0]["policy"] == "broken" for r in records)
    table = pd.read_parquet(tmp_path / "s" / "summary.parquet")
    first = table[table["policy"] == "first"]
    assert first["replications"].item() == 2 and first["mean_ms"].notna().all()
    broken = table[table["policy"] == "broken"]
    assert broken["replications"].item() == 0 and broken["method"].item() == "no completed task"


def test_one_replication_falls_back_to_named_batch_means(tmp_path: Path) -> None:
    doc = study_doc(replications=1, grid={})
    doc["grid"] = {"duration": [60, 2000]}
    out = run_study(study_from_dict(doc), tmp_path / "s", serial=True,
                    progress=lambda _l: None)
    table = pd.read_parquet(out / "summary.parquet")
    assert (table["replications"] == 1).all()
    assert (table["estimand"] == STEADY_STATE).all()
    short, long = table[table["duration"] == 60], table[table["duration"] == 2000]
    assert short["method"].str.startswith("1 replication; ").all()
    # 60 s hold too few tasks beyond the p95 for batches: the estimate stands alone
    assert short["p95_ci_low_ms"].isna().all() and short["p95_ms"].notna().all()
    jsq = long[long["policy"] == "jsq"]
    assert jsq["method"].item().startswith("1 replication; batch means")
    assert jsq["mean_ci_low_ms"].item() <= jsq["mean_ms"].item() <= jsq["mean_ci_high_ms"].item()
    # the difference is the difference of the two steady-state means shown
    random = long[long["policy"] == "random"]
    assert jsq["diff_vs_baseline_ms"].item() == pytest.approx(
        jsq["mean_ms"].item() - random["mean_ms"].item())


def test_a_local_dask_cluster_gives_the_serial_result(tmp_path: Path) -> None:
    """Two folders of the same study run on one cluster, as an experiment's studies do:
    their cells have the same keys, and each folder gets its own."""
    study = study_from_dict(study_doc())
    lines: list[str] = []
    both = [prepare_study(study, tmp_path / name, progress=lines.append)
            for name in ("dask", "twin")]
    run_cells([spec for p in both for spec in p.todo], workers=2, progress=lines.append)
    parallel, twin = (finish_study(p, progress=lines.append) for p in both)
    assert any(line.startswith("dask: 2 local workers") for line in lines)
    assert any(line.startswith("cells 8/8 done (0 failed), 0 running") for line in lines)
    pd.testing.assert_frame_equal(pd.read_parquet(parallel / "summary.parquet"),
                                  pd.read_parquet(twin / "summary.parquet"))
    serial = run_study(study, tmp_path / "serial", serial=True, progress=lambda _l: None)
    pd.testing.assert_frame_equal(pd.read_parquet(parallel / "summary.parquet"),
                                  pd.read_parquet(serial / "summary.parquet"))
    assert sorted(p.name for p in (parallel / "cells").iterdir()) == \
        sorted(s["key"] for s in plan_cells(study, parallel))


def test_an_unreachable_scheduler_is_one_line_within_seconds(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump(study_doc()))
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "study", str(file),
                          "--scheduler", f"tcp://127.0.0.1:{port}", "--out",
                          str(tmp_path / "s")], cwd=PROJECT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0, res.stderr
    assert res.stderr.startswith(f"testbed: --scheduler tcp://127.0.0.1:{port}: no Dask "
                                 "scheduler answered")
    assert time.monotonic() - started < 30  # connect timeout 5 s plus interpreter start


def test_a_bad_study_file_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump(study_doc(grid={"workload.params.rate": [1.0, -2.0]})))
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "study", str(file), "--out",
                          str(tmp_path / "s")], cwd=PROJECT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith(f"testbed: {file}: grid (point ")
    assert "workload.params.rate=-2.0): workload.params.rate: expected a finite number > 0" \
        in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "s").exists()


def test_degraded_cells_and_policies_are_left_out_unless_included(tmp_path: Path) -> None:
    from testbed.study.cells import read_cell
    from testbed.study.summary import summarize

    study = study_from_dict(study_doc(replications=3, grid={}))
    out = run_study(study, tmp_path / "s", serial=True, progress=lambda _l: None)
    about = json.loads((out / "study.json").read_text())
    records = [read_cell(c) for c in sorted((out / "cells").iterdir())]
    records[0]["degraded"] = True  # as the fidelity guard records it
    records[1]["degraded_policies"] = {"jsq": "dispatch lag p99 45.00 ms > 10 ms"}
    table = summarize(about, records, out / "traces").set_index("policy")
    assert table.loc["random", "replications"] == 2 and table.loc["random", "degraded_cells"] == 1
    assert table.loc["jsq", "replications"] == 1 and table.loc["jsq", "degraded_cells"] == 2
    kept = summarize(about, records, out / "traces", include_degraded=True).set_index("policy")
    assert (kept["replications"] == 3).all() and kept.loc["jsq", "degraded_cells"] == 2
    for record in records:
        record["degraded"] = True
    none = summarize(about, records, out / "traces").set_index("policy")
    assert (none["replications"] == 0).all() and none["mean_ms"].isna().all()
    assert (none["method"] == "no replication to use: 3 degraded (left out), 0 failed").all()


def test_rerun_degraded_runs_only_degraded_cells_again_and_keeps_their_attempts(
        tmp_path: Path) -> None:
    study = study_from_dict(study_doc(replications=2, grid={}))
    out = run_study(study, tmp_path / "s", serial=True, progress=lambda _l: None)
    cells = sorted((out / "cells").iterdir())
    marked = json.loads((cells[0] / CELL_FILE).read_text())
    marked.update(degraded=True, reasons=["shaper release lateness p99 1.51 ms > 1 ms"])
    (cells[0] / CELL_FILE).write_text(json.dumps(marked))
    before = mtimes(out)
    lines: list[str] = []
    run_study(study, out, serial=True, progress=lines.append)  # a resume keeps it
    assert mtimes(out) == before and any("--rerun-degraded" in line for line in lines)
    lines.clear()
    run_study(study, out, serial=True, rerun_degraded=True, progress=lines.append)
    assert any("set aside 1 degraded cell(s)" in line for line in lines)
    assert any("1 finished before, 1 to run" in line for line in lines)
    again = json.loads((cells[0] / CELL_FILE).read_text())
    assert again["degraded"] is False and again["degraded_attempts"] == 1
    (kept,) = (out / "degraded").iterdir()
    assert kept.name == f"{cells[0].name}-1"
    assert json.loads((kept / CELL_FILE).read_text())["reasons"] == marked["reasons"]
    assert (out / "traces" / f"{cells[0].name}.parquet").is_file()
    untouched = {k: v for k, v in before.items() if cells[1].name in k}
    assert {k: v for k, v in mtimes(out).items() if cells[1].name in k} == untouched
    table = pd.read_parquet(out / "summary.parquet")
    assert (table["replications"] == 2).all() and (table["degraded_cells"] == 0).all()


def test_every_value_lies_inside_its_interval(tmp_path: Path) -> None:
    for reps in (1, 3):
        doc = study_doc(replications=reps, grid={})
        doc["grid"] = {"duration": [40], "workload.params.rate": [1.0, 2.0]}
        table = pd.read_parquet(run_study(study_from_dict(doc), tmp_path / str(reps),
                                          serial=True, progress=lambda _l: None)
                                / "summary.parquet")
        for value, low, high in (("mean_ms", "mean_ci_low_ms", "mean_ci_high_ms"),
                                 ("p95_ms", "p95_ci_low_ms", "p95_ci_high_ms"),
                                 ("diff_vs_baseline_ms", "diff_ci_low_ms", "diff_ci_high_ms")):
            inside = (table[low] <= table[value] + 1e-9) & (table[value] <= table[high] + 1e-9)
            none = table[low].isna() & table[high].isna()  # too short for an interval
            assert (inside | none).all(), table[[value, low, high]]
            if reps > 1:
                assert inside.all() and (table["estimand"] == RUN_AS_CONFIGURED).all()
                if value != "diff_vs_baseline_ms":
                    assert (table[low] >= 0).all()  # a latency bound is never negative
