"""Study engine: simulator cells on a two-worker Dask ``LocalCluster`` against the same
cells one after another, and the time to re-run a finished study.

``python -m tests.bench.bench_study [--quick] [--workers N]`` (no root needed). The study
is the built-in ``continuum`` scenario on the simulator, 300 model seconds per cell,
with a grid of 5 arrival rates x 3 edge sizes and 4 replications (60 cells;
``--quick``: 60 model seconds, 2 x 2 x 3 = 12 cells). The same cells run three times:

* **cluster**: ``run_study`` on a ``LocalCluster`` of ``--workers`` single-threaded
  worker processes (start-up of the cluster included);
* **serial**: ``run_study(serial=True)``: every cell in this process, one after another;
* **re-run**: ``run_study`` again on the cluster's finished folder (nothing to run; the
  summary and the page are written again).

Printed: each wall time, whole and until the last cell ended (the rest is the summary
and the page, the same work in both), the speed-ups serial / cluster and the re-run
time; the two
summaries must be equal (exit status 1 otherwise). Nothing is asserted about timing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.study.run import run_study
from testbed.study.spec import study_from_dict


def study_doc(quick: bool) -> dict[str, Any]:
    """The benchmark's study."""
    rates = [1.0, 1.5] if quick else [0.5, 1.0, 1.5, 2.0, 2.5]
    workers = [2, 4] if quick else [2, 4, 8]
    return {"study": "bench-study", "scenario": "continuum", "executors": ["sim"],
            "policies": ["random", "jsq"], "replications": 3 if quick else 4, "seed": 11,
            "grid": {"workload.params.rate": rates, "services.edge.params.workers": workers,
                     "duration": [60 if quick else 300]}}


def timed(fn: Any) -> tuple[float, float, Any]:
    """(wall seconds, seconds until the last cell ended, result) of ``fn(progress)``."""
    began = time.perf_counter()
    last = [0.0]

    def progress(line: str) -> None:
        if line.startswith("cells "):
            last[0] = time.perf_counter() - began

    result = fn(progress)
    return time.perf_counter() - began, last[0], result


def measure(quick: bool, workers: int) -> dict[str, Any]:
    """The three timings and whether the summaries agree."""
    study = study_from_dict(study_doc(quick))
    cells = len(study.points()) * study.replications
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        root = Path(tmp)
        cluster_s, cluster_cells_s, cluster = timed(
            lambda p: run_study(study, root / "cluster", workers=workers, progress=p))
        serial_s, serial_cells_s, serial = timed(
            lambda p: run_study(study, root / "serial", serial=True, progress=p))
        rerun_s, _, _ = timed(
            lambda p: run_study(study, root / "cluster", workers=workers, progress=p))
        same = pd.read_parquet(cluster / "summary.parquet").equals(
            pd.read_parquet(serial / "summary.parquet"))
    return {"cells": cells, "workers": workers, "cluster_s": cluster_s, "serial_s": serial_s,
            "cluster_cells_s": cluster_cells_s, "serial_cells_s": serial_cells_s,
            "speedup": serial_s / cluster_s, "cells_speedup": serial_cells_s / cluster_cells_s,
            "rerun_s": rerun_s, "rerun_per_cell_ms": 1000.0 * rerun_s / cells,
            "same_summary": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    found = measure(args.quick, args.workers)
    print(f"{found['cells']} simulator cells; LocalCluster of {found['workers']} workers")
    print("           whole study   until the last cell ended")
    print(f"  cluster  {found['cluster_s']:7.1f} s   {found['cluster_cells_s']:7.1f} s")
    print(f"  serial   {found['serial_s']:7.1f} s   {found['serial_cells_s']:7.1f} s")
    print(f"  speed-up serial/cluster  {found['speedup']:.2f}x whole, "
          f"{found['cells_speedup']:.2f}x cells")
    print(f"  re-run of the finished study  {found['rerun_s']:.1f} s "
          f"({found['rerun_per_cell_ms']:.0f} ms per cell)")
    print(f"  summaries equal: {found['same_summary']}")
    return 0 if found["same_summary"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
