"""``armada-storage`` without emulation: its study files' scenarios, the trace rows the
user writes, and the metric and claim functions on hand-made rows and runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from testbed.analysis.traces import rows_to_frame
from testbed.reports.claims_index import FAILS, HOLDS
from testbed.study.spec import load_study
from testbed.systems.armada.builders import (
    SITE_DELAYS_MS,
    armada_storage,
    cargo_node,
    site_location,
    site_name,
)
from testbed.systems.armada.storage_control import Stream, frame_row
from testbed.systems.armada.storage_experiment import (
    claims,
    fault_conditions,
    isp_delays,
    near_conditions,
    selection_table,
    stream_numbers,
)

STUDIES = Path(__file__).resolve().parents[2] / "testbed/systems/armada/studies/storage"


@pytest.mark.parametrize("size", ["small", "full"])
def test_every_site_has_a_captain_and_a_cargo_node_of_its_own(size: str) -> None:
    study = load_study(STUDIES / size / "fault.yaml")
    (point,) = study.points()
    scen = study.scenario(point, 0)
    sites = len([s for s in scen.services if s.program == "armada.captain"])
    programs = [s.program for s in scen.services]
    assert programs.count("armada.cargo") == sites == (4 if size == "small" else 6)
    for i in range(sites):
        cargo = next(s for s in scen.services if s.name == f"cargo-{cargo_node(i)}")
        assert cargo.node == cargo_node(i) != site_name(i)
    appmgr = next(s for s in scen.services if s.program == "armada.app_manager")
    assert appmgr.params["topn"] == 1  # the paper's storage runs
    (crash,) = scen.events
    assert crash.target == cargo_node(0) and 0 < crash.at < scen.duration / 2
    lons = [site_location(i)[1] for i in range(sites)]
    assert lons == sorted(lons)  # sites farther east sit behind longer ISP paths
    delays = isp_delays(scen.resolved())
    assert [delays[cargo_node(i)] for i in range(sites)] == list(SITE_DELAYS_MS[:sites])


def test_the_selection_study_sweeps_the_three_workloads() -> None:
    study = load_study(STUDIES / "full" / "storage.yaml")
    modes = [study.scenario(p, 0).workload.params["mode"] for p in study.points()]
    assert modes == ["read", "write", "read-write"]
    small = load_study(STUDIES / "small" / "storage.yaml")
    assert [small.scenario(p, 0).workload.params["mode"] for p in small.points()] == [
        "read-write"]


def test_docker_cargos_keep_their_store_on_a_volume() -> None:
    doc = armada_storage({"sites": 3, "cargo_runtime": "docker"})
    nodes = {n["name"]: n for n in doc["topology"]["nodes"]}
    assert all(nodes[cargo_node(i)]["runtime"] == "docker" for i in range(3))
    process = {n["name"]: n for n in armada_storage({"sites": 3})["topology"]["nodes"]}
    assert "runtime" not in process[cargo_node(0)]


def _answer(performed: list[str], recognised: bool = False) -> dict[str, Any]:
    return {"server_arrival": 10.01, "start": 10.02, "end": 10.10, "queue_ms": 10.0,
            "performed": performed, "inserted": "write" in performed, "read_ms": 4.0,
            "write_ms": 9.0, "recognised": recognised}


def test_rows_fit_the_trace_schema() -> None:
    stream = Stream("nearest", "read-write", 0, site_name(0))
    ok = frame_row("r", stream, 0, 1500, 0.9, 10.0, 10.12, 9.0, _answer(["read", "write"]),
                   None)
    read = frame_row("r", stream, 1, 3, 1.0, 10.2, 10.3, 9.0, _answer(["read"], True), None)
    failed = frame_row("r", stream, 2, 7, 1.1, 10.4, 10.5, 9.0, None, "502: store")
    df = rows_to_frame([ok, read, failed])
    assert list(df["outcome"]) == ["ok", "ok", "error"]
    assert ok["op"] == "read+write" and ok["bytes"] == 1032 and ok["key"] == "1500"
    assert ok["arrival_model"] == 0.9 and ok["dispatch_model"] == pytest.approx(1.0)
    assert ok["service_s"] == pytest.approx(0.08) and ok["wait_s"] == pytest.approx(0.01)
    assert ok["network_s"] == pytest.approx(0.12 - 0.08 - 0.01)
    assert read["write_ms"] is None and read["recognised"] == 1 and ok["recognised"] == 0
    numbers = stream_numbers(df)
    assert numbers == {"frames": 3, "ok": 2, "failed": 1, "read_mean": 4.0, "read_p95": 4.0,
                       "write_mean": 9.0, "write_p95": 9.0, "recognised": 1, "writes": 1,
                       "written": 1}


def _numbers(write_mean: float | None) -> dict[str, Any]:
    return {"frames": 24, "ok": 24, "failed": 0, "read_mean": 5.0, "read_p95": 8.0,
            "write_mean": write_mean, "write_p95": None if write_mean is None else 2 * write_mean,
            "recognised": 10, "written": 8 if write_mean else 0,
            "cargos": [["c01", 1.0], ["c02", 4.0]], "lag_ms": [1.0, 2.0],
            "readback": {"found": 24, "expected": 24, "replicas": 3}}


def _selection(near_write: float, random_write: float) -> list[dict[str, Any]]:
    return [{"mode": mode, "replication": 0, "degraded": False,
             "policies": {"nearest": _numbers(None if mode == "read" else near_write),
                          "random": _numbers(None if mode == "read" else random_write),
                          "eventual": _numbers(None if mode == "read" else 1.0)}}
            for mode in ("read", "write", "read-write")]


def _fault(**changes: Any) -> dict[str, Any]:
    run = {"replication": 0, "degraded": False, "policy": "nearest", "frames": 24, "ok": 24,
           "failed": 0, "read_mean": 5.0, "read_p95": 8.0, "write_mean": 20.0,
           "write_p95": 40.0, "recognised": 10, "written": 8, "cargos": ["c01", "c02", "c03"],
           "serving_cargo": "c01", "lost": ["c01"], "lost_at_s": [0.8],
           "restores": [{"lost": "c01", "cargo_id": "c04", "since_lost_s": 1.2,
                         "since_last_seen_s": 4.0, "copy_s": 0.1, "records": 1008}],
           "readback": {"found": 24, "expected": 24, "replicas": 3},
           "ready_after": ["c02", "c03", "c04"], "event_errors": []}
    return {**run, **changes}


def test_nearest_must_write_faster_than_random_in_every_writing_workload() -> None:
    assert [c.passed for c in near_conditions(_selection(10.0, 30.0))] == [True, True]
    assert [c.passed for c in near_conditions(_selection(30.0, 10.0))] == [False, False]
    table = selection_table(_selection(10.0, 30.0))
    assert len(table["rows"]) == 9 and all(len(r) == len(table["columns"])
                                           for r in table["rows"])


def test_a_cargo_failure_is_judged_on_loss_reads_and_restoration() -> None:
    assert all(fault_conditions(_fault()).values())
    assert not fault_conditions(_fault(serving_cargo="c02"))["the serving Cargo crashed"]
    assert not fault_conditions(_fault(lost=[]))["the serving Cargo crashed"]
    assert not fault_conditions(_fault(failed=1))["no frame failed"]
    short = _fault(readback={"found": 23, "expected": 24, "replicas": 3})
    assert not fault_conditions(short)["every acknowledged write on every replica"]
    assert not fault_conditions(_fault(ready_after=["c01", "c02", "c03"]))[
        "three replicas restored"]
    assert not fault_conditions(_fault(restores=[]))["three replicas restored"]


def test_claims_are_computed_and_not_run_without_their_study() -> None:
    found = {"selection": _selection(10.0, 30.0), "fault": [_fault()]}
    s1, s2 = claims(found)
    assert (s1.verdict, s2.verdict) == (HOLDS, HOLDS)
    assert "3.00-3.00 times" in s1.why and "c04" in s2.why
    _, s2 = claims({"selection": _selection(10.0, 30.0), "fault": [_fault(failed=2)]})
    assert s2.verdict == FAILS and "Not met: no frame failed." in s2.why
    s1, s2 = claims({"selection": [], "fault": []})
    assert s1.verdict == s2.verdict == "not run"


def test_no_write_means_an_empty_write_column() -> None:
    df = rows_to_frame([frame_row("r", Stream("random", "read", 0, "e01"), 0, 3, 0.0, 1.0,
                                  1.1, 0.5, _answer(["read"], True), None)])
    numbers = stream_numbers(pd.DataFrame(df))
    assert numbers["write_mean"] is None and numbers["written"] == 0
