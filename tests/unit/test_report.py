"""Tests of the report layer: CDF plots and tables."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.analysis.run_summary import summarize
from testbed.reports.latency_report import format_table, plot_cdfs
from tests.unit.trace_frames import frame

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def base_latencies() -> list[float]:
    return list(np.random.default_rng(1).exponential(0.05, size=300))


# --- plots ------------------------------------------------------------------------------


@pytest.mark.parametrize("log_x", [False, True])
def test_plot_cdfs_writes_one_png_per_policy_and_combined(tmp_path, base_latencies, log_x):
    df = frame({"jsq": base_latencies, "random/v2": [x + 0.01 for x in base_latencies]})
    paths = plot_cdfs(df, tmp_path / "plots", log_x=log_x)
    names = [p.name for p in paths]
    assert names == ["cdf_jsq.png", "cdf_random_v2.png", "cdf_all.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_plot_cdfs_policy_without_completed_tasks(tmp_path):
    df = frame({"a": [0.1, 0.2], "b": [0.1, 0.2]}, failed={("b", 0), ("b", 1)})
    paths = plot_cdfs(df, tmp_path)
    assert all(p.is_file() for p in paths) and len(paths) == 3


# --- table ------------------------------------------------------------------------------


def test_format_table(base_latencies):
    df = frame({"jsq": base_latencies, "random": base_latencies}, failed={("random", 3)})
    summary = summarize(df)
    text = format_table(summary)
    lines = text.splitlines()
    assert lines[0].split() == ["policy", "n", "failed", "mean_ms", "p50_ms", "p95_ms", "p99_ms"]
    assert len({len(line) for line in lines}) == 1  # fixed width
    jsq = lines[1].split()
    assert jsq[:3] == ["jsq", "300", "0"]
    assert float(jsq[3]) == pytest.approx(summary["policies"]["jsq"]["mean_ms"], abs=0.005)
    assert lines[2].split()[:3] == ["random", "300", "1"]


def test_format_table_missing_values():
    summary = summarize(frame({"a": [0.1]}, failed={("a", 0)}))
    assert format_table(summary).splitlines()[1].split() == ["a", "1", "1", "-", "-", "-", "-"]
