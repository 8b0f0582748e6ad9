"""Tests of the object-detection task (``nodes.armada.detect_task``) over real HTTP.

The detector is real (OpenCV's HOG people detector, ~0.1 s per 640x480 frame on one core
of the development VM), so timing assertions only compare frames with each other.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from nodes.armada.detect_task import DETECTORS, make_app
from workloads.armada_frames import FrameSet, FrameSpec, FramesUnavailable, load_frames

JPEG = {"Content-Type": "image/jpeg"}
#: Frame 5 of the default spec (vtest.avi frame 20) shows three pedestrians to HOG.
PEOPLE_FRAME = 5


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> FrameSet:
    """The first frames of the default spec (640x480 vtest.avi frames)."""
    try:
        return load_frames(FrameSpec(count=PEOPLE_FRAME + 1), cache=tmp_path_factory.mktemp("f"))
    except FramesUnavailable as exc:
        pytest.skip(str(exc))


@asynccontextmanager
async def task(**settings: Any) -> AsyncIterator[TestClient]:
    """A test client talking to a fresh detection task."""
    async with TestClient(TestServer(make_app(**settings))) as client:
        yield client


async def infer(client: TestClient, data: bytes) -> dict[str, Any]:
    """POST one frame and return its (200) answer."""
    resp = await client.post("/infer", data=data, headers=JPEG)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_hog_finds_the_pedestrians_of_a_vtest_frame(frames: FrameSet) -> None:
    async with task() as client:
        before = time.time()
        body = await infer(client, frames[PEOPLE_FRAME])
        after = time.time()
    assert body["detector"] == "hog"
    assert body["frame_shape"] == [480, 640, 3]
    assert len(body["detections"]) >= 1
    for x, y, w, h, score in body["detections"]:
        assert 0 <= x and 0 <= y and x + w <= 640 + 16 and y + h <= 480 + 16
        assert w > 0 and h > 0 and score > 0
    assert before <= body["server_arrival"] <= body["start"] <= body["end"] <= after
    assert body["processing_ms"] == pytest.approx((body["end"] - body["start"]) * 1000)
    assert body["processing_ms"] > 1
    assert body["queue_at_arrival"] == 0


@pytest.mark.parametrize("detector", sorted(set(DETECTORS) - {"hog"}))
async def test_haar_detectors_run(frames: FrameSet, detector: str) -> None:
    async with task(detector=detector) as client:
        body = await infer(client, frames[0])
    assert body["detector"] == detector
    assert all(len(d) == 5 for d in body["detections"])


@pytest.mark.parametrize(
    ("data", "headers", "status", "reason"),
    [
        (b"", JPEG, 400, "expected a JPEG image, found nothing"),
        (b"GIF89a garbage", JPEG, 400, "expected a JPEG image (starting FF D8 FF)"),
        (b"\xff\xd8\xff" + b"\x00garbage" * 50, JPEG, 400, "could not be decoded"),
        (b"\xff\xd8\xff", {"Content-Type": "text/plain"}, 415, "expected image/jpeg"),
    ],
)
async def test_bad_frames_are_refused(
    data: bytes, headers: dict[str, str], status: int, reason: str
) -> None:
    async with task() as client:
        resp = await client.post("/infer", data=data, headers=headers)
        assert resp.status == status
        assert reason in (await resp.json())["error"]
        stats = await (await client.get("/stats")).json()
    assert stats["completed"] == 0


async def test_too_large_frames_get_413(frames: FrameSet) -> None:
    async with task(max_body_bytes=1000) as client:
        resp = await client.post("/infer", data=frames[0], headers=JPEG)
        assert resp.status == 413
        assert (await resp.json())["error"] == "body: expected at most 1000 bytes, found more"

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: aiohttp's limit
            yield frames[0]

        resp = await client.post("/infer", data=chunks(), headers=JPEG)
        assert resp.status == 413
        assert "at most 1000 bytes" in (await resp.json())["error"]


@pytest.mark.timing
async def test_frames_queue_behind_a_single_worker(frames: FrameSet) -> None:
    async with task(workers=1) as client:
        pending = [asyncio.create_task(infer(client, frames[k])) for k in range(4)]
        await asyncio.sleep(0.05)
        began = time.perf_counter()
        health = await client.get("/health")  # the loop answers while frames are processed
        assert health.status == 200
        assert time.perf_counter() - began < 0.05
        stats = await (await client.get("/stats")).json()
        assert stats["running"] == 1 and stats["in_flight"] >= 2
        bodies = sorted(await asyncio.gather(*pending), key=lambda b: b["start"])
        stats = await (await client.get("/stats")).json()
    for earlier, later in itertools.pairwise(bodies):
        assert later["start"] >= earlier["end"]  # one at a time
    assert [b["queue_at_arrival"] for b in bodies] == [0, 0, 1, 2]  # waiting, not in service
    last = bodies[-1]
    assert last["queue_ms"] >= 0.9 * sum(b["processing_ms"] for b in bodies[:-1])
    assert stats["completed"] == 4 and stats["in_flight"] == 0
    assert stats["mean_processing_ms"] > 0
    assert stats["cpu_seconds"] > 0


async def test_a_full_queue_refuses_with_503(frames: FrameSet) -> None:
    async with task(workers=1, queue_limit=1) as client:
        answers = await asyncio.gather(
            *(client.post("/infer", data=frames[0], headers=JPEG) for _ in range(4))
        )
        statuses = sorted(a.status for a in answers)
        stats = await (await client.get("/stats")).json()
    assert statuses.count(200) >= 2 and 503 in statuses
    assert stats["rejected"] == statuses.count(503)


async def test_openapi_describes_the_endpoints() -> None:
    async with task() as client:
        spec = await (await client.get("/openapi.json")).json()
        wrong = await client.get("/infer")
        assert wrong.status == 405
        assert "not allowed" in (await wrong.json())["error"]
    assert set(spec["paths"]) == {"/infer", "/health", "/stats", "/openapi.json"}
    assert set(spec["paths"]["/infer"]["post"]["responses"]) == {
        "200", "400", "408", "413", "415", "503"
    }


@pytest.mark.parametrize(
    "settings", [{"detector": "yolo"}, {"workers": 0}, {"queue_limit": 0}, {"threads": 0}]
)
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make_app(**settings)


def test_runs_as_a_process_and_stops_on_sigterm(frames: FrameSet) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodes.armada.detect_task", "--host", "127.0.0.1", "--port", "0"],
        cwd=root,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on 127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1])
        import requests

        resp = requests.post(f"http://127.0.0.1:{port}/infer", data=frames[0], headers=JPEG,
                             timeout=10)
        assert resp.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def stats_until(client: TestClient, condition: Any, timeout: float = 10.0) -> dict:
    """Poll ``GET /stats`` until ``condition(stats)`` holds; return those stats."""
    deadline = time.monotonic() + timeout
    while not condition(stats := await (await client.get("/stats")).json()):
        assert time.monotonic() < deadline, f"/stats never satisfied the condition: {stats}"
        await asyncio.sleep(0.005)
    return stats


async def test_a_frame_abandoned_while_waiting_leaves_the_queue(frames: FrameSet) -> None:
    async with task(workers=1) as client:
        first = asyncio.create_task(infer(client, frames[0]))
        await stats_until(client, lambda st: st["running"] == 1)
        abandoned = asyncio.create_task(infer(client, frames[1]))
        await stats_until(client, lambda st: st["waiting"] == 1)
        abandoned.cancel()  # closes its connection while it waits
        await first
        stats = await stats_until(client, lambda st: st["in_flight"] == 0)
        after = await infer(client, frames[2])
    assert stats["in_flight"] == 0 and stats["completed"] == 1
    assert after["queue_at_arrival"] == 0
