"""The Armada storage layer (Cargo, Cargo Manager, storage SDK) over real HTTP.

Services run in-process on loopback ports with their stores in ``tmp_path``; the
durability test runs a real Cargo process and SIGKILLs it between acknowledged writes.
Health checks run every 0.1 s, so failures are detected and repaired within a second;
tests wait for conditions.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from nodes.armada import app_manager, beacon
from nodes.armada.cargo import service as cargo
from nodes.armada.cargo.codec import pack_records, record_bytes
from nodes.armada.cargo.service import CargoConfig
from nodes.armada.cargo_manager import service as cargo_manager
from nodes.armada.cargo_manager.placement import CargoView, pick_cargo
from nodes.armada.configs import DEFAULT_CAPACITY_BYTES
from nodes.armada.sdk.storage import (
    StorageClient,
    StorageFull,
    StorageUnavailable,
    SyncStorageClient,
)
from nodes.common import free_port
from testbed.poll import await_until
from tests.secured import AUTH, bare_call, secured

TOKEN = "s3cret"
CITY = (40.10, -88.20)
SUBURB = (40.13, -88.25)  # ~5 km from the city
TOWN = (40.30, -88.50)  # ~33 km
FAR = (41.88, -87.63)  # ~200 km
DIM = 8
REPO = Path(__file__).resolve().parents[2]


def vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim))


def records(ids: range, dim: int = DIM, seed: int = 0) -> list[dict[str, Any]]:
    rows = vectors(len(ids), dim, seed)
    return [{"id": i, "vector": v.tolist()} for i, v in zip(ids, rows, strict=True)]


async def call(http: aiohttp.ClientSession, method: str, url: str, body: Any = None,
               headers: dict[str, str] | None = None, data: str | None = None
               ) -> tuple[int, Any]:
    async with http.request(method, url, json=body, data=data, headers=headers) as resp:
        return resp.status, await resp.json()


@dataclass
class Layer:
    """A running storage layer: Cargo Manager, Beacon, Cargos and a client session."""

    tmp: Path
    http: aiohttp.ClientSession
    manager: TestServer
    beacon: TestServer
    cargos: dict[str, TestServer] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return str(self.manager.make_url("")).rstrip("/")

    @property
    def beacon_url(self) -> str:
        return str(self.beacon.make_url("")).rstrip("/")

    def config(self, cargo_id: str) -> CargoConfig:
        return self.cargos[cargo_id].app[cargo.CARGO_KEY].config

    async def add_cargo(self, cargo_id: str, where: tuple[float, float],
                        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
                        port: int | None = None) -> TestServer:
        port = port or free_port()
        config = CargoConfig(
            cargo_id=cargo_id, url=f"http://127.0.0.1:{port}", data_dir=self.tmp / cargo_id,
            lat=where[0], lon=where[1], capacity_bytes=capacity_bytes,
            beacon=self.beacon_url, recheck_s=1.0, write_timeout_s=5.0,
        )
        server = TestServer(secured(cargo.make_app(config)), host="127.0.0.1", port=port)
        await server.start_server()
        self.cargos[cargo_id] = server
        return server

    async def crash(self, cargo_id: str) -> TestServer:
        """Stop a Cargo without a goodbye: the manager must notice by itself."""
        server = self.cargos.pop(cargo_id)
        server.app[cargo.CARGO_KEY].config.beacon = None
        await server.close()
        return server

    async def add_cargos(self, places: Sequence[tuple[str, tuple[float, float]]] = (
            ("city", CITY), ("suburb", SUBURB), ("town", TOWN)), **options: Any) -> None:
        """A Cargo at each ``(cargo_id, where)`` (``options`` as for :meth:`add_cargo`),
        once every one is registered."""
        for cargo_id, where in places:
            await self.add_cargo(cargo_id, where, **options)
        await await_until(lambda: self.cargo_count(len(places)),
                       what=f"{len(places)} Cargos registered")

    async def allocate(self, app: str, near: tuple[float, float], **fields: Any
                       ) -> tuple[int, Any]:
        """``POST /storage`` for ``app`` used ``near`` a place (``dim`` DIM unless given)."""
        return await call(self.http, "POST", self.url + "/storage", {
            "app": app, "locations": [{"lat": near[0], "lon": near[1]}], "dim": DIM, **fields})

    async def cargo_count(self, n: int) -> bool:
        status, body = await call(self.http, "GET", self.url + "/cargos")
        return status == 200 and sum(c["state"] == "alive" for c in body["cargos"]) == n

    async def allocation(self, app: str) -> dict[str, Any]:
        status, body = await call(self.http, "GET", f"{self.url}/storage/{app}")
        assert status == 200, body
        return body


@asynccontextmanager
async def storage_layer(tmp: Path, seed: int = 1, manager: TestServer | None = None
                        ) -> AsyncIterator[Layer]:
    """A Cargo Manager (checks every 0.1 s, dead after 2 misses) behind a Beacon; or
    ``manager``, started already, behind it. The layer's manager at the end is closed."""
    if manager is None:
        manager = TestServer(secured(cargo_manager.make_app(0.1, 0.3, 2, seed=seed)), host="127.0.0.1")
        await manager.start_server()
    unused = f"http://127.0.0.1:{free_port()}"
    bea = TestServer(secured(beacon.make_app(unused, unused, [TOKEN],
                                     cargo_manager=str(manager.make_url("")).rstrip("/"))),
                     host="127.0.0.1")
    await bea.start_server()
    async with aiohttp.ClientSession(headers=AUTH) as http:
        layer = Layer(tmp, http, manager, bea)
        try:
            yield layer
        finally:
            for server in layer.cargos.values():
                server.app[cargo.CARGO_KEY].config.beacon = None
                await server.close()
            await bea.close()
            await layer.manager.close()


@asynccontextmanager
async def standalone(tmp: Path, cargo_id: str = "c1", port: int | None = None,
                     **overrides: Any) -> AsyncIterator[tuple[TestServer, str]]:
    """One Cargo that registers nowhere (driven directly, as the manager would)."""
    port = port or free_port()
    config = CargoConfig(cargo_id=cargo_id, url=f"http://127.0.0.1:{port}",
                         data_dir=tmp / cargo_id, lat=CITY[0], lon=CITY[1], **overrides)
    server = TestServer(secured(cargo.make_app(config)), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        yield server, config.url
    finally:
        await server.close()


def allocation(app: str = "faces", quota_bytes: int = 10**6, **extra: Any) -> dict[str, Any]:
    return {"app": app, "quota_bytes": quota_bytes, "dim": DIM, **extra}


# ------------------------------------------------------------------- durability


async def _start_process(port: int, data_dir: Path, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodes.armada.cargo", "--host", "127.0.0.1",
            "--port", str(port), "--data-dir", str(data_dir), "--cargo-id", "c1",
            "--lat", str(CITY[0]), "--lon", str(CITY[1]),
            cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
        )


async def _serving(http: aiohttp.ClientSession, url: str,
                   proc: asyncio.subprocess.Process) -> bool:
    assert proc.returncode is None, "the Cargo process exited"
    try:
        async with http.get(url + "/health") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def test_acknowledged_writes_survive_sigkill_and_restart(tmp_path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data_dir, log = tmp_path / "data", tmp_path / "cargo.log"
    descriptors = vectors(400, 128, seed=7)
    acked: dict[int, list[float]] = {}
    next_id = iter(range(len(descriptors)))
    proc = await _start_process(port, data_dir, log)
    try:
        async with aiohttp.ClientSession(headers=AUTH) as http:
            await await_until(lambda: _serving(http, url, proc), 30, "the Cargo to serve")
            status, body = await call(http, "POST", url + "/apps",
                                      {"app": "faces", "quota_bytes": 10**7, "dim": 128})
            assert status == 201, body

            async def writer() -> None:
                while True:
                    batch = [next(next_id) for _ in range(random.choice((1, 1, 3)))]
                    sent = {i: descriptors[i].tolist() for i in batch}
                    try:
                        status, _ = await call(http, "POST", url + "/apps/faces/records", {
                            "records": [{"id": i, "vector": v} for i, v in sent.items()]})
                    except aiohttp.ClientError:
                        return  # killed with this write in flight: not acknowledged
                    assert status == 200
                    acked.update(sent)

            for kill in range(3):
                target = len(acked) + 20 + 7 * kill
                writers = [asyncio.create_task(writer()) for _ in range(4)]
                await await_until(lambda t=target: _at_least(acked, t), 30, "writes acknowledged")
                proc.kill()  # SIGKILL, with writes in flight
                assert await proc.wait() == -9
                await asyncio.gather(*writers)
                proc = await _start_process(port, data_dir, log)
                await await_until(lambda p=proc: _serving(http, url, p), 30, "the Cargo to restart")
                status, app = await call(http, "GET", url + "/apps/faces")
                assert status == 200 and app["state"] == "ready" and app["dim"] == 128
                assert app["records"] >= len(acked)  # writes in flight may have committed
                for rid, vector in acked.items():
                    status, body = await call(http, "GET", f"{url}/apps/faces/records/{rid}")
                    assert status == 200 and body["vector"] == vector, rid
            probe = next(iter(acked))
            status, body = await call(http, "POST", url + "/apps/faces/match",
                                      {"vector": acked[probe], "threshold": 0.5})
            assert status == 200 and body == {"app": "faces", "match": True, "id": probe,
                                              "distance": 0.0, "records": app["records"]}
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
    assert proc.returncode == 0  # SIGTERM stops it gracefully


async def _at_least(acked: dict[int, Any], n: int) -> bool:
    return len(acked) >= n


# ------------------------------------------------------------------- validation


async def test_cargo_validates_every_request(tmp_path) -> None:
    async with standalone(tmp_path) as (_, url), aiohttp.ClientSession(headers=AUTH) as http:
        bad = [
            ({"app": "faces"}, "quota_bytes: expected integer >= 1, found nothing"),
            (allocation(dim=0), "dim: expected integer >= 1 and <= 4096"),
            (allocation(app="Faces"), "app: expected name of 1-40 characters"),
            (allocation(peers=["ftp://x"]), "peers: expected array of http://host:port URLs"),
            # a port out of range or not a number, a malformed host: 400, not a 500
            (allocation(peers=["http://x:99999"]), "peers: expected array of http://host:port"),
            (allocation(peers=["http://x:-1"]), "peers: expected array of http://host:port"),
            (allocation(peers=["http://[::1:80"]), "peers: expected array of http://host:port"),
            (allocation(source={"kind": "tape"}), "source: expected"),
            (allocation(source={"kind": "url", "url": "http://x", "extra": 1}), "source:"),
            (allocation(quota_bytes=10), "quota_bytes: expected at least one record"),
            (allocation(colour="red"), "colour: expected one of the fields"),
        ]
        for body, reason in bad:
            status, answer = await call(http, "POST", url + "/apps", body)
            assert status == 400 and answer["error"].startswith(reason), (body, answer)
        status, answer = await call(http, "POST", url + "/apps", data="{not json")
        assert status == 400 and answer["error"].startswith("body: expected a JSON object")
        assert (await call(http, "POST", url + "/apps", allocation()))[0] == 201
        status, answer = await call(http, "POST", url + "/apps", allocation())
        assert status == 409 and answer["error"] == "app: faces is already allocated here"
        write = url + "/apps/faces/records"
        good = records(range(1))[0]
        bad_writes = [
            ({"records": [{"id": 1, "vector": [1.0]}]}, "records[0].vector: expected 8 numbers"),
            ({"records": [{**good, "id": -1}]}, "records: expected array of 1 to"),
            ({"records": [{**good, "id": 2**63}]}, "records: expected"),
            ({"records": [{**good, "id": True}]}, "records: expected"),
            ({"records": [{**good, "label": "x"}]}, "records: expected"),
            ({"records": []}, "records: expected"),
        ]
        for body, reason in bad_writes:
            status, answer = await call(http, "POST", write, body)
            assert status == 400 and answer["error"].startswith(reason), (body, answer)
        nan = json.dumps({"records": [{"id": 1, "vector": [float("nan")] * DIM}]})
        status, answer = await call(http, "POST", write, data=nan)
        assert status == 400 and answer["error"].startswith("records: expected")
        status, answer = await call(http, "POST", url + "/apps/none/records", {"records": [good]})
        assert status == 404 and answer["error"] == "no such application here: none"
        status, answer = await call(http, "GET", url + "/apps/faces/records/x")
        assert status == 400 and answer["error"].startswith("id: expected an integer")
        status, answer = await call(http, "GET", url + "/apps/faces/records/5")
        assert status == 404 and answer["error"] == "no such record: 5"
        status, answer = await call(http, "GET", url + "/apps/faces/records?limit=0")
        assert status == 400 and answer["error"].startswith("limit: expected")
        match = url + "/apps/faces/match"
        status, answer = await call(http, "POST", match, {"vector": [1.0, 2.0]})
        assert status == 400 and answer["error"] == "vector: expected 8 numbers, found 2"
        status, answer = await call(http, "POST", match, {"vector": good["vector"],
                                                          "threshold": -1})
        assert status == 400 and answer["error"].startswith("threshold: expected finite")
        status, answer = await call(http, "POST", match, {"vector": good["vector"]})
        assert status == 200 and answer["match"] is False and answer["id"] is None
        status, answer = await call(http, "PUT", url + "/apps/faces/peers", {"peers": "x"})
        assert status == 400
        status, answer = await call(http, "DELETE", url + "/apps/faces/records")
        assert status == 405
        async with http.get(url + "/openapi.json") as resp:
            spec = await resp.json()
        assert "/apps/{app}/match" in spec["paths"]
        assert "507" in spec["paths"]["/apps/{app}/records"]["post"]["responses"]


async def test_manager_and_beacon_validate_and_check_tokens(tmp_path) -> None:
    async with storage_layer(tmp_path) as layer:
        http, cm, bea = layer.http, layer.url, layer.beacon_url
        node = {"cargo_id": "c9", "url": "http://127.0.0.1:9", "lat": 1.0, "lon": 2.0,
                "capacity_bytes": 10**9}
        status, answer = await bare_call("POST", bea + "/cargos", node)
        assert status == 401 and "Bearer" in answer["error"]
        status, answer = await call(http, "POST", bea + "/cargos", node,
                                    {"Authorization": "Bearer nope"})
        assert status == 403
        status, answer = await bare_call("DELETE", bea + "/cargos/c9")
        assert status == 401
        assert (await call(http, "GET", bea + "/cargos"))[1] == {"cargos": []}
        status, answer = await call(http, "POST", bea + "/cargos", {**node, "url": "x"}, AUTH)
        assert status == 400 and answer["error"].startswith("url: expected http://host:port")
        status, answer = await call(http, "POST", bea + "/cargos", node, AUTH)
        assert status == 200 and answer["state"] == "alive" and answer["drop"] == []
        storage = {"app": "faces", "locations": [{"lat": 1, "lon": 2}]}
        bad = [
            ({**storage, "consistency": "linearizable"}, "consistency: expected one of strong"),
            ({**storage, "replication": 0}, "replication: expected integer >= 1"),
            ({**storage, "strategy": "closest"}, "strategy: expected one of nearest, random"),
            ({**storage, "source": {"kind": "replicas", "urls": ["http://a:1"]}}, "source:"),
            ({**storage, "locations": []}, "locations: expected non-empty array"),
            ({**storage, "dim": 8, "quota_bytes": 71}, "quota_bytes: expected at least one"),
        ]
        for body, reason in bad:
            status, answer = await call(http, "POST", cm + "/storage", body)
            assert status == 400 and answer["error"].startswith(reason), (body, answer)
        status, answer = await call(http, "POST", cm + "/query", {"app": "x", "lat": 1,
                                                                  "lon": 2})
        assert status == 404 and answer["error"] == "no storage for application: x"
        status, answer = await call(http, "POST", cm + "/storage", storage)
        assert status == 507 and answer["error"].startswith("insufficient storage: 1 live")
        async with http.get(bea + "/openapi.json") as resp:
            spec = await resp.json()
        assert spec["paths"]["/cargos"]["post"]["security"] == [{"bearer": []}]
        async with http.get(cm + "/openapi.json") as resp:
            assert "/storage" in (await resp.json())["paths"]


# -------------------------------------------------------------------- capacity


async def test_capacity_and_quotas_are_enforced(tmp_path) -> None:
    size = record_bytes(DIM)  # 72 bytes
    async with standalone(tmp_path, capacity_bytes=100 * size) as (_, url), \
            aiohttp.ClientSession(headers=AUTH) as http:
        status, body = await call(http, "POST", url + "/apps",
                                  allocation("a", quota_bytes=60 * size))
        assert status == 201 and body["record_bytes"] == size
        status, body = await call(http, "POST", url + "/apps",
                                  allocation("b", quota_bytes=50 * size))
        assert status == 507 and body["error"] == (
            f"insufficient storage: {40 * size} of {100 * size} bytes unreserved, "
            f"{50 * size} asked")
        write = url + "/apps/a/records"
        assert (await call(http, "POST", write, {"records": records(range(55))}))[0] == 200
        status, body = await call(http, "POST", write, {"records": records(range(50, 60))})
        assert status == 200 and body["written"] == 10  # 5 replaced, 5 new: exactly full
        status, body = await call(http, "POST", write, {"records": records(range(60, 61))})
        assert status == 507 and body["error"].startswith("quota: 1 new records would make 61")
        status, body = await call(http, "POST", write, {"records": records(range(60),
                                                                           seed=3)})
        assert status == 200  # replacing records needs no room
        status, app = await call(http, "GET", url + "/apps/a")
        assert app["records"] == 60 and app["used_bytes"] == 60 * size
        inline = {"kind": "inline", "records": records(range(41))}
        status, body = await call(http, "POST", url + "/apps",
                                  allocation("c", quota_bytes=40 * size, source=inline))
        assert status == 507 and body["error"].startswith("source: quota: 41 new records")
        assert (await call(http, "GET", url + "/apps/c"))[0] == 404  # nothing kept
        status, node = await call(http, "GET", url + "/status")
        assert node["reserved_bytes"] == 60 * size and node["used_bytes"] == 60 * size
        assert node["disk_bytes"] > 0
        status, body = await call(http, "POST", url + "/apps",
                                  allocation("c", quota_bytes=40 * size))
        assert status == 201  # the refused allocation released its reservation

    async with storage_layer(tmp_path / "layer") as layer:
        await layer.add_cargos([(f"c{i}", where) for i, where in enumerate((CITY, SUBURB, TOWN))],
                               capacity_bytes=1000 * size)
        storage = {"app": "a", "locations": [{"lat": CITY[0], "lon": CITY[1]}], "dim": DIM,
                   "quota_bytes": 600 * size}
        status, body = await call(layer.http, "POST", layer.url + "/storage", storage)
        assert status == 201 and len(body["replicas"]) == 3
        status, body = await call(layer.http, "POST", layer.url + "/storage",
                                  {**storage, "app": "b"})
        assert status == 507 and body["error"] == (
            f"insufficient storage: 0 live Cargos have {600 * size} bytes unreserved, 3 needed")
        _, listing = await call(layer.http, "GET", layer.url + "/cargos")
        assert {c["free_bytes"] for c in listing["cargos"]} == {400 * size}
        status, body = await call(layer.http, "POST", layer.url + "/storage", storage)
        assert status == 200  # asked again with the same parameters: the same allocation
        status, again = await call(layer.http, "POST", layer.url + "/storage",
                                   {"app": "a", "locations": storage["locations"]})
        assert status == 200 and again["quota_bytes"] == 600 * size  # as the AM asks
        status, body = await call(layer.http, "POST", layer.url + "/storage",
                                  {**storage, "consistency": "eventual"})
        assert status == 409 and body["error"].startswith("consistency: storage for a exists")


# ------------------------------------------------------------------- selection


def test_pick_cargo_nearest_and_random() -> None:
    cargos = [CargoView("a", *CITY, 10), CargoView("b", *SUBURB, 10),
              CargoView("c", *TOWN, 10), CargoView("d", *FAR, 10),
              CargoView("e", *FAR, 20)]
    rng = random.Random(1)

    def place(locations: list[tuple[float, float]], strategy: str) -> list[str]:
        chosen: list[CargoView] = []
        for _ in range(3):
            rest = [c for c in cargos if c not in chosen]
            chosen.append(pick_cargo(rest, locations, [(c.lat, c.lon) for c in chosen],
                                     strategy, rng))
        return [c.cargo_id for c in chosen]

    assert place([CITY], "nearest") == ["a", "b", "c"]
    assert place([FAR], "nearest") == ["e", "d", "c"]  # more free space first on ties
    assert place([CITY, FAR], "nearest") == ["a", "e", "b"]  # one near each, then the city
    drawn = {tuple(place([CITY], "random")) for _ in range(20)}
    assert len(drawn) > 1 and all(len(set(d)) == 3 for d in drawn)
    assert pick_cargo([], [CITY], [], "nearest", rng) is None
    again = random.Random(5)
    first = [pick_cargo(cargos, [CITY], [], "random", again).cargo_id for _ in range(5)]
    again = random.Random(5)
    assert first == [pick_cargo(cargos, [CITY], [], "random", again).cargo_id
                     for _ in range(5)]


# ------------------------------------------------- replication, failure, SDK


async def _restored(layer: Layer, app: str, lost: str) -> dict[str, Any] | None:
    body = await layer.allocation(app)
    ready = [r for r in body["replicas"] if r["state"] == "ready"]
    return body if len(ready) == 3 and lost not in {r["cargo_id"] for r in ready} else None


async def test_strong_replication_failover_and_restoring_the_factor(tmp_path) -> None:
    async with storage_layer(tmp_path) as layer:
        await layer.add_cargos([("city", CITY), ("suburb", SUBURB), ("town", TOWN),
                                ("far", FAR)])
        ports = {cargo_id: server.port for cargo_id, server in layer.cargos.items()}
        source = {"kind": "inline", "records": records(range(10), seed=1)}
        status, alloc = await layer.allocate("faces", CITY, source=source)
        assert status == 201, alloc
        assert alloc["state"] == "ready" and alloc["consistency"] == "strong"
        assert [r["cargo_id"] for r in alloc["replicas"]] == ["city", "suburb", "town"]
        assert all(e["loaded"] == 10 for e in alloc["events"] if e["event"] == "allocated")

        async with StorageClient(layer.url, "faces", *SUBURB, request_timeout_s=10.0) as sdk:
            assert [r.cargo_id for r in sdk.replicas] == ["suburb", "city", "town"]
            fresh = vectors(20, seed=2)
            for i, vector in enumerate(fresh):
                answer = await sdk.write(100 + i, vector)
                assert answer.body["replicas"] == 3 and answer.cargo_id == "suburb"
            for cargo_id in ("city", "suburb", "town"):  # strong: on every replica already
                url = str(layer.cargos[cargo_id].make_url("")).rstrip("/")
                for i in (0, 19):
                    status, body = await call(layer.http, "GET",
                                              f"{url}/apps/faces/records/{100 + i}")
                    assert status == 200 and body["vector"] == fresh[i].tolist()
            found = await sdk.match(fresh[3] + 0.001, threshold=0.1)
            assert found.matched and found.id == 103 and found.distance < 0.01
            far_off = await sdk.match(fresh[3] + 10, threshold=0.1)
            assert not far_off.matched and far_off.id is not None
            assert await sdk.read(999) is None

            began = time.monotonic()
            await layer.crash("suburb")
            answer = await sdk.write(200, fresh[0])  # fails over; waits for the detection
            assert answer.cargo_id == "city" and answer.attempts == 2
            assert answer.body["replicas"] == 2
            assert [e.kind for e in sdk.events[-2:]] == ["error", "switch"]
            assert await sdk.read(200) == fresh[0].tolist()
            restored = await await_until(lambda: _restored(layer, "faces", "suburb"),
                                      what="replication factor restored")
            assert time.monotonic() - began < 5
            assert {r["cargo_id"] for r in restored["replicas"]} == {"city", "town", "far"}
            (restore,) = restored["restores"]
            assert restore["cargo_id"] == "far" and restore["lost"] == "suburb"
            assert 0 < restore["since_lost_s"] <= restore["since_last_seen_s"]
            assert restore["records"] == 31
            kinds = [e["event"] for e in restored["events"]]
            assert kinds[-2:] == ["lost", "restored"]
            far_url = str(layer.cargos["far"].make_url("")).rstrip("/")
            status, body = await call(layer.http, "GET", f"{far_url}/apps/faces/records/200")
            assert status == 200 and body["vector"] == fresh[0].tolist()
            answer = await sdk.write(201, fresh[1])  # the new replica takes writes at once
            assert answer.body["replicas"] == 3
            status, body = await call(layer.http, "GET", f"{far_url}/apps/faces/records/201")
            assert status == 200
            status, query = await call(layer.http, "POST", layer.url + "/query",
                                       {"app": "faces", "lat": SUBURB[0], "lon": SUBURB[1]})
            assert [c["cargo_id"] for c in query["candidates"]] == ["city", "town", "far"]

        # The crashed Cargo comes back with its old data: told to drop the application.
        await layer.add_cargo("suburb", SUBURB, port=ports["suburb"])
        back = str(layer.cargos["suburb"].make_url("")).rstrip("/")

        async def dropped() -> bool:
            status, body = await call(layer.http, "GET", back + "/apps")
            return status == 200 and body["apps"] == []

        await await_until(dropped, what="the replaced replica dropped")
        status, node = await call(layer.http, "GET", layer.url + "/cargos/suburb")
        assert node["state"] == "alive" and node["apps"] == []


async def test_eventual_consistency_lag_is_measured_and_replicas_converge(tmp_path) -> None:
    async with storage_layer(tmp_path) as layer:
        await layer.add_cargos()
        status, alloc = await layer.allocate("faces", TOWN, consistency="eventual",
                                             strategy="random")
        assert status == 201 and alloc["strategy"] == "random"
        fresh = vectors(30, seed=4)

        def sync_writes() -> list[int]:
            with SyncStorageClient(layer.url, "faces", *CITY) as sdk:
                replies = [sdk.write(i, v).body["replicas"] for i, v in enumerate(fresh)]
                assert sdk.read(7) == fresh[7].tolist()
                assert sdk.match(fresh[7], threshold=0.0).id == 7
                assert sdk.current is not None and sdk.current.cargo_id == "city"
                return replies

        assert await asyncio.to_thread(sync_writes) == [1] * 30  # acked by one replica

        async def converged() -> bool:
            for server in layer.cargos.values():
                _, app = await call(layer.http, "GET", str(server.make_url("/apps/faces")))
                if app["records"] != 30:
                    return False
            return True

        await await_until(converged, what="every replica has every write")
        city = str(layer.cargos["city"].make_url("")).rstrip("/")

        async def measured() -> dict[str, Any] | None:
            _, stats = await call(layer.http, "GET", city + "/stats?samples=1")
            faces = stats["apps"]["faces"]
            return faces if faces["lag"]["count"] == 30 else None

        faces = await await_until(measured, what="a lag sample per write")
        assert faces["writes"] == 30 and faces["unreplicated"] == 0
        assert 0 <= faces["lag"]["p50_ms"] <= faces["lag"]["max_ms"] < 5000
        assert len(faces["lag_samples"]) == 30
        suburb = str(layer.cargos["suburb"].make_url("")).rstrip("/")
        _, stats = await call(layer.http, "GET", suburb + "/stats")
        assert stats["apps"]["faces"]["replicated_in"] == 30

        # Every replica leaves (SIGTERM: goodbye); they come back with their data, which
        # the manager takes back rather than losing it.
        ports = {cargo_id: server.port for cargo_id, server in layer.cargos.items()}
        for cargo_id in list(layer.cargos):
            await layer.cargos.pop(cargo_id).close()
        assert (await layer.allocation("faces"))["state"] == "lost"
        for cargo_id, where in (("city", CITY), ("suburb", SUBURB), ("town", TOWN)):
            await layer.add_cargo(cargo_id, where, port=ports[cargo_id])

        async def back() -> dict[str, Any] | None:
            body = await layer.allocation("faces")
            return body if body["state"] == "ready" else None

        body = await await_until(back, what="the replicas re-adopted")
        assert [e["event"] for e in body["events"]][-3:] == ["readopted"] * 3
        await await_until(converged, what="the data kept")


async def test_peers_catch_up_bounds_and_last_writer_wins(tmp_path) -> None:
    port_a, port_b = free_port(), free_port()
    peer_b = f"http://127.0.0.1:{port_b}"
    quick = {"write_timeout_s": 0.6, "max_lag_s": 0.3}
    async with aiohttp.ClientSession(headers=AUTH) as http:
        # Eventual, with the peer down: the first writes are acknowledged at once, then the
        # lag bound holds writes back.
        async with standalone(tmp_path, "a", port=port_a, **quick) as (_, a):
            status, _ = await call(http, "POST", a + "/apps", allocation(
                consistency="eventual", peers=[peer_b]))
            assert status == 201
            write = a + "/apps/faces/records"
            assert (await call(http, "POST", write, {"records": records(range(5))}))[0] == 200
            await asyncio.sleep(0.4)
            status, body = await call(http, "POST", write, {"records": records(range(5, 6))})
            assert status == 503 and "more than the bound of 0.3 s" in body["error"]
        # The Cargo restarts on its directory: what the peer has not applied is still due.
        async with standalone(tmp_path, "a", port=port_a, **quick) as (_, a):
            status, app = await call(http, "GET", a + "/apps/faces")
            assert app["records"] == 5 and app["peers"] == [peer_b]
            assert app["acked"] == {peer_b: 0}
            async with standalone(tmp_path, "b", port=port_b) as (_, b):
                status, _ = await call(http, "POST", b + "/apps", allocation(peers=[a]))
                assert status == 201

                async def caught_up() -> bool:
                    _, app = await call(http, "GET", b + "/apps/faces")
                    return app["records"] == 5

                await await_until(caught_up, what="the peer caught up")
                status, _ = await call(http, "POST", write, {"records": records(range(5, 6))})
                assert status == 200
                # Last writer wins, whatever the delivery order.
                await call(http, "POST", b + "/apps/faces/records",
                           {"records": [{"id": 1, "vector": [9.0] * DIM}]})

                async def same_everywhere() -> bool:
                    values = [(await call(http, "GET", f"{u}/apps/faces/records/1"))[1]["vector"]
                              for u in (a, b)]
                    return values == [[9.0] * DIM] * 2

                await await_until(same_everywhere, what="both replicas hold the last write")
                stale = {"origin": "x", "records": [{"id": 1, "vector": [0.0] * DIM, "ts": 1,
                                                     "origin": "x"}]}
                status, body = await call(http, "POST", a + "/apps/faces/replicate", stale)
                assert status == 200 and body["applied"] == 0
            # Strong, with the peer down: not acknowledged in time, 503 naming the peer.
            status, _ = await call(http, "POST", a + "/apps",
                                   allocation("strict", peers=[peer_b]))
            assert status == 201
            status, body = await call(http, "POST", a + "/apps/strict/records",
                                      {"records": records(range(1))})
            assert status == 503 and f"missing: {peer_b}" in body["error"]
            status, _ = await call(http, "PUT", a + "/apps/strict/peers", {"peers": []})
            status, body = await call(http, "POST", a + "/apps/strict/records",
                                      {"records": records(range(1, 2))})
            assert status == 200 and body["replicas"] == 1


# ------------------------------------------------------------ data sources


async def test_initial_data_set_from_url_file_and_bad_sources(tmp_path) -> None:
    ids = list(range(1000, 1040))
    rows = vectors(len(ids), seed=5)
    binary = pack_records(ids, rows)
    as_json = {"records": [{"id": i, "vector": v.tolist()} for i, v in zip(ids, rows,
                                                                               strict=True)]}

    async def serve_binary(request: web.Request) -> web.Response:
        return web.Response(body=binary, content_type="application/octet-stream")

    async def serve_json(request: web.Request) -> web.Response:
        return web.json_response(as_json)

    async def serve_broken(request: web.Request) -> web.Response:
        return web.Response(body=binary[:-3], content_type="application/octet-stream")

    data = web.Application()
    data.router.add_get("/faces.bin", serve_binary)
    data.router.add_get("/faces.json", serve_json)
    data.router.add_get("/broken.bin", serve_broken)
    (tmp_path / "faces.bin").write_bytes(binary)
    (tmp_path / "faces.json").write_text(json.dumps(as_json))
    async with TestServer(secured(data), host="127.0.0.1") as source, standalone(tmp_path) as (_, url), \
            aiohttp.ClientSession(headers=AUTH) as http:
        base = str(source.make_url("")).rstrip("/")
        sources = {
            "bin": {"kind": "url", "url": base + "/faces.bin"},
            "json": {"kind": "url", "url": base + "/faces.json"},
        }  # file sources (below a data root): tests/unit/test_cargo_inputs.py
        for name, src in sources.items():
            status, body = await call(http, "POST", url + "/apps", allocation(name, source=src))
            assert status == 201 and body["loaded"] == 40 and body["records"] == 40, body
            status, body = await call(http, "GET", f"{url}/apps/{name}/records/1039")
            assert body["vector"] == rows[-1].tolist()
            status, body = await call(http, "POST", f"{url}/apps/{name}/match",
                                      {"vector": rows[4].tolist(), "threshold": 1e-9})
            assert body["match"] and body["id"] == 1004
        failing = [
            ({"kind": "url", "url": base + "/broken.bin"}, 422, "source: 2877 bytes is not"),
            ({"kind": "url", "url": base + "/missing"}, 502, "source: http"),
            ({"kind": "url", "url": f"http://127.0.0.1:{free_port()}/x"}, 502, "source: http"),
        ]
        for src, code, reason in failing:
            status, body = await call(http, "POST", url + "/apps", allocation("bad", source=src))
            assert status == code and body["error"].startswith(reason), body
            assert (await call(http, "GET", url + "/apps/bad"))[0] == 404


# ------------------------------------------------- Application Manager hook


async def test_need_storage_deployment_allocates_through_the_manager(tmp_path) -> None:
    tasks: dict[str, dict[str, Any]] = {}

    async def place(request: web.Request) -> web.Response:
        task = {**await request.json(), "status": "starting", "node_id": "n1", "url": None}
        tasks[task["task_id"]] = task
        return web.json_response(task, status=201)

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"tasks": list(tasks.values())})

    stub = web.Application()  # a stand-in Spinner that accepts every task
    stub.router.add_post("/tasks", place)
    stub.router.add_get("/tasks", listing)
    async with TestServer(secured(stub), host="127.0.0.1") as spin, storage_layer(tmp_path) as layer:
        await layer.add_cargos()
        am = TestServer(secured(app_manager.make_app(str(spin.make_url("")).rstrip("/"), layer.url)),
                        host="127.0.0.1")
        async with am:
            status, app = await call(layer.http, "POST", str(am.make_url("/apps")), {
                "name": "faces", "module": "nodes.armada.echo_task", "cpu": 0.1,
                "memory_mb": 100, "need_storage": True,
                "locations": [{"lat": CITY[0], "lon": CITY[1]}]})
            assert status == 201, app
            storage = app["storage"]
            assert storage["app"] == "faces" and storage["state"] == "ready"
            assert storage["replication"] == 3 and storage["dim"] == 128
            assert storage["locations"] == [{"lat": CITY[0], "lon": CITY[1]}]
        async with StorageClient(layer.url, "faces", *TOWN) as sdk:
            assert sdk.current is not None and sdk.current.cargo_id == "town"
            await sdk.write(1, np.ones(128))
            with pytest.raises(ValueError, match="expected 128 numbers"):
                await sdk.write(2, np.ones(3))
            for server in list(layer.cargos):
                await layer.crash(server)
            with pytest.raises(StorageUnavailable):
                await sdk.read(1)


async def test_sdk_reports_a_full_quota(tmp_path) -> None:
    async with storage_layer(tmp_path) as layer:
        await layer.add_cargos()
        status, _ = await layer.allocate("tiny", CITY, quota_bytes=2 * record_bytes(DIM))
        assert status == 201
        async with StorageClient(layer.url, "tiny", *CITY, keep_alive=False) as sdk:
            await sdk.write_many([(1, np.ones(DIM)), (2, np.zeros(DIM))])
            with pytest.raises(StorageFull, match="quota"):
                await sdk.write(3, np.ones(DIM))
            assert sdk.current is not None and not sdk.current.failed  # no failover
        status, body = await call(layer.http, "DELETE", layer.url + "/storage/tiny")
        assert status == 200 and body["state"] == "released"
        for server in layer.cargos.values():
            assert (await call(layer.http, "GET", str(server.make_url("/apps"))))[1] == {
                "apps": []}
