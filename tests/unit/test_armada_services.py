"""The Armada services (Beacon, Application Manager, Spinner, Captain) over real HTTP.

Every service runs in-process on a loopback port; Captains start real task processes
(``nodes.armada.echo_task``). Intervals are shortened (health checks every 0.1 s) so
detection, re-placement and scaling happen within seconds; tests wait for conditions.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from nodes.armada import app_manager, beacon, captain, spinner
from nodes.armada.auth import load_tokens
from nodes.armada.captain import CaptainConfig, free_port
from nodes.armada.scaling import ReplicaState, ScalingPolicy, plan_scaling
from testbed.poll import await_until
from tests.secured import AUTH, bare_call, secured

TOKEN = "s3cret"
CITY = (40.10, -88.20)  # precision-5 cells here are about 4.9 km x 4.9 km
SUBURB = (40.13, -88.25)  # ~5 km away: a neighbouring cell
FAR = (41.88, -87.63)  # ~200 km away


@dataclass
class Stack:
    """A running Armada: URLs, servers and a client session."""

    tmp: Path
    http: aiohttp.ClientSession
    spinner: TestServer
    manager: TestServer
    beacon: TestServer
    captains: dict[str, TestServer] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return str(self.beacon.make_url("")).rstrip("/")

    def state(self, server: TestServer, key: str) -> Any:
        return server.app[key]

    async def add_captain(self, node_id: str, where: tuple[float, float], cpu: float = 1.0,
                          tags: tuple[str, ...] = (), recheck_s: float = 5.0) -> TestServer:
        port = free_port()
        config = CaptainConfig(
            beacon=self.url, node_id=node_id, url=f"http://127.0.0.1:{port}",
            lat=where[0], lon=where[1], cpu=cpu, memory_mb=2048, tags=list(tags),
            task_host="127.0.0.1", recheck_s=recheck_s, sample_s=0.2,
            workdir=self.tmp / node_id,
        )
        server = TestServer(secured(captain.make_app(config)), host="127.0.0.1", port=port)
        await server.start_server()
        self.captains[node_id] = server
        return server

    async def call(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None, data: str | None = None
                   ) -> tuple[int, Any]:
        async with self.http.request(method, self.url + path, json=body, data=data,
                                     headers=headers) as resp:
            return resp.status, await resp.json()


@asynccontextmanager
async def armada(tmp: Path, *, poll_s: float = 0.1, cooldown_s: float = 0.0,
                 policy: ScalingPolicy | None = None, user_ttl_s: float = 20.0,
                 cargo_manager: str | None = None) -> AsyncIterator[Stack]:
    """Spinner, Application Manager and Beacon on loopback; add Captains with the stack."""
    spin = TestServer(secured(spinner.make_app(0.1, 0.3, 2)), host="127.0.0.1")
    await spin.start_server()
    spin_url = str(spin.make_url("")).rstrip("/")
    am = TestServer(secured(app_manager.make_app(spin_url, cargo_manager, poll_s, policy,
                                         cooldown_s=cooldown_s, user_ttl_s=user_ttl_s)),
                    host="127.0.0.1")
    await am.start_server()
    bea = TestServer(secured(beacon.make_app(str(am.make_url("")).rstrip("/"), spin_url, [TOKEN])),
                     host="127.0.0.1")
    await bea.start_server()
    async with aiohttp.ClientSession(headers=AUTH) as http:
        stack = Stack(tmp, http, spin, am, bea)
        try:
            yield stack
        finally:
            for server in stack.captains.values():
                await server.close()
            for server in (bea, am, spin):
                await server.close()


def deployment(name: str = "det", **overrides: Any) -> dict[str, Any]:
    body = {
        "name": name, "module": "nodes.armada.echo_task", "args": {"name": name},
        "cpu": 0.1, "memory_mb": 200, "need_storage": False,
        "locations": [{"lat": CITY[0], "lon": CITY[1]}],
    }
    body.update(overrides)
    return body


async def app_status(stack: Stack, name: str = "det") -> dict[str, Any]:
    status, body = await stack.call("GET", f"/apps/{name}")
    assert status == 200, body
    return body


def running(app: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in app["replicas"] if r["status"] == "running"]


async def nodes(stack: Stack) -> dict[str, dict[str, Any]]:
    status, body = await stack.call("GET", "/nodes")
    assert status == 200
    return {n["node_id"]: n for n in body["nodes"]}


# ------------------------------------------------------------------- tokens, errors


async def test_state_changes_need_a_valid_token_and_refusals_change_nothing(tmp_path) -> None:
    node = {"node_id": "n1", "url": "http://127.0.0.1:9", "lat": 1.0, "lon": 2.0,
            "node_type": "volunteer", "cpu": 1, "memory_mb": 512}
    async with armada(tmp_path) as stack:
        status, body = await bare_call("POST", stack.url + "/nodes", node)
        assert status == 401 and "Bearer" in body["error"]
        status, body = await bare_call("POST", stack.url + "/nodes", node,
                                       {"Authorization": "Basic x"})
        assert status == 401
        status, body = await stack.call("POST", "/nodes", node, {"Authorization": "Bearer no"})
        assert status == 403 and body == {"error": "authorization: credential not accepted"}
        status, _ = await bare_call("POST", stack.url + "/apps", deployment())
        assert status == 401
        status, _ = await stack.call("POST", "/apps", deployment(),
                                     {"Authorization": "Bearer wrong"})
        assert status == 403
        status, _ = await stack.call("DELETE", "/nodes/n1", headers={"Authorization": "Bearer x"})
        assert status == 403

        assert await nodes(stack) == {}
        assert (await stack.call("GET", "/apps"))[1] == {"apps": []}
        status, body = await stack.call("POST", "/nodes", node, AUTH)
        assert status == 200 and body["node_id"] == "n1" and body["state"] == "alive"
        assert body["trusted"] is True
        # the Beacon's user token is a credential too (a contributor's node registers
        # and leaves), but not over a node the run secret registered
        user = {"Authorization": f"Bearer {TOKEN}"}
        status, body = await stack.call("DELETE", "/nodes/n1", headers=user)
        assert status == 403 and "registered with the run secret" in body["error"], body
        status, body = await stack.call("POST", "/nodes", node, user)
        assert status == 403 and body["error"].startswith("node_id: node n1 was"), body
        status, body = await stack.call("POST", "/nodes", {**node, "node_id": "n2"}, user)
        assert status == 200 and body["trusted"] is False, body
        status, body = await stack.call("DELETE", "/nodes/n2", headers=user)
        assert status == 200 and body["state"] == "left", body
        status, body = await stack.call("DELETE", "/nodes/n1")
        assert status == 200, body


async def test_bad_requests_get_400_with_reasons(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        status, body = await stack.call("POST", "/nodes", headers=AUTH, data="{not json")
        assert status == 400 and body["error"].startswith("body: expected a JSON object")
        bad_node = {"node_id": "n", "url": "ftp://x", "lat": 1, "lon": 2,
                    "node_type": "volunteer", "cpu": 1, "memory_mb": 1}
        status, body = await stack.call("POST", "/nodes", bad_node, AUTH)
        assert status == 400 and body["error"].startswith("url: expected http://host:port")
        status, body = await stack.call("POST", "/apps", deployment(cpu=-1), AUTH)
        assert status == 400 and body["error"].startswith("cpu: expected finite number > 0")
        status, body = await stack.call("POST", "/apps", deployment(locations=[{"lat": 95,
                                                                                "lon": 0}]), AUTH)
        assert status == 400 and body["error"].startswith("locations:")
        no_module = deployment()
        del no_module["module"]
        status, body = await stack.call("POST", "/apps", no_module, AUTH)
        assert status == 400 and body["error"].startswith("module: expected it")
        status, body = await stack.call("POST", "/apps", deployment(min_replicas=2), AUTH)
        assert status == 400 and "min_replicas" in body["error"]
        status, body = await stack.call("POST", "/query", {"app": "det", "lat": "1", "lon": 2})
        assert status == 400 and body["error"].startswith("lat: expected number")
        huge = 10**400  # an integer no float holds: refused, not an OverflowError (500)
        status, body = await stack.call("POST", "/query", {"app": "det", "lat": huge, "lon": 2})
        assert status == 400 and body["error"].startswith("lat: expected number")
        status, body = await stack.call("POST", "/apps", deployment(cpu=huge), AUTH)
        assert status == 400 and body["error"].startswith("cpu: expected finite number > 0")
        status, body = await stack.call("POST", "/query", {"app": "none", "lat": 1, "lon": 2})
        assert status == 404 and body["error"] == "no such application: none"
        status, body = await stack.call("GET", "/apps/none")
        assert status == 404
        status, body = await stack.call("POST", "/apps", deployment(need_storage=True), AUTH)
        assert status == 409 and "storage is not available" in body["error"]
        status, body = await stack.call("POST", "/apps", deployment(), AUTH)
        assert status == 409 and "no node can host" in body["error"]  # no Captain yet
        assert (await stack.call("GET", "/apps"))[1] == {"apps": []}


async def test_unreachable_upstream_is_a_502(tmp_path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    server = TestServer(secured(beacon.make_app(dead, dead, [TOKEN])), host="127.0.0.1")
    async with aiohttp.ClientSession(headers=AUTH) as http, server, http.get(server.make_url("/apps")) as resp:
        assert resp.status == 502
        assert (await resp.json())["error"].startswith("application manager unreachable")


async def test_every_service_describes_itself(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        cap = await stack.add_captain("n1", CITY)
        for server in (stack.beacon, stack.manager, stack.spinner, cap):
            async with stack.http.get(server.make_url("/openapi.json")) as resp:
                spec = await resp.json()
            assert spec["openapi"].startswith("3.") and "/health" in spec["paths"]
        _, spec = await stack.call("GET", "/openapi.json")
        assert spec["paths"]["/apps"]["post"]["security"] == [{"bearer": []}]


def test_tokens_file(tmp_path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# deployers\nabc\n\n  def  # contributor\n")
    assert load_tokens(path) == {"abc", "def"}


# --------------------------------------------------------- deployment and discovery


async def test_deploy_runs_three_replicas_on_distinct_nodes_and_query_lists_them(
        tmp_path) -> None:
    async with armada(tmp_path) as stack:
        for i, where in enumerate((CITY, SUBURB, FAR, CITY)):
            await stack.add_captain(f"n{i}", where, tags=("campus",) if i == 1 else ())
        await await_until(lambda: _count_nodes(stack, 4), what="4 registered nodes")
        status, body = await stack.call("POST", "/apps", deployment(), AUTH)
        assert status == 201, body
        assert len(body["replicas"]) == 3 and body["state"] == "degraded"
        assert (await stack.call("POST", "/apps", deployment(), AUTH))[0] == 409
        app = await await_until(lambda: _ready(stack), what="3 running replicas")
        placed = {r["node_id"] for r in app["replicas"]}
        assert len(placed) == 3 and "n2" not in placed  # spread, and near the location
        assert app["first_running_at"] >= app["created_at"]
        status, answer = await stack.call("POST", "/query", {
            "app": "det", "lat": SUBURB[0], "lon": SUBURB[1], "tags": ["campus"], "user": "u1"})
        assert status == 200 and answer["topn"] == 3
        candidates = answer["candidates"]
        assert len(candidates) == 3 and candidates[0]["node_id"] == "n1"
        assert all(c["reason"] == "area" for c in candidates)
        for c in candidates:
            async with stack.http.post(c["url"] + "/infer", data=b"frame") as resp:
                assert resp.status == 200 and (await resp.json())["bytes"] == 5
        loaded = await await_until(lambda: _loaded(stack), what="load reported")
        assert loaded["load"]["completed"] >= 1 and loaded["utilisation"] is not None
        assert (await stack.call("DELETE", "/apps/det", headers=AUTH))[0] == 200
        spin = stack.spinner.app[spinner.SPINNER_KEY]
        assert spin.tasks == {}
        assert all(n["free_cpu"] == pytest.approx(1.0) for n in (await nodes(stack)).values())


async def _count_nodes(stack: Stack, n: int) -> bool:
    return len(await nodes(stack)) == n


async def _ready(stack: Stack) -> dict[str, Any] | None:
    app = await app_status(stack)
    return app if len(running(app)) == 3 and app["state"] == "ready" else None


async def _loaded(stack: Stack) -> dict[str, Any] | None:
    app = await app_status(stack)
    # Utilisation needs two CPU samples of a serving task, so it may come a poll later
    # than the load counters: wait for both.
    done = [r for r in app["replicas"]
            if r["load"] and r["load"]["completed"] and r["utilisation"] is not None]
    return done[0] if done else None


async def test_failing_program_is_replaced_until_the_app_is_declared_failed(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        await stack.add_captain("n0", CITY, cpu=4)
        await await_until(lambda: _count_nodes(stack, 1))
        status, _ = await stack.call("POST", "/apps", deployment(
            args={"work_ms": -1}), AUTH)  # the program exits at once: a bad option
        assert status == 201  # accepted: it fails on the node
        app = await await_until(lambda: _failed(stack), timeout=30, what="app failed")
        assert app["failures"] > 6


async def _failed(stack: Stack) -> dict[str, Any] | None:
    app = await app_status(stack)
    return app if app["state"] == "failed" else None


# ----------------------------------------------------- health checks and churn


@pytest.mark.timing
async def test_dead_node_is_detected_and_its_replica_placed_elsewhere(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        for i, where in enumerate((CITY, SUBURB, CITY, FAR)):
            await stack.add_captain(f"n{i}", where)
        await await_until(lambda: _count_nodes(stack, 4))
        assert (await stack.call("POST", "/apps", deployment(), AUTH))[0] == 201
        app = await await_until(lambda: _ready(stack), what="3 running replicas")
        victim = app["replicas"][0]
        crashed = stack.captains.pop(victim["node_id"])
        crashed.app[captain.CAPTAIN_KEY].config.beacon = f"http://127.0.0.1:{free_port()}"  # no goodbye
        began = time.monotonic()
        await crashed.close()  # stops answering; its tasks die with it
        dead = await await_until(lambda: _node_state(stack, victim["node_id"], "dead"))
        assert time.monotonic() - began < 2.0  # 2 missed checks at 0.1 s, 0.3 s timeout
        assert dead["tasks"] == []

        async def replaced() -> dict[str, Any] | None:
            app = await app_status(stack)
            again = [r for r in running(app) if r["task_id"] == victim["task_id"]
                     and r["node_id"] != victim["node_id"]]
            return again[0] if again and len(running(app)) == 3 else None

        moved = await await_until(replaced, what="replica re-placed")
        assert moved["node_id"] is not None and moved["url"] != victim["url"]


async def _node_state(stack: Stack, node_id: str, state: str) -> dict[str, Any] | None:
    node = (await nodes(stack)).get(node_id)
    return node if node and node["state"] == state else None


async def test_graceful_leave_replaces_at_once(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        for i, where in enumerate((CITY, SUBURB, CITY, FAR)):
            await stack.add_captain(f"n{i}", where)
        await await_until(lambda: _count_nodes(stack, 4))
        assert (await stack.call("POST", "/apps", deployment(), AUTH))[0] == 201
        app = await await_until(lambda: _ready(stack))
        leaving = app["replicas"][1]["node_id"]
        await stack.captains.pop(leaving).close()  # SIGTERM path: deregisters, stops tasks
        node = (await nodes(stack))[leaving]
        assert node["state"] == "left" and node["tasks"] == []
        await await_until(lambda: _ready(stack), what="3 running again")


async def test_captain_registers_again_when_the_spinner_forgets_it(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        cap = await stack.add_captain("n0", CITY, recheck_s=0.4)
        await await_until(lambda: _count_nodes(stack, 1))
        agent = cap.app[captain.CAPTAIN_KEY]
        assert agent.registrations == 1
        del stack.spinner.app[spinner.SPINNER_KEY].nodes["n0"]  # e.g. a Spinner restart
        await await_until(lambda: _count_nodes(stack, 1), what="registered again")
        assert agent.registrations == 2


async def test_captain_refuses_what_it_cannot_run(tmp_path) -> None:
    async with armada(tmp_path) as stack:
        cap = await stack.add_captain("n0", CITY, cpu=0.5)
        spec = {"task_id": "t1", "app": "a", "runtime": "process", "module": "os.path",
                "cpu": 0.1, "memory_mb": 10}
        async with stack.http.post(cap.make_url("/tasks"), json=spec) as resp:
            assert resp.status == 422 and "nodes." in (await resp.json())["error"]
        spec |= {"runtime": "docker", "image": "x"}
        async with stack.http.post(cap.make_url("/tasks"), json=spec) as resp:
            assert resp.status == 422 and "docker" in (await resp.json())["error"]
        spec |= {"runtime": "process", "module": "nodes.armada.echo_task", "cpu": 0.6}
        async with stack.http.post(cap.make_url("/tasks"), json=spec) as resp:
            assert resp.status == 409 and "not enough free" in (await resp.json())["error"]


# -------------------------------------------------------------------- auto-scaling


async def test_autoscale_up_where_users_concentrate_then_down_to_minimum(tmp_path) -> None:
    policy = ScalingPolicy(users_per_replica=2)
    async with armada(tmp_path, policy=policy, user_ttl_s=1.5) as stack:
        far = [FAR, (42.5, -87.6), (41.3, -88.9)]  # expected locations, far apart
        for i, where in enumerate(far):
            await stack.add_captain(f"far{i}", where)
        for i in range(2):
            await stack.add_captain(f"city{i}", (CITY[0] + i * 0.01, CITY[1]))
        await await_until(lambda: _count_nodes(stack, 5))
        locations = [{"lat": lat, "lon": lon} for lat, lon in far]
        assert (await stack.call("POST", "/apps", deployment(locations=locations), AUTH))[0] == 201
        await await_until(lambda: _ready(stack))
        async def users_query() -> None:
            for user in range(4):  # 4 users, 2 per replica: 2 replicas wanted in the city
                status, _ = await stack.call("POST", "/query", {
                    "app": "det", "lat": CITY[0], "lon": CITY[1] + user * 0.001,
                    "user": f"u{user}"})
                assert status == 200

        async def grown() -> dict[str, Any] | None:
            # Users keep querying while they are there, as real clients re-query; on a
            # loaded machine scaling up may take longer than a user's time to live.
            await users_query()
            app = await app_status(stack)
            city = [r for r in running(app) if r["node_id"].startswith("city")]
            return app if len(city) == 2 else None

        app = await await_until(grown, what="two replicas in the city")
        assert [e["action"] for e in app["scaling"]] == ["up", "up"]
        assert {e["reason"] for e in app["scaling"]} == {"users"}
        status, answer = await stack.call("POST", "/query", {
            "app": "det", "lat": CITY[0], "lon": CITY[1], "user": "u0"})
        assert status == 200
        assert {c["node_id"] for c in answer["candidates"][:2]} == {"city0", "city1"}

        async def shrunk() -> dict[str, Any] | None:
            app = await app_status(stack)
            return app if len(app["replicas"]) == 3 and app["users"] == 0 else None

        app = await await_until(shrunk, what="back to the minimum")  # users expire
        assert [e["action"] for e in app["scaling"]] == ["up", "up", "down", "down"]
        assert all(r["node_id"].startswith("far") for r in app["replicas"])


def replica(task_id: str, where: tuple[float, float], util: float | None = 0.1,
            order: int = 0) -> ReplicaState:
    return ReplicaState(task_id, where[0], where[1], True, util, order)


def test_plan_scaling_up_on_load_near_the_busiest() -> None:
    replicas = [replica("a", CITY, 0.9), replica("b", FAR, 0.8), replica("c", SUBURB, 0.7)]
    action = plan_scaling(replicas, [], ScalingPolicy())
    assert action is not None and (action.action, action.reason) == ("up", "load")
    assert (action.lat, action.lon) == CITY
    capped = plan_scaling(replicas, [], ScalingPolicy(max_replicas=3))
    assert capped is None


def test_plan_scaling_keeps_the_minimum_and_the_users_demand() -> None:
    three = [replica(f"r{i}", FAR, 0.0, i) for i in range(3)]
    assert plan_scaling(three, [], ScalingPolicy()) is None
    four = [*three, replica("r3", CITY, 0.0, 3)]
    assert plan_scaling(four, [], ScalingPolicy()).task_id == "r3"  # the newest, idle
    kept = plan_scaling(four, [], ScalingPolicy(), locations=[FAR, CITY])
    assert kept.task_id == "r2"  # every expected location keeps a replica
    city = [replica("c1", CITY, 0.0, 10), replica("c2", CITY, 0.0, 11)]
    users = [CITY] * 8  # demand 2 in the city at 4 users per replica
    action = plan_scaling([*three, *city], users, ScalingPolicy())
    assert action is not None and action.action == "down" and action.task_id == "r2"
    busy = [replica(f"r{i}", FAR, 0.5, i) for i in range(4)]
    assert plan_scaling(busy, [], ScalingPolicy()) is None  # not idle enough to shrink
    grow = plan_scaling(three, users, ScalingPolicy())
    assert grow is not None and (grow.action, grow.reason) == ("up", "users")
    assert grow.lat == pytest.approx(CITY[0]) and grow.lon == pytest.approx(CITY[1])


# ------------------------------------------------------------------- confinement


async def test_the_captain_runs_only_allowed_programs_under_identifiers(tmp_path) -> None:
    """A task id is an identifier, never a path (an absolute one wrote a root-owned log
    outside the work folder); NUL and lone surrogates are refused, not a 500; only the
    allowlisted programs run."""
    outside = tmp_path / "outside"
    async with armada(tmp_path) as stack:
        cap = await stack.add_captain("n0", CITY, cpu=1)
        spec = {"task_id": "t1", "app": "a", "runtime": "process",
                "module": "nodes.armada.echo_task", "cpu": 0.1, "memory_mb": 10}
        for field, value in (("task_id", str(outside)), ("task_id", "../up"),
                             ("task_id", "a\x00b"), ("task_id", "x" * 81), ("app", "a/b"),
                             ("args", {"name": "a\x00b"})):
            async with stack.http.post(cap.make_url("/tasks"),
                                       json={**spec, field: value}) as resp:
                body = await resp.json()
                assert resp.status == 400 and body["error"].startswith(f"{field}"), body
        async with stack.http.post(cap.make_url("/tasks"), data=b'{"task_id": "\\ud800"}',
                                   headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400, await resp.text()
        async with stack.http.post(cap.make_url("/tasks"),
                                   json={**spec, "module": "nodes.cpu_load"}) as resp:
            body = await resp.json()
            assert resp.status == 422 and "nodes.armada.echo_task" in body["error"], body
        assert not outside.with_suffix(".log").exists() and not (tmp_path / "up.log").exists()
        assert cap.app[captain.CAPTAIN_KEY].tasks == {}


async def test_the_captain_confines_task_args(tmp_path) -> None:
    """A task's ``args`` come after the Captain's own options on its command line, so
    they could move the task's address, its secret file, or (a URL option) where the
    task sends the run secret: the Captain's own options (or an abbreviation argparse
    would expand to one) and undeclared options are refused with 400 naming the key,
    URL options must name the Beacon's host, and a value that looks like an option
    stays a value. The Application Manager refuses the same before placing anything."""
    async with armada(tmp_path) as stack:
        cap = await stack.add_captain("n0", CITY, cpu=1)
        echo = {"task_id": "t1", "app": "a", "runtime": "process",
                "module": "nodes.armada.echo_task", "cpu": 0.1, "memory_mb": 10}
        face = {**echo, "module": "nodes.armada.face_task"}
        refused = [
            (echo, {"host": "0.0.0.0"}, "host"), (echo, {"port": 80}, "port"),
            (echo, {"secret_file": "/tmp/other"}, "secret_file"),
            (echo, {"secret-file": "/tmp/other"}, "secret-file"),
            (echo, {"sec": "/tmp/other"}, "sec"), (echo, {"ho": "0.0.0.0"}, "ho"),
            (echo, {"help": True}, "help"), (echo, {"verbose": True}, "verbose"),
            (face, {"storage_manager": "http://10.255.0.1:7003"}, "storage_manager"),
            (face, {"storage_manager": "http://127.0.0.1@10.255.0.1:7003"},
             "storage_manager"),
            (face, {"storage_manager": "127.0.0.1:7003"}, "storage_manager"),
        ]
        for spec, args, key in refused:
            async with stack.http.post(cap.make_url("/tasks"),
                                       json={**spec, "args": args}) as resp:
                body = await resp.json()
                assert resp.status == 400 and body["error"].startswith(f"args.{key}:"), body
            status, body = await stack.call("POST", "/apps", deployment(
                module=spec["module"], args=args), AUTH)
            if key != "storage_manager":  # the AM does not know the Beacon's host
                assert status == 400 and body["error"].startswith(f"args.{key}:"), body
        assert cap.app[captain.CAPTAIN_KEY].tasks == {}
        assert (await stack.call("GET", "/apps"))[1] == {"apps": []}

        args = {"name": "--port=1", "work_ms": 0}  # a value, not the option
        async with stack.http.post(cap.make_url("/tasks"), json={
                **echo, "memory_mb": 200, "args": args}) as resp:
            body = await resp.json()
            assert resp.status == 202, body
        task = cap.app[captain.CAPTAIN_KEY].tasks["t1"]
        await await_until(lambda: _task_running(task), timeout=30, what="the task serving")
        async with stack.http.get(task.url + "/health") as resp:
            assert (await resp.json())["name"] == "--port=1"


def test_task_args_of_a_program_without_declarations() -> None:
    """A program of a Captain's own allowlist (``--task-module``) declares nothing: any
    key but the runner's options passes, and any URL value must name the Beacon's host."""
    from nodes.armada.fields import args_to_argv, task_args_refusal

    assert task_args_refusal("my.task", {"anything": 1, "url": "http://10.0.0.1:80/x"},
                             "10.0.0.1") is None
    assert task_args_refusal("my.task", {"po": 1}, "10.0.0.1").startswith("args.po:")
    assert task_args_refusal("my.task", {"peer": "http://evil.example:80"},
                             "10.0.0.1").startswith("args.peer: expected an http://host")
    assert task_args_refusal("my.task", {"peer": "http://evil.example:80"}) is None
    assert args_to_argv({"a": "-x", "b": -1, "c": True, "d": False, "e": "y"}) == [
        "--a=-x", "--b=-1", "--c", "--e", "y"]


async def _task_running(task: captain.RunningTask) -> bool:
    assert task.status in ("starting", "running"), task.reason
    return task.status == "running"


async def test_the_beacon_forwards_only_the_routes_it_exposes(tmp_path) -> None:
    """``DELETE /nodes/..%2Ftasks%2F<id>`` decoded would reach the Spinner's ``DELETE
    /tasks/<id>``, which the Beacon does not expose: refused on the raw path."""
    from yarl import URL

    async with armada(tmp_path) as stack:
        for i, where in enumerate((CITY, SUBURB, CITY)):
            await stack.add_captain(f"n{i}", where)
        await await_until(lambda: _count_nodes(stack, 3))
        assert (await stack.call("POST", "/apps", deployment(), AUTH))[0] == 201
        app = await await_until(lambda: _ready(stack), timeout=30, what="three replicas")
        task = app["replicas"][0]["task_id"]
        for raw in (f"/nodes/..%2Ftasks%2F{task}", f"/nodes/%2E%2E%2Ftasks%2F{task}",
                    f"/nodes/..%252Ftasks%252F{task}", "/apps/%2e%2e"):
            async with stack.http.delete(URL(stack.url + raw, encoded=True)) as resp:
                body = await resp.json()
                assert resp.status == 400 and body["error"].startswith("path:"), (raw, body)
        assert task in {r["task_id"] for r in running(await app_status(stack))}
