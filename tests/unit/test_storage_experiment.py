"""The armada-storage driver's pure parts: the generated scenario and the trace rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.analysis.traces import rows_to_frame
from testbed.systems.armada.builders import SITE_DELAYS_MS, site_location, site_name
from testbed.systems.armada.storage_experiment import (
    SIZES,
    Stream,
    _row,
    stats_ms,
    storage_scenario,
)


@pytest.mark.parametrize("size", ["small", "full"])
def test_scenario_has_a_captain_and_a_cargo_per_site(size: str, tmp_path: Path) -> None:
    plan = SIZES[size]
    scen = storage_scenario(plan, tmp_path)
    programs = [s.program for s in scen.services]
    assert programs.count("armada.captain") == programs.count("armada.cargo") == plan.sites
    assert {"armada.beacon", "armada.app_manager", "armada.spinner",
            "armada.cargo_manager"} <= set(programs)
    appmgr = next(s for s in scen.services if s.program == "armada.app_manager")
    assert appmgr.params["topn"] == 1  # the paper's storage runs
    cargo = next(s for s in scen.services if s.program == "armada.cargo")
    assert str(tmp_path) in cargo.params["data_dir"]
    # sites farther east sit behind longer ISP paths
    lons = [site_location(i)[1] for i in range(plan.sites)]
    assert lons == sorted(lons)
    delays = {lk.b if lk.a == "wan" else lk.a: lk.delay_ms for lk in scen.topology.links
              if "wan" in (lk.a, lk.b)}
    assert [delays[f"s{i + 1:02d}"] for i in range(plan.sites)] == list(
        SITE_DELAYS_MS[:plan.sites])


def test_too_few_sites_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sites"):
        storage_scenario(SIZES["small"].__class__(sites=2, frames=5), tmp_path)


def test_rows_fit_the_trace_schema() -> None:
    stream = Stream("nearest", "read-write", 0, site_name(0))
    answer = {"server_arrival": 10.01, "start": 10.02, "end": 10.10, "queue_ms": 10.0,
              "performed": ["read", "write"], "inserted": True}
    ok = _row("r", stream, 0, 1500, 10.0, 10.12, 9.0, answer, None)
    failed = _row("r", stream, 1, 7, 10.2, 10.3, 9.0, None, "502: store")
    df = rows_to_frame([ok, failed])
    assert list(df["outcome"]) == ["ok", "error"]
    assert ok["op"] == "read+write" and ok["bytes"] == 1032 and ok["key"] == "1500"
    assert ok["service_s"] == pytest.approx(0.08) and ok["wait_s"] == pytest.approx(0.01)
    assert ok["network_s"] == pytest.approx(0.12 - 0.08 - 0.01)


def test_stats_of_nothing_and_something() -> None:
    assert stats_ms([])["n"] == 0
    got = stats_ms([1.0, 2.0, 3.0])
    assert got["mean_ms"] == 2.0 and got["max_ms"] == 3.0
