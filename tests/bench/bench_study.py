"""Study engine: simulator cells on a two-worker Dask ``LocalCluster`` against the same
cells one after another, and the time to re-run a finished study.

``python -m tests.bench.bench_study [--quick] [--workers N]`` (no root needed). The study
is the built-in ``continuum`` scenario on the simulator with a grid of 5 arrival rates x
3 edge sizes and 4 replications (60 cells; ``--quick``: 2 x 2 x 3 = 12 cells). The same
cells run three times into fresh folders:

* **cluster**: ``run_study`` on a ``LocalCluster`` of ``--workers`` single-threaded
  worker processes (start-up of the cluster included);
* **serial**: ``run_study(serial=True)``: every cell in this process, one after another;
* **re-run**: ``run_study`` again on the cluster's finished folder (nothing to run; the
  summary and the page are written again).

Printed: each wall time, the speed-up serial / cluster and the re-run time; the two
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
            "grid": {"workload.params.rate": rates, "services.edge.params.workers": workers}}


def timed(fn: Any) -> tuple[float, Any]:
    """(wall seconds, result) of ``fn()``."""
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


def measure(quick: bool, workers: int) -> dict[str, Any]:
    """The three timings and whether the summaries agree."""
    study = study_from_dict(study_doc(quick))
    cells = len(study.points()) * study.replications
    quiet = lambda _line: None  # noqa: E731 - progress lines are not the point here
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        root = Path(tmp)
        cluster_s, cluster = timed(lambda: run_study(study, root / "cluster", workers=workers,
                                                     progress=quiet))
        serial_s, serial = timed(lambda: run_study(study, root / "serial", serial=True,
                                                   progress=quiet))
        rerun_s, _ = timed(lambda: run_study(study, root / "cluster", workers=workers,
                                             progress=quiet))
        same = pd.read_parquet(cluster / "summary.parquet").equals(
            pd.read_parquet(serial / "summary.parquet"))
    return {"cells": cells, "workers": workers, "cluster_s": cluster_s, "serial_s": serial_s,
            "speedup": serial_s / cluster_s, "rerun_s": rerun_s,
            "rerun_per_cell_ms": 1000.0 * rerun_s / cells, "same_summary": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    found = measure(args.quick, args.workers)
    print(f"{found['cells']} simulator cells; LocalCluster of {found['workers']} workers")
    print(f"  cluster  {found['cluster_s']:7.1f} s")
    print(f"  serial   {found['serial_s']:7.1f} s")
    print(f"  speed-up serial/cluster  {found['speedup']:.2f}x")
    print(f"  re-run of the finished study  {found['rerun_s']:.1f} s "
          f"({found['rerun_per_cell_ms']:.0f} ms per cell)")
    print(f"  summaries equal: {found['same_summary']}")
    return 0 if found["same_summary"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
