"""Client mistakes get a 4xx and a one-line log, never a 500, a traceback or a held
connection (issue 13, "no 500 for a client mistake").

The services share :mod:`nodes.common`; these tests use the tier server (and, for slow
bodies, every kind of body reader) served by the real :func:`nodes.common.serve_async`
on loopback, with raw sockets where a client must misbehave below HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodes.common import free_port, serve_async
from nodes.offloading.tier_server import make_app
from testbed.poll import await_until
from tests.secured import AUTH, secured


def tier() -> web.Application:
    return make_app(workers=1, speed=1.0, time_scale=1.0, mu=1.0, max_hold_s=60.0)


@pytest.mark.parametrize("size", [1e308, 2**63, 61])
async def test_a_size_holding_a_worker_past_the_bound_is_refused(size: float) -> None:
    async with TestClient(TestServer(tier())) as client:
        resp = await client.post("/task", json={"task_id": 1, "size": size, "client": "c"})
        assert resp.status == 400
        assert (await resp.json())["error"].startswith("size: expected at most 60 ")


@pytest.mark.parametrize("client", ["a\x00b", "\ud800", "x\udfffy"])
async def test_a_string_with_nul_or_a_lone_surrogate_is_refused_naming_the_field(
        client: str) -> None:
    body = json.dumps({"task_id": 1, "size": 0.001, "client": client})  # ASCII escapes
    async with TestClient(TestServer(tier())) as http:
        resp = await http.post("/task", data=body, headers={"Content-Type": "application/json"})
        assert resp.status == 400
        assert (await resp.json())["error"].startswith("client: expected text without NUL")


async def test_a_lone_surrogate_in_a_field_name_is_refused() -> None:
    async with TestClient(TestServer(tier())) as http:
        resp = await http.post("/task", data='{"\\ud800": 1}',
                               headers={"Content-Type": "application/json"})
        assert resp.status == 400
        assert "lone surrogates" in (await resp.json())["error"]


@contextlib.asynccontextmanager
async def served(app: web.Application, **timeouts: float) -> AsyncIterator[int]:
    """``app`` served by :func:`serve_async` on a loopback port, stopped on exit."""
    port = free_port()
    task = asyncio.create_task(serve_async(app, "127.0.0.1", port, **timeouts))

    async def listening() -> bool:
        with contextlib.suppress(OSError):
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return True
        return False

    await await_until(listening, timeout=10, what="the server to listen")
    try:
        yield port
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def closed_by_server(reader: asyncio.StreamReader, limit_s: float) -> bytes:
    """Everything the server sends until it closes, waiting at most ``limit_s``."""
    return await asyncio.wait_for(reader.read(), limit_s)


async def test_a_slow_header_client_is_closed() -> None:
    async with served(tier(), header_timeout_s=0.5) as port:
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for _reader, writer in conns:
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the head never ends
            await writer.drain()
        for reader, writer in conns:
            assert await closed_by_server(reader, 20) == b""
            writer.close()


async def test_an_idle_connection_is_closed() -> None:
    async with served(tier(), header_timeout_s=0.5) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_by_server(reader, 20) == b""
        writer.close()


def _echo() -> web.Application:
    from nodes.armada.echo_task import make_app as echo
    return echo()


def _detect() -> web.Application:
    from nodes.armada.detect_task import make_app as detect
    return detect("haar-face")


def _face() -> web.Application:
    from nodes.armada.face_task import make_app as face
    from nodes.armada.face_task import memory_store_factory
    return face(memory_store_factory())


def _beacon() -> web.Application:
    from nodes.armada.beacon import make_app as beacon
    return secured(beacon("http://127.0.0.1:9", "http://127.0.0.1:9"))


#: A service reading a request body, and the head of a request to it: the JSON
#: services (the tier server stands for every ``read_json_object`` caller) and those
#: reading a raw body (the Captain's task programs' frames, the Beacon's forwarding).
SLOW_BODY_TARGETS = {
    "tier_server": (tier, b"POST /task HTTP/1.1\r\nContent-Type: application/json\r\n"),
    "echo_task": (_echo, b"POST /infer HTTP/1.1\r\nContent-Type: application/octet-stream\r\n"),
    "detect_task": (_detect, b"POST /infer HTTP/1.1\r\nContent-Type: image/jpeg\r\n"),
    "face_task": (_face, (b"POST /recognise HTTP/1.1\r\nContent-Type: image/jpeg\r\n"
                          b"X-Face-Identity: 1\r\nX-Face-Observation: 2\r\n")),
    "beacon": (_beacon, b"POST /apps HTTP/1.1\r\nContent-Type: application/json\r\n"
               + "".join(f"{k}: {v}\r\n" for k, v in AUTH.items()).encode()),
}


@pytest.mark.parametrize("name", sorted(SLOW_BODY_TARGETS))
async def test_a_slow_body_gets_408_and_the_connection_closed(name: str) -> None:
    """A body that stops arriving after its first bytes is answered 408 once the body
    timeout has passed and the connection is closed right after, on every kind of body
    reader: within a generous bound (5 s against 0.5 s) that still tells it from
    aiohttp's 10 s of reading ("lingering" on) the rest of an unread body."""
    make, head = SLOW_BODY_TARGETS[name]
    async with served(make(), body_timeout_s=0.5) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + b"Host: x\r\nContent-Length: 100\r\n\r\n\xff\xd8\xff{")
        await writer.drain()
        answer = await closed_by_server(reader, 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b'"body: expected the whole body within 0.5 s' in answer


async def test_a_malformed_request_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    async with served(tier()) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
        await writer.drain()
        answer = await closed_by_server(reader, 20)
        writer.close()
    assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request")
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == 1, [r.getMessage() for r in records]
    line = records[0].getMessage()
    assert "\n" not in line and records[0].exc_info is None
    assert line.startswith("malformed request from 127.0.0.1: "), line


@pytest.mark.timing
async def test_a_slow_header_client_is_closed_within_the_timeout() -> None:
    loop = asyncio.get_running_loop()
    async with served(tier(), header_timeout_s=1.0) as port:
        started = loop.time()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\n")
        await writer.drain()
        assert await closed_by_server(reader, 20) == b""
        writer.close()
        assert 0.9 <= loop.time() - started <= 2.5
