"""A live ``testbed run`` child for tests that stop, kill or crowd a running emulation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]


def start_continuum(out: Path, ledgers: Path) -> subprocess.Popen:
    """``testbed run continuum`` (400 s, so it outlives the test) into ``out`` with its
    ledger under ``ledgers``; returns once its services answer. When the run ends before
    that, the test fails with its output."""
    env = {**os.environ, "TESTBED_LEDGER_ROOT": str(ledgers)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", "continuum", "--duration", "400",
         "--out", str(out)],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "services answering" in line:
            return proc
    proc.wait()
    pytest.fail("run ended before its services answered:\n" + "".join(lines))
