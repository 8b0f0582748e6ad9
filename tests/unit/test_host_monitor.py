"""Tests of the host CPU fidelity monitor (``testbed.host_monitor``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.errors import TestbedError
from testbed.host_monitor import CpuTimes, HostMonitor, idle_share, parse_cpu_times

STAT = """cpu  {user} 0 {system} {idle} {iowait} 0 0 0 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
intr 12345
"""


def stat_text(user: int, system: int, idle: int, iowait: int = 0) -> str:
    """``/proc/stat`` text with the given aggregate counters."""
    return STAT.format(user=user, system=system, idle=idle, iowait=iowait)


def test_parse_and_idle_share() -> None:
    before = parse_cpu_times(stat_text(100, 50, 800, 50))
    assert before == CpuTimes(total=1000, idle=850)
    after = parse_cpu_times(stat_text(160, 70, 820, 50))
    assert idle_share(before, after) == pytest.approx(20 / 100)
    assert idle_share(before, before) == 1.0
    with pytest.raises(TestbedError, match="no aggregate 'cpu' line"):
        parse_cpu_times("intr 1 2 3\n")


def test_summary_from_a_controlled_stat_file(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(stat_text(0, 0, 1000))
    monitor = HostMonitor(interval_s=60.0, threshold=0.25, stat_path=stat).start()
    stat.write_text(stat_text(850, 50, 1100))  # 1000 jiffies, 100 idle
    summary = monitor.stop()
    assert summary.idle_share == pytest.approx(0.1)
    assert summary.intervals == 1 and summary.saturated_intervals == 1
    assert summary.saturated and summary.threshold == 0.25
    assert monitor.stop() == summary  # stopping twice changes nothing
    assert summary.to_dict()["idle_share"] == pytest.approx(0.1)


def test_busy_loops_on_every_core_show_as_saturation() -> None:
    cores = os.cpu_count() or 1
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)
    ]
    try:
        time.sleep(0.3)  # let the interpreters start
        with HostMonitor(interval_s=0.25, threshold=0.3) as monitor:
            time.sleep(1.0)
        busy = monitor.summary()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert busy.intervals >= 3
    assert 0.0 <= busy.min_idle_share <= busy.idle_share < 0.3
    assert busy.saturated and busy.saturated_intervals >= 1
    assert busy.duration_s == pytest.approx(1.0, abs=0.2)
    assert busy.cores == cores


def test_an_idle_wait_is_not_saturated_at_a_zero_threshold() -> None:
    with HostMonitor(interval_s=0.1, threshold=0.0) as monitor:
        time.sleep(0.3)
    summary = monitor.summary()
    assert 0.0 <= summary.idle_share <= 1.0
    assert not summary.saturated
    assert [s.wall for s in monitor.samples] == sorted(s.wall for s in monitor.samples)


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        HostMonitor(interval_s=0)
    with pytest.raises(ValueError, match="threshold"):
        HostMonitor(threshold=1.5)
    with pytest.raises(TestbedError, match="never started"):
        HostMonitor().stop()
    monitor = HostMonitor(interval_s=10).start()
    with pytest.raises(TestbedError, match="already started"):
        monitor.start()
    monitor.stop()
