"""A study with an emulation cell, end to end on a real ``LocalCluster`` (root only).

The emulation runs beside a bounded CPU load on every core, so the fidelity guard marks
its cell degraded: the summary leaves it out and counts it, and a re-run with
``--include-degraded`` (nothing left to run) takes it in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[2]
HOG = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def cpu_load(limit_s: float = 120.0) -> Iterator[None]:
    """One busy loop per core, each ending by itself after ``limit_s``, killed on exit."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG.format(limit=limit_s)])
            for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def study(folder: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "study",
                           str(folder / "study.yaml"), "--out", str(folder / "s"),
                           "--workers", "2", *flags], cwd=PROJECT, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.emulation
def test_a_degraded_emulation_cell_is_marked_counted_and_left_out() -> None:
    # Run folders hold Unix sockets: keep the study folder's path short (107-byte limit).
    with tempfile.TemporaryDirectory(prefix="tbs", dir="/tmp") as tmp:
        folder = Path(tmp)
        (folder / "study.yaml").write_text(yaml.safe_dump({
            "study": "loaded", "scenario": "continuum", "executors": ["sim", "emulation"],
            "policies": ["random", "jsq"], "baseline": "random", "replications": 1,
            "grid": {"duration": [15]}}))
        with cpu_load():
            first = study(folder)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "warning: 1 degraded emulation cell(s) left out" in first.stdout
        records = {r["executor"]: r for r in
                   (json.loads(p.read_text()) for p in folder.glob("s/cells/*/cell.json"))}
        assert records["emulation"]["degraded"] and records["emulation"]["reasons"]
        assert any("idle" in reason for reason in records["emulation"]["reasons"])
        assert not records["sim"]["degraded"]
        meta = json.loads((folder / "s" / "cells" / records["emulation"]["key"] / "run" /
                           "metadata.json").read_text())
        assert meta["fidelity"]["degraded"] is True
        table = pd.read_parquet(folder / "s" / "summary.parquet")
        emulated = table[table["executor"] == "emulation"]
        assert (emulated["replications"] == 0).all() and (emulated["degraded_cells"] == 1).all()
        simulated = table[table["executor"] == "sim"]
        assert (simulated["replications"] == 1).all() and simulated["mean_ms"].notna().all()
        # both executors replayed one trace: the same tasks for every policy
        traces = pd.read_parquet(folder / "s" / "traces")
        tasks = traces.groupby(["executor", "policy"])["task_id"].apply(frozenset)
        assert tasks.nunique() == 1
        assert (folder / "s" / "report.html").stat().st_size > 0

        again = study(folder, "--include-degraded")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "1 finished before" not in again.stdout  # both cells finished before
        assert "2 finished before, 0 to run" in again.stdout
        table = pd.read_parquet(folder / "s" / "summary.parquet")
        emulated = table[table["executor"] == "emulation"]
        assert (emulated["replications"] == 1).all() and emulated["mean_ms"].notna().all()
        assert (emulated["degraded_cells"] == 1).all()
