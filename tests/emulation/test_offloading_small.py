"""The small offloading experiment with both executors, end to end (root only).

Checks that the claims report is produced with every claim section and numbers from
both executors; whether the claims hold is what the report is for, not this test.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from testbed.systems.offloading import claims
from testbed.systems.offloading import experiment as offloading


@pytest.mark.emulation
def test_small_offloading_experiment_writes_the_claims_report(tmp_path):
    # Run folders hold the delayer's Unix socket: keep their path short (108-byte limit).
    with tempfile.TemporaryDirectory(prefix="tbo", dir="/tmp") as runs:
        metrics = offloading.run_experiment("small", ["sim", "emulation"], Path(runs),
                                            progress=lambda _line: None)
    for run in metrics["runs"].values():
        if "emulation" in run:  # every run on both executors replayed one trace
            assert run["sim"]["trace_sha256"] == run["emulation"]["trace_sha256"]
    both = [p for p in metrics["points"] if p["executors"] == ["sim", "emulation"]]
    assert {p["experiment"] for p in both} == {"load", "edge", "burst"}
    for point in both:
        for per in point["policies"].values():
            assert per["sim"]["n"] == per["emulation"]["n"] > 0
            assert per["emulation"]["mean_s"] is not None
            assert "emulation_corrected" in per
    # the penalty and confounder studies run on the simulator only at this size
    assert all(p["executors"] == ["sim"] for p in metrics["points"] if p not in both)
    assert metrics["calibration"] and metrics["offsets"]["per_tier"]
    report = claims.write_report(metrics, tmp_path / "report", "testbed experiment ...")
    text = report.read_text()
    for n in range(1, 8):
        assert f"## Claim {n}:" in text
    assert "| simulation |" in text and "| emulation |" in text
    assert "## Sim-vs-emulation discrepancy" in text
    assert "not run" not in text.lower()
    assert text.count("*Why:*") == 7
    assert (tmp_path / "report" / "burst_emulation.png").exists()
