"""``testbed study --scheduler``: the cells go to a Dask cluster started beforehand with
the ``dask scheduler`` and ``dask worker`` commands, as on a cluster of machines
(``docs/studies.md``), here on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import yaml

from testbed.study.run import run_study
from testbed.study.spec import load_study

PROJECT = Path(__file__).resolve().parents[2]
DASK = str(Path(sys.executable).with_name("dask"))


@contextmanager
def cluster(folder: Path, workers: int = 2) -> Iterator[str]:
    """A scheduler and ``workers`` single-threaded workers on loopback; yields the
    scheduler's address. Each command runs in a process group of its own, ended on exit."""
    from distributed import Client

    info = folder / "scheduler.json"
    log = (folder / "cluster.log").open("w")
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(info)],
                              cwd=PROJECT, stdout=log, stderr=log, start_new_session=True)]
    try:
        deadline = time.monotonic() + 60
        while not info.is_file() or not info.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler wrote no address"
            assert procs[0].poll() is None, "the scheduler exited"
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        procs.append(subprocess.Popen(
            [DASK, "worker", address, "--nthreads", "1", "--nworkers", str(workers),
             "--no-dashboard", "--resources", "emulation=1"],
            cwd=PROJECT, stdout=log, stderr=log, start_new_session=True))
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(workers, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def test_a_study_runs_on_a_cluster_started_with_the_dask_commands(tmp_path: Path) -> None:
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump({
        "study": "remote", "scenario": "continuum", "executors": ["sim"],
        "policies": ["random", "jsq"], "replications": 2, "seed": 4,
        "grid": {"duration": [20], "workload.params.rate": [1.0, 2.0]}}))
    with cluster(tmp_path) as address:
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "study", str(file),
                              "--scheduler", address, "--out", str(tmp_path / "remote")],
                             cwd=PROJECT, capture_output=True, text=True, timeout=300,
                             check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cells 4/4 done (0 failed)" in res.stdout
    local = run_study(load_study(file), tmp_path / "serial", serial=True,
                      progress=lambda _l: None)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "remote" / "summary.parquet"),
                                  pd.read_parquet(local / "summary.parquet"))
