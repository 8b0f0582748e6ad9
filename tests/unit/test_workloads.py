"""Tests of the workload generators and the materialised trace format."""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workloads
from testbed.errors import TestbedError
from testbed.registry import generate, generators
from workloads.trace import Task, read_trace, write_trace

BURSTY = {"rate": 2.0, "mu": 1.0, "burst": {"on_mean_s": 2.0, "off_mean_s": 6.0, "factor": 4.0}}
GEN = generators()["bursty-pareto"]


def _xm(mu: float, alpha: float) -> float:
    return (alpha - 1) / (alpha * mu)


# --- trace files -------------------------------------------------------------------------


def test_trace_round_trip_is_exact(tmp_path):
    tasks = generate("bursty-pareto", BURSTY, ["c1", "c2"], 50.0, seed=7)
    meta = {"generator": "bursty-pareto", "params": BURSTY, "seed": 7}
    path = write_trace(tasks, tmp_path, meta)
    assert path == tmp_path / "trace.csv"
    assert path.read_text().splitlines()[0] == "task_id,client,arrival,size,cls"
    back, back_meta = read_trace(tmp_path)
    assert back == tasks
    assert back_meta["n"] == len(tasks)
    assert back_meta["seed"] == 7 and back_meta["params"] == BURSTY
    assert len(back_meta["sha256"]) == 64


def test_write_trace_sorts_and_rewrites_digest(tmp_path):
    tasks = [Task(1, "b", 2.0, 0.5, "small"), Task(0, "a", 1.0, 0.25, "small")]
    write_trace(tasks, tmp_path, {"sha256": "stale", "n": 99})
    back, meta = read_trace(tmp_path)
    assert [t.task_id for t in back] == [0, 1]
    assert meta["n"] == 2 and meta["sha256"] != "stale"


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e6, allow_nan=False),
            st.floats(min_value=1e-300, max_value=1e6, allow_nan=False),
            st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1),
        ),
        max_size=20,
    )
)
def test_trace_round_trip_any_floats_and_names(tmp_path_factory, rows):
    tasks = [Task(i, name, arrival, size, "small") for i, (arrival, size, name) in enumerate(rows)]
    folder = tmp_path_factory.mktemp("trace")
    write_trace(tasks, folder, {})
    back, _ = read_trace(folder)
    assert back == sorted(tasks, key=lambda t: (t.arrival, t.task_id))


def test_write_trace_refuses_duplicate_ids(tmp_path):
    tasks = [Task(0, "a", 0.0, 1.0, "small"), Task(0, "a", 1.0, 1.0, "small")]
    with pytest.raises(TestbedError, match="task_id 0"):
        write_trace(tasks, tmp_path, {})


@pytest.mark.parametrize(
    "task",
    [
        Task(0, "a\nb", 0.0, 1.0, "small"),
        Task(0, "a", 0.0, 1.0, ""),
        Task(0, "a", -1.0, 1.0, "small"),
        Task(0, "a", math.nan, 1.0, "small"),
        Task(0, "a", 0.0, 0.0, "small"),
    ],
)
def test_write_trace_refuses_unreadable_tasks(tmp_path, task):
    with pytest.raises(TestbedError, match="task 0"):
        write_trace([task], tmp_path, {})


def test_read_trace_detects_tampering(tmp_path):
    write_trace([Task(0, "a", 0.5, 1.0, "small")], tmp_path, {})
    csv_path = tmp_path / "trace.csv"
    csv_path.write_text(csv_path.read_text().replace("0.5", "0.6"))
    with pytest.raises(TestbedError, match=r"trace\.csv: sha256 .* does not match"):
        read_trace(tmp_path)


def _rewrite(folder, text):
    """Replace the CSV and re-sign it so only row validation can fail."""
    write_trace([], folder, {})
    (folder / "trace.csv").write_text(text)
    meta = json.loads((folder / "trace.json").read_text())
    meta["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    meta["n"] = text.count("\n") - 1
    (folder / "trace.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("0,a,0.5,1.0\n", "expected 5 fields"),
        ("x,a,0.5,1.0,small\n", "task_id is not an integer"),
        ("0,a,zero,1.0,small\n", "arrival is not a number"),
        ("0,a,0.5,0,small\n", "size must be a finite number > 0"),
        ("0,a,-1,1,small\n", "arrival must be a finite number >= 0"),
        ("0,a,0.5,nan,small\n", "size must be a finite number"),
        ("0,,0.5,1,small\n", "client is empty"),
        ("0,a,0.5,1.0,small\n0,a,0.6,1.0,small\n", "task_id 0 appears more than once"),
        ("0,a,0.5,1.0,small\n1,a,0.4,1.0,small\n", "sorted by arrival"),
    ],
)
def test_read_trace_names_file_and_line_of_bad_rows(tmp_path, body, message):
    _rewrite(tmp_path, "task_id,client,arrival,size,cls\n" + body)
    bad_line = body.count("\n") + 1
    with pytest.raises(TestbedError, match=message) as info:
        read_trace(tmp_path)
    assert f"trace.csv:{bad_line}:" in str(info.value)


def test_read_trace_bad_header_and_missing_files(tmp_path):
    with pytest.raises(TestbedError, match="not found"):
        read_trace(tmp_path)
    _rewrite(tmp_path, "id,client,arrival,size,cls\n")
    with pytest.raises(TestbedError, match=r"trace\.csv:1: expected header"):
        read_trace(tmp_path)


def test_read_trace_checks_count(tmp_path):
    write_trace([Task(0, "a", 0.5, 1.0, "small")], tmp_path, {})
    meta = json.loads((tmp_path / "trace.json").read_text())
    meta["n"] = 3
    (tmp_path / "trace.json").write_text(json.dumps(meta))
    with pytest.raises(TestbedError, match="n is 3"):
        read_trace(tmp_path)


# --- registry ----------------------------------------------------------------------------


def test_registry_and_unknown_generator():
    assert "bursty-pareto" in generators()
    assert GEN.name == "bursty-pareto"
    with pytest.raises(TestbedError, match="known: bursty-pareto"):
        generate("nope", BURSTY, ["a"], 1.0, 0)


@pytest.mark.parametrize(
    ("clients", "duration", "seed"),
    [([], 1.0, 0), (["a", "a"], 1.0, 0), (["a"], 0.0, 0), (["a"], math.inf, 0), (["a"], 1.0, -1)],
)
def test_generate_refuses_bad_arguments(clients, duration, seed):
    with pytest.raises(TestbedError):
        generate("bursty-pareto", BURSTY, clients, duration, seed)


def test_generate_wraps_param_errors():
    with pytest.raises(TestbedError, match=r"params\.mu: expected"):
        generate("bursty-pareto", {"rate": 1.0}, ["a"], 1.0, 0)


# --- bursty-pareto -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"mu": 1.0}, "params.rate"),
        ({"rate": 1.0}, "params.mu"),
        ({"rate": 0, "mu": 1.0}, "params.rate"),
        ({"rate": True, "mu": 1.0}, "params.rate"),
        ({"rate": "1", "mu": 1.0}, "params.rate"),
        ({"rate": 1.0, "mu": math.nan}, "params.mu"),
        ({"rate": 1.0, "mu": 1.0, "alpha": 2.0}, "params.alpha"),
        ({"rate": 1.0, "mu": 1.0, "rte": 1.0}, "params.rte"),
        ({"rate": 1.0, "mu": 1.0, "burst": 3}, "params.burst"),
        (
            {"rate": 1.0, "mu": 1.0, "burst": {"on_mean_s": 1, "off_mean_s": 1}},
            "params.burst.factor",
        ),
        (
            {"rate": 1.0, "mu": 1.0, "burst": {"on_mean_s": 1, "off_mean_s": -1, "factor": 2}},
            "params.burst.off_mean_s",
        ),
        (
            {
                "rate": 1.0,
                "mu": 1.0,
                "burst": {"on_mean_s": 1, "off_mean_s": 1, "factor": 2, "x": 1},
            },
            "params.burst.x",
        ),
    ],
)
def test_validation_messages(params, field):
    with pytest.raises(ValueError) as info:
        GEN.validate(params)
    assert re.match(re.escape(field) + ": expected .*, found ", str(info.value))


def test_valid_params_pass():
    GEN.validate(BURSTY)
    GEN.validate({"rate": 1, "mu": 2, "alpha": 3})


def test_determinism_and_seed_sensitivity():
    a = generate("bursty-pareto", BURSTY, ["a", "b"], 100.0, seed=3)
    b = generate("bursty-pareto", BURSTY, ["a", "b"], 100.0, seed=3)
    c = generate("bursty-pareto", BURSTY, ["a", "b"], 100.0, seed=4)
    assert a == b
    assert a != c


def test_clients_have_independent_streams():
    """Adding a client leaves the existing clients' tasks unchanged."""
    one = generate("bursty-pareto", BURSTY, ["a"], 100.0, seed=3)
    two = generate("bursty-pareto", BURSTY, ["a", "b"], 100.0, seed=3)
    strip = [(t.arrival, t.size, t.cls) for t in one]
    assert strip == [(t.arrival, t.size, t.cls) for t in two if t.client == "a"]
    assert any(t.client == "b" for t in two)


def test_sorted_ids_and_arrivals_within_duration():
    tasks = generate("bursty-pareto", BURSTY, ["a", "b", "c"], 200.0, seed=1)
    assert [t.task_id for t in tasks] == list(range(len(tasks)))
    arrivals = [t.arrival for t in tasks]
    assert arrivals == sorted(arrivals)
    assert all(0.0 <= a < 200.0 for a in arrivals)


@pytest.mark.parametrize("alpha", [2.5, 3.0])
def test_size_distribution(alpha):
    mu = 4.0
    params = {"rate": 1000.0, "mu": mu, "alpha": alpha}
    tasks = generate("bursty-pareto", params, ["a"], 200.0, seed=11)
    sizes = np.array([t.size for t in tasks])
    x_m = _xm(mu, alpha)
    assert GEN.min_service_time(params) == pytest.approx(x_m)
    assert sizes.min() >= x_m
    assert sizes.mean() == pytest.approx(1 / mu, rel=0.03)
    threshold = x_m * 10 ** (1 / alpha)
    large = np.array([t.cls == "large" for t in tasks])
    assert np.array_equal(large, sizes > threshold)
    assert large.mean() == pytest.approx(0.1, abs=0.01)


def test_default_alpha_is_2_5():
    assert GEN.min_service_time({"rate": 1.0, "mu": 1.0}) == pytest.approx(_xm(1.0, 2.5))


def test_poisson_rate_without_burst():
    tasks = generate("bursty-pareto", {"rate": 5.0, "mu": 1.0}, ["a", "b"], 2000.0, seed=5)
    expected = 5.0 * 2 * 2000.0
    assert len(tasks) == pytest.approx(expected, rel=0.03)
    gaps = np.diff([t.arrival for t in tasks if t.client == "a"])
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.03)
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)  # exponential gaps


def test_bursty_rate_averages_over_on_off():
    rate, on, off, factor = 2.0, 2.0, 6.0, 4.0
    duration = 20_000.0
    tasks = generate("bursty-pareto", BURSTY, ["a"], duration, seed=9)
    expected = rate * (off + factor * on) / (on + off) * duration
    assert len(tasks) == pytest.approx(expected, rel=0.05)


def test_bursts_make_counts_overdispersed():
    """Counts per window vary more than Poisson (variance/mean > 1) under bursts."""
    tasks = generate("bursty-pareto", BURSTY, ["a"], 5000.0, seed=2)
    counts = np.bincount([int(t.arrival // 10.0) for t in tasks], minlength=500)
    assert counts.var() / counts.mean() > 2.0
    plain = generate("bursty-pareto", {"rate": 2.0, "mu": 1.0}, ["a"], 5000.0, seed=2)
    counts = np.bincount([int(t.arrival // 10.0) for t in plain], minlength=500)
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.2)


def test_module_exports():
    assert workloads.Task is Task
    assert workloads.write_trace is write_trace


# --- deterministic burst schedule --------------------------------------------------------

SCHEDULE = {"rate": 5.0, "mu": 1.0,
            "bursts": [{"start_s": 400.0, "duration_s": 200.0, "factor": 4.0},
                       {"start_s": 100.0, "duration_s": 100.0, "factor": 2.0}]}


def test_burst_schedule_sets_the_rate_inside_each_window():
    tasks = generate("bursty-pareto", SCHEDULE, ["a"], 1000.0, seed=4)
    arrivals = np.array([t.arrival for t in tasks])

    def rate(lo, hi):
        return ((arrivals >= lo) & (arrivals < hi)).sum() / (hi - lo)

    assert rate(0, 100) == pytest.approx(5.0, rel=0.15)
    assert rate(100, 200) == pytest.approx(10.0, rel=0.1)
    assert rate(200, 400) == pytest.approx(5.0, rel=0.1)
    assert rate(400, 600) == pytest.approx(20.0, rel=0.05)
    assert rate(600, 1000) == pytest.approx(5.0, rel=0.1)


def test_burst_schedule_is_deterministic_and_keeps_sizes():
    """The schedule draws no phases, and sizes do not depend on the arrival parameters."""
    one = generate("bursty-pareto", SCHEDULE, ["a", "b"], 300.0, seed=2)
    assert one == generate("bursty-pareto", SCHEDULE, ["a", "b"], 300.0, seed=2)
    plain = generate("bursty-pareto", {"rate": 5.0, "mu": 1.0}, ["a"], 300.0, seed=2)
    mine = [t.size for t in one if t.client == "a"]
    shared = min(len(mine), len(plain))
    assert mine[:shared] == [t.size for t in plain][:shared]


def test_burst_schedule_windows_at_zero_and_past_the_end():
    params = {"rate": 2.0, "mu": 1.0,
              "bursts": [{"start_s": 0, "duration_s": 10, "factor": 3},
                         {"start_s": 10, "duration_s": 5, "factor": 0.5},
                         {"start_s": 90, "duration_s": 50, "factor": 2},
                         {"start_s": 500, "duration_s": 1, "factor": 9}]}
    GEN.validate(params)
    tasks = generate("bursty-pareto", params, ["a"], 100.0, seed=1)
    assert tasks and all(0.0 <= t.arrival < 100.0 for t in tasks)


@pytest.mark.parametrize(
    ("bursts", "field"),
    [
        ("soon", "params.bursts"),
        ([3], "params.bursts[0]"),
        ([{"start_s": 1, "duration_s": 1}], "params.bursts[0].factor"),
        ([{"start_s": -1, "duration_s": 1, "factor": 2}], "params.bursts[0].start_s"),
        ([{"start_s": True, "duration_s": 1, "factor": 2}], "params.bursts[0].start_s"),
        ([{"start_s": 1, "duration_s": 0, "factor": 2}], "params.bursts[0].duration_s"),
        ([{"start_s": 1, "duration_s": 1, "factor": 2, "x": 1}], "params.bursts[0].x"),
        ([{"start_s": 5, "duration_s": 10, "factor": 2},
          {"start_s": 0, "duration_s": 6, "factor": 2}], "params.bursts[0].start_s"),
    ],
)
def test_burst_schedule_validation(bursts, field):
    with pytest.raises(ValueError) as info:
        GEN.validate({"rate": 1.0, "mu": 1.0, "bursts": bursts})
    assert re.match(re.escape(field) + ": expected .*, found ", str(info.value))


def test_burst_schedule_excludes_the_random_model():
    with pytest.raises(ValueError, match="params.bursts: expected no random burst model"):
        GEN.validate({**BURSTY, "bursts": []})
