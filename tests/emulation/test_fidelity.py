"""The fidelity guard on real runs: every measure recorded, and a run beside a CPU hog
marked degraded with a warning.

Both runs replay the built-in ``continuum`` scenario briefly (one policy, 10 model s:
half a second of wall time per replay). The plain run is not asserted healthy, since a
busy CI machine may rightly degrade it; its measures are checked instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from testbed.calibrate import process_cpu_seconds
from testbed.poll import wait_until
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario

pytestmark = pytest.mark.emulation
HOG_LIMIT_S = 60  # each busy loop ends by itself after this, whatever happens here
BUSY_LOOP = ("import time\nend = time.monotonic() + {limit}\n"
             "while time.monotonic() < end:\n    pass\n")


def _short_run(tmp_path: Path, name: str) -> tuple[dict, list[str]]:
    scenario = load_scenario("continuum").with_overrides(duration=10, policies=["jsq"])
    lines: list[str] = []
    folder = run_scenario(scenario, out=tmp_path / name, progress=lines.append,
                          ledger_root=tmp_path / "ledgers")
    return json.loads((folder / "metadata.json").read_text()), lines


@contextmanager
def cpu_hog() -> Iterator[list[int]]:
    """One busy loop per core (at least two), running until the ``with`` ends."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=HOG_LIMIT_S)])
             for _ in range(max(2, os.cpu_count() or 1))]
    try:
        wait_until(lambda: all(process_cpu_seconds(p.pid) > 0.05 for p in procs), 10.0,
                   "the busy loops to spin")
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_run_records_every_measure(tmp_path: Path) -> None:
    meta, _lines = _short_run(tmp_path, "plain")
    verdict = meta["fidelity"]
    assert set(verdict) == {"degraded", "reasons", "degraded_policies", "measures",
                            "thresholds", "absent"}
    measures = verdict["measures"]
    assert 0.0 <= measures["host_idle_share"] <= 1.0
    assert measures["dispatch_lag"]["count"] == meta["trace"]["n"]  # one row per task
    assert measures["dispatch_lag"]["p99_ms"] >= 0
    if meta["shaping_backend"] == "userspace":
        late = measures["shaper_lateness"]
        assert late["count"] > 0 and 0 <= late["p50_ms"] <= late["p99_ms"] <= late["max_ms"]
    else:  # netem reports no lateness: absent, not zero
        assert measures["shaper_lateness"] is None and "shaper_lateness" in verdict["absent"]
    paths = {(p["client"], p["target"]): p for p in measures["rtt"]}
    assert set(paths) == {("c1", "edge"), ("c1", "cloud"), ("c2", "edge"), ("c2", "cloud")}
    for path in paths.values():
        assert path["error"] is None and path["samples"] > 0
        # a delayed link never delivers before its delay (less the jitter's downward half)
        assert path["min_ms"] >= path["configured_ms"] - 2 * path["jitter_ms"]
    assert paths["c1", "cloud"]["configured_ms"] == 42.0


def test_a_run_beside_a_cpu_hog_is_degraded_and_says_so(tmp_path: Path) -> None:
    with cpu_hog():
        meta, lines = _short_run(tmp_path, "loaded")
    verdict = meta["fidelity"]
    assert verdict["degraded"] is True
    assert verdict["measures"]["host_idle_share"] < verdict["thresholds"]["min_host_idle_share"]
    idle = [r for r in verdict["reasons"] if r.startswith("host CPU idle share")]
    assert idle, verdict["reasons"]
    warnings = [line for line in lines if line.startswith("warning: degraded emulation:")]
    assert len(warnings) == 1 and idle[0] in warnings[0]
