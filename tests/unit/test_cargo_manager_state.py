"""The Cargo Manager's state file (``--state-dir``): durable metadata across restarts.

Services run in-process on loopback ports as in ``test_armada_storage.py`` (whose layer
and helpers are reused): the Cargo Manager checks every 0.1 s and declares a Cargo dead
after 2 misses; it listens on a fixed port so that a new one can take over behind the
same Beacon. Tests wait for conditions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from nodes.armada.cargo.codec import record_bytes
from nodes.armada.cargo_manager import service as cargo_manager
from nodes.armada.cargo_manager.service import CARGO_MANAGER_KEY
from nodes.armada.cargo_manager.state import (
    STATE_FORMAT,
    STATE_VERSION,
    StateFileError,
    load_state,
)
from nodes.armada.configs import STATE_FILE
from nodes.armada.intents import INTENTS_FILE, load_intents
from nodes.common import free_port
from testbed.poll import await_until
from tests.secured import AUTH, secured
from tests.unit.test_armada_storage import (
    CITY,
    DIM,
    FAR,
    REPO,
    SUBURB,
    TOWN,
    Layer,
    call,
    records,
    storage_layer,
)
from tests.unit.test_cargo_inputs import cargo_process, make_secret, request

QUIET_S = 60.0  # a Cargo's --recheck-s: it does not register again on its own


def manager_app(state_dir: Path, max_missed: int = 2) -> Any:
    return cargo_manager.make_app(0.1, 0.3, max_missed, seed=1, state_dir=state_dir)


async def start_manager(app: Any, port: int) -> TestServer:
    server = TestServer(secured(app), host="127.0.0.1", port=port)
    await server.start_server()
    return server


@asynccontextmanager
async def durable_layer(tmp: Path) -> AsyncIterator[Layer]:
    """``storage_layer`` with ``--state-dir tmp/state``, the manager on a fixed port."""
    manager = await start_manager(manager_app(tmp / "state"), free_port())
    async with storage_layer(tmp, manager=manager) as layer:
        yield layer


def state_of(layer: Layer) -> dict[str, Any]:
    """The state file as it is on disk now, checked by the manager's own loader."""
    path = layer.tmp / "state" / STATE_FILE
    assert load_state(path) is not None
    doc = json.loads(path.read_text())
    assert doc["format"] == STATE_FORMAT and doc["version"] == STATE_VERSION
    return doc


def held(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Application -> its replicas, in a state file."""
    return {a["app"]: a["replicas"] for a in doc["allocations"]}


def replica_ids(alloc: dict[str, Any]) -> list[str]:
    return [r["cargo_id"] for r in alloc["replicas"]]


async def add_quiet_cargos(layer: Layer, places: Any = None) -> None:
    """Cargos that, once registered, only come back to a restarted manager through its
    health checks (they do not register again on their own within a test)."""
    await (layer.add_cargos() if places is None else layer.add_cargos(places))
    for cargo_id in layer.cargos:
        layer.config(cargo_id).recheck_s = QUIET_S


async def registrations(layer: Layer) -> dict[str, int]:
    counts = {}
    for cargo_id, server in layer.cargos.items():
        _, status = await call(layer.http, "GET", str(server.make_url("/status")))
        counts[cargo_id] = status["registrations"]
    return counts


async def restart(layer: Layer, app: Any) -> None:
    """Serve ``app`` (a new manager) where the previous one was."""
    layer.manager = await start_manager(app, layer.manager.port)


# --------------------------------------------------------------------- restart


async def test_restarted_manager_answers_allocations_and_confirms_its_cargos(
        tmp_path) -> None:
    async with durable_layer(tmp_path) as layer:
        await add_quiet_cargos(layer)
        source = {"kind": "inline", "records": records(range(10), seed=1)}
        status, faces = await layer.allocate("faces", CITY, consistency="eventual",
                                             strategy="random", source=source)
        assert status == 201, faces
        status, notes = await layer.allocate("notes", TOWN, replication=2)
        assert status == 201, notes
        status, _ = await call(layer.http, "DELETE", layer.url + "/storage/notes")
        assert status == 200
        before = await layer.allocation("faces")
        counted = await registrations(layer)
        await layer.manager.close()

        app = manager_app(tmp_path / "state")
        manager = app[CARGO_MANAGER_KEY]
        assert {c: n.state for c, n in manager.cargos.items()} == dict.fromkeys(
            ("city", "suburb", "town"), "unconfirmed")
        assert list(manager.allocations) == ["faces"]
        await restart(layer, app)

        # Answered at once, as it was: replicas, strategy, consistency, history.
        after = await layer.allocation("faces")
        assert after == before
        assert after["strategy"] == "random" and after["consistency"] == "eventual"
        assert after["source"] == "inline" and after["state"] == "ready"
        assert sorted(replica_ids(after)) == ["city", "suburb", "town"]
        status, body = await call(layer.http, "GET", layer.url + "/storage/notes")
        assert status == 404

        async def served() -> dict[str, Any] | None:
            _, query = await call(layer.http, "POST", layer.url + "/query",
                                  {"app": "faces", "lat": TOWN[0], "lon": TOWN[1]})
            return query if len(query["candidates"]) == 3 else None

        query = await await_until(served, what="the replicas confirmed by health checks")
        assert [c["cargo_id"] for c in query["candidates"]] == ["town", "suburb", "city"]
        assert query["consistency"] == "eventual" and query["dim"] == DIM
        assert await layer.cargo_count(3)
        assert await registrations(layer) == counted  # health checks, not registrations
        town = query["candidates"][0]["url"]
        status, record = await call(layer.http, "GET", town + "/apps/faces/records/3")
        assert status == 200 and record["vector"] == source["records"][3]["vector"]

        # The same request is the same allocation (the source included); another is not.
        status, again = await layer.allocate("faces", CITY, consistency="eventual",
                                             strategy="random", source=source)
        assert status == 200 and replica_ids(again) == replica_ids(before)
        status, body = await layer.allocate("faces", CITY, consistency="strong")
        assert status == 409 and body["error"].startswith("consistency: storage for faces")
        assert held(state_of(layer)) == {"faces": replica_ids(before)}


async def test_state_file_holds_every_acknowledged_change(tmp_path) -> None:
    async with durable_layer(tmp_path) as layer:
        await add_quiet_cargos(layer)

        def all_registered() -> dict[str, Any] | None:
            # GET /cargos shows a registration before its answer (and the write) is done
            doc = state_of(layer)
            states = {c["cargo_id"]: c["state"] for c in doc["cargos"]}
            return doc if states == dict.fromkeys(("city", "suburb", "town"), "alive") else None

        doc = await await_until(all_registered, what="the registrations in the state file")
        assert doc["allocations"] == []

        async def allocate(app: str, near: tuple[float, float]
                           ) -> tuple[int, dict[str, Any], dict[str, Any]]:
            status, body = await layer.allocate(app, near, quota_bytes=10**5)
            return status, body, state_of(layer)  # read right after the answer

        for app, near in (("one", CITY), ("two", TOWN)):
            status, body, doc = await allocate(app, near)
            assert status == 201, body
            assert held(doc)[app] == replica_ids(body)
            (saved,) = [a for a in doc["allocations"] if a["app"] == app]
            assert saved["ready_at"] == body["ready_at"] and saved["events"] == body["events"]
        # Concurrent allocations: each answer comes after a write that holds it.
        answers = await asyncio.gather(*(allocate(f"app-{i}", SUBURB) for i in range(5)))
        for i, (status, body, doc) in enumerate(answers):
            assert status == 201, body
            assert held(doc)[f"app-{i}"] == replica_ids(body)
        status, body = await call(layer.http, "DELETE", layer.url + "/storage/one")
        assert status == 200 and body["state"] == "released"
        doc = state_of(layer)
        assert sorted(held(doc)) == sorted(["two"] + [f"app-{i}" for i in range(5)])
        # A Cargo that leaves (SIGTERM: it deregisters before it stops).
        await layer.cargos.pop("town").close()
        doc = state_of(layer)
        assert {c["cargo_id"]: c["state"] for c in doc["cargos"]}["town"] == "left"
        assert all("town" not in replicas for replicas in held(doc).values())
        assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [INTENTS_FILE,
                                                                         STATE_FILE]
        assert load_intents(tmp_path / "state" / INTENTS_FILE) == []  # every one settled


async def test_a_cargo_that_never_comes_back_is_declared_dead_and_replaced(
        tmp_path) -> None:
    async with durable_layer(tmp_path) as layer:
        await add_quiet_cargos(layer, [("city", CITY), ("suburb", SUBURB), ("town", TOWN),
                                       ("far", FAR)])
        source = {"kind": "inline", "records": records(range(10), seed=2)}
        status, alloc = await layer.allocate("faces", CITY, source=source)
        assert status == 201 and replica_ids(alloc) == ["city", "suburb", "town"]
        path = tmp_path / "state" / STATE_FILE
        last_write = path.read_bytes()
        await layer.manager.close()
        path.write_bytes(last_write)  # as if killed: the final write on stop is lost
        await layer.crash("suburb")  # goes away while no manager watches
        await restart(layer, manager_app(tmp_path / "state"))

        async def restored() -> dict[str, Any] | None:
            body = await layer.allocation("faces")
            return body if body["restores"] and body["state"] == "ready" else None

        body = await await_until(restored, what="the replication factor restored")
        assert replica_ids(body) == ["city", "town", "far"]
        (restore,) = body["restores"]
        assert restore["cargo_id"] == "far" and restore["lost"] == "suburb"
        assert restore["records"] == 10
        assert 0 < restore["since_lost_s"] <= restore["since_last_seen_s"]
        lost = [e for e in body["events"] if e["event"] == "lost"]
        assert [(e["cargo_id"], e["reason"]) for e in lost] == [("suburb", "cargo suburb dead")]
        _, suburb = await call(layer.http, "GET", layer.url + "/cargos/suburb")
        assert suburb["state"] == "dead" and suburb["apps"] == []
        _, query = await call(layer.http, "POST", layer.url + "/query",
                              {"app": "faces", "lat": SUBURB[0], "lon": SUBURB[1]})
        assert [c["cargo_id"] for c in query["candidates"]] == ["city", "town", "far"]
        # Strong writes no longer wait for the dead Cargo: every live replica applies them.
        city = str(layer.cargos["city"].make_url("")).rstrip("/")
        status, write = await call(layer.http, "POST", city + "/apps/faces/records",
                                   {"records": records(range(50, 51))})
        assert status == 200 and write["replicas"] == 3
        doc = state_of(layer)
        assert held(doc) == {"faces": ["city", "town", "far"]}
        assert {c["cargo_id"]: c["state"] for c in doc["cargos"]}["suburb"] == "dead"
        assert doc["allocations"][0]["restores"] == body["restores"]


# ----------------------------------------------------- unconfirmed Cargos, bad files


def one_allocation_state(cargo_url: str) -> dict[str, Any]:
    """A state file: Cargo ``c1`` (alive when written) holding application ``faces``."""
    return {
        "format": STATE_FORMAT, "version": STATE_VERSION, "saved_at": 3.0,
        "cargos": [{"cargo_id": "c1", "url": cargo_url, "lat": CITY[0], "lon": CITY[1],
                    "capacity_bytes": 10**9, "node_type": "volunteer", "tags": ["lab"],
                    "state": "alive", "registered_at": 1.0, "last_seen": 2.5,
                    "used_bytes": 0, "disk_bytes": 4096}],
        "allocations": [{"app": "faces", "locations": [{"lat": CITY[0], "lon": CITY[1]}],
                         "replication": 1, "consistency": "strong", "strategy": "nearest",
                         "quota_bytes": 10**6, "dim": DIM, "source": None,
                         "replicas": ["c1"], "created_at": 1.5, "ready_at": 2.0,
                         "events": [{"t": 2.0, "event": "ready", "replicas": 1}],
                         "restores": [], "losses": []}],
    }


async def test_unconfirmed_cargos_are_not_served_until_they_come_back(tmp_path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    url = f"http://127.0.0.1:{free_port()}"  # nothing answers there
    (state_dir / STATE_FILE).write_text(json.dumps(one_allocation_state(url)))
    app = manager_app(state_dir, max_missed=10**6)  # never declared dead here
    async with TestServer(secured(app), host="127.0.0.1") as server, \
            aiohttp.ClientSession(headers=AUTH) as http:
        cm = str(server.make_url("")).rstrip("/")

        async def checked() -> bool:
            return app[CARGO_MANAGER_KEY].cargos["c1"].missed >= 2

        await await_until(checked, what="health checks of the unconfirmed Cargo")
        status, node = await call(http, "GET", cm + "/cargos/c1")
        assert status == 200 and node["state"] == "unconfirmed" and node["apps"] == ["faces"]
        assert node["tags"] == ["lab"] and node["last_seen"] == 2.5
        status, alloc = await call(http, "GET", cm + "/storage/faces")
        assert status == 200 and replica_ids(alloc) == ["c1"] and alloc["state"] == "ready"
        assert alloc["events"] == [{"t": 2.0, "event": "ready", "replicas": 1}]
        status, query = await call(http, "POST", cm + "/query",
                                   {"app": "faces", "lat": CITY[0], "lon": CITY[1]})
        assert status == 200 and query["candidates"] == []
        status, body = await call(http, "POST", cm + "/storage", {
            "app": "other", "locations": [{"lat": 0, "lon": 0}], "replication": 1})
        assert status == 507 and body["error"].startswith("insufficient storage: 0 live")
        _, health = await call(http, "GET", cm + "/health")
        assert health == {"ok": True, "cargos": 0, "allocations": 1}
        # It registers again (holding its data): handled as any re-registration.
        registration = {"cargo_id": "c1", "url": url, "lat": CITY[0], "lon": CITY[1],
                        "capacity_bytes": 10**9, "apps": ["faces"]}
        status, node = await call(http, "POST", cm + "/cargos", registration)
        assert status == 200 and node["state"] == "alive" and node["drop"] == []
        status, query = await call(http, "POST", cm + "/query",
                                   {"app": "faces", "lat": CITY[0], "lon": CITY[1]})
        assert [c["cargo_id"] for c in query["candidates"]] == ["c1"]
        doc = json.loads((state_dir / STATE_FILE).read_text())
        assert doc["cargos"][0]["state"] == "alive" and doc["cargos"][0]["tags"] == []


def test_a_bad_state_file_stops_the_manager(tmp_path, caplog) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    path = state_dir / STATE_FILE
    good = one_allocation_state("http://127.0.0.1:9")

    def variant(**changes: Any) -> bytes:
        return json.dumps({**good, **changes}).encode()

    ghost = {**good["allocations"][0], "replicas": ["c1", "ghost"]}
    cases = [
        (b"", "expected a JSON object, found an empty file"),
        (b'{"format": "armada-cargo-manager-state", "vers', "found invalid JSON (Unterminated"),
        (b"\xff\xfe{}", "found invalid JSON ("),
        (b"[1, 2]", "expected a JSON object, found [1, 2] (array)"),
        (variant(version=STATE_VERSION + 1),
         f"state.version: expected {STATE_VERSION}, found {STATE_VERSION + 1} (number)"),
        (variant(version="1"), f'state.version: expected {STATE_VERSION}, found "1" (string)'),
        (json.dumps({"cargos": []}).encode(),
         f'state.format: expected "{STATE_FORMAT}", found nothing'),
        (variant(cargos=[{**good["cargos"][0], "lat": "north"}]),
         'cargos[0].lat: expected number in [-90, 90], found "north" (string)'),
        (variant(allocations=[ghost]), "allocations[0].replicas: ghost is not among the cargos"),
        (variant(extra=1), "state.extra: unknown field"),
    ]
    for content, reason in cases:
        path.write_bytes(content)
        with pytest.raises(StateFileError) as info:
            manager_app(state_dir)
        assert str(info.value).startswith(f"state file {path}: "), info.value
        assert reason in str(info.value), (reason, info.value)
        assert path.read_bytes() == content  # never overwritten
    path.unlink()
    path.mkdir()  # unreadable as a file
    with pytest.raises(StateFileError, match="cannot read it"):
        manager_app(state_dir)
    path.rmdir()

    # The command line refuses to start, naming the file and the fault.
    path.write_bytes(variant(version=99))
    with caplog.at_level(logging.ERROR, logger="nodes.armada.cargo_manager"):
        code = cargo_manager.main(["--host", "127.0.0.1", "--port", str(free_port()),
                                   "--state-dir", str(state_dir)])
    assert code == 1
    assert f"refusing to start: state file {path}: state.version: expected 1, found 99" \
        in caplog.text

    # A good file loads (the Cargo unconfirmed) and is written back in the same format.
    path.write_bytes(variant())
    manager = manager_app(state_dir)[CARGO_MANAGER_KEY]
    assert manager.cargos["c1"].state == "unconfirmed"
    assert manager.allocations["faces"].replicas == {"c1": "ready"}
    doc = json.loads(path.read_text())
    assert doc["cargos"][0]["state"] == "unconfirmed"
    assert doc["allocations"] == good["allocations"]


async def test_a_change_that_cannot_be_written_is_not_acknowledged(tmp_path,
                                                                   monkeypatch) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    path = state_dir / STATE_FILE
    url = f"http://127.0.0.1:{free_port()}"
    path.write_text(json.dumps(one_allocation_state(url)))
    app = manager_app(state_dir, max_missed=10**6)
    written = cargo_manager.write_state_file

    def full_disk(target: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    async with TestServer(secured(app), host="127.0.0.1") as server, \
            aiohttp.ClientSession(headers=AUTH) as http:
        cm = str(server.make_url("")).rstrip("/")
        monkeypatch.setattr(cargo_manager, "write_state_file", full_disk)
        status, body = await call(http, "DELETE", cm + "/storage/faces")
        assert status == 500 and body["error"] == (  # the intent, before any Cargo is told
            f"state: cannot write {state_dir / INTENTS_FILE}: [Errno 28] No space left on "
            "device")
        assert (await call(http, "GET", cm + "/storage/faces"))[0] == 200  # not released
        registration = {"cargo_id": "c2", "url": url, "lat": 1.0, "lon": 2.0,
                        "capacity_bytes": 10**9}
        status, body = await call(http, "POST", cm + "/cargos", registration)
        assert status == 500 and body["error"].startswith("state: cannot write")
        assert held(json.loads(path.read_text())) == {"faces": ["c1"]}  # the file as it was
        monkeypatch.setattr(cargo_manager, "write_state_file", written)
        status, body = await call(http, "DELETE", cm + "/storage/faces")
        assert status == 200 and body["state"] == "released"
        doc = json.loads(path.read_text())
        assert doc["allocations"] == [] and [c["cargo_id"] for c in doc["cargos"]] == [
            "c1", "c2"]


# ------------------------------------------------- crashes during allocations

KILLS = 10
ROUND = 6  # allocations asked at once in each round, with the last round's releases


async def test_a_manager_killed_during_allocations_leaves_no_orphans(tmp_path) -> None:
    """Real processes: four Cargos and a Cargo Manager (``--state-dir``), SIGKILLed 10
    times while allocations (and releases) are in flight, each time once a Cargo holds a
    copy the manager has not answered yet. Afterwards no Cargo holds a copy the manager
    does not count, and every name can be allocated and released again."""
    secret_file, auth = make_secret(tmp_path)
    port = free_port()
    cm = f"http://127.0.0.1:{port}"
    log = (tmp_path / "manager.log").open("ab")
    env = {**os.environ, "TESTBED_SECRET_FILE": str(secret_file)}

    async def start_manager_process() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodes.armada.cargo_manager", "--host", "127.0.0.1",
            "--port", str(port), "--state-dir", str(tmp_path / "state"),
            "--health-interval-s", "0.2", "--health-timeout-s", "1", "--max-missed", "5",
            "--seed", "1", cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=log,
            stderr=log, env=env)

    names: dict[str, dict[str, Any]] = {}  # every name asked, with its request

    def storage_request(name: str, i: int) -> dict[str, Any]:
        return {"app": name, "locations": [{"lat": 1.0, "lon": 2.0}], "dim": DIM,
                "quota_bytes": 100 * record_bytes(DIM), "replication": 3,
                "source": {"kind": "inline", "records": records(range(20), seed=i)}}

    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(aiohttp.ClientSession())
        cargo_urls = []
        for name in ("c1", "c2", "c3", "c4"):
            url, _ = await stack.enter_async_context(cargo_process(
                tmp_path, secret_file, name, "--beacon", cm,
                "--recheck-s", "0.5", "--capacity-gb", "0.001"))
            cargo_urls.append(url)

        async def alive_cargos() -> bool:
            try:
                status, body = await request(http, "GET", cm + "/cargos", auth)
            except aiohttp.ClientError:
                return False
            return status == 200 and sum(c["state"] == "alive" for c in body["cargos"]) == 4

        async def held() -> dict[str, set[str]]:
            """Cargo URL -> the applications it holds."""
            found = {}
            for url in cargo_urls:
                _, body = await request(http, "GET", url + "/apps", auth)
                found[url] = {a["app"] for a in body["apps"]}
            return found

        async def ask(method: str, name: str, body: Any = None) -> int | None:
            try:
                return (await request(http, method, f"{cm}/storage/{name}" if method ==
                                      "DELETE" else cm + "/storage", auth, body))[0]
            except aiohttp.ClientError:
                return None  # the manager was killed with it in flight

        created: list[str] = []
        for kill in range(KILLS):
            proc = await start_manager_process()
            try:
                await await_until(alive_cargos, 30, "four Cargos alive at the manager")
                fresh = [f"k{kill}-{i}" for i in range(ROUND)]
                for i, name in enumerate(fresh):
                    names[name] = storage_request(name, i)
                calls = [asyncio.create_task(ask("POST", n, names[n])) for n in fresh]
                calls += [asyncio.create_task(ask("DELETE", n)) for n in created]

                async def copy_unanswered(fresh: list[str] = fresh,
                                          calls: list[Any] = calls) -> bool:
                    copies = set().union(*(await held()).values())
                    return any(not t.done() and n in copies
                               for n, t in zip(fresh, calls, strict=False))

                await await_until(copy_unanswered, 30, "a copy made, not yet answered",
                                  interval=0.005)
            finally:
                proc.kill()
                await proc.wait()
            answers = await asyncio.gather(*calls)
            created = [n for n, code in zip(fresh, answers, strict=False) if code == 201]

        proc = await start_manager_process()
        try:
            await await_until(alive_cargos, 30, "four Cargos alive at the manager")

            async def counted() -> dict[str, set[str]]:
                _, body = await request(http, "GET", cm + "/storage", auth)
                return {url: {a["app"] for a in body["storage"]
                              if url in {r["url"] for r in a["replicas"]}}
                        for url in cargo_urls}

            async def no_orphans() -> bool:
                return await held() == await counted()

            await await_until(no_orphans, 15, "every copy on a Cargo counted by the manager")
            for name, body in names.items():
                status, answer = await request(http, "POST", cm + "/storage", auth, body)
                assert status in (200, 201) and len(answer["replicas"]) == 3, (name, answer)
                status, answer = await request(http, "DELETE", f"{cm}/storage/{name}", auth)
                assert status == 200, (name, answer)
            assert all(not apps for apps in (await held()).values())
            for url in cargo_urls:
                _, status = await request(http, "GET", url + "/status", auth)
                assert status["reserved_bytes"] == 0, url
        finally:
            proc.terminate()
            await proc.wait()
            log.close()
