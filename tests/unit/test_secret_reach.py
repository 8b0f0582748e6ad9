"""Where the run secret goes: only on state-changing requests to the run's own services.

A user token may register a node at any URL through the Beacon, so the Spinner and the
Cargo Manager must never send the run secret there: not on their health checks (reads
carry no credential at all) and not on work, which only nodes registered with the run
secret get. Each test registers a recorder (a small HTTP server on 127.0.0.1 that
answers like a node and keeps every request's headers) with a user token, drives the
legitimate flows around it, and checks that the secret never reached it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from nodes.armada.cargo_manager import service as cargo_manager
from nodes.armada.configs import STATE_FILE
from nodes.armada.sdk.storage import StorageClient
from nodes.http import PeerError, call_json
from nodes.secret import SECRET_ENV, RedirectRefused, environment_headers, peer_session
from testbed.poll import await_until
from tests.secured import AUTH, SECRET, secret_file, secured
from tests.unit.test_armada_services import CITY, FAR, TOKEN, armada, deployment
from tests.unit.test_armada_storage import DIM, records, storage_layer

USER = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Recorder:
    """What a recorder server received: ``(method, path, headers)`` per request."""

    server: TestServer
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    def count(self, method: str, path: str) -> int:
        return sum(m == method and p == path for m, p, _ in self.seen)

    def leaked(self) -> list[tuple[str, str]]:
        """The requests that carried the run secret, in any header."""
        return [(m, p) for m, p, headers in self.seen
                if any(SECRET.value in value for value in headers.values())]


async def _answer(recorder: Recorder, request: web.Request) -> web.StreamResponse:
    """Record ``request``; answer as a healthy Captain and Cargo would (a status, a
    started task, a created application), or redirect ``/moved`` to ``/elsewhere``."""
    recorder.seen.append((request.method, request.path, dict(request.headers)))
    if request.path.startswith("/moved"):
        raise web.HTTPTemporaryRedirect(request.query.get("to", "/elsewhere"))
    if request.path == "/status":
        return web.json_response({"tasks": [], "apps": [], "used_bytes": 0})
    if request.method == "POST" and request.path == "/tasks":
        body = await request.json()
        return web.json_response({"task_id": body.get("task_id"), "status": "running",
                                  "url": recorder.url}, status=202)
    if request.method == "POST" and request.path == "/apps":
        return web.json_response({"app": "x", "loaded": 0}, status=201)
    return web.json_response({})


@asynccontextmanager
async def recorder() -> AsyncIterator[Recorder]:
    """A recorder server on a loopback port."""
    app = web.Application()
    server = TestServer(app, host="127.0.0.1")
    found = Recorder(server)

    async def handle(request: web.Request) -> web.StreamResponse:
        return await _answer(found, request)

    app.router.add_route("*", "/{tail:.*}", handle)
    await server.start_server()
    try:
        yield found
    finally:
        await server.close()


# ------------------------------------------------------------------ the client side


async def test_peer_sessions_send_the_secret_on_changes_only_and_follow_no_redirect(
) -> None:
    """GET/HEAD carry no credential; POST/PUT/DELETE carry the run secret; a redirect of
    a state-changing request is refused (the secret would follow it), one of a read is
    followed without a credential."""
    async with recorder() as rec, recorder() as other:
        app = secured(web.Application())
        async with peer_session(app) as session:
            for method in ("GET", "HEAD", "POST", "PUT", "DELETE"):
                async with session.request(method, rec.url + "/status") as resp:
                    assert resp.status == 200
            with pytest.raises(PeerError) as refused:
                await call_json(session, "POST", f"{rec.url}/moved?to={other.url}/x", {})
            assert "redirect" in str(refused.value)
            with pytest.raises(RedirectRefused):
                async with session.delete(f"{rec.url}/moved?to={other.url}/x"):
                    pass
            status, _ = await call_json(session, "GET", f"{rec.url}/moved?to={other.url}/y")
            assert status == 200
    sent = {(m, "Authorization" in h) for m, path, h in rec.seen if path == "/status"}
    assert sent == {("GET", False), ("HEAD", False), ("POST", True), ("PUT", True),
                    ("DELETE", True)}
    assert other.seen == [("GET", "/y", other.seen[0][2])] and not other.leaked()


def test_in_host_clients_send_the_secret_on_changes_only(tmp_path) -> None:
    env = {SECRET_ENV: str(secret_file(tmp_path))}
    assert environment_headers("GET", env) == environment_headers("HEAD", env) == {}
    assert environment_headers("POST", env) == environment_headers("delete", env) == AUTH
    assert environment_headers("POST", {}) == {}


# ------------------------------------------------------------------ compute layer


async def test_a_node_a_user_token_registers_never_receives_the_run_secret(tmp_path) -> None:
    """A contributor's node (user token, the Beacon) at a recording URL: health-checked
    many times, offered to a deployment with no other node (refused: it is not trusted
    with tasks) and then with a run node beside it (placed there only), the app
    removed: no request to it ever carries the run secret."""
    async with armada(tmp_path) as stack, recorder() as rec:
        node = {"node_id": "volunteer", "url": rec.url, "lat": CITY[0], "lon": CITY[1],
                "node_type": "volunteer", "cpu": 64, "memory_mb": 65536}
        status, body = await stack.call("POST", "/nodes", node, USER)
        assert status == 200 and body["trusted"] is False, body
        await await_until(lambda: _checked(rec, 5), what="five health checks")
        assert rec.leaked() == []  # a health check is a read: no credential
        status, body = await stack.call("POST", "/apps", deployment(), AUTH)
        assert status == 409 and "1 registered with a user token" in body["error"], body

        await stack.add_captain("n0", FAR, cpu=1)
        await await_until(lambda: _alive(stack, "n0"), what="the run's node registered")
        status, body = await stack.call("POST", "/apps", deployment(), AUTH)
        assert status == 201, body
        assert {r["node_id"] for r in body["replicas"]} == {"n0"}
        status, body = await stack.call("DELETE", "/apps/det", headers=AUTH)
        assert status == 200, body
        checks = rec.count("GET", "/status")
        await await_until(lambda: _checked(rec, checks + 3), what="three more checks")
        status, listed = await stack.call("GET", "/nodes")
        assert {n["node_id"]: n["trusted"] for n in listed["nodes"]} == {
            "volunteer": False, "n0": True}
    assert {(m, p) for m, p, _ in rec.seen} == {("GET", "/status")}
    assert rec.leaked() == []


async def _checked(rec: Recorder, n: int) -> bool:
    return rec.count("GET", "/status") >= n


async def _alive(stack: Any, node_id: str) -> bool:
    status, body = await stack.call("GET", "/nodes")
    return status == 200 and any(n["node_id"] == node_id and n["state"] == "alive"
                                 for n in body["nodes"])


# ------------------------------------------------------------------ storage layer


async def test_a_cargo_a_user_token_registers_never_receives_the_run_secret(tmp_path) -> None:
    """A contributor's Cargo (user token, the Beacon) at a recording URL, nearest the
    application's users and claiming its data: health-checked, never allocated (507
    while it is the only one), not re-adopted (told to drop), not listed by ``/query``,
    not in the state file; the run's Cargos get the allocation, the SDK's writes and
    reads, the release. The secret never reaches the recorder."""
    manager = TestServer(secured(cargo_manager.make_app(0.1, 0.3, 2, seed=1,
                                                        state_dir=tmp_path / "cm")),
                         host="127.0.0.1")
    await manager.start_server()
    async with storage_layer(tmp_path, manager=manager) as layer, recorder() as rec:
        cargo = {"cargo_id": "volunteer", "url": rec.url, "lat": CITY[0], "lon": CITY[1],
                 "capacity_bytes": 10**12}
        status, body = await _post(layer.http, layer.beacon_url + "/cargos", cargo, USER)
        assert status == 200 and body["trusted"] is False and body["drop"] == [], body
        await await_until(lambda: _checked(rec, 5), what="five health checks")
        assert rec.leaked() == []  # a health check is a read: no credential
        status, body = await layer.allocate("faces", CITY, replication=1)
        assert status == 507 and body["error"].startswith("insufficient storage: 0 live")

        for cargo_id in ("far1", "far2", "far3"):
            await layer.add_cargo(cargo_id, FAR)
        await await_until(lambda: layer.cargo_count(4), what="the run's Cargos registered")
        status, body = await layer.allocate("faces", CITY, source={
            "kind": "inline", "records": records(range(4))})
        assert status == 201, body
        assert sorted(r["cargo_id"] for r in body["replicas"]) == ["far1", "far2", "far3"]
        status, body = await _post(layer.http, layer.beacon_url + "/cargos",
                                   {**cargo, "apps": ["faces"]}, USER)
        assert status == 200 and body["drop"] == ["faces"] and body["apps"] == [], body
        async with StorageClient(layer.url, "faces", *CITY) as sdk:
            await sdk.write(9, [0.5] * DIM)
            assert await sdk.read(9) == [0.5] * DIM
            assert {r.cargo_id for r in sdk.replicas} == {"far1", "far2", "far3"}
        saved = json.loads((tmp_path / "cm" / STATE_FILE).read_text())
        assert sorted(c["cargo_id"] for c in saved["cargos"]) == ["far1", "far2", "far3"]
        status, body = await _call(layer.http, "DELETE", layer.url + "/storage/faces")
        assert status == 200, body
        checks = rec.count("GET", "/status")
        await await_until(lambda: _checked(rec, checks + 3), what="three more checks")
    assert {(m, p) for m, p, _ in rec.seen} == {("GET", "/status")}
    assert rec.leaked() == []


async def _post(http: aiohttp.ClientSession, url: str, body: Any,
                headers: dict[str, str]) -> tuple[int, Any]:
    return await _call(http, "POST", url, body, headers)


async def _call(http: aiohttp.ClientSession, method: str, url: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with http.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()
