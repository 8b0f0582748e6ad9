"""A Cargo's inputs confined (issue 13): file sources below ``--data-root``, every source
read bounded, replicated versions bounded against the clock, query parameters checked.

Real Cargo processes on loopback, started with ``TESTBED_SECRET_FILE`` and sent
``Authorization: Bearer`` (the services' shared secret interface), fed by a real endless
HTTP source on loopback (bounded by the test) and real files inside and outside the root.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from nodes.armada.cargo.codec import pack_records
from nodes.common import free_port
from testbed.poll import await_until
from tests.unit.test_armada_storage import DIM, REPO, allocation, records, vectors

ENDLESS_CAP_BYTES = 256 * 1024**2  # the endless source stops after this much, whatever


def make_secret(folder: Path) -> tuple[Path, dict[str, str]]:
    """A 0600 secret file (``TESTBED_SECRET_FILE``) and the header that presents it."""
    value = secrets.token_hex(16)
    path = folder / "secret"
    path.touch(mode=0o600)
    path.write_text(value)
    return path, {"Authorization": f"Bearer {value}"}


@pytest.fixture
def secret(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    return make_secret(tmp_path)


async def request(http: aiohttp.ClientSession, method: str, url: str, auth: dict[str, str],
                  body: Any = None) -> tuple[int, Any]:
    async with http.request(method, url, json=body, headers=auth) as resp:
        return resp.status, await resp.json()


@asynccontextmanager
async def cargo_process(tmp: Path, secret_file: Path, name: str, *options: str
                        ) -> AsyncIterator[tuple[str, int]]:
    """A Cargo process ``name`` on a free loopback port; its URL and pid."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp / f"{name}.log").open("ab")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nodes.armada.cargo", "--host", "127.0.0.1", "--port",
        str(port), "--data-dir", str(tmp / name), "--cargo-id", name, "--lat", "1",
        "--lon", "2", *options, cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=log,
        stderr=log, env={**os.environ, "TESTBED_SECRET_FILE": str(secret_file)})
    try:
        async with aiohttp.ClientSession() as http:

            async def serving() -> bool:
                assert proc.returncode is None, (tmp / f"{name}.log").read_text()
                try:
                    async with http.get(url + "/health") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            await await_until(serving, 30, f"Cargo {name} to serve")
        yield url, proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        log.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def test_file_sources_are_read_only_below_the_data_root(tmp_path, secret) -> None:
    secret_file, auth = secret
    root = tmp_path / "datasets"
    root.mkdir()
    data = pack_records(range(5), vectors(5))
    (root / "faces.bin").write_bytes(data)
    (root / "faces.json").write_text(json.dumps({"records": records(range(5))}))
    outside = tmp_path / "private.bin"  # a real file, readable by this Cargo, outside
    outside.write_bytes(data)
    outside.chmod(0o600)
    (root / "escape.bin").symlink_to(outside)
    (root / "zero.bin").symlink_to("/dev/zero")
    os.mkfifo(root / "pipe.bin")
    async with cargo_process(tmp_path, secret_file, "c1", "--data-root", str(root)) as (url, _), \
            aiohttp.ClientSession() as http:
        refused = [
            (str(outside), "source.path: expected a file below the data root"),
            ("../private.bin", "source.path: expected a file below the data root"),
            (f"{root}/../private.bin", "source.path: expected a file below the data root"),
            ("escape.bin", "source.path: expected a file below the data root"),
            ("zero.bin", "source.path: expected a file below the data root"),
            ("/dev/zero", "source.path: expected a file below the data root"),
            ("/etc/shadow", "source.path: expected a file below the data root"),
            ("pipe.bin", "source.path: expected a regular file"),
        ]
        for path, reason in refused:
            status, body = await request(http, "POST", url + "/apps", auth, allocation(
                "bad", source={"kind": "file", "path": path}))
            assert status == 400 and body["error"].startswith(reason), (path, body)
            assert (await request(http, "GET", url + "/apps/bad", auth))[0] == 404
        for name, path in (("rel", "faces.bin"), ("abs", str(root / "faces.bin")),
                           ("json", "faces.json")):
            status, body = await request(http, "POST", url + "/apps", auth, allocation(
                name, source={"kind": "file", "path": path}))
            assert status == 201 and body["loaded"] == 5, body
        status, body = await request(http, "POST", url + "/apps", auth, allocation(
            "bad", source={"kind": "file", "path": "none.bin"}))
        assert status == 422 and body["error"].startswith("source: cannot read none.bin")
    # Without a data root, no file is read at all.
    async with cargo_process(tmp_path, secret_file, "c2") as (url, _), \
            aiohttp.ClientSession() as http:
        status, body = await request(http, "POST", url + "/apps", auth, allocation(
            "faces", source={"kind": "file", "path": str(root / "faces.bin")}))
        assert status == 400 and body["error"].startswith(
            "source.path: file sources are refused by this Cargo"), body


async def test_endless_sources_are_refused_without_growing_memory(tmp_path, secret) -> None:
    secret_file, auth = secret
    root = tmp_path / "datasets"
    root.mkdir()
    with (root / "huge.bin").open("wb") as huge:  # sparse: 1 GiB of zeros, no disk used
        huge.truncate(1024**3)
    sent = {"bytes": 0}

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        chunk = bytes(64 * 1024)
        with_closed = (ConnectionResetError, aiohttp.ClientConnectionResetError)
        try:
            while sent["bytes"] < ENDLESS_CAP_BYTES:
                await resp.write(chunk)
                sent["bytes"] += len(chunk)
        except with_closed:
            pass  # the Cargo hung up: what the test wants
        return resp

    source_app = web.Application()
    source_app.router.add_get("/endless", endless)
    async with TestServer(source_app, host="127.0.0.1") as server, \
            cargo_process(tmp_path, secret_file, "c1", "--data-root", str(root)) as (url, pid), \
            aiohttp.ClientSession() as http:
        endless_url = str(server.make_url("/endless"))
        before = rss_bytes(pid)
        quota = 10**6
        status, body = await request(http, "POST", url + "/apps", auth, allocation(
            "faces", quota_bytes=quota, source={"kind": "url", "url": endless_url}))
        assert status == 413 and body["error"].startswith(f"source: {endless_url} holds more "
                                                          "than"), body
        assert sent["bytes"] < ENDLESS_CAP_BYTES  # the Cargo stopped reading early
        status, body = await request(http, "POST", url + "/apps", auth, allocation(
            "faces", quota_bytes=quota, source={"kind": "file", "path": "huge.bin"}))
        assert status == 413 and body["error"].startswith("source: huge.bin holds more than")
        assert rss_bytes(pid) - before < 64 * 1024**2, (before, rss_bytes(pid))
        assert (await request(http, "GET", url + "/apps", auth))[1] == {"apps": []}


async def test_a_future_version_cannot_poison_a_record(tmp_path, secret) -> None:
    secret_file, auth = secret
    async with cargo_process(tmp_path, secret_file, "a") as (a, _), \
            cargo_process(tmp_path, secret_file, "b") as (b, _), \
            aiohttp.ClientSession() as http:
        for here, there in ((a, b), (b, a)):
            status, body = await request(http, "POST", here + "/apps", auth,
                                         allocation(peers=[there]))
            assert status == 201, body
        poison = [9.0] * DIM
        # The sequence: a version at 2**63 - 1 sent to one replica.
        status, body = await request(http, "POST", b + "/apps/faces/replicate", auth, {
            "origin": "x", "records": [{"id": 1, "vector": poison, "ts": 2**63 - 1,
                                        "origin": "x"}]})
        assert status == 400 and body["error"].startswith("records[0].ts: expected at most")
        good = records(range(1, 2), seed=3)
        status, body = await request(http, "POST", a + "/apps/faces/records", auth,
                                     {"records": good})
        assert status == 200 and body["written"] == 1 and body["replicas"] == 2, body
        for url in (a, b):
            status, body = await request(http, "GET", url + "/apps/faces/records/1", auth)
            assert status == 200 and body["vector"] == good[0]["vector"], url
        # A version just ahead of the clock (within the skew bound) is taken, but a
        # client write on that replica still supersedes it, and is stored everywhere.
        ahead = time.time_ns() + 10**9
        status, body = await request(http, "POST", b + "/apps/faces/replicate", auth, {
            "origin": "x", "records": [{"id": 1, "vector": poison, "ts": ahead,
                                        "origin": "x"}]})
        assert status == 200 and body["applied"] == 1
        fresh = records(range(1, 2), seed=4)
        status, body = await request(http, "POST", b + "/apps/faces/records", auth,
                                     {"records": fresh})
        assert status == 200 and body["written"] == 1 and body["replicas"] == 2, body
        for url in (a, b):
            status, body = await request(http, "GET", url + "/apps/faces/records/1", auth)
            assert status == 200 and body["vector"] == fresh[0]["vector"], url


async def test_query_parameters_are_checked(tmp_path, secret) -> None:
    secret_file, auth = secret
    async with cargo_process(tmp_path, secret_file, "c1") as (url, _), \
            aiohttp.ClientSession() as http:
        assert (await request(http, "POST", url + "/apps", auth, allocation()))[0] == 201
        listing = url + "/apps/faces/records"
        for query, name in (("after=99999999999999999999", "after"), ("after=-2", "after"),
                            ("after=1e3", "after"), ("after=", "after"),
                            ("after=" + "9" * 5000, "after"), ("limit=0", "limit"),
                            ("limit=99999999999999999999", "limit"), ("limit=x", "limit")):
            status, body = await request(http, "GET", f"{listing}?{query}", auth)
            assert status == 400 and body["error"].startswith(
                f"{name}: expected integer in ["), (query, body)
        status, body = await request(http, "GET", f"{listing}?after={2**63 - 1}&limit=5", auth)
        assert status == 200 and body["records"] == []
