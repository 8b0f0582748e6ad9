"""Tests of the tier server (``nodes.offloading.tier_server``) over real HTTP on loopback.

Timing tests use holds of tens of milliseconds: long enough that scheduling noise is
small against them, short enough to keep the suite fast. Waiting is observed (emerging
from the FIFO), never configured.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp.test_utils import TestClient, TestServer

from nodes.common import MAX_BODY_BYTES
from nodes.offloading.tier_server import WorkerPool, make_app
from tests.secured import AUTH, secured

HOLD_TOLERANCE_S = 0.01  # one task's hold vs. nominal, allowing a busy machine's stalls
PROMPT_S = 0.01  # "no wait": the scheduling noise of a loaded machine, not a hold


@asynccontextmanager
async def tier(**overrides: Any) -> AsyncIterator[TestClient]:
    """A test client talking to a fresh tier server (C=1, S=1, K=10, MU=1 by default)."""
    params: dict[str, Any] = {"workers": 1, "speed": 1.0, "time_scale": 10.0, "mu": 1.0}
    params.update(overrides)
    async with TestClient(TestServer(secured(make_app(**params))), headers=AUTH) as client:
        yield client


async def post_task(client: TestClient, task_id: int, size: float) -> dict[str, Any]:
    """POST one task and return its (200) response body."""
    resp = await client.post("/task", json={"task_id": task_id, "size": size, "client": "c1"})
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def state(client: TestClient) -> dict[str, Any]:
    """GET /state."""
    resp = await client.get("/state")
    assert resp.status == 200
    return await resp.json()


async def wait_state(
    client: TestClient, pred: Callable[[dict[str, Any]], bool], timeout: float = 5.0
) -> dict[str, Any]:
    """Poll /state until ``pred`` holds (or fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        current = await state(client)
        if pred(current):
            return current
        assert time.monotonic() < deadline, f"condition not reached; last state {current}"
        await asyncio.sleep(0.002)


def wait_of(r: dict[str, Any]) -> float:
    return r["start"] - r["server_arrival"]


# ------------------------------------------------------------------- service timing


@pytest.mark.timing
async def test_single_task_reports_timestamps_and_holds_for_size_over_speed_and_scale() -> None:
    async with tier(speed=2.0, time_scale=10.0) as client:
        before = time.time()
        r = await post_task(client, 7, 1.0)  # 1 / 2 / 10 = 50 ms
        after = time.time()
    assert set(r) == {
        "task_id",
        "server_arrival",
        "start",
        "end",
        "queue_at_arrival",
        "service_wall_s",
        "worker",
    }
    assert r["task_id"] == 7 and r["worker"] == 0 and r["queue_at_arrival"] == 0
    assert before <= r["server_arrival"] <= r["start"] <= r["end"] <= after
    assert wait_of(r) < PROMPT_S
    assert r["service_wall_s"] == pytest.approx(r["end"] - r["start"])
    assert abs(r["service_wall_s"] - 0.05) < HOLD_TOLERANCE_S


@pytest.mark.timing
async def test_hold_error_is_small() -> None:
    """The timed hold lands within tens of microseconds of its deadline on average."""
    sizes = [0.013, 0.05, 0.1, 0.137, 0.2, 0.031] * 4  # holds of 1.3 .. 20 ms at K=10
    async with tier() as client:
        errors = [
            (await post_task(client, i, size))["service_wall_s"] - size / 10.0
            for i, size in enumerate(sizes)
        ]
    assert min(errors) > -0.0002  # never noticeably early
    assert statistics.median(errors) < 0.0003  # plain asyncio.sleep: ~0.5-1 ms late
    assert statistics.mean(errors) < 0.002  # a loaded machine may stall a few holds


@pytest.mark.timing
async def test_compute_model_burns_cpu_for_the_hold() -> None:
    async with tier(model="compute") as client:
        cpu_before = time.process_time()
        r = await post_task(client, 1, 0.5)  # 50 ms
        cpu_used = time.process_time() - cpu_before
    assert abs(r["service_wall_s"] - 0.05) < HOLD_TOLERANCE_S
    assert cpu_used > 0.02  # most of the hold, even when other processes compete


# ----------------------------------------------------------- queueing and contention


async def test_waiting_emerges_with_one_worker_and_three_simultaneous_tasks() -> None:
    hold = 0.1
    async with tier(workers=1) as client:
        results = await asyncio.gather(*(post_task(client, i, hold * 10) for i in range(3)))
    waits = sorted(wait_of(r) for r in results)
    for k, w in enumerate(waits):
        assert w == pytest.approx(k * hold, abs=2 * HOLD_TOLERANCE_S)
    assert sorted(r["queue_at_arrival"] for r in results) == [0, 0, 1]


async def test_fifo_order() -> None:
    async with tier(workers=1) as client:
        pending = []
        for i in range(5):
            pending.append(asyncio.create_task(post_task(client, i, 0.3)))
            # arrived: waiting, in service or (on a slow host) already done
            await wait_state(client, lambda s, n=i + 1:
                             s["queue"] + s["busy"] + s["completed"] == n)
        results = await asyncio.gather(*pending)
    starts = [r["start"] for r in results]
    assert starts == sorted(starts)
    assert [r["queue_at_arrival"] for r in results] == [0, 0, 1, 2, 3]


async def test_two_workers_serve_in_parallel() -> None:
    hold = 0.1
    async with tier(workers=2) as client:
        results = await asyncio.gather(*(post_task(client, i, hold * 10) for i in range(3)))
    by_wait = sorted(results, key=wait_of)
    assert wait_of(by_wait[0]) < PROMPT_S and wait_of(by_wait[1]) < PROMPT_S
    assert {by_wait[0]["worker"], by_wait[1]["worker"]} == {0, 1}
    assert wait_of(by_wait[2]) == pytest.approx(hold, abs=2 * HOLD_TOLERANCE_S)


async def test_state_during_load() -> None:
    async with tier(workers=2, speed=2.0, mu=3.0, window_s=5.0) as client:
        pending = [asyncio.create_task(post_task(client, i, 4.0)) for i in range(4)]
        loaded = await wait_state(client, lambda s: s["busy"] == 2 and s["queue"] == 2)
        await asyncio.gather(*pending)
        idle = await state(client)
    assert set(loaded) == {
        "queue",
        "busy",
        "active",
        "c",
        "arrival_rate",
        "service_rate",
        "speed",
        "window_s",
        "completed",
        "time",
    }
    assert loaded["active"] == 2 and loaded["c"] == 2
    assert loaded["service_rate"] == pytest.approx(6.0) and loaded["speed"] == 2.0
    assert loaded["window_s"] == 5.0
    assert loaded["completed"] == 0 and loaded["arrival_rate"] > 0
    assert abs(loaded["time"] - time.time()) < 1.0
    assert (idle["queue"], idle["busy"], idle["completed"]) == (0, 0, 4)


async def detailed_state(client: TestClient) -> dict[str, Any]:
    """GET /state?detail=1."""
    resp = await client.get("/state", params={"detail": "1"})
    assert resp.status == 200
    return await resp.json()


async def test_state_detail_reports_the_exact_backlog_in_model_seconds_at_speed() -> None:
    async with tier(workers=1, speed=2.0, time_scale=10.0) as client:
        plain = await state(client)
        assert "in_service_remaining" not in plain and "queued" not in plain
        empty = await detailed_state(client)
        assert (empty["in_service_remaining"], empty["queued"]) == ([], [])
        sizes = [4.0, 1.0, 3.0]  # model s at speed 1: 2.0, 0.5 and 1.5 at speed 2
        pending = []
        for i, size in enumerate(sizes):
            pending.append(asyncio.create_task(post_task(client, i, size)))
            await wait_state(client, lambda s, n=i + 1: s["queue"] + s["busy"] == n)
        first = await detailed_state(client)
        await asyncio.sleep(0.05)  # 0.5 model s of the first task's service
        later = await detailed_state(client)
        results = await asyncio.gather(*pending)
        done = await detailed_state(client)
    for snapshot in (first, later):
        assert (snapshot["busy"], snapshot["queue"]) == (1, 2)
        assert snapshot["queued"] == [0.5, 1.5]  # FIFO order, divided by the speed
        assert len(snapshot["in_service_remaining"]) == 1
    remaining_first = first["in_service_remaining"][0]
    remaining_later = later["in_service_remaining"][0]
    started = results[0]["start"]
    assert 0 < remaining_first <= 2.0
    assert remaining_first == pytest.approx(2.0 - (first["time"] - started) * 10.0, abs=0.05)
    assert remaining_first - remaining_later == pytest.approx(
        (later["time"] - first["time"]) * 10.0, abs=0.05
    )
    assert (done["in_service_remaining"], done["queued"]) == ([], [])


async def test_state_detail_counts_tasks_held_by_disabled_workers() -> None:
    async with tier(workers=2) as client:
        pending = [asyncio.create_task(post_task(client, i, 1.0)) for i in range(2)]
        await wait_state(client, lambda s: s["busy"] == 2)
        assert (await client.post("/admin/workers", json={"active": 1})).status == 200
        pending.append(asyncio.create_task(post_task(client, 2, 0.5)))
        await wait_state(client, lambda s: s["queue"] == 1)
        snapshot = await detailed_state(client)
        await asyncio.gather(*pending)
    assert (snapshot["active"], snapshot["busy"]) == (1, 2)
    assert len(snapshot["in_service_remaining"]) == 2 and snapshot["queued"] == [0.5]


async def test_state_detail_must_be_0_or_1() -> None:
    async with tier() as client:
        resp = await client.get("/state", params={"detail": "yes"})
        assert resp.status == 400
        assert await resp.json() == {"error": "detail: expected 0 or 1, found 'yes'"}


async def test_arrival_rate_in_the_first_window_uses_elapsed_time() -> None:
    k, n = 10.0, 20
    async with tier(workers=4, time_scale=k, window_s=30.0) as client:
        t0 = time.monotonic()
        assert (await client.post("/reset")).status == 200
        t1 = time.monotonic()
        await asyncio.gather(*(post_task(client, i, 0.01) for i in range(n)))
        t2 = time.monotonic()
        rate = (await state(client))["arrival_rate"]
        t3 = time.monotonic()
    assert n / (t3 - t0) / k <= rate <= n / (t2 - t1) / k


async def test_arrival_rate_over_a_full_window_and_its_expiry() -> None:
    k, n, window = 10.0, 10, 0.3
    async with tier(workers=4, time_scale=k, window_s=window) as client:
        await asyncio.sleep(window)  # let a whole window pass since the server started
        await asyncio.gather(*(post_task(client, i, 0.01) for i in range(n)))
        full = (await state(client))["arrival_rate"]
        await wait_state(client, lambda s: s["arrival_rate"] == 0.0)
    assert full == pytest.approx(n / window / k)


async def test_disabled_workers_do_not_serve() -> None:
    async with tier(workers=2) as client:
        resp = await client.post("/admin/workers", json={"active": 0})
        assert resp.status == 200 and await resp.json() == {"active": 0, "c": 2}
        pending = asyncio.create_task(post_task(client, 1, 0.1))
        held = await wait_state(client, lambda s: s["queue"] == 1)
        assert held["busy"] == 0 and held["active"] == 0
        assert (await client.post("/admin/workers", json={"active": 1})).status == 200
        first = await pending
        results = await asyncio.gather(*(post_task(client, i, 0.3) for i in range(2)))
    assert first["start"] - first["server_arrival"] > 0
    assert sorted(wait_of(r) for r in results)[1] > 0.02  # one worker: the second waits


async def test_client_disconnect_while_queued_keeps_accounting_exact() -> None:
    async with tier(workers=1) as client:
        first = asyncio.create_task(post_task(client, 1, 0.5))
        await wait_state(client, lambda s: s["busy"] == 1)
        _reader, writer = await asyncio.open_connection(client.host, client.port)
        body = b'{"task_id": 2, "size": 0.1, "client": "gone"}'
        writer.write(
            b"POST /task HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        await wait_state(client, lambda s: s["queue"] == 1)
        writer.close()
        await writer.wait_closed()
        left = await wait_state(client, lambda s: s["queue"] == 0)
        assert left["busy"] == 1  # the abandoned task left the queue; the first still runs
        await first
        after = await post_task(client, 3, 0.1)
        idle = await state(client)
    assert after["queue_at_arrival"] == 0 and wait_of(after) < PROMPT_S
    assert (idle["queue"], idle["busy"], idle["completed"]) == (0, 0, 2)


async def test_pool_cancelled_waiter_leaves_the_queue() -> None:
    pool = WorkerPool(1)
    worker = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)  # let the waiter enqueue
    assert pool.queue == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pool.queue == 0
    pool.release(worker)
    assert pool.busy == 0 and await pool.acquire() == 0


async def test_pool_waiter_cancelled_as_it_gets_a_worker_gives_it_back() -> None:
    pool = WorkerPool(1)
    worker = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    pool.release(worker)  # hands the worker to the waiter ...
    waiter.cancel()  # ... which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (pool.queue, pool.busy) == (0, 0)


# ------------------------------------------------------------------- reset, health


async def test_reset_is_refused_while_tasks_are_in_flight() -> None:
    async with tier() as client:
        pending = asyncio.create_task(post_task(client, 1, 0.5))
        await wait_state(client, lambda s: s["busy"] == 1)
        refused = await client.post("/reset")
        assert refused.status == 409
        assert "in flight" in (await refused.json())["error"]
        await pending
        before = await state(client)
        accepted = await client.post("/reset")
        assert accepted.status == 200
        after = await state(client)
    assert before["completed"] == 1 and before["arrival_rate"] > 0
    assert after["completed"] == 0 and after["arrival_rate"] == 0.0


async def test_health() -> None:
    async with tier(workers=3) as client:
        resp = await client.get("/health")
        assert resp.status == 200 and await resp.json() == {"ok": True, "c": 3}


# -------------------------------------------------------------------------- errors

TASK_BODY_ERRORS = [
    (b"{not json", "body"),
    (b"", "body"),
    (b"\xff\xfe", "body"),
    (b"[1, 2]", "body"),
    (b"[" * 5000, "body"),
    (b'{"size": 1, "client": "a"}', "task_id"),
    (b'{"task_id": "1", "size": 1, "client": "a"}', "task_id"),
    (b'{"task_id": true, "size": 1, "client": "a"}', "task_id"),
    (b'{"task_id": 1.5, "size": 1, "client": "a"}', "task_id"),
    (b'{"task_id": 1, "client": "a"}', "size"),
    (b'{"task_id": 1, "size": 0, "client": "a"}', "size"),
    (b'{"task_id": 1, "size": -2.5, "client": "a"}', "size"),
    (b'{"task_id": 1, "size": NaN, "client": "a"}', "size"),
    (b'{"task_id": 1, "size": Infinity, "client": "a"}', "size"),
    (b'{"task_id": 1, "size": "1", "client": "a"}', "size"),
    (b'{"task_id": 1, "size": 1' + b"0" * 400 + b', "client": "a"}', "size"),  # no float
    (b'{"task_id": 1, "size": 1}', "client"),
    (b'{"task_id": 1, "size": 1, "client": 3}', "client"),
    (b'{"task_id": 1, "size": 1, "client": ""}', "client"),
    (b'{"task_id": 1, "size": 1, "client": "a", "prio": 2}', "prio"),
]


@pytest.mark.parametrize(("body", "field"), TASK_BODY_ERRORS)
async def test_malformed_task_is_400_naming_the_field(body: bytes, field: str) -> None:
    async with tier() as client:
        resp = await client.post("/task", data=body, headers={"Content-Type": "application/json"})
        assert resp.status == 400
        error = (await resp.json())["error"]
        idle = await state(client)
    assert error.startswith(f"{field}: expected ")
    assert ", found " in error
    assert (idle["queue"], idle["busy"], idle["arrival_rate"]) == (0, 0, 0.0)


@pytest.mark.parametrize("body", [{"active": -1}, {"active": 3}, {"active": "1"}, {}])
async def test_bad_worker_count_is_400(body: dict[str, Any]) -> None:
    async with tier(workers=2) as client:
        resp = await client.post("/admin/workers", json=body)
        assert resp.status == 400
        assert (await resp.json())["error"].startswith("active: expected integer >= 0 and <= 2")


@pytest.mark.parametrize(
    ("method", "path", "status", "reason"),
    [
        ("GET", "/task", 405, r"method GET not allowed on /task; allowed: POST"),
        ("POST", "/state", 405, r"method POST not allowed on /state; allowed: GET"),
        ("DELETE", "/reset", 405, r"allowed: POST"),
        ("GET", "/nope", 404, r"no such endpoint: /nope"),
    ],
)
async def test_wrong_method_and_unknown_path_are_json(
    method: str, path: str, status: int, reason: str
) -> None:
    async with tier() as client:
        resp = await client.request(method, path)
        assert resp.status == status
        assert resp.content_type == "application/json"
        assert re.search(reason, (await resp.json())["error"])


async def test_oversized_body_is_413() -> None:
    big = b'{"task_id": 1, "size": 1, "client": "' + b"x" * MAX_BODY_BYTES + b'"}'
    async with tier() as client:
        resp = await client.post("/task", data=big)
        assert resp.status == 413
        assert "at most" in (await resp.json())["error"]
        assert (await client.get("/health")).status == 200  # server still fine


def test_make_app_refuses_bad_parameters() -> None:
    with pytest.raises(ValueError, match="workers"):
        make_app(0, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="time_scale"):
        make_app(1, 1.0, 0.5, 1.0)
    with pytest.raises(ValueError, match="model"):
        make_app(1, 1.0, 1.0, 1.0, model="magic")


# ---------------------------------------------------------------------- entry point


def test_module_entry_point_serves_and_stops_on_sigterm() -> None:
    cmd = [
        sys.executable,
        "-m",
        "nodes.offloading.tier_server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--workers",
        "2",
        "--speed",
        "1",
        "--time-scale",
        "10",
        "--mu",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)$", line.strip())
        assert match, line
        health = requests.get(f"http://127.0.0.1:{match.group(1)}/health", timeout=5)
        assert health.json() == {"ok": True, "c": 2}
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0
    assert out == "" and err == ""


def test_module_entry_point_refuses_bad_arguments() -> None:
    cmd = [
        sys.executable,
        "-m",
        "nodes.offloading.tier_server",
        "--workers",
        "0",
        "--speed",
        "1",
        "--time-scale",
        "10",
        "--mu",
        "1",
    ]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "argument --workers: expected an integer in [1, 4096], found '0'" in done.stderr


async def test_reset_dates_the_rate_window_to_the_trace_start() -> None:
    """With ``since`` in the future, the idle lead-in is not counted as observed time."""
    async with tier(time_scale=1.0) as client:
        start = time.time() + 0.2
        resp = await client.post("/reset", json={"since": start})
        assert resp.status == 200
        await asyncio.sleep(start + 0.1 - time.time())  # a wall-clock instant, not a wait
        await post_task(client, 1, 0.001)
        state = await (await client.get("/state")).json()
        # One arrival 0.1 s after the window start: about 10 per second, not 1/0.3.
        assert 5.0 < state["arrival_rate"] < 12.0, state["arrival_rate"]
        bad = await client.post("/reset", json={"since": start + 10 * 3600})
        assert bad.status == 400
        assert "since" in (await bad.json())["error"]


async def test_the_document_states_the_size_and_workers_bounds() -> None:
    """The OpenAPI document states the largest task and the number of workers (so a
    fuzzer's schema-valid requests are accepted), and the largest task it states is
    accepted while anything above it is refused."""
    from nodes.common import OPENAPI_KEY

    document = make_app(workers=3, speed=2.0, time_scale=10.0, mu=1.0,
                        max_hold_s=0.01)[OPENAPI_KEY]["paths"]

    def schema(path: str) -> dict[str, Any]:
        return document[path]["post"]["requestBody"]["content"]["application/json"]["schema"]

    largest = schema("/task")["properties"]["size"]["maximum"]
    assert largest == pytest.approx(0.2)
    assert schema("/admin/workers")["properties"]["active"]["maximum"] == 3
    async with tier(speed=2.0, max_hold_s=0.01) as client:
        await post_task(client, 1, largest)
        resp = await client.post("/task", json={"task_id": 2, "size": largest * 1.001,
                                                "client": "c1"})
        assert resp.status == 400 and "size" in (await resp.json())["error"]


async def test_a_task_whose_service_time_exceeds_the_task_timeout_is_refused() -> None:
    """With ``task_timeout`` (model s), a task whose service time ``size / speed`` exceeds
    it is refused naming ``size`` (its client would give up first), however short its
    hold on the wall clock; one within it is served."""
    async with tier(speed=2.0, time_scale=1000.0, task_timeout=3.0) as client:
        resp = await client.post("/task", json={"task_id": 1, "size": 6.01, "client": "c1"})
        assert resp.status == 400
        error = (await resp.json())["error"]
        assert error.startswith("size: expected at most 6 model seconds"), error
        assert "task timeout of 3 model s" in error
        served = await post_task(client, 2, 6.0)  # 3 model s of service: 3 ms on the wall
        assert served["task_id"] == 2


def test_the_emulation_passes_the_scenario_task_timeout_to_every_tier_server(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The command line the executor builds for a tier server carries the scenario's
    ``task_timeout`` (model seconds, beside the node's speed and the time scale), and the
    server it starts bounds a task's size by it: ``task_timeout * speed``."""
    from nodes import common
    from nodes.common import OPENAPI_KEY
    from nodes.offloading import tier_server
    from testbed.emulation.executor import EmulatedTopology
    from testbed.scenario import load_scenario

    scenario = load_scenario("continuum").with_overrides(task_timeout=12)
    topo = EmulatedTopology(scenario=scenario, infra=None, net=None, workdir=tmp_path)
    servers = [s for s in scenario.services if s.program == "tier_server"]
    assert servers
    served: dict[str, Any] = {}

    async def serve_async(app: Any, host: str, port: int, **_: Any) -> None:
        served.update(app=app)

    monkeypatch.setattr(common, "serve_async", serve_async)
    for svc in servers:
        argv = topo.service_argv(svc)
        flag = argv.index("--task-timeout")
        assert float(argv[flag + 1]) == 12.0, argv
        served.clear()
        assert tier_server.main(argv) == 0
        task = served["app"][OPENAPI_KEY]["paths"]["/task"]["post"]
        size = task["requestBody"]["content"]["application/json"]["schema"]["properties"]["size"]
        assert size["maximum"] == pytest.approx(12.0 * scenario.node(svc.node).speed)
