"""Starting a delayer process for a run: recorded in the run's ledger, awaited until it answers.

The process runs ``python -m testbed.emulation.delayer`` from the repository root in a
session of its own, logging to ``delayer.log`` in its work folder; its ledger entry (a
process entry with ``role: delayer``) lets teardown, or ``clean`` after a crash, end it,
and its TAPs vanish with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from testbed.emulation.cpu_partition import Partition, cpu_list
from testbed.emulation.delayer.client import DelayerClient
from testbed.emulation.delayer.compiled import FIFO_ENV
from testbed.emulation.ledger import Ledger
from testbed.emulation.tap_rx import check_rx
from testbed.errors import EmulationError

#: The repository root, the process's working folder (so ``-m`` finds the package).
ROOT = Path(__file__).resolve().parents[3]


def start_delayer(ledger: Ledger, workdir: str | Path, timeout: float = 10.0,
                  data_path: str | None = None, rx: str | None = None,
                  fifo: int | None = None, cpus: Partition | None = None) -> DelayerClient:
    """Start a delayer process, record it in ``ledger`` and wait until it answers.

    ``data_path`` (``auto``, ``c``, ``python``) forces who relays frames; None leaves it to
    the environment (``TESTBED_SHAPER``) or detection. ``rx`` (``inline``, ``threaded``)
    is the receive mode of links that do not name one; None leaves it to
    ``TESTBED_SHAPER_RX`` (see :mod:`testbed.emulation.tap_rx`). ``fifo`` is the compiled
    shaper's SCHED_FIFO priority (0: SCHED_OTHER); None leaves it to ``TESTBED_SHAPER_FIFO``.
    ``cpus`` confines the delayer to its ``shaper`` CPUs; None leaves it to
    ``TESTBED_SHAPER_CPUS`` (see :mod:`testbed.emulation.cpu_partition`).
    """
    if fifo is not None and not 0 <= fifo <= 99:
        raise EmulationError(f"fifo: expected a priority from 0 (SCHED_OTHER) to 99, got {fifo}")
    env = None if fifo is None else {**os.environ, FIFO_ENV: str(fifo)}
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    control = workdir / "delayer.sock"
    log_path = workdir / "delayer.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.emulation.delayer", "--control", str(control),
             *(["--data-path", data_path] if data_path else []),
             *(["--rx", check_rx(rx)] if rx else []),
             *(["--cpus", cpu_list(cpus.shaper)] if cpus else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            cwd=str(ROOT), env=env)
    entry = ledger.record_process(proc.pid, role="delayer", control=str(control))
    client = DelayerClient(control, ledger=ledger, entry=entry)
    client.process = proc
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            ledger.forget(entry)
            tail = log_path.read_text(errors="replace")[-2000:]
            raise EmulationError(f"the delayer exited with {proc.returncode}: {tail}")
        if control.exists() and client.alive():
            return client
        if time.monotonic() > deadline:
            ledger.release(entry)
            raise EmulationError(f"the delayer did not answer on {control} within {timeout} s")
        time.sleep(0.01)
