"""Runs a study's cells on a Dask cluster (or one after another) with a progress line.

By default a ``LocalCluster`` sized to the machine: one single-threaded worker process
per core, so simulator cells run in parallel on every core. Emulation cells ask for
the worker resource ``emulation`` (each local worker has one) and, inside the cell,
hold a cluster-wide lock named by the host (:mod:`testbed.study.cells`), so one
emulation runs per host at a time however many workers it has; and they start only
after every simulator cell ended, so no simulator cell takes CPU from an emulation that
measures with it. ``scheduler`` sends
the cells to an existing cluster instead (``docs/studies.md`` says how to start one);
an unreachable scheduler is one line of error after ``CONNECT_TIMEOUT_S``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from testbed.errors import TestbedError
from testbed.study.cells import RECORD_KEYS, run_cell

CONNECT_TIMEOUT_S = 5
#: Dask settings of the local cluster's workers (passed on to them by their nannies).
WORKER_CONFIG = {"distributed.worker.profile.enabled": False,
                 "distributed.admin.system-monitor.gil.enabled": False}
EMULATION = "emulation"
Progress = Callable[[str], None]


class Tally:
    """Cells done, failed and running, and an estimate of the time left.

    The estimate takes each executor's mean wall time per finished cell (an emulation
    cell lasts far longer than a simulator cell) over the cells of that executor still
    to run, divided by how many run at once: every slot for simulator cells, one for
    emulation cells. An executor with no finished cell yet borrows the overall mean.
    """

    def __init__(self, specs: Sequence[Mapping[str, Any]], slots: int) -> None:
        self.total, self.slots = len(specs), max(1, slots)
        self.left: dict[str, int] = {}
        for spec in specs:
            self.left[spec["executor"]] = self.left.get(spec["executor"], 0) + 1
        self.walls: dict[str, list[float]] = {}
        self.done = self.failed = 0
        self.emulating = False

    def add(self, record: Mapping[str, Any]) -> None:
        """Count one cell that ended."""
        self.done += 1
        executor = record.get("executor", "")
        self.left[executor] = max(0, self.left.get(executor, 1) - 1)
        if record.get("wall_s") is not None:
            self.walls.setdefault(executor, []).append(float(record["wall_s"]))
        if record.get("status") not in ("ok", "incomplete"):
            self.failed += 1

    def seconds_left(self) -> float | None:
        """The estimate, or ``None`` before any cell has ended."""
        every = [w for walls in self.walls.values() for w in walls]
        if not every:
            return None
        total = 0.0
        for executor, left in self.left.items():
            walls = self.walls.get(executor) or every
            at_once = 1 if executor == EMULATION else self.slots
            total += left * (sum(walls) / len(walls)) / at_once
        return total

    def line(self) -> str:
        """``cells 12/60 done (1 failed), 2 running, about 40 s left``."""
        left = self.total - self.done
        running = min(left, 1 if self.emulating else self.slots)
        eta = self.seconds_left()
        shown = f", about {eta:.0f} s left" if eta is not None and left else ""
        return (f"cells {self.done}/{self.total} done ({self.failed} failed), "
                f"{running} running{shown}")


def _error_record(spec: Mapping[str, Any], error: BaseException) -> dict[str, Any]:
    """The record of a cell whose task itself failed (it runs again on resume)."""
    return {**{k: spec[k] for k in RECORD_KEYS},
            "status": "error", "error": f"{type(error).__name__}: {error}", "failed": [],
            "degraded": False, "reasons": []}


def run_serial(specs: Sequence[Mapping[str, Any]], progress: Progress) -> list[dict[str, Any]]:
    """Every cell one after another in this process (the benchmark's peer)."""
    tally = Tally(specs, 1)
    records = []
    for spec in specs:
        try:
            record = run_cell(spec)
        except Exception as exc:  # noqa: BLE001 - one broken cell must not lose the others
            record = _error_record(spec, exc)
        tally.add(record)
        records.append(record)
        progress(tally.line())
    return records


def _connect(scheduler: str | None, workers: int | None) -> tuple[Any, Any, int]:
    """(client, cluster we started or None, slots)."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError) as exc:
            raise TestbedError(f"--scheduler {scheduler}: no Dask scheduler answered within "
                               f"{CONNECT_TIMEOUT_S} s ({type(exc).__name__})") from exc
        slots = sum(w.get("nthreads", 1) for w in
                    client.scheduler_info().get("workers", {}).values())
        return client, None, slots
    import dask

    n = workers or os.cpu_count() or 1
    # The workers' statistical profiler samples every thread's stack every 10 ms: a
    # pure-Python simulator cell ran about a fifth slower under it.
    with dask.config.set(WORKER_CONFIG):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               resources={EMULATION: 1}, dashboard_address=None,
                               silence_logs=logging.ERROR)
    return Client(cluster), cluster, n


def _phase(client: Any, specs: Sequence[Mapping[str, Any]], tally: Tally,
           progress: Progress) -> list[dict[str, Any]]:
    """Submit ``specs`` and collect their records as they end."""
    from distributed import as_completed

    futures, by_key = [], {}
    for spec in specs:
        resources = {EMULATION: 1} if spec["executor"] == EMULATION else None
        # two studies of one experiment may hold the same cell (same scenario, seed and
        # executor), each in its own folder: the task key names the folder too
        where = hashlib.sha256(spec["study_folder"].encode()).hexdigest()[:8]
        future = client.submit(run_cell, dict(spec), key=f"cell-{spec['key']}-{where}",
                               pure=False, resources=resources)
        futures.append(future)
        by_key[future.key] = spec
    records = []
    for future in as_completed(futures):
        spec = by_key[future.key]
        try:
            record = future.result()
        except Exception as exc:  # noqa: BLE001 - recorded; the other cells go on
            record = _error_record(spec, exc)
        tally.add(record)
        records.append(record)
        progress(tally.line())
    return records


def run_dask(specs: Sequence[Mapping[str, Any]], progress: Progress,
             scheduler: str | None = None, workers: int | None = None) -> list[dict[str, Any]]:
    """Every cell as a task of a Dask cluster; records in the order cells end.

    Simulator cells run first, all in parallel; emulation cells only after the last of
    them ended, so no simulator cell competes for the CPU an emulation measures with.
    """
    client, cluster, slots = _connect(scheduler, workers)
    try:
        progress(f"dask: {client.dashboard_link if cluster is None else f'{slots} local workers'}"
                 f"; {len(specs)} cells")
        tally = Tally(specs, slots)
        records = _phase(client, [s for s in specs if s["executor"] != EMULATION], tally,
                         progress)
        emulated = [s for s in specs if s["executor"] == EMULATION]
        if emulated:
            tally.emulating = True  # one emulation per host
            records += _phase(client, emulated, tally, progress)
        return records
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
