"""Tests of the face-recognition workload (``workloads.armada_faces``, ``armada_face_frames``,
``armada_face_descriptors``), its pure recognition layer
(``nodes.armada.face_recognition``) and the face task (``nodes.armada.face_task``) over
real HTTP with the in-memory store.

Detection is real (OpenCV's frontal-face Haar cascade, ~15-40 ms per 320x240 frame on the
development VM); the face frames are built once per module into a temporary cache.
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from nodes.armada import face_task
from nodes.armada.face_recognition import FaceIndex, describe, detect_faces, match, subject
from nodes.armada.face_task import (
    MemoryFaceStore,
    StoreError,
    StoreNotWiredError,
    cargo_store_factory,
    make_app,
)
from testbed.errors import TestbedError
from testbed.poll import await_until
from testbed.registry import generate, generators
from workloads.armada_face_descriptors import (
    DIM,
    INITIAL_RECORDS,
    RECORD_BYTES,
    THRESHOLD,
    IdentityModel,
    decode_record,
    decode_records,
    encode_record,
    encode_records,
    initial_records,
)
from workloads.armada_face_frames import (
    FACE_SOURCES,
    MIN_OVERLAP,
    FaceCascade,
    FaceFrames,
    FaceFrameSpec,
    _read_sources,
    build_face_frames,
    load_face_frames,
    overlap,
)
from workloads.armada_faces import PLAN_NAME, read_plan, write_plan
from workloads.armada_frames import FramesUnavailable, data_dir
from workloads.trace import write_trace

GEN = generators()["face-recognition"]
SEED = 11
#: Documented bounds on the identity model's error rates at its threshold
#: (docs/face_recognition.md); the measured rates are 0 on these samples.
MAX_FALSE_MATCH_RATE = 1e-4
MAX_FALSE_NON_MATCH_RATE = 1e-3


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> FaceFrames:
    """One face frame per source (320x240), built into a temporary cache."""
    try:
        return load_face_frames(FaceFrameSpec(count=len(FACE_SOURCES)),
                                cache=tmp_path_factory.mktemp("faces"))
    except FramesUnavailable as exc:
        pytest.skip(str(exc))


def _jpeg(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".jpg", image)
    assert ok
    return data.tobytes()


# --- face frames -------------------------------------------------------------------------


def test_every_frame_shows_a_detectable_subject_face(frames: FaceFrames) -> None:
    assert len(frames) == len(FACE_SOURCES)
    assert sorted(frames.sources) == list(range(len(FACE_SOURCES)))
    for k, data in enumerate(frames):
        assert data.startswith(b"\xff\xd8\xff")
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert image.shape == (240, 320, 3)
        faces = detect_faces(data)
        assert faces, f"frame {k} ({FACE_SOURCES[frames.sources[k]]}): no face"
        assert overlap(subject(faces), frames.faces[k]) >= MIN_OVERLAP  # type: ignore[arg-type]


def test_the_listed_source_faces_are_where_the_cascade_finds_them() -> None:
    try:
        images = _read_sources(cv2, data_dir())
    except FramesUnavailable as exc:
        pytest.skip(str(exc))
    cascade = FaceCascade()
    photos = [i for i, s in enumerate(FACE_SOURCES) if s.frame is None]
    assert [FACE_SOURCES[i].file for i in photos] == [
        "messi5.jpg", "basketball1.png", "basketball2.png"]
    for index in [*photos, 3, 13, 23, len(FACE_SOURCES) - 1]:  # the photos and some video
        found = cascade.detect(images[index])
        assert max(overlap(FACE_SOURCES[index].box, b) for b in found) > 0.8


def test_frames_are_deterministic_and_cached(frames: FaceFrames, tmp_path: Path) -> None:
    assert frames.folder is not None and frames.folder.name.startswith("faces-")
    again = load_face_frames(frames.spec, cache=frames.folder.parent)
    assert again.frames == frames.frames and again.faces == frames.faces
    # frame k depends on k and the frame size only, so a shorter set is a prefix
    assert build_face_frames(FaceFrameSpec(count=3)).frames == frames.frames[:3]
    assert frames.frame(len(frames) + 1) == frames[1]
    # a damaged cache is rebuilt
    copy = tmp_path / frames.folder.name
    copy.mkdir()
    for path in frames.folder.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / "face_00000.jpg").write_bytes(b"broken")
    assert load_face_frames(frames.spec, cache=tmp_path).frames == frames.frames


def test_missing_media_is_named(tmp_path: Path) -> None:
    with pytest.raises(FramesUnavailable, match=r"Megamind\.avi: sample media not found"):
        build_face_frames(FaceFrameSpec(count=1), media=tmp_path)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"width": 64}, r"images\.width: expected an integer in \[128, 1280\], found 64"),
        ({"count": 0}, r"images\.count: expected an integer in \[1, 1000\]"),
        ({"quality": True}, r"images\.quality: expected an integer"),
        ({"width": 1280, "height": 128}, r"images\.width: expected width / height in"),
        ({"size": 3}, r"images\.size: expected one of the fields"),
    ],
)
def test_bad_frame_specs_are_refused(raw: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        FaceFrameSpec.from_mapping(raw)


# --- the identity model ------------------------------------------------------------------


def test_descriptors_are_deterministic_and_independent_of_the_population() -> None:
    small, large = IdentityModel(10, seed=SEED), IdentityModel(10_000, seed=SEED)
    vector = small.descriptor(3, 7)
    assert vector.shape == (DIM,) and vector.dtype == np.float64
    assert np.array_equal(vector, large.descriptor(3, 7))
    assert np.array_equal(vector, IdentityModel(10, seed=SEED).descriptor(3, 7))
    assert not np.array_equal(vector, small.descriptor(3, 8))
    assert not np.array_equal(vector, IdentityModel(10, seed=SEED + 1).descriptor(3, 7))
    vector[:] = 0  # callers own the vector they get
    assert np.any(small.descriptor(3, 7))


def test_identities_separate_at_the_threshold() -> None:
    model = IdentityModel(400, seed=SEED)
    assert model.threshold == pytest.approx(0.5767, abs=1e-4) == THRESHOLD
    assert model.margin == pytest.approx(7.10, abs=0.01)
    observations = 4
    vectors = np.stack([model.descriptor(i, k) for i in range(400) for k in range(observations)])
    labels = np.repeat(np.arange(400), observations)
    squares = np.einsum("ij,ij->i", vectors, vectors)
    gram = squares[:, None] + squares[None, :] - 2 * vectors @ vectors.T
    distances = np.sqrt(np.maximum(gram, 0.0))
    upper = np.triu(np.ones_like(distances, dtype=bool), k=1)
    same = distances[upper & (labels[:, None] == labels[None, :])]
    other = distances[upper & (labels[:, None] != labels[None, :])]
    assert same.size == 400 * 6 and other.size == 1600 * 1599 // 2 - 2400
    assert np.mean(same) == pytest.approx(0.399, abs=0.01)
    assert np.mean(other) == pytest.approx(1.038, abs=0.01)
    false_non_match = np.mean(same > model.threshold)
    false_match = np.mean(other <= model.threshold)
    assert false_non_match <= MAX_FALSE_NON_MATCH_RATE
    assert false_match <= MAX_FALSE_MATCH_RATE
    assert same.max() < model.threshold < other.min()


def test_nearest_neighbour_recognises_known_and_rejects_unknown_identities() -> None:
    records = initial_records(SEED)
    index = FaceIndex()
    for record_id, vector in records:
        index.put(record_id, vector)
    model = IdentityModel(2000, seed=SEED)
    for identity in range(0, INITIAL_RECORDS, 5):
        found = index.match(model.descriptor(identity, 1 + identity), THRESHOLD)
        assert found is not None and found[0] == identity and found[1] < THRESHOLD
    for identity in range(INITIAL_RECORDS, INITIAL_RECORDS + 200):
        assert index.match(model.descriptor(identity, 1), THRESHOLD) is None


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"identities": 0}, r"identities: expected an integer >= 1, found 0"),
        ({"identities": 5, "dim": 0}, r"dim: expected an integer >= 1"),
        ({"identities": 5, "seed": -1}, r"seed: expected an integer >= 0"),
        ({"identities": 5, "noise_scale": 0.0}, r"noise_scale: expected a finite number > 0"),
        ({"identities": 5, "centre_scale": math.nan}, r"centre_scale: expected a finite"),
    ],
)
def test_bad_models_are_refused(kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        IdentityModel(**kwargs)


def test_descriptor_refuses_identities_outside_the_population() -> None:
    model = IdentityModel(5)
    with pytest.raises(ValueError, match=r"identity: expected an integer in \[0, 4\], found 5"):
        model.descriptor(5, 0)
    with pytest.raises(ValueError, match=r"observation key: expected an integer >= 0"):
        model.descriptor(0, -1)


# --- records and the initial data set ----------------------------------------------------


def test_records_round_trip_exactly() -> None:
    vector = IdentityModel(1).descriptor(0, 0)
    vector[:3] = [-0.0, 5e-324, -1.7976931348623157e308]
    data = encode_record(2**64 - 1, vector)
    assert len(data) == RECORD_BYTES == 1032
    assert data[:8] == b"\xff" * 8
    assert encode_record(1, vector)[:8] == b"\x00" * 7 + b"\x01"  # big-endian id
    assert struct.unpack("<d", data[8:16])[0] == vector[0]  # little-endian values
    record_id, back = decode_record(data)
    assert record_id == 2**64 - 1 and back.tobytes() == vector.tobytes()
    records = [(7, vector), (8, -vector)]
    decoded = decode_records(encode_records(records))
    assert [r for r, _ in decoded] == [7, 8]
    assert np.array_equal(decoded[1][1], -vector)


@pytest.mark.parametrize(
    ("record_id", "vector", "reason"),
    [
        (-1, np.zeros(DIM), r"record id: expected an integer in \[0, 2\*\*64 - 1\], found -1"),
        (2**64, np.zeros(DIM), r"record id: expected an integer"),
        (True, np.zeros(DIM), r"record id: expected an integer"),
        (1.0, np.zeros(DIM), r"record id: expected an integer"),
        (1, np.zeros(DIM - 1), r"record vector: expected 128 numbers, found shape \(127,\)"),
        (1, np.zeros((2, 64)), r"record vector: expected 128 numbers, found shape \(2, 64\)"),
        (1, [np.nan] + [0.0] * 127, r"expected finite numbers, found nan at index 0"),
        (1, [0.0] * 127 + [np.inf], r"found inf at index 127"),
        (1, ["a"] * DIM, r"record vector: expected 128 numbers"),
    ],
)
def test_bad_records_are_refused(record_id: Any, vector: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        encode_record(record_id, vector)


def test_malformed_record_bytes_are_refused() -> None:
    good = encode_record(1, np.zeros(DIM))
    with pytest.raises(ValueError, match=r"record: expected 1032 bytes, found 1031"):
        decode_record(good[:-1])
    with pytest.raises(ValueError, match=r"record: expected bytes, found str"):
        decode_record("x" * 1032)  # type: ignore[arg-type]
    nan = good[:8] + struct.pack("<d", math.nan) + good[16:]
    with pytest.raises(ValueError, match=r"records\[1\]: record vector: expected finite"):
        decode_records(good + nan)
    with pytest.raises(ValueError, match=r"records: expected a multiple of 1032 bytes, found 1"):
        decode_records(b"x")


def test_initial_data_set_is_one_descriptor_per_known_identity() -> None:
    records = initial_records(SEED)
    assert len(records) == INITIAL_RECORDS == 1000
    assert [r for r, _ in records] == list(range(1000))
    model = IdentityModel(1000, seed=SEED)
    assert np.array_equal(records[42][1], model.descriptor(42, 0))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(records, initial_records(SEED),
                                                          strict=True))
    assert not np.array_equal(records[0][1], initial_records(SEED + 1)[0][1])
    assert len(encode_records(records)) == 1000 * 1032
    with pytest.raises(ValueError, match=r"model: expected seed 11 and >= 1000 identities"):
        initial_records(SEED, model=IdentityModel(10, seed=SEED))


# --- the generator -----------------------------------------------------------------------


def test_generator_is_registered_and_deterministic() -> None:
    assert GEN.name == "face-recognition"
    params = {"mode": "read-write"}
    first = generate("face-recognition", params, ["a", "b", "c"], 400.0, SEED)
    assert first == generate("face-recognition", params, ["a", "b", "c"], 400.0, SEED)
    assert first != generate("face-recognition", params, ["a", "b", "c"], 400.0, SEED + 1)
    plan = GEN.plan(params, SEED)
    assert np.array_equal(plan.identity, GEN.plan(params, SEED).identity)
    assert not np.array_equal(plan.identity, GEN.plan(params, SEED + 1).identity)


def test_tasks_are_dealt_to_clients_at_the_frame_rate() -> None:
    params = {"mode": "read", "fps": 4, "demand_s": 0.02}
    tasks = generate("face-recognition", params, ["a", "b", "c"], 400.0, SEED)
    assert len(tasks) == 1000
    assert [t.task_id for t in tasks] == list(range(1000))
    assert {t.cls for t in tasks} == {"read"} and {t.size for t in tasks} == {0.02}
    arrivals = [t.arrival for t in tasks]
    assert arrivals == sorted(arrivals)
    for client, count in (("a", 334), ("b", 333), ("c", 333)):
        mine = np.array([t.arrival for t in tasks if t.client == client])
        assert mine.size == count
        assert 0 <= mine[0] < 0.25
        assert np.allclose(np.diff(mine), 0.25)
    zero = generate("face-recognition", {**params, "phase": "zero"}, ["a"], 300.0, SEED)
    assert [t.arrival for t in zero[:3]] == [0.0, 0.25, 0.5]


@pytest.mark.parametrize(("mode", "low", "high"),
                         [("read", 1.0, 1.0), ("write", 0.0, 0.0), ("read-write", 0.45, 0.55)])
def test_modes_set_the_share_of_known_faces(mode: str, low: float, high: float) -> None:
    plan = GEN.plan({"mode": mode}, SEED)
    assert plan.mode == mode and plan.frames == 1000
    assert low <= plan.known.mean() <= high
    assert np.array_equal(plan.known, plan.identity < 1000)
    assert plan.identity.min() >= 0 and plan.identity.max() < 2000
    assert np.array_equal(plan.observation, np.arange(1, 1001))
    assert np.array_equal(plan.image, np.arange(1000) % 100)
    assert np.array_equal(plan.descriptor(5), plan.model().descriptor(
        int(plan.identity[5]), 6))


def test_plan_of_a_shorter_trace_is_a_prefix() -> None:
    long = GEN.plan({"mode": "read-write", "known_share": 0.3}, SEED)
    short = GEN.plan({"mode": "read-write", "known_share": 0.3, "frames": 50}, SEED)
    assert np.array_equal(short.identity, long.identity[:50])


def test_a_too_short_run_is_refused() -> None:
    with pytest.raises(TestbedError, match=r"1000 frames at 5 fps over 2 client\(s\) need a "
                                           r"duration > 99\.\d+ s, found 50"):
        generate("face-recognition", {"mode": "write"}, ["a", "b"], 50.0, SEED)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({}, r"params\.mode: expected one of read, write, read-write, found nothing"),
        ({"mode": "scan"}, r"params\.mode: expected one of .*, found 'scan'"),
        ({"mode": "read", "frames": 0}, r"params\.frames: expected an integer in \[1, 100000\]"),
        ({"mode": "read", "fps": 0}, r"params\.fps: expected a number in \(0, 30\], found 0"),
        ({"mode": "read", "fps": "5"}, r"params\.fps: expected a number"),
        ({"mode": "read", "phase": "late"}, r"params\.phase: expected one of random, zero"),
        ({"mode": "read", "initial": 3000}, r"initial: expected at most identities \(2000\)"),
        ({"mode": "write", "identities": 1000}, r"identities: expected more than initial"),
        ({"mode": "read", "known_share": 1.5}, r"known_share: expected a number in \[0, 1\]"),
        ({"mode": "read", "demand_s": 0}, r"params\.demand_s: expected a number in \(0, inf\]"),
        ({"mode": "read", "images": {"count": 0}}, r"params\.images\.count: expected"),
        ({"mode": "read", "images": []}, r"params\.images: expected a mapping"),
        ({"mode": "read", "seed": 1}, r"params\.seed: expected one of the fields"),
    ],
)
def test_bad_params_are_refused(params: dict[str, Any], reason: str) -> None:
    with pytest.raises(TestbedError, match=reason):
        generate("face-recognition", params, ["a"], 1000.0, SEED)


def test_read_only_on_the_whole_population_is_accepted() -> None:
    GEN.validate({"mode": "read", "identities": 1000})


def test_plan_file_round_trip_and_checks(tmp_path: Path) -> None:
    params = {"mode": "read-write", "frames": 30, "images": {"count": 7}}
    tasks = generate("face-recognition", params, ["a"], 10.0, SEED)
    write_trace(tasks, tmp_path, {"generator": "face-recognition", "params": params,
                                  "seed": SEED})
    write_plan(tmp_path, params, SEED)
    plan = read_plan(tmp_path)
    expected = GEN.plan(params, SEED)
    assert plan.mode == "read-write" and plan.images.count == 7
    for name in ("identity", "observation", "image", "known"):
        assert np.array_equal(getattr(plan, name), getattr(expected, name))
    doc = json.loads((tmp_path / PLAN_NAME).read_text())
    assert doc["model"]["threshold"] == THRESHOLD and len(doc["frames"]) == 30
    write_plan(tmp_path, {**params, "frames": 31}, SEED)
    with pytest.raises(TestbedError, match=r"written for trace params"):
        read_plan(tmp_path)
    with pytest.raises(TestbedError, match=r"face-recognition plan not found"):
        read_plan(tmp_path / "nowhere")
    with pytest.raises(TestbedError, match=r"params\.mode"):
        write_plan(tmp_path, {}, SEED)


# --- the pure recognition layer ----------------------------------------------------------


def test_match_takes_the_nearest_record_within_the_threshold() -> None:
    base = np.zeros(DIM)
    near, far = base.copy(), base.copy()
    near[0], far[0] = 0.3, 0.5
    assert match(base, [], 1.0) is None
    assert match(base, [(1, far), (2, near)], 1.0) == (2, pytest.approx(0.3))
    assert match(base, [(1, far), (2, near)], 0.3) == (2, pytest.approx(0.3))  # <= matches
    assert match(base, [(1, far), (2, near)], 0.29) is None
    assert match(base, [(2, near), (2, far)], 1.0) == (2, pytest.approx(0.5))  # replaced
    index = FaceIndex()
    for k in range(100):  # grows past its first block
        assert index.put(k, np.full(DIM, k + 1.0))
    assert not index.put(5, base) and len(index) == 100 and 5 in index
    assert index.match(base, 0.0) == (5, 0.0)
    with pytest.raises(ValueError, match=r"descriptor: expected 128 numbers"):
        index.match(np.zeros(3), 1.0)


def test_detection_and_description_edge_cases() -> None:
    blank = _jpeg(np.zeros((240, 320, 3), np.uint8))
    assert detect_faces(blank) == []
    assert subject([]) is None
    assert subject([(0, 0, 40, 40), (5, 5, 50, 50)]) == (5, 5, 50, 50)
    with pytest.raises(ValueError, match="could not be decoded"):
        detect_faces(b"\xff\xd8\xffnot really")
    with pytest.raises(ValueError, match="no face to describe"):
        describe(IdentityModel(3), None, 1, 1)


# --- the face task -----------------------------------------------------------------------


@asynccontextmanager
async def task(store: Any, **settings: Any) -> AsyncIterator[TestClient]:
    """A test client talking to a fresh face task using ``store``."""

    async def factory() -> Any:
        return store

    async with TestClient(TestServer(make_app(factory, model_seed=SEED, **settings))) as client:
        yield client


async def recognise(client: TestClient, data: bytes, identity: int, observation: int,
                    op: str | None = None) -> dict[str, Any]:
    """POST one frame and return its (200) answer."""
    headers = {"Content-Type": "image/jpeg", "X-Face-Identity": str(identity),
               "X-Face-Observation": str(observation)}
    if op is not None:
        headers["X-Face-Op"] = op
    resp = await client.post("/recognise", data=data, headers=headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_read_only_recognises_known_identities(frames: FaceFrames) -> None:
    store = MemoryFaceStore(initial_records(SEED))
    async with task(store, op="read") as client:
        for k, identity in enumerate((0, 17, 999)):
            body = await recognise(client, frames[k], identity, 100 + k)
            assert body["faces"] and body["face"] == body["faces"][0]
            assert body["op"] == "read" and body["performed"] == ["read"]
            assert body["recognised"] is True and body["matched_id"] == identity
            assert 0 < body["distance"] < THRESHOLD and not body["inserted"]
            assert body["detect_ms"] > 0 and body["storage_ms"] == body["read_ms"] >= 0
            assert body["write_ms"] == 0
            assert body["server_arrival"] <= body["start"] <= body["end"]
        unknown = await recognise(client, frames[3], 1500, 1)
        assert unknown["recognised"] is False and unknown["matched_id"] is None
        stats = await (await client.get("/stats")).json()
    assert store.matches == 4 and store.inserts == 0 and len(store.index) == 1000
    assert stats["completed"] == 4 and stats["reads"] == 4 and stats["recognised"] == 3
    assert stats["writes"] == 0 and stats["in_flight"] == 0 and stats["mean_detect_ms"] > 0


async def test_read_then_write_inserts_unknowns_then_recognises_them(
    frames: FaceFrames,
) -> None:
    store = MemoryFaceStore(initial_records(SEED))
    async with task(store) as client:  # the default op is read-write
        first = await recognise(client, frames[0], 1234, 1)
        assert first["performed"] == ["read", "write"] and first["inserted"]
        assert first["recognised"] is False
        assert first["storage_ms"] == pytest.approx(first["read_ms"] + first["write_ms"])
        again = await recognise(client, frames[1], 1234, 2)
        assert again["performed"] == ["read"] and again["matched_id"] == 1234
        known = await recognise(client, frames[2], 5, 3)
        assert known["performed"] == ["read"] and known["matched_id"] == 5
        written = await recognise(client, frames[3], 5, 4, op="write")
        assert written["performed"] == ["write"] and written["recognised"] is None
    assert store.inserts == 2 and len(store.index) == 1001 and 1234 in store.index


async def test_a_trace_replays_through_the_task(frames: FaceFrames) -> None:
    params = {"mode": "read-write", "frames": 24, "identities": 1008, "known_share": 0.5,
              "images": {"count": len(frames)}}
    plan = GEN.plan(params, SEED)
    store = MemoryFaceStore(initial_records(SEED))
    written: set[int] = set()
    async with task(store, op=plan.mode) as client:
        for k in range(plan.frames):
            identity = int(plan.identity[k])
            body = await recognise(client, frames.frame(int(plan.image[k])), identity,
                                   int(plan.observation[k]))
            if plan.known[k] or identity in written:
                assert body["performed"] == ["read"] and body["matched_id"] == identity
            else:
                assert body["performed"] == ["read", "write"]
                written.add(identity)
    assert written and store.inserts == len(written)


async def test_a_frame_without_a_face_performs_no_op() -> None:
    store = MemoryFaceStore()
    async with task(store) as client:
        body = await recognise(client, _jpeg(np.zeros((240, 320, 3), np.uint8)), 1, 1)
        stats = await (await client.get("/stats")).json()
    assert body["faces"] == [] and body["face"] is None and body["performed"] == []
    assert store.matches == store.inserts == 0 and stats["no_face"] == 1


@pytest.mark.parametrize(
    ("headers", "data", "status", "reason"),
    [
        ({"X-Face-Observation": "1"}, None, 400, "X-Face-Identity: expected an integer"),
        ({"X-Face-Identity": "x", "X-Face-Observation": "1"}, None, 400,
         "X-Face-Identity: expected an integer >= 0, found 'x'"),
        ({"X-Face-Identity": "-3", "X-Face-Observation": "1"}, None, 400,
         "X-Face-Identity: expected an integer >= 0"),
        ({"X-Face-Identity": "99999999", "X-Face-Observation": "1"}, None, 400,
         "X-Face-Identity: expected an integer below 10000000"),
        ({"X-Face-Identity": "1"}, None, 400, "X-Face-Observation: expected an integer"),
        ({"X-Face-Identity": "1", "X-Face-Observation": "1", "X-Face-Op": "scan"}, None, 400,
         "X-Face-Op: expected one of read, write, read-write, found 'scan'"),
        ({"X-Face-Identity": "1", "X-Face-Observation": "1"}, b"GIF89a", 400,
         "body: expected a JPEG image"),
        ({"X-Face-Identity": "1", "X-Face-Observation": "1"}, b"\xff\xd8\xff\x00", 400,
         "could not be decoded"),
        ({"X-Face-Identity": "1", "X-Face-Observation": "1", "Content-Type": "image/png"},
         None, 415, "Content-Type: expected image/jpeg, found image/png"),
    ],
)
async def test_bad_requests_are_refused(
    frames: FaceFrames, headers: dict[str, str], data: bytes | None, status: int, reason: str
) -> None:
    async with task(MemoryFaceStore()) as client:
        resp = await client.post("/recognise", data=frames[0] if data is None else data,
                                 headers={"Content-Type": "image/jpeg", **headers})
        assert resp.status == status
        assert reason in (await resp.json())["error"]
        stats = await (await client.get("/stats")).json()
    assert stats["failed"] == 1 and stats["completed"] == 0


async def test_a_failing_store_answers_502(frames: FaceFrames) -> None:
    class Broken(MemoryFaceStore):
        async def match(self, vector: np.ndarray, threshold: float) -> None:
            raise StoreError("cargo 10.0.0.5:9000 unreachable")

    async with task(Broken()) as client:
        resp = await client.post("/recognise", data=frames[0], headers={
            "Content-Type": "image/jpeg", "X-Face-Identity": "1", "X-Face-Observation": "1"})
        assert resp.status == 502
        assert (await resp.json())["error"] == "storage: cargo 10.0.0.5:9000 unreachable"
        health = await (await client.get("/health")).json()
    assert health["status"] == "ok" and health["threshold"] == THRESHOLD


def test_bad_settings_and_a_cargo_store_without_its_location(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def factory() -> Any:
        return MemoryFaceStore()

    with pytest.raises(ValueError, match="op must be one of"):
        make_app(factory, op="scan")
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        make_app(factory, threshold=math.inf)
    for key in ("ARMADA_APP", "ARMADA_NODE_LAT", "ARMADA_NODE_LON"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(StoreNotWiredError, match="needs app"):
        cargo_store_factory("http://10.0.0.1:7000")
    # The command line is fine, the environment is not: the task refuses to start.
    with caplog.at_level(logging.ERROR, logger="nodes.armada.face_task"):
        assert face_task.main(["--storage-manager", "http://10.0.0.1:7000"]) == 1
    assert "refusing to start: --storage-manager http://10.0.0.1:7000: the Cargo store " \
        "needs app" in caplog.text and "a Captain sets them for its tasks" in caplog.text
    for argv in ([], ["--memory-store", "--storage-manager", "http://10.0.0.1:7000"]):
        with pytest.raises(SystemExit) as exit_info:
            face_task.main(argv)  # exactly one store must be chosen
        assert exit_info.value.code == 2
    assert "argument --storage-manager: expected exactly one store" in capsys.readouterr().err


def test_the_cargo_reads_the_workloads_record_format() -> None:
    from nodes.armada.cargo.codec import pack_records, unpack_records
    from workloads.armada_face_descriptors import encode_records, initial_records

    records = initial_records(0)[:5]
    ids = [r[0] for r in records]
    vectors = np.stack([np.asarray(r[1], dtype=float) for r in records])
    raw = encode_records(records)
    assert pack_records(ids, vectors) == raw
    back = unpack_records(raw, 128)
    assert [i for i, _ in back] == ids
    assert np.array_equal(np.frombuffer(back[0][1], "<f8"), vectors[0])


async def test_the_task_reads_and_writes_through_the_cargo_replicas(
        frames: FaceFrames, tmp_path: Any) -> None:
    """The Cargo-backed store end to end: a storage layer of three Cargos holding known
    faces (strong consistency); an unknown face is written on a miss and recognised next."""
    from tests.unit.test_armada_storage import storage_layer

    known = initial_records(SEED)[:20]
    async with storage_layer(tmp_path) as layer:
        await layer.add_cargos([(f"c{k}", where) for k, where in
                                enumerate(((40.0, -88.0), (40.1, -88.1), (40.2, -88.2)))])
        body = {"app": "faces", "locations": [{"lat": 40.0, "lon": -88.0}],
                "consistency": "strong",
                "source": {"kind": "inline", "records": [
                    {"id": i, "vector": np.asarray(v, dtype=float).tolist()} for i, v in known]}}
        async with layer.http.post(f"{layer.url}/storage", json=body) as resp:
            assert resp.status in (200, 201), await resp.text()
        await await_until(lambda: _ready(layer, "faces", 3))
        factory = cargo_store_factory(layer.url, "faces", 40.0, -88.0)
        async with TestClient(TestServer(make_app(factory, op="read-write",
                                                  model_seed=SEED))) as client:
            hit = await recognise(client, frames[0], 7, 500)
            assert hit["recognised"] and hit["matched_id"] == 7
            miss = await recognise(client, frames[1], 1500, 501)
            assert not miss["recognised"] and miss["inserted"]
            again = await recognise(client, frames[2], 1500, 502)
            assert again["recognised"] and again["matched_id"] == 1500
            assert again["read_ms"] > 0 and miss["write_ms"] > 0


async def _ready(layer: Any, app: str, n: int) -> bool:
    alloc = await layer.allocation(app)
    return sum(r.get("state") == "ready" for r in alloc.get("replicas", [])) >= n
