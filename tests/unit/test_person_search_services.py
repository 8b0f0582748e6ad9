"""The person-search services (edge data server, coordinator) over real HTTP on loopback.

Every service runs in-process on an ephemeral loopback port. Timing tests use an idle
analysis of 50 ms wall (``tc = 10`` model s at ``time_scale = 200``): long against
scheduling noise, short enough for a fast suite; bounds are one-sided tight (an
analysis never ends early) and tolerant upwards (a busy machine stalls). End-to-end
runs use 5 ms analyses: there only the searches' outcomes and choices are checked.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import pytest
import requests
from aiohttp import web
from aiohttp.test_utils import TestServer

from nodes.person_search import coordinator, edge_server
from nodes.person_search.model import Search, compensation_factor
from nodes.person_search.policies import make_search_policy
from tests.secured import AUTH, secured
from workloads.person_search import SearchWorld, build_world

TC = 10.0
SLOW = 200.0  # time_scale of the timing tests: Tc = 50 ms wall
FAST = 2000.0  # time_scale of the end-to-end runs: Tc = 5 ms wall
TC_WALL = TC / SLOW
EARLY = 0.001  # an analysis may end this much before its nominal end (clock granularity)
LATE = 0.02  # ... and this much after it (a loaded machine)


async def call(http: aiohttp.ClientSession, method: str, url: str,
               body: Any = None) -> tuple[int, Any]:
    """One JSON request; ``(status, decoded body)``."""
    async with http.request(method, url, json=body) as resp:
        return resp.status, await resp.json()


@asynccontextmanager
async def started(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on a loopback ephemeral port; yield its base URL."""
    server = TestServer(secured(app), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@asynccontextmanager
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    """A client session without a connection limit."""
    async with aiohttp.ClientSession(headers=AUTH, connector=aiohttp.TCPConnector(limit=0)) as http:
        yield http


def world_body(present: dict[int, list[int]], epoch: str = "e1") -> dict[str, Any]:
    """A ``PUT /world`` body from ``{slot: [targets]}``."""
    return {"slots": len(present), "present": {str(j): ids for j, ids in present.items()},
            "epoch": epoch}


async def wait_running(http: aiohttp.ClientSession, url: str, running: int) -> None:
    """Poll ``/health`` until the server runs ``running`` analyses."""
    deadline = time.monotonic() + 5.0
    while True:
        _, health = await call(http, "GET", f"{url}/health")
        if health["running"] == running:
            return
        assert time.monotonic() < deadline, f"running never reached {running}: {health}"
        await asyncio.sleep(0.002)


# --- edge server: contract ----------------------------------------------------------------


async def test_edge_health_world_and_openapi() -> None:
    async with started(edge_server.make_app(2, TC, SLOW)) as url, client() as http:
        status, health = await call(http, "GET", f"{url}/health")
        assert status == 200
        assert health["ok"] is True and health["server"] == 2
        assert (health["running"], health["loaded"], health["slots"]) == (0, False, 0)
        status, answer = await call(http, "PUT", f"{url}/world",
                                    world_body({1: [0, 3], 2: [], 3: [1]}))
        assert status == 200, answer
        assert answer["entries"] == [2, 0, 1]
        _, health = await call(http, "GET", f"{url}/health")
        assert (health["loaded"], health["slots"], health["epoch"]) == (True, 3, "e1")
        status, spec = await call(http, "GET", f"{url}/openapi.json")
        assert status == 200 and {"/world", "/analyse", "/health"} <= set(spec["paths"])


@pytest.mark.parametrize(("body", "field"), [
    ({"slots": 2, "present": {"1": [0]}, "epoch": "e"}, 'no key "2"'),
    ({"slots": 1, "present": {"1": [0], "2": []}, "epoch": "e"}, 'unknown key "2"'),
    ({"slots": 1, "present": {"01": [0]}, "epoch": "e"}, 'unknown key "01"'),
    ({"slots": 1, "present": {"1": [-1]}, "epoch": "e"}, 'present["1"]'),
    ({"slots": 1, "present": {"1": [True]}, "epoch": "e"}, 'present["1"]'),
    ({"slots": 1, "present": {"1": 3}, "epoch": "e"}, 'present["1"]'),
    ({"slots": 1, "present": [[0]], "epoch": "e"}, "present:"),
    ({"slots": 0, "present": {}, "epoch": "e"}, "slots:"),
    ({"slots": 1, "present": {"1": []}, "epoch": ""}, "epoch:"),
    ({"slots": 1, "present": {"1": []}}, "epoch:"),
    ({"slots": 1, "present": {"1": []}, "epoch": "e", "extra": 1}, "extra:"),
])
async def test_edge_world_validation(body: dict[str, Any], field: str) -> None:
    async with started(edge_server.make_app(0, TC, SLOW)) as url, client() as http:
        status, answer = await call(http, "PUT", f"{url}/world", body)
        assert status == 400 and field in answer["error"], answer
        _, health = await call(http, "GET", f"{url}/health")
        assert health["loaded"] is False


async def test_edge_world_may_exceed_the_common_body_limit() -> None:
    async with started(edge_server.make_app(0, TC, SLOW)) as url, client() as http:
        big = world_body({1: list(range(40_000)), 2: [1]})  # ~270 KB, over 64 KiB
        status, answer = await call(http, "PUT", f"{url}/world", big)
        assert status == 200 and answer["entries"] == [40_000, 1], answer
        huge = world_body({1: list(range(2_500_000))})  # ~20 MB, over 16 MiB
        status, answer = await call(http, "PUT", f"{url}/world", huge)
        assert status == 413 and answer["error"] == (
            f"body: expected at most {edge_server.WORLD_BODY_BYTES} bytes, found more")


async def test_edge_analyse_validation_and_state() -> None:
    async with started(edge_server.make_app(1, TC, SLOW)) as url, client() as http:
        status, answer = await call(http, "POST", f"{url}/analyse", {"search": 0, "item": 2})
        assert status == 409 and "no world" in answer["error"]
        await call(http, "PUT", f"{url}/world", world_body({1: [0], 2: [1]}))
        status, answer = await call(http, "POST", f"{url}/analyse", {"search": 0, "item": 4})
        assert status == 404 and "item: 4 is not on server 1" in answer["error"], answer
        status, answer = await call(http, "POST", f"{url}/analyse", {"search": 0, "item": 1})
        assert status == 404 and "2 .. 3" in answer["error"]
        for body, field in [({"search": -1, "item": 2}, "search:"),
                            ({"search": 0}, "item:"),
                            ({"search": 0, "item": 2, "factor": 0}, "factor:"),
                            ({"search": 0, "item": 2, "factor": "2"}, "factor:"),
                            ({"search": 0, "item": 2, "slot": 1}, "slot:")]:
            status, answer = await call(http, "POST", f"{url}/analyse", body)
            assert status == 400 and answer["error"].startswith(field), (body, answer)


# --- edge server: the response model ------------------------------------------------------


async def test_edge_single_analysis_takes_tc() -> None:
    async with started(edge_server.make_app(1, TC, SLOW)) as url, client() as http:
        await call(http, "PUT", f"{url}/world", world_body({1: [0], 2: [1]}))
        before = time.time()
        status, answer = await call(http, "POST", f"{url}/analyse", {"search": 1, "item": 3})
        after = time.time()
    assert status == 200, answer
    assert answer["search"] == 1 and answer["item"] == 3 and answer["slot"] == 2
    assert answer["present"] is True and answer["running_at_admission"] == 0
    assert before <= answer["admitted_wall"] <= answer["ended_wall"] <= after
    assert TC_WALL - EARLY <= answer["duration_s"] <= TC_WALL + LATE
    assert answer["ended_wall"] - answer["admitted_wall"] == pytest.approx(
        answer["duration_s"], abs=0.002)


async def test_edge_factor_scales_the_duration() -> None:
    async with started(edge_server.make_app(0, TC, SLOW)) as url, client() as http:
        await call(http, "PUT", f"{url}/world", world_body({1: [0]}))
        status, answer = await call(http, "POST", f"{url}/analyse",
                                    {"search": 5, "item": 0, "factor": 2.5})
    assert status == 200 and answer["present"] is False
    assert 2.5 * TC_WALL - EARLY <= answer["duration_s"] <= 2.5 * TC_WALL + LATE


async def test_edge_paper_sharing_three_concurrent_take_one_two_three_tc() -> None:
    async with started(edge_server.make_app(0, TC, SLOW)) as url, client() as http:
        await call(http, "PUT", f"{url}/world", world_body({1: [0, 1, 2]}))
        answers = await asyncio.gather(*(
            call(http, "POST", f"{url}/analyse", {"search": k, "item": 0}) for k in range(3)))
    assert all(status == 200 for status, _ in answers)
    ordered = sorted((a for _, a in answers), key=lambda a: a["running_at_admission"])
    assert [a["running_at_admission"] for a in ordered] == [0, 1, 2]
    for n, a in enumerate(ordered, start=1):
        assert n * TC_WALL - EARLY <= a["duration_s"] <= n * TC_WALL + LATE, ordered


async def test_edge_processor_sharing_two_concurrent_end_near_two_tc() -> None:
    app = edge_server.make_app(0, TC, SLOW, "processor-sharing")
    async with started(app) as url, client() as http:
        await call(http, "PUT", f"{url}/world", world_body({1: [0, 1]}))
        answers = [a for _, a in await asyncio.gather(*(
            call(http, "POST", f"{url}/analyse", {"search": k, "item": 0}) for k in range(2)))]
    first = min(a["admitted_wall"] for a in answers)
    assert sorted(a["running_at_admission"] for a in answers) == [0, 1]
    for a in answers:  # both end near 2 Tc after the first admission (less its lead)
        assert 2 * TC_WALL - LATE <= a["ended_wall"] - first <= 2 * TC_WALL + LATE, answers
    assert max(a["ended_wall"] for a in answers) - first >= 2 * TC_WALL - EARLY


async def test_edge_world_is_locked_while_analyses_run() -> None:
    async with started(edge_server.make_app(0, TC, SLOW)) as url, client() as http:
        await call(http, "PUT", f"{url}/world", world_body({1: [0]}))
        pending = asyncio.create_task(call(http, "POST", f"{url}/analyse",
                                           {"search": 0, "item": 0}))
        await wait_running(http, url, 1)
        status, answer = await call(http, "PUT", f"{url}/world", world_body({1: [1]}, "e2"))
        assert status == 409 and "while 1 analyses run" in answer["error"]
        status, answer = await pending
        assert status == 200 and answer["present"] is True
        status, _ = await call(http, "PUT", f"{url}/world", world_body({1: [1]}, "e2"))
        assert status == 200


async def test_edge_disconnected_client_leaves_the_model_consistent() -> None:
    app = edge_server.make_app(0, TC, SLOW)
    async with started(app) as url, client() as http:
        await call(http, "PUT", f"{url}/world", world_body({1: [0]}))
        async with aiohttp.ClientSession(headers=AUTH) as other:
            gone = asyncio.create_task(call(other, "POST", f"{url}/analyse",
                                            {"search": 0, "item": 0}))
            await wait_running(http, url, 1)
            gone.cancel()
            with pytest.raises(asyncio.CancelledError):
                await gone
        # the abandoned analysis still counts until its end, then the server is idle
        status, answer = await call(http, "POST", f"{url}/analyse", {"search": 0, "item": 0})
        assert status == 200 and answer["running_at_admission"] == 1
        assert TC_WALL <= answer["duration_s"] <= 2 * TC_WALL + LATE
        await wait_running(http, url, 0)
        status, answer = await call(http, "POST", f"{url}/analyse", {"search": 0, "item": 0})
        assert answer["running_at_admission"] == 0
        assert answer["duration_s"] <= TC_WALL + LATE
    assert not app[edge_server.EDGE_SERVER_KEY].jobs


def test_edge_command_line_is_checked() -> None:
    for argv in (["--server-index", "-1"], ["--server-index", "0", "--tc", "0"],
                 ["--server-index", "0", "--time-scale", "0.002"],
                 ["--server-index", "0", "--sharing", "fair"], []):
        with pytest.raises(SystemExit) as exc:
            edge_server.main(argv)
        assert exc.value.code == 2


def start_program(module: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``python -m module --host 127.0.0.1 --port 0 args``; the process and its base URL."""
    cmd = [sys.executable, "-m", module, "--host", "127.0.0.1", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)$", line.strip())
    if not match:
        proc.kill()
        proc.wait()
    assert match, line
    return proc, f"http://127.0.0.1:{match.group(1)}"


def test_programs_serve_a_run_and_stop_on_sigterm() -> None:
    """Both services as the harness starts them: a one-search run through real processes."""
    procs = []
    try:
        edge, edge_url = start_program("nodes.person_search.edge_server", "--server-index",
                                       "0", "--tc", "10", "--time-scale", "1000")
        procs.append(edge)
        cap, cap_url = start_program("nodes.person_search.coordinator", "--server", edge_url)
        procs.append(cap)
        assert requests.get(f"{edge_url}/health", timeout=5).json()["loaded"] is False
        put = requests.put(f"{edge_url}/world", json=world_body({1: [], 2: [0]}), timeout=5,
                           headers=AUTH)
        assert put.status_code == 200, put.text
        body = run_body([edge_url], [0], slots=2, time_scale=1000)
        run = requests.post(f"{cap_url}/runs", json=body, timeout=10, headers=AUTH)
        assert run.status_code == 200, run.text
        assert run.json()["requests"][0]["found_item"] == 1
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=10)
            assert proc.returncode == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# --- coordinator: contract ----------------------------------------------------------------


def run_body(servers: list[str], starts: list[int], **overrides: Any) -> dict[str, Any]:
    """A ``POST /runs`` body (priority, line, 5 slots, FAST time scale by default)."""
    body = {"servers": servers, "layout": "line", "slots": 5, "starts": starts,
            "policy": "priority", "policy_seed": 7, "tc": TC, "time_scale": FAST}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


URLS = [f"http://127.0.0.1:{9000 + s}" for s in range(5)]


@pytest.mark.parametrize(("overrides", "field"), [
    ({"servers": []}, "servers:"),
    ({"servers": "http://a:1"}, "servers:"),
    ({"servers": [*URLS[:4], "ftp://x:1"]}, "servers[4]:"),
    ({"servers": [*URLS[:4], "http://x:1/?q=1"]}, "servers[4]:"),
    ({"layout": "grid"}, "perfect square"),
    ({"layout": "ring"}, "layout:"),
    ({"slots": 0}, "slots:"),
    ({"starts": []}, "starts:"),
    ({"starts": [0, 5]}, "starts[1]:"),
    ({"starts": [0, True]}, "starts[1]:"),
    ({"policy": "greedy"}, "policy:"),
    ({"policy": "random", "policy_params": {"w": 0.1}}, "policy_params:"),
    ({"policy_params": {"beta": 1}}, "policy_params.beta:"),
    ({"policy_params": {"tc": 3}}, "policy_params.tc:"),
    ({"policy_params": {"w": "0.1"}}, "policy_params.w:"),
    ({"policy_params": {"w": -1}}, "policy_params: w:"),
    ({"policy_params": {"compensation": "both"}}, "policy_params: compensation:"),
    ({"policy_seed": None}, "policy_seed:"),
    ({"policy_seed": -1}, "policy_seed:"),
    ({"tc": "10"}, "tc:"),
    ({"time_scale": 0}, "time_scale:"),
    ({"time_scale": 0.002}, "time_scale: expected finite number >= 1 (model seconds"),
    ({"accounting": "literal"}, "accounting:"),
    ({"request_timeout_s": -1}, "request_timeout_s:"),
    ({"targets": 3}, "targets:"),
])
async def test_coordinator_validation(overrides: dict[str, Any], field: str) -> None:
    async with started(coordinator.make_app(URLS)) as url, client() as http:
        body = {**run_body(URLS, [0, 1]), **overrides}
        body = {k: v for k, v in body.items() if v is not None}
        status, answer = await call(http, "POST", f"{url}/runs", body)
    assert status == 400, answer
    assert field in answer["error"], answer


@asynccontextmanager
async def listener() -> AsyncIterator[tuple[str, list[bytearray]]]:
    """A TCP server on a loopback ephemeral port that records every connection the
    moment it is accepted (then what arrives first on it) and answers nothing; yields its
    base URL and the record."""
    seen: list[bytearray] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(received := bytearray())
        try:
            received += await asyncio.wait_for(reader.read(4096), timeout=1.0)
        except TimeoutError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        await server.wait_closed()


async def test_coordinator_contacts_no_server_outside_its_configuration() -> None:
    """A well-formed edge-server URL that is not among the coordinator's ``--server``s is
    refused with 400 naming its ``servers[i]``, and nothing reaches it: the coordinator
    contacts only the edge servers of its configuration, never a URL a request names."""
    async with listener() as (stranger, seen), \
            started(coordinator.make_app(URLS[:1])) as url, client() as http:
        for servers, index in (([stranger], 0), ([URLS[0], stranger], 1)):
            status, answer = await call(http, "POST", f"{url}/runs", run_body(servers, [0]))
            assert status == 400, answer
            assert answer["error"].startswith(f"servers[{index}]: expected one of this "
                                              f"coordinator's edge servers"), answer
            assert stranger in answer["error"]
        # the coordinator still answers (so any request it had sent has been sent)
        status, health = await call(http, "GET", f"{url}/health")
        assert status == 200 and health["runs"] == 0
    assert seen == []


async def test_coordinator_health_and_openapi() -> None:
    async with started(coordinator.make_app()) as url, client() as http:
        status, health = await call(http, "GET", f"{url}/health")
        assert status == 200 and health == {"ok": True, "running": False, "runs": 0}
        status, spec = await call(http, "GET", f"{url}/openapi.json")
        assert status == 200 and "/runs" in spec["paths"]


async def test_coordinator_unreachable_server_fails_with_502() -> None:
    async with started(edge_server.make_app(0, TC, FAST)) as edge, \
            started(coordinator.make_app([edge, "http://127.0.0.1:9"])) as url, client() as http:
        await call(http, "PUT", f"{edge}/world", world_body({1: [0], 2: [0]}))
        dead = "http://127.0.0.1:9"  # discard port: nothing listens
        status, answer = await call(http, "POST", f"{url}/runs",
                                    run_body([edge, dead], [0], slots=2))
    assert status == 502 and "server 1 (http://127.0.0.1:9)" in answer["error"], answer


async def test_coordinator_refuses_servers_in_the_wrong_state() -> None:
    async with started(edge_server.make_app(0, TC, FAST)) as s0, \
            started(edge_server.make_app(1, TC, FAST)) as s1, \
            started(edge_server.make_app(0, TC, 1000)) as s2, \
            started(coordinator.make_app([s0, s1, s2])) as url, client() as http:
        await call(http, "PUT", f"{s0}/world", world_body({1: [0], 2: [0]}))
        await call(http, "PUT", f"{s2}/world", world_body({1: [0], 2: [0]}))
        cases = [([s0, s1], "server 1", "loaded"),  # no world
                 ([s1, s0], "server 0", "server = 0"),  # wrong index
                 ([s2], "server 0", "time_scale")]
        for servers, who, what in cases:
            status, answer = await call(http, "POST", f"{url}/runs",
                                        run_body(servers, [0], slots=2))
            assert status == 409 and who in answer["error"] and what in answer["error"], answer
        status, answer = await call(http, "POST", f"{url}/runs", run_body([s0], [0], slots=3))
        assert status == 409 and "slots" in answer["error"]


async def test_coordinator_failed_analysis_fails_the_run() -> None:
    """A server whose truth lacks the target: the search runs dry, the run answers 502."""
    async with started(edge_server.make_app(0, TC, FAST)) as s0, \
            started(edge_server.make_app(1, TC, FAST)) as s1, \
            started(coordinator.make_app([s0, s1])) as url, client() as http:
        for edge in (s0, s1):
            await call(http, "PUT", f"{edge}/world", world_body({1: [], 2: []}))
        status, answer = await call(http, "POST", f"{url}/runs",
                                    run_body([s0, s1], [0], slots=2))
        assert status == 502 and "search 0" in answer["error"], answer
        _, health = await call(http, "GET", f"{url}/health")
        assert health["running"] is False


def fake_edge(analyse: Any) -> web.Application:
    """A server that passes the run's health check and analyses with ``analyse``."""

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "server": 0, "running": 0, "loaded": True,
                                  "slots": 2, "tc": TC, "time_scale": FAST})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/analyse", analyse)
    return app


async def refuse(request: web.Request) -> web.Response:
    return web.json_response({"error": "overloaded"}, status=503)


async def stall(request: web.Request) -> web.Response:
    await asyncio.sleep(5.0)
    return web.json_response({})


async def garble(request: web.Request) -> web.Response:
    return web.json_response({"search": 0, "item": 1, "present": "yes"})


@pytest.mark.parametrize(("analyse", "reason"), [
    (refuse, "answered 503: overloaded"),
    (stall, "no answer from"),
    (garble, "malformed answer"),
])
async def test_coordinator_failed_request_fails_the_run(analyse: Any, reason: str) -> None:
    async with started(fake_edge(analyse)) as edge, started(coordinator.make_app([edge])) as url, \
            client() as http:
        began = time.monotonic()
        status, answer = await call(http, "POST", f"{url}/runs",
                                    run_body([edge], [0], slots=2, request_timeout_s=0.2))
        assert time.monotonic() - began < 2.0
        assert status == 502, answer
        assert re.match(rf"server 0 \({edge}\), item [01] of search 0: ", answer["error"])
        assert reason in answer["error"], answer
        _, health = await call(http, "GET", f"{url}/health")
        assert health["running"] is False


async def test_coordinator_client_gone_cancels_the_run() -> None:
    async with started(fake_edge(stall)) as edge, started(coordinator.make_app([edge])) as url, \
            client() as http:
        async with aiohttp.ClientSession(headers=AUTH) as other:
            gone = asyncio.create_task(call(other, "POST", f"{url}/runs",
                                            run_body([edge], [0, 0], slots=2)))
            deadline = time.monotonic() + 5.0
            while not (await call(http, "GET", f"{url}/health"))[1]["running"]:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.002)
            gone.cancel()
            with pytest.raises(asyncio.CancelledError):
                await gone
        deadline = time.monotonic() + 2.0
        while (await call(http, "GET", f"{url}/health"))[1]["running"]:
            assert time.monotonic() < deadline, "the run outlived its client"
            await asyncio.sleep(0.002)


# --- coordinator: end to end --------------------------------------------------------------


def truth(world: SearchWorld, server: int, targets: list[int] | None = None) -> dict[str, Any]:
    """Server ``server``'s ``PUT /world`` body; ``targets[i]`` is sent as target id ``i``."""
    chosen = list(range(world.targets)) if targets is None else targets
    present = {j: [i for i, k in enumerate(chosen) if world.holder[k, j] == server]
               for j in range(1, world.slots + 1)}
    return world_body(present, epoch=f"targets {chosen[:3]}...")


@dataclass
class Deployment:
    """Edge servers and a coordinator on loopback, and a client."""

    world: SearchWorld
    edges: list[str]
    url: str
    http: aiohttp.ClientSession

    async def load(self, targets: list[int] | None = None) -> None:
        for s, edge in enumerate(self.edges):
            status, answer = await call(self.http, "PUT", f"{edge}/world",
                                        truth(self.world, s, targets))
            assert status == 200, answer

    async def run(self, starts: list[int], **overrides: Any) -> dict[str, Any]:
        status, answer = await call(self.http, "POST", f"{self.url}/runs",
                                    run_body(self.edges, starts, **overrides))
        assert status == 200, answer
        return answer


@asynccontextmanager
async def deployment(world: SearchWorld) -> AsyncIterator[Deployment]:
    """One edge server per server of ``world`` (paper sharing, FAST) and a coordinator."""
    servers = [TestServer(secured(edge_server.make_app(s, TC, FAST)), host="127.0.0.1")
               for s in range(world.layout.servers)]
    cap = None
    try:
        for server in servers:
            await server.start_server()
        edges = [str(s.make_url("")).rstrip("/") for s in servers]
        cap = TestServer(secured(coordinator.make_app(edges)), host="127.0.0.1")
        await cap.start_server()
        async with client() as http:
            yield Deployment(world, edges, str(cap.make_url("")).rstrip("/"), http)
    finally:
        for server in (*servers, *([cap] if cap else [])):
            await server.close()


WORLD = build_world({"servers": 5, "targets": 20, "slots": 5, "movement": "normal"}, 3)


def starts_of(world: SearchWorld, targets: list[int]) -> list[int]:
    return [int(world.holder[k, 0]) for k in targets]


@pytest.mark.parametrize("policy", ["priority", "random", "load-balance"])
async def test_end_to_end_every_search_finds_its_required_item(policy: str) -> None:
    async with deployment(WORLD) as dep:
        await dep.load()
        targets = list(range(WORLD.targets))
        result = await dep.run(starts_of(WORLD, targets), policy=policy)
    assert result["policy"] == policy and result["targets"] == WORLD.targets
    for request in result["requests"]:
        k = request["search"]
        assert request["found_item"] == WORLD.required_item(k)
        assert request["response_model_s"] == pytest.approx(request["response_wall_s"] * FAST)
        assert request["response_wall_s"] >= request["analyses"] * TC / FAST - EARLY
    rows = result["analyses"]
    assert len(rows) == sum(r["analyses"] for r in result["requests"])
    assert result["makespan_s"] == max(r["response_wall_s"] for r in result["requests"])
    assert result["model_makespan_s"] == pytest.approx(result["makespan_s"] * FAST)
    for row in rows:
        assert row["present"] == WORLD.contains(row["search"], row["item"])
        assert row["server"] == row["item"] // WORLD.slots and row["factor"] == 1.0
        assert row["sent_wall"] <= row["admitted_wall"] <= row["ended_wall"]
        assert row["ended_wall"] <= row["answered_wall"]
    # the first batch holds every search, chosen in id order with sequential loads
    first = sorted((r for r in rows if r["step"] == 0), key=lambda r: r["search"])
    assert [r["search"] for r in first] == targets
    seen = np.zeros(WORLD.layout.servers, dtype=int)
    for row in first:
        assert row["coordinator_load"] == seen[row["server"]]
        seen[row["server"]] += 1


@pytest.mark.parametrize(("policy", "targets"), [
    ("priority", [0, 1, 2, 3, 4, 5]), ("random", [6, 7]), ("load-balance", [8, 9]),
])
async def test_single_search_analyses_the_items_search_run_gives(
        policy: str, targets: list[int]) -> None:
    """Alone, a search sees idle servers at every choice: exactly :meth:`Search.run`.

    The run's only search has id 0 (its index in ``starts``), so the reference search
    has id 0 too: the random policies draw from the stream of the search id.
    """
    async with deployment(WORLD) as dep:
        for k in targets:
            await dep.load([k])  # target k is target 0 of this world
            result = await dep.run(starts_of(WORLD, [k]), policy=policy)
            chosen = make_search_policy(policy, WORLD.items, 7,
                                        **({"tc": TC} if policy == "priority" else {}))
            alone = Search(0, WORLD.items, WORLD.start_point(k), 0.0, float(WORLD.slots))
            expected = alone.run(chosen, lambda item, k=k: WORLD.contains(k, item))
            rows = sorted(result["analyses"], key=lambda r: r["step"])
            assert [r["item"] for r in rows] == expected, (policy, k)
            assert all(r["coordinator_load"] == 0 for r in rows)
            assert all(r["running_at_admission"] == 0 for r in rows)
            assert result["requests"][0]["found_item"] == WORLD.required_item(k)


async def test_compensated_accounting_sends_the_eq7_factor() -> None:
    async with deployment(WORLD) as dep:
        await dep.load()
        targets = list(range(WORLD.targets))
        result = await dep.run(starts_of(WORLD, targets), accounting="compensated",
                               policy_params={"w": 0.01, "candidates": "after-discovery"})
    assert all(r["found_item"] == WORLD.required_item(r["search"])
               for r in result["requests"])
    for row in result["analyses"]:
        if row["step"] == 0:  # T_L = 0 at the first choice
            slot = row["item"] % WORLD.slots + 1
            assert row["factor"] == compensation_factor(float(slot), 0.0)
        assert row["factor"] >= 1.0


async def test_coordinator_runs_one_at_a_time() -> None:
    async with deployment(WORLD) as dep:
        await dep.load()
        body = run_body(dep.edges, starts_of(WORLD, list(range(WORLD.targets))),
                        time_scale=FAST)
        first = asyncio.create_task(call(dep.http, "POST", f"{dep.url}/runs", body))
        deadline = time.monotonic() + 5.0
        while not (await call(dep.http, "GET", f"{dep.url}/health"))[1]["running"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        status, answer = await call(dep.http, "POST", f"{dep.url}/runs", body)
        assert status == 409 and "in progress" in answer["error"]
        status, _ = await first
        assert status == 200
        _, health = await call(dep.http, "GET", f"{dep.url}/health")
        assert health == {"ok": True, "running": False, "runs": 1}
