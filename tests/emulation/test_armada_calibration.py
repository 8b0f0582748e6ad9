"""``testbed calibrate armada-detector`` at its small size: the real detector under CPU quotas.

Two shares are measured on real processes in real cgroups; the file must be what the
simulator reads, the quota must show (less CPU, slower frames), the small probe must
cost less than a frame, and nothing the measurement made may be left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from testbed.systems.armada.calibration_run import (
    SIZES,
    run_calibration,
    write_calibration_report,
)
from testbed.systems.armada.sim_calibration import DEFAULT_PATH, load_calibration

pytestmark = pytest.mark.emulation


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("calibration")
    committed = DEFAULT_PATH.read_bytes() if DEFAULT_PATH.exists() else None
    run_calibration("small", out, progress=lambda _line: None)
    # the small size never replaces the committed calibration
    assert (DEFAULT_PATH.read_bytes() if DEFAULT_PATH.exists() else None) == committed
    return out


def test_the_file_is_what_the_simulator_reads(measured: Path) -> None:
    cal = load_calibration(measured / DEFAULT_PATH.name)
    assert [s.cores for s in cal.shares] == list(SIZES["small"].shares)
    assert cal.frame_bytes > cal.probe_small_bytes > 0
    for share in cal.shares:
        assert len(share.frame_s) == 30  # every frame of the set, one round
        assert len(share.startup_s) == 1
        assert share.startup_s[0] > max(share.frame_s)  # importing OpenCV takes a while
    doc = json.loads((measured / DEFAULT_PATH.name).read_text())
    assert doc["size"] == "small" and doc["machine"]["cpus"]


def test_the_quota_shows_and_a_small_probe_costs_less(measured: Path) -> None:
    cal = load_calibration(measured / DEFAULT_PATH.name)
    low, high = cal.shares
    assert np.median(low.frame_s) > np.median(high.frame_s)
    for share in cal.shares:
        assert np.median(share.probe_small_s) < np.median(share.frame_s)
    # the replica's own processing is part of, and below, the request's time
    doc = json.loads((measured / DEFAULT_PATH.name).read_text())
    for raw in doc["shares"]:
        assert all(p < t for p, t in zip(raw["frame_processing_s"], raw["frame_s"],
                                         strict=True))


def test_nothing_is_left_behind(measured: Path) -> None:
    del measured
    leftovers = [p for root in (Path("/sys/fs/cgroup/cpu/edge-testbed"),
                                Path("/sys/fs/cgroup/edge-testbed"))
                 if root.exists() for p in root.glob("armada-cal-*")]
    assert leftovers == []
    assert not list(Path("/run/edge-testbed/secrets").glob("armada-cal-*"))


def test_the_report_gives_every_share(measured: Path, tmp_path: Path) -> None:
    report = write_calibration_report(measured, tmp_path / "calibration.md", "test")
    text = report.read_text()
    for cores in SIZES["small"].shares:
        assert f"\n| {cores:g} | 1 | " in text
