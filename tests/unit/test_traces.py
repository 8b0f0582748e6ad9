"""Tests of the per-task trace schema, its files and the summary."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.run_summary import summarize, write_summary
from testbed.analysis.traces import (
    CORE,
    columns,
    kinds,
    read_traces,
    rows_to_frame,
    schema,
    validate_frame,
    write_traces,
)
from testbed.errors import TestbedError
from testbed.registry import System, TraceKind, register

DOC = Path(__file__).resolve().parents[2] / "docs" / "traces.md"


def row(task_id: int = 0, policy: str = "jsq", latency: float = 0.1, **extra) -> dict:
    """A complete ok row whose latency parts add up to ``latency``."""
    base = {
        "run": "r1",
        "policy": policy,
        "repetition": 0,
        "kind": "task",
        "task_id": task_id,
        "client": "c1",
        "target": "edge1",
        "tier": "edge",
        "size": 0.05,
        "cls": "small",
        "arrival_model": float(task_id),
        "dispatch_model": float(task_id) + 0.001,
        "response_model": float(task_id) + 0.001 + latency,
        "arrival_wall": 1000.0 + task_id,
        "dispatch_wall": 1000.0 + task_id + 0.0001,
        "server_arrival_wall": 1000.0 + task_id + 0.002,
        "start_wall": 1000.0 + task_id + 0.003,
        "end_wall": 1000.0 + task_id + 0.008,
        "response_wall": 1000.0 + task_id + 0.01,
        "latency_s": latency,
        "network_s": latency * 0.2,
        "wait_s": latency * 0.3,
        "service_s": latency * 0.5,
        "latency_wall_s": 0.01,
        "queue_at_arrival": 1,
        "estimate_s": None,
        "state_age_s": 0.05,
        "decision_us": 12.5,
        "outcome": "ok",
        "error": None,
    }
    base.update(extra)
    return base


def failed_row(task_id: int = 0, policy: str = "jsq", outcome: str = "timeout") -> dict:
    """A row of a task that did not complete: no server timestamps or latency parts."""
    r = row(task_id, policy, outcome=outcome, error="timed out after 5 s")
    for key in (
        "response_model",
        "server_arrival_wall",
        "start_wall",
        "end_wall",
        "response_wall",
        "latency_s",
        "network_s",
        "wait_s",
        "service_s",
        "latency_wall_s",
        "queue_at_arrival",
    ):
        del r[key]
    return r


def test_columns_are_ordered_and_typed():
    COLUMNS = columns()
    names = list(COLUMNS)
    assert names[:6] == ["run", "policy", "repetition", "kind", "task_id", "client"]
    assert names.index("error") < names.index("frame_stream")
    assert COLUMNS["latency_s"] == "float64"
    assert COLUMNS["task_id"] == "int64"
    assert COLUMNS["queue_at_arrival"] == "Int64"
    assert COLUMNS["error"] == "string"
    assert set(kinds()) == {"task", "frame", "storage", "search"}
    assert names[:len(CORE)] == [c.name for c in CORE]


def test_every_column_is_documented():
    text = DOC.read_text().split("## Per-task trace")[1]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE))
    assert documented == set(columns())


def test_rows_to_frame_types_and_fills_nullable():
    df = rows_to_frame([row(0), failed_row(1)])
    assert list(df.columns) == list(columns())
    assert {c: str(df[c].dtype) for c in df.columns} == columns()
    assert df.loc[1, "latency_s"] != df.loc[1, "latency_s"]  # NaN
    assert df["queue_at_arrival"].isna().tolist() == [False, True]
    assert df["frame_index"].isna().all()
    assert df["error"].isna().tolist() == [True, False]


def test_rows_to_frame_empty():
    df = rows_to_frame([])
    assert df.empty and list(df.columns) == list(columns())


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{**row(), "bogus": 1}], "trace row 0: unknown columns"),
        ([{k: v for k, v in row().items() if k != "policy"}], "policy is required"),
        ([row(policy=None)], "policy is required but null"),
        ([row(kind="video")], "kind must be one of"),
        ([row(outcome="lost")], "outcome must be one of"),
        ([{**row(), "latency_s": None}], "latency_s is required when outcome is ok"),
        ([{**row(), "task_id": "7"}], "task_id: expected a number"),
        ([row(task_id=1.5)], "task_id: expected an integer"),
        ([row(client=3)], "client: expected text"),
        ([row(size=True)], "size: expected a number"),
        ([row(client="cam\x00")], "client: expected text"),
        ([row(client="cam\ud800")], "client: expected text"),
        ([row(0), row(1), row(2, client=b"c")], r"client: expected text.*\(row 2\)"),
        ([row(0), row(1), row(2, size="9")], r"size: expected a number.*\(row 2\)"),
        ([row(size=1 + 2j)], "size: expected a number"),
        ([row(op="get")], "op is only for rows of kind storage"),
    ],
)
def test_rows_to_frame_refuses_schema_violations(rows, message):
    with pytest.raises(TestbedError, match=message):
        rows_to_frame(rows)


def test_extension_columns_for_their_kind():
    rows = [
        row(0, kind="storage", op="put", key="k1", bytes=1024, replica="store2"),
        row(1, kind="frame", frame_stream="cam1", frame_index=7, frame_deadline_s=0.1),
        row(2, kind="search", step=3, item="node-9"),
    ]
    df = rows_to_frame(rows)
    assert df.loc[0, "bytes"] == 1024 and df.loc[1, "frame_index"] == 7
    assert df.loc[2, "item"] == "node-9"
    assert pd.isna(df.loc[0, "frame_index"]) and pd.isna(df.loc[1, "op"])


def test_validate_frame_accepts_typed_and_concatenated_frames():
    a = rows_to_frame([row(0)])
    b = rows_to_frame([row(0, policy="random")])
    both = validate_frame(pd.concat([a, b]))
    assert list(both.index) == [0, 1]
    assert both["policy"].tolist() == ["jsq", "random"]


@pytest.mark.parametrize("drop_parquet", [False, True])
def test_write_and_read_round_trip(tmp_path, drop_parquet):
    rows = [
        row(0, latency=0.123456789012345),
        failed_row(1, outcome="error"),
        row(2, kind="storage", op="get", key="a,b", bytes=3, replica="s1", estimate_s=0.2),
    ]
    df = rows_to_frame(rows)
    parquet_path, csv_path = write_traces(df, tmp_path)
    assert parquet_path.name == "traces.parquet" and csv_path.name == "traces.csv"
    if drop_parquet:
        parquet_path.unlink()
    back = read_traces(tmp_path)
    pd.testing.assert_frame_equal(back, df, check_exact=True)


def test_read_traces_missing_folder(tmp_path):
    with pytest.raises(TestbedError, match="no traces.parquet or traces.csv"):
        read_traces(tmp_path)


def test_read_traces_bad_csv(tmp_path):
    write_traces(rows_to_frame([row(0)]), tmp_path)
    (tmp_path / "traces.parquet").unlink()
    csv_path = tmp_path / "traces.csv"
    csv_path.write_text(csv_path.read_text().replace("0.05,small", "big,small", 1))
    with pytest.raises(TestbedError, match="cannot read traces"):
        read_traces(tmp_path)


def test_summarize_matches_numpy():
    rng = np.random.default_rng(0)
    latencies = rng.exponential(0.05, size=101)
    rows = [row(i, latency=float(x), target=f"t{i % 3}") for i, x in enumerate(latencies)]
    rows += [failed_row(200), failed_row(201, outcome="error")]
    rows += [row(i, policy="random", latency=0.2) for i in range(4)]
    summary = summarize(rows_to_frame(rows))
    assert list(summary["policies"]) == ["jsq", "random"]
    jsq = summary["policies"]["jsq"]
    assert (jsq["n"], jsq["n_ok"], jsq["n_failed"]) == (103, 101, 2)
    ms = latencies * 1000
    assert jsq["mean_ms"] == pytest.approx(ms.mean())
    for q in (50, 95, 99):
        assert jsq[f"p{q}_ms"] == pytest.approx(np.percentile(ms, q))
    assert jsq["max_ms"] == pytest.approx(ms.max())
    assert jsq["mean_wait_ms"] == pytest.approx(0.3 * ms.mean())
    assert jsq["mean_network_ms"] == pytest.approx(0.2 * ms.mean())
    assert jsq["mean_service_ms"] == pytest.approx(0.5 * ms.mean())
    assert list(jsq["share_by_target"]) == ["edge1", "t0", "t1", "t2"]
    assert sum(jsq["share_by_target"].values()) == pytest.approx(1.0)
    assert jsq["share_by_target"]["edge1"] == pytest.approx(2 / 103)
    assert summary["policies"]["random"]["p99_ms"] == pytest.approx(200.0)


def test_summarize_policy_without_completed_tasks(tmp_path):
    summary = summarize(rows_to_frame([failed_row(0)]))
    entry = summary["policies"]["jsq"]
    assert entry["n_ok"] == 0 and entry["mean_ms"] is None and entry["p99_ms"] is None
    path = write_summary(summary, tmp_path)
    assert path.name == "summary.json"
    assert json.loads(path.read_text()) == summary


def test_schema_flags_are_consistent():
    for column in schema():
        if column.ok_required or column.kind is not None:
            assert column.nullable, column.name


def _probe_system(*trace_kinds: TraceKind) -> System:
    return System(name="trace-probe", description="registers trace kinds",
                  trace_kinds=trace_kinds)


def test_a_registered_kind_brings_its_columns():
    """A system's trace kind adds its extension columns after the others; they are
    refused on rows of another kind and gone again once the system is removed."""
    probe = row(0, kind="probe", probe_hops=3, probe_path="a>b")
    with pytest.raises(TestbedError, match="unknown columns"):
        rows_to_frame([probe])
    unregister = register(_probe_system(TraceKind(
        "probe", "a multi-hop probe", (("probe_hops", "int"), ("probe_path", "string")))))
    try:
        assert list(columns())[-2:] == ["probe_hops", "probe_path"]
        assert kinds()[-1] == "probe"
        df = rows_to_frame([probe, row(1)])
        assert str(df["probe_hops"].dtype) == "Int64" and df.loc[0, "probe_path"] == "a>b"
        with pytest.raises(TestbedError, match="probe_hops is only for rows of kind probe"):
            rows_to_frame([row(2, probe_hops=1)])
    finally:
        unregister()
    assert "probe_hops" not in columns() and "probe" not in kinds()


@pytest.mark.parametrize(("kind", "message"), [
    (TraceKind("probe", "x", (("latency_s", "float"),)), "'latency_s' of kind 'probe' is declared"),
    (TraceKind("probe", "x", (("op", "string"),)), "'op' of kind 'probe' is declared already"),
    (TraceKind("probe", "x", (("probe_when", "datetime"),)), "dtype must be one of string"),
])
def test_a_clashing_or_mistyped_column_is_refused(kind: TraceKind, message: str):
    unregister = register(_probe_system(kind))
    try:
        with pytest.raises(TestbedError, match=message):
            schema()
    finally:
        unregister()


def test_a_kind_two_systems_claim_is_refused():
    with pytest.raises(TestbedError, match="trace kind 'frame' is registered by 'armada'"):
        register(_probe_system(TraceKind("frame", "again")))


def test_numbers_of_every_python_and_numpy_kind_are_read_as_numbers():
    """Object columns are checked without a Python loop where pandas can tell every value
    is a number or a string; the values it cannot classify are checked one by one."""
    rows = [row(0, estimate_s=np.int64(5)), row(1, estimate_s=Fraction(1, 4)),
            row(2, estimate_s=None), row(3, estimate_s=2.5), row(4, estimate_s=pd.NA)]
    df = rows_to_frame(rows)
    assert df["estimate_s"].tolist()[:2] == [5.0, 0.25]
    assert df["estimate_s"].isna().tolist() == [False, False, True, False, True]
