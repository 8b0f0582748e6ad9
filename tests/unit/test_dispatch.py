"""Tests of the dispatcher (``nodes.offloading.dispatcher``) against real tier servers on loopback.

Servers run in-process on ephemeral ports (the entry-point test also starts the
dispatcher as a subprocess). Traces are tiny and compressed with ``time_scale`` 10 so a
run takes well under a second.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nodes.common import make_base_app
from nodes.offloading import dispatcher as dispatch
from nodes.offloading.policies.base import Decision, Outcome, Policy, TaskInfo, View
from nodes.offloading.tier_server import make_app
from testbed.analysis.traces import rows_to_frame
from testbed.errors import EmulationError, TestbedError
from workloads.trace import Task, write_trace

K = 10.0  # time_scale of every test


@asynccontextmanager
async def serving(*apps: web.Application) -> AsyncIterator[list[str]]:
    """Serve ``apps`` on ephemeral loopback ports; yield their base URLs."""
    runners: list[web.AppRunner] = []
    try:
        for app in apps:
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
        yield [f"http://127.0.0.1:{r.addresses[0][1]}" for r in runners]
    finally:
        for runner in runners:
            await runner.cleanup()


def tier(workers: int = 1, speed: float = 1.0) -> web.Application:
    return make_app(workers, speed, K, 1.0)


def make_trace(folder: Path, n: int = 20, gap: float = 0.2, other: int = 3) -> list[Task]:
    """Write a trace with ``n`` tasks of client c1 every ``gap`` model s (+ some of c2)."""
    tasks = [Task(i, "c1", i * gap, 0.1 + 0.05 * (i % 5), "small") for i in range(n)]
    tasks += [Task(n + j, "c2", j * gap + 0.01, 0.2, "small") for j in range(other)]
    write_trace(tasks, folder, {"generator": "test"})
    return [t for t in tasks if t.client == "c1"]


def config(tmp_path: Path, urls: list[str], policy: str = "jsq", **extra: Any) -> dict[str, Any]:
    """A dispatcher config for client c1 of the trace in ``tmp_path/trace``."""
    cfg: dict[str, Any] = {
        "run": "r1",
        "client": "c1",
        "policy": policy,
        "policy_seed": 3,
        "repetition": 0,
        "trace": str(tmp_path / "trace"),
        "targets": [
            {"name": f"t{i}", "tier": "edge" if i == 0 else "cloud", "url": url}
            for i, url in enumerate(urls)
        ],
        "poll_interval_s": 0.01,
        "time_scale": K,
        "start_at": None,
        "out": str(tmp_path / "out" / "rows.jsonl"),
        "timeout_s": 50.0,
        "ready_timeout_s": 2.0,
    }
    cfg.update(extra)
    return cfg


def free_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Recorder(Policy):
    """A test policy: round-robin, remembering what it was shown and told."""

    oracle: bool = False
    true_state: bool = False
    views: list[tuple[TaskInfo, View]] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = "recorder"
        self.sees_sizes = self.oracle
        self.needs_true_state = self.true_state

    def choose(self, task: TaskInfo, view: View) -> Decision:
        self.views.append((task, view))
        names = sorted(view.targets)
        return Decision(names[len(self.views) % len(names)], estimate_s=0.25)

    def observe(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def use_policy(monkeypatch: pytest.MonkeyPatch, policy: Policy) -> None:
    """Make the dispatcher build ``policy`` whatever the config names."""
    monkeypatch.setattr(dispatch, "make_policy", lambda name, seed: policy)


# ---------------------------------------------------------------------- full runs


@pytest.mark.timing
@pytest.mark.parametrize("policy", ["jsq", "random"])
async def test_every_task_is_placed_measured_and_written(tmp_path: Path, policy: str) -> None:
    expected = make_trace(tmp_path / "trace")
    async with serving(tier(1), tier(2, speed=2.0)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls, policy))
    assert [r["task_id"] for r in rows] == [t.task_id for t in expected]
    assert all(r["outcome"] == "ok" and r["error"] is None for r in rows)
    frame = rows_to_frame(rows)  # the rows follow the trace schema
    assert len(frame) == len(expected)
    written = [
        json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()
    ]
    assert sorted(r["task_id"] for r in written) == [t.task_id for t in expected]
    service_errors = []
    for row, task in zip(rows, expected, strict=True):
        assert (row["run"], row["policy"], row["client"], row["kind"]) == (
            "r1",
            policy,
            "c1",
            "task",
        )
        assert row["tier"] == {"t0": "edge", "t1": "cloud"}[row["target"]]
        assert (row["size"], row["cls"], row["arrival_model"]) == (task.size, "small", task.arrival)
        wait_wall = row["start_wall"] - row["server_arrival_wall"]
        service_wall = row["end_wall"] - row["start_wall"]
        assert row["latency_wall_s"] == pytest.approx(
            row["network_s"] + wait_wall + service_wall, abs=1e-9
        )
        assert row["latency_s"] == pytest.approx(
            row["network_s"] + row["wait_s"] + row["service_s"], abs=1e-9
        )
        assert 0 <= row["network_s"] < 0.1
        speed = 1.0 if row["target"] == "t0" else 2.0
        service_errors.append(row["service_s"] - task.size / speed)
        assert row["response_model"] == pytest.approx(row["dispatch_model"] + row["latency_s"])
        assert row["arrival_wall"] <= row["dispatch_wall"] <= row["server_arrival_wall"]
        assert row["state_age_s"] < 0.2 and row["decision_us"] > 0
        assert row["state_fetch_s"] is None  # only a true-state policy waits for a fetch
    assert statistics.median(service_errors) < 0.01  # model s; 1 ms wall
    assert max(service_errors) < 0.5  # even when a busy machine stalls the loop
    lags = [r["dispatch_wall"] - r["arrival_wall"] for r in rows]
    assert statistics.median(lags) < 0.002 and max(lags) < 0.05
    starts = [r["arrival_wall"] - r["arrival_model"] / K for r in rows]
    assert max(starts) - min(starts) < 1e-6  # one common start instant


async def test_waiting_emerges_when_everything_goes_to_one_worker(tmp_path: Path) -> None:
    make_trace(tmp_path / "trace", n=4, gap=0.0, other=0)  # four simultaneous tasks
    async with serving(tier(1)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls))
    waits = sorted(r["wait_s"] for r in rows)
    assert waits[0] < 0.1 and waits[-1] > 0.25  # model seconds; holds are 0.1-0.25
    assert sorted(r["queue_at_arrival"] for r in rows) == [0, 0, 1, 2]


async def test_policy_sees_fresh_states_and_learns_outcomes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = make_trace(tmp_path / "trace", n=6)
    recorder = Recorder()
    use_policy(monkeypatch, recorder)
    async with serving(tier(1), tier(1)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls))
    assert len(recorder.views) == len(expected)
    for task, view in recorder.views:
        assert task.size is None and task.client == "c1"
        assert set(view.targets) == {"t0", "t1"}
        for state in view.targets.values():
            assert state.c == 1 and state.service_rate == 1.0
            assert state.speed == 1.0 and state.backlog is None  # no true state asked for
            assert 0 < state.delay_s < 0.1 and state.age_s >= 0
    # Polled every 10 ms while tasks come every 20 ms wall: most views are fresh. A poller
    # that stopped after the first answer would show ages growing by 20 ms per task
    # (median 50 ms); the median ignores one stall of a busy machine.
    ages = [max(s.age_s for s in view.targets.values()) for _task, view in recorder.views]
    assert statistics.median(ages) < 0.03, ages
    assert {o.task_id for o in recorder.outcomes} == {t.task_id for t in expected}
    assert all(o.ok and o.estimate_s == 0.25 for o in recorder.outcomes)
    by_id = {r["task_id"]: r for r in rows}
    for o in recorder.outcomes:
        assert o.latency_s == by_id[o.task_id]["latency_s"]
        assert o.target == by_id[o.task_id]["target"]
    assert all(r["estimate_s"] == 0.25 for r in rows)


async def test_only_an_oracle_sees_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = make_trace(tmp_path / "trace", n=3)
    oracle = Recorder(oracle=True)
    use_policy(monkeypatch, oracle)
    async with serving(tier(1)) as urls:
        await dispatch.run_dispatch(config(tmp_path, urls))
    assert [task.size for task, _ in oracle.views] == [t.size for t in expected]


@pytest.mark.timing
async def test_a_true_state_policy_sees_fresh_exact_backlogs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_trace(tmp_path / "trace", n=20, gap=0.05, other=0)  # a task every 5 ms wall
    oracle = Recorder(oracle=True, true_state=True)
    use_policy(monkeypatch, oracle)
    async with serving(tier(1), tier(1, speed=2.0)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls, poll_interval_s=10.0))
    assert len(oracle.views) == 20
    speeds = {"t0": 1.0, "t1": 2.0}
    for _task, view in oracle.views:
        for name, state in view.targets.items():
            assert state.speed == speeds[name] and state.backlog is not None
            assert len(state.backlog.in_service) == state.busy
            assert len(state.backlog.queued) == state.queue
            services = {(0.1 + 0.05 * k) / speeds[name] for k in range(5)}  # the trace's sizes
            assert all(0 <= w <= max(services) + 1e-9 for w in state.backlog.in_service)
            assert all(any(w == pytest.approx(x) for x in services) for w in state.backlog.queued)
            assert state.age_s < 0.05  # fetched for this decision, not the 10 s poll
    assert any(s.backlog.in_service for _, v in oracle.views for s in v.targets.values())
    assert all(r["outcome"] == "ok" and r["state_age_s"] < 0.05 for r in rows)
    # the fetch's wait is reported beside the latency and lies inside the dispatch lag
    assert all(0 < r["state_fetch_s"] <= r["dispatch_wall"] - r["arrival_wall"] for r in rows)


async def test_future_start_is_honoured(tmp_path: Path) -> None:
    make_trace(tmp_path / "trace", n=3)
    start_at = time.time() + 0.2
    async with serving(tier(1)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls, start_at=start_at))
    for row in rows:
        assert row["arrival_wall"] == pytest.approx(start_at + row["arrival_model"] / K)
        assert row["dispatch_wall"] >= row["arrival_wall"]


async def test_past_start_means_now(tmp_path: Path) -> None:
    make_trace(tmp_path / "trace", n=3)
    async with serving(tier(1)) as urls:
        before = time.time()
        rows = await dispatch.run_dispatch(config(tmp_path, urls, start_at=before - 100))
    assert rows[0]["arrival_wall"] >= before
    assert rows[0]["dispatch_wall"] - rows[0]["arrival_wall"] < 0.05


async def test_max_inflight_bounds_concurrency(tmp_path: Path) -> None:
    make_trace(tmp_path / "trace", n=4, gap=0.0, other=0)
    async with serving(tier(4)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls, max_inflight=1))
    assert all(r["outcome"] == "ok" for r in rows)
    assert max(r["queue_at_arrival"] for r in rows) == 0
    ordered = sorted(rows, key=lambda r: r["dispatch_wall"])
    for earlier, later in itertools.pairwise(ordered):
        assert later["dispatch_wall"] >= earlier["response_wall"]


# ------------------------------------------------------------------------ failures


async def test_unreachable_target_is_named(tmp_path: Path) -> None:
    make_trace(tmp_path / "trace", n=2)
    dead = f"http://127.0.0.1:{free_port()}"
    async with serving(tier(1)) as urls:
        cfg = config(tmp_path, [urls[0], dead], ready_timeout_s=0.3)
        began = time.monotonic()
        with pytest.raises(EmulationError, match=rf"not ready within 0.3 s: t1 \({dead}\)"):
            await dispatch.run_dispatch(cfg)
    assert time.monotonic() - began < 2.0


def fake_tier(task_handler: Any) -> web.Application:
    """A server that is healthy and idle, but answers /task with ``task_handler``."""
    app = make_base_app()
    app.router.add_get("/health", _healthy)
    app.router.add_get("/state", _idle_state)
    app.router.add_post("/task", task_handler)
    return app


async def _healthy(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "c": 1})


async def _idle_state(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "queue": 0,
            "busy": 0,
            "active": 1,
            "c": 1,
            "arrival_rate": 0.0,
            "service_rate": 1.0,
            "window_s": 10.0,
            "completed": 0,
            "time": time.time(),
        }
    )


async def test_failed_requests_become_error_and_timeout_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = make_trace(tmp_path / "trace", n=6)
    recorder = Recorder()
    use_policy(monkeypatch, recorder)

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "size: expected less"}, status=400)

    async def never(request: web.Request) -> web.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with serving(fake_tier(refuse), fake_tier(never)) as urls:
        rows = await dispatch.run_dispatch(config(tmp_path, urls, timeout_s=1.0))
    assert len(rows) == len(expected)
    for row in rows:
        if row["target"] == "t0":
            assert (row["outcome"], row["error"]) == ("error", "HTTP 400: size: expected less")
        else:
            assert row["outcome"] == "timeout" and "within 0.1 s wall" in row["error"]
            assert row["response_wall"] - row["dispatch_wall"] == pytest.approx(0.1, abs=0.05)
        assert "latency_s" not in row and "wait_s" not in row
    rows_to_frame(rows)  # failures follow the schema too
    assert len(recorder.outcomes) == len(expected)
    assert not any(o.ok for o in recorder.outcomes)


async def test_a_failing_policy_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_trace(tmp_path / "trace", n=3)

    class Broken(Recorder):
        def choose(self, task: TaskInfo, view: View) -> Decision:
            return Decision("nowhere")

    use_policy(monkeypatch, Broken())
    async with serving(tier(1)) as urls:
        with pytest.raises(TestbedError, match="chose unknown target 'nowhere' for task 0"):
            await dispatch.run_dispatch(config(tmp_path, urls))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client": ""}, r"client: expected a non-empty string, found ''"),
        ({"bogus": 1}, r"bogus: expected one of the keys"),
        ({"time_scale": 0.5}, r"time_scale: expected a number >= 1"),
        ({"targets": []}, r"targets: expected a non-empty list"),
        ({"targets": [{"name": "a", "tier": "e"}]}, r"targets\[0\]: expected an object"),
        (
            {"targets": [{"name": "a", "tier": "e", "url": "ftp://x"}]},
            r"targets\[0\].url: expected an http:// URL",
        ),
        ({"timeout_s": None}, r"timeout_s: expected a number > 0, found None"),
    ],
)
async def test_bad_config_is_refused(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    cfg = config(tmp_path, ["http://127.0.0.1:1"], **change)
    with pytest.raises(TestbedError, match=message):
        await dispatch.run_dispatch(cfg)


async def test_missing_config_key_is_refused(tmp_path: Path) -> None:
    cfg = config(tmp_path, ["http://127.0.0.1:1"])
    del cfg["out"]
    with pytest.raises(TestbedError, match="out: expected a file path, found '<missing>'"):
        await dispatch.run_dispatch(cfg)


# --------------------------------------------------------------------- entry point


async def test_module_entry_point_end_to_end(tmp_path: Path) -> None:
    expected = make_trace(tmp_path / "trace", n=5)
    async with serving(tier(1), tier(1)) as urls:
        cfg_path = tmp_path / "dispatch.json"
        cfg_path.write_text(json.dumps(config(tmp_path, urls, "random")))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodes.offloading.dispatcher",
            str(cfg_path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, err.decode()
    assert out == b""
    assert "client c1: 5 tasks, 5 ok, 0 errors, 0 timeouts" in err.decode()
    lines = (tmp_path / "out" / "rows.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert sorted(r["task_id"] for r in rows) == [t.task_id for t in expected]
    assert {r["outcome"] for r in rows} == {"ok"}


async def test_module_entry_point_reports_a_bad_config(tmp_path: Path) -> None:
    cfg_path = tmp_path / "dispatch.json"
    cfg_path.write_text("{}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodes.offloading.dispatcher",
        str(cfg_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 1
    assert "run: expected a non-empty string" in err.decode()
