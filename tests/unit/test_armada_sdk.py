"""The Armada client SDK (``nodes.armada.sdk.client``) against stand-in tasks on loopback.

Each stand-in task is a tiny aiohttp app with ``POST /infer`` (answering after a
configurable processing time) and ``GET /health``; a stand-in Beacon answers
``POST /query`` with their candidate list. The real detector has the same endpoints.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from nodes.armada.sdk.choice import ArmadaUnavailable
from nodes.armada.sdk.client import ArmadaClient, SyncArmadaClient
from testbed.poll import await_until
from tests.secured import secured

FRAME = b"\x89PNG-ish probe frame"


@dataclass
class StandIn:
    """A stand-in task: ``delay_s`` of processing per frame; ``broken`` answers 503."""

    name: str
    delay_s: float
    broken: bool = False
    frames: list[bytes] = field(default_factory=list)
    server: TestServer | None = None

    def app(self) -> web.Application:
        async def infer(request: web.Request) -> web.Response:
            frame = await request.read()
            if self.broken:
                return web.json_response({"error": "overloaded"}, status=503)
            start = time.time()
            await asyncio.sleep(self.delay_s)  # the emulated processing time
            self.frames.append(frame)
            return web.json_response({"name": self.name, "start": start, "end": time.time()})

        async def health(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/infer", infer)
        app.router.add_get("/health", health)
        return app

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")


@asynccontextmanager
async def fleet(*delays: float) -> AsyncIterator[tuple[list[StandIn], str]]:
    """Stand-in tasks with the given delays and a stand-in Beacon listing them all."""
    tasks = [StandIn(f"t{i}", d) for i, d in enumerate(delays)]
    for task in tasks:
        task.server = TestServer(secured(task.app()), host="127.0.0.1")
        await task.server.start_server()
    queries: list[dict] = []

    async def query(request: web.Request) -> web.Response:
        queries.append(await request.json())
        return web.json_response({"candidates": [
            {"task_id": t.name, "url": t.url, "node_id": f"n{i}", "reason": "area"}
            for i, t in enumerate(tasks)]})

    beacon = web.Application()
    beacon.router.add_post("/query", query)
    async with TestServer(secured(beacon), host="127.0.0.1") as server:
        try:
            yield tasks, str(server.make_url("")).rstrip("/")
        finally:
            for task in tasks:
                await task.server.close()


def client(beacon: str, **overrides) -> ArmadaClient:
    params = {"probe_payload": FRAME, "user": "u1", "reprobe_s": (30.0, 30.0)}
    params.update(overrides)
    return ArmadaClient(beacon, "det", 40.1, -88.2, **params)


async def test_probes_every_candidate_and_picks_the_fastest() -> None:
    async with fleet(0.06, 0.005, 0.03) as (tasks, beacon), client(beacon) as armada:
        assert armada.current is not None and armada.current.task_id == "t1"
        assert all(t.frames == [FRAME] for t in tasks)  # one real probe frame each
        kinds = [e.kind for e in armada.events]
        assert kinds[:3] == ["query", "probe", "switch"]
        probe = armada.events[1].detail["latency_ms"]
        assert probe["t1"] < probe["t2"] < probe["t0"] and probe["t0"] >= 60
        reply = await armada.infer(b"frame-1")
        assert reply.task_id == "t1" and reply.body["name"] == "t1" and reply.attempts == 1
        assert reply.latency_s >= 0.005


async def test_failover_is_immediate_and_loses_no_frame() -> None:
    async with fleet(0.02, 0.002, 0.01) as (tasks, beacon), client(beacon) as armada:
        sent = [f"frame-{i}".encode() for i in range(30)]
        replies = []
        for i, frame in enumerate(sent):
            if i == 10:
                await tasks[1].server.close()  # the serving node dies between frames
            if i == 20:
                tasks[2].broken = True  # the next one fails while answering
            replies.append(await armada.infer(frame))
        assert len(replies) == 30
        served = [r.task_id for r in replies]
        assert served == ["t1"] * 10 + ["t2"] * 10 + ["t0"] * 10
        assert [r.attempts for r in replies].count(2) == 2
        received = tasks[0].frames + tasks[1].frames + tasks[2].frames
        assert all(frame in received for frame in sent)  # every frame was served
        switches = [(e.detail["source"], e.detail["target"], e.detail["reason"])
                    for e in armada.switches]
        assert switches == [(None, "t1", "probe"), ("t1", "t2", "failover"),
                            ("t2", "t0", "failover")]
        errors = [e for e in armada.events if e.kind == "error"]
        assert [e.detail["task_id"] for e in errors] == ["t1", "t2"]
        # The frame that hit the dead node was retried at once, not after a timeout.
        failed_over = replies[10]
        assert failed_over.attempts == 2 and failed_over.latency_s < 1.0


async def test_periodic_reprobe_moves_to_a_node_that_became_faster() -> None:
    async with fleet(0.003, 0.03) as (tasks, beacon), \
            client(beacon, reprobe_s=(0.1, 0.15), seed=7) as armada:
        assert armada.current.task_id == "t0"
        tasks[0].delay_s, tasks[1].delay_s = 0.05, 0.001  # background load hits t0
        await await_until(lambda: armada.current.task_id == "t1", 5.0, interval=0.01)
        switch = armada.switches[-1]
        assert switch.detail["reason"] == "probe" and switch.detail["source"] == "t0"
        probes = [e.t for e in armada.events if e.kind == "probe"]
        assert len(probes) >= 2
        gaps = [b - a for a, b in itertools.pairwise(probes)]
        assert all(0.1 <= g < 0.5 for g in gaps)  # jittered period plus the probe itself
        assert (await armada.infer(b"x")).task_id == "t1"


async def test_recovered_node_is_used_again_after_a_probe() -> None:
    async with fleet(0.002, 0.02) as (tasks, beacon), client(beacon) as armada:
        tasks[0].broken = True
        assert (await armada.infer(b"a")).task_id == "t1"
        tasks[0].broken = False
        await armada.reprobe()
        assert (await armada.infer(b"b")).task_id == "t0"


async def test_unavailable_when_every_candidate_fails() -> None:
    async with fleet(0.001, 0.001) as (tasks, beacon), client(beacon) as armada:
        for task in tasks:
            task.broken = True
        with pytest.raises(ArmadaUnavailable):
            await armada.infer(b"lost")
        assert sum(e.kind == "query" for e in armada.events) == 2  # asked again first


async def test_sync_client_picks_the_fastest_and_fails_over() -> None:
    async with fleet(0.03, 0.002) as (tasks, beacon):
        def run() -> list[str]:
            with SyncArmadaClient(beacon, "det", 40.1, -88.2, probe_payload=FRAME,
                                  reprobe_s=(60.0, 60.0)) as armada:
                first = armada.infer(b"one").task_id
                tasks[1].broken = True
                second = armada.infer(b"two")
                return [first, second.task_id, str(second.attempts),
                        armada.switches[-1].detail["reason"]]

        assert await asyncio.to_thread(run) == ["t1", "t0", "2", "failover"]


def test_reprobe_range_is_checked() -> None:
    with pytest.raises(ValueError):
        ArmadaClient("http://127.0.0.1:1", "det", 0, 0, probe_payload=b"", reprobe_s=(2, 1))
    with pytest.raises(ValueError):
        ArmadaClient("http://127.0.0.1:1", "det", 0, 0, probe_payload=b"", switch_margin=1.0)


def _round(selection, **latencies_ms) -> str | None:
    """Feed one probe round (None: failed) and return the chosen task id."""
    selection.probed([(c, None if latencies_ms[c.task_id] is None
                       else latencies_ms[c.task_id] / 1e3, None)
                      for c in selection.candidates])
    return selection.current.task_id if selection.current else None


def test_reprobe_switches_only_past_the_margin() -> None:
    armada = ArmadaClient("http://127.0.0.1:1", "det", 0, 0, probe_payload=b"",
                          switch_margin=0.2)
    listing = {"candidates": [{"task_id": t, "url": f"http://{t}:1"} for t in ("a", "b")]}
    armada.adopt(listing)
    assert _round(armada, a=30, b=60) == "a"  # the first round takes the fastest
    armada.adopt(listing)  # a new query: same replicas, fresh objects
    assert _round(armada, a=60, b=50) == "a"  # 50 >= 0.8 * 60: noise, stay
    assert _round(armada, a=60, b=47) == "b"  # 47 < 48: clearly faster, move
    assert _round(armada, a=50, b=None) == "a"  # the current failed its probe: best
    assert _round(armada, a=50, b=45) == "a"  # 45 >= 40: stay
    assert armada.failed(armada.current, "reset").task_id == "b"  # failover: next-best
    assert [e.detail["reason"] for e in armada.switches] == ["probe", "probe", "probe",
                                                             "failover"]
