"""Tests of the streaming client (``nodes.armada.sdk.streaming``).

Most tests use fake senders, so they need neither OpenCV nor the sample media; one runs
the real detection task in-process and streams real frames to it.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from nodes.armada.detect_task import make_app
from nodes.armada.sdk.streaming import (
    UNKNOWN,
    Delivery,
    Frame,
    SendError,
    StreamConfig,
    stream_frames,
    url_sender,
)
from testbed.analysis.traces import rows_to_frame
from testbed.registry import generate
from workloads.armada_frames import FrameSpec, FramesUnavailable, load_frames

FRAMES = [b"\xff\xd8\xff frame %d" % k for k in range(3)]


def config(**overrides: Any) -> StreamConfig:
    """A stream config for client ``c1`` with a 1 s frame deadline."""
    values: dict[str, Any] = {
        "run": "r1", "policy": "armada", "client": "c1", "stream": "cam1", "deadline_s": 1.0,
    }
    values.update(overrides)
    return StreamConfig(**values)


def stream(fps: float, duration: float, clients: tuple[str, ...] = ("c1",)) -> list[Any]:
    """A frame-stream trace starting at 0."""
    return generate("frame-stream", {"fps": fps, "phase": "zero"}, list(clients),
                              duration, seed=1)


async def fake_infer(service_s: float = 0.01) -> dict[str, Any]:
    """Act as a task that starts at once and works ``service_s``; return its answer."""
    start = time.time()
    await asyncio.sleep(service_s)
    return {"server_arrival": start, "start": start, "end": time.time(),
            "queue_at_arrival": 0, "detections": []}


async def test_frames_go_out_at_the_configured_rate_and_rows_validate() -> None:
    seen: list[Frame] = []

    async def sender(frame: Frame) -> Delivery:
        frame.tried.append(("edge1", "edge"))
        seen.append(frame)
        return Delivery("edge1", "edge", await fake_infer(), estimate_s=0.02, state_age_s=0.5)

    tasks = stream(fps=20, duration=1.0, clients=("c1", "c2"))
    out = io.StringIO()
    rows = await stream_frames(config(), tasks, FRAMES, sender, out)
    assert len(rows) == 20  # c2's frames are not ours
    assert [r["frame_index"] for r in rows] == list(range(20))
    assert [f.data for f in seen] == [FRAMES[k % 3] for k in range(20)]
    lags = [r["dispatch_wall"] - r["arrival_wall"] for r in rows]
    assert max(lags) < 0.03
    gaps = np.diff([r["dispatch_wall"] for r in rows])
    assert np.mean(gaps) == pytest.approx(0.05, abs=0.005)
    df = rows_to_frame(rows)
    assert (df["kind"] == "frame").all() and (df["outcome"] == "ok").all()
    assert (df["frame_stream"] == "cam1").all() and (df["frame_deadline_s"] == 1.0).all()
    assert (df["target"] == "edge1").all() and (df["cls"] == "frame").all()
    assert (df["latency_s"] >= df["service_s"]).all()
    assert (df["service_s"] >= 0.01).all() and (df["wait_s"] == 0).all()
    assert len(out.getvalue().splitlines()) == 20
    assert json.loads(out.getvalue().splitlines()[0])["kind"] == "frame"


async def test_time_scale_scales_server_time_but_not_network() -> None:
    async def sender(_: Frame) -> Delivery:
        return Delivery("edge1", "edge", await fake_infer(service_s=0.02))

    rows = await stream_frames(config(time_scale=10.0), stream(10, 0.3), FRAMES, sender)
    row = rows[0]
    assert row["service_s"] == pytest.approx((row["end_wall"] - row["start_wall"]) * 10)
    assert 0.2 <= row["service_s"] < 0.3
    assert 0 <= row["network_s"] < 0.01
    assert row["latency_s"] == pytest.approx(row["network_s"] + row["wait_s"] + row["service_s"])
    rows_to_frame(rows)


async def test_failed_sends_become_error_and_timeout_rows() -> None:
    async def sender(frame: Frame) -> Delivery:
        kind = frame.index % 4
        if kind == 0:
            frame.tried += [("edge1", "edge"), ("edge2", "edge")]
            raise SendError("every candidate refused the connection")
        if kind == 1:
            raise RuntimeError("sender bug")
        if kind == 2:
            frame.tried.append(("edge3", "edge"))
            await asyncio.sleep(10)
        return Delivery("edge1", "edge", {"detections": []})  # malformed: no timestamps

    rows = await stream_frames(config(timeout_s=0.2), stream(20, 0.2), FRAMES, sender)
    assert len(rows) == 4
    refused, bug, hung, malformed = rows
    assert refused["outcome"] == "error" and refused["target"] == "edge2"
    assert refused["error"] == (
        "SendError: every candidate refused the connection (tried edge1, edge2)"
    )
    assert bug["outcome"] == "error" and bug["target"] == UNKNOWN
    assert "sender bug" in bug["error"]
    assert hung["outcome"] == "timeout" and hung["target"] == "edge3"
    assert hung["response_wall"] - hung["dispatch_wall"] == pytest.approx(0.2, abs=0.05)
    assert malformed["outcome"] == "error" and "lacks server_arrival" in malformed["error"]
    df = rows_to_frame(rows)
    assert df["latency_s"].isna().all()


async def test_frames_beyond_max_in_flight_are_recorded_as_skipped() -> None:
    async def sender(_: Frame) -> Delivery:
        return Delivery("edge1", "edge", await fake_infer(0.25))

    rows = await stream_frames(config(max_in_flight=1), stream(20, 0.5), FRAMES, sender)
    assert len(rows) == 10
    skipped = [r for r in rows if r["outcome"] == "error"]
    assert skipped and all(r["error"].startswith("skipped: max_in_flight=1") for r in skipped)
    assert sum(r["outcome"] == "ok" for r in rows) == 10 - len(skipped) >= 2
    rows_to_frame(rows)


async def test_url_sender_against_an_unreachable_task() -> None:
    async with aiohttp.ClientSession() as session:
        sender = url_sender(session, "http://127.0.0.1:9", "edge1", "edge")
        rows = await stream_frames(config(), stream(10, 0.2), FRAMES, sender)
    assert [r["outcome"] for r in rows] == ["error", "error"]
    assert all(r["target"] == "edge1" and r["error"].startswith("SendError: edge1:")
               for r in rows)
    rows_to_frame(rows)


async def test_streams_real_frames_to_the_detection_task(tmp_path: Any) -> None:
    try:
        frames = load_frames(FrameSpec(width=320, height=240, count=3), cache=tmp_path)
    except FramesUnavailable as exc:
        pytest.skip(str(exc))
    async with TestServer(make_app()) as server, aiohttp.ClientSession() as session:
        sender = url_sender(session, str(server.make_url("")).rstrip("/"), "edge1", "edge")
        rows = await stream_frames(config(), stream(5, 1.0), frames, sender)
        bad = url_sender(session, f"{str(server.make_url('')).rstrip('/')}/nowhere", "e", "edge")
        failed = await stream_frames(config(), stream(5, 0.2), frames, bad)
    assert [r["outcome"] for r in rows] == ["ok"] * 5
    df = rows_to_frame(rows)
    assert (df["service_s"] > 0).all() and (df["network_s"] >= 0).all()
    assert failed[0]["outcome"] == "error" and "HTTP 404" in failed[0]["error"]


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        config(time_scale=0.5)
    with pytest.raises(ValueError, match="client"):
        config(client="")
    with pytest.raises(ValueError, match="deadline_s"):
        config(deadline_s=-1.0)
