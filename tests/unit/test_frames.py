"""Tests of the frame source (``workloads.armada_frames``) and the ``frame-stream`` generator.

Reading real frames needs Debian's ``opencv-doc`` (``setup.sh`` installs it); those
tests are skipped with the reason when it is absent. Everything else runs anywhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testbed.errors import TestbedError
from testbed.registry import generate, generators
from workloads import armada_frames as frames_module
from workloads.armada_frame_stream import DEFAULT_DEMAND_S, MAX_FPS
from workloads.armada_frames import (
    PHOTO_FILES,
    VIDEO_FILE,
    FrameSpec,
    FramesUnavailable,
    data_dir,
    encode_frames,
    load_frames,
)

needs_media = pytest.mark.skipif(
    not (data_dir() / VIDEO_FILE).is_file(),
    reason=f"{data_dir() / VIDEO_FILE} missing: Debian's opencv-doc package is not installed",
)
SMALL = FrameSpec(width=320, height=240, count=5, step=10)


def _shape(jpeg: bytes) -> tuple[int, ...]:
    import cv2

    image = cv2.imdecode(np.frombuffer(jpeg, dtype=np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return tuple(image.shape)


@needs_media
def test_frames_are_resized_jpegs_and_cached_deterministically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_frames(SMALL, cache=tmp_path)
    assert len(first) == 5
    assert all(f.startswith(b"\xff\xd8\xff") for f in first)
    assert {_shape(f) for f in first} == {(240, 320, 3)}
    assert len(set(first)) == 5  # different video frames
    assert first.folder == tmp_path / SMALL.key()
    assert list(first) == encode_frames(SMALL)  # same spec, same bytes

    def refuse(*_: object) -> list[bytes]:
        raise AssertionError("the cached set should have been used")

    monkeypatch.setattr(frames_module, "encode_frames", refuse)
    again = load_frames(SMALL, cache=tmp_path)
    assert again.frames == first.frames
    assert again.frame(7) == first[2]  # streams cycle through the set


@needs_media
def test_damaged_cache_is_re_encoded(tmp_path: Path) -> None:
    first = load_frames(SMALL, cache=tmp_path)
    assert first.folder is not None
    (first.folder / "frame_00002.jpg").write_bytes(b"damaged")
    assert load_frames(SMALL, cache=tmp_path).frames == first.frames
    assert (first.folder / "frame_00002.jpg").read_bytes() == first[2]


@needs_media
def test_cache_keeps_a_bounded_number_of_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frames_module, "MAX_CACHED_SETS", 2)
    for quality in (50, 60, 70):
        load_frames(FrameSpec(width=64, height=64, count=1, quality=quality), cache=tmp_path)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


@needs_media
def test_photos_source_cycles_through_the_photos(tmp_path: Path) -> None:
    spec = FrameSpec(source="photos", width=320, height=240, count=len(PHOTO_FILES) + 1)
    photos = load_frames(spec, cache=tmp_path)
    assert photos[0] == photos[len(PHOTO_FILES)]
    assert len(set(photos)) == len(PHOTO_FILES)
    assert {_shape(f) for f in photos} == {(240, 320, 3)}


@needs_media
def test_asking_past_the_end_of_the_video_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="the video ends at frame 795"):
        load_frames(FrameSpec(first=790, count=10, step=1), cache=tmp_path)


def test_missing_media_names_the_file_and_the_package(tmp_path: Path) -> None:
    with pytest.raises(FramesUnavailable, match=r"vtest\.avi.*opencv-doc"):
        load_frames(SMALL, cache=tmp_path / "cache", media=tmp_path)
    with pytest.raises(FramesUnavailable, match=r"messi5\.jpg.*opencv-doc"):
        encode_frames(FrameSpec(source="photos"), media=tmp_path)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"width": 4000}, r"frames\.width: expected an integer in \[64, 1920\], found 4000"),
        ({"count": 0}, r"frames\.count"),
        ({"quality": True}, r"frames\.quality"),
        ({"source": "camera"}, r"frames\.source: expected one of video, photos"),
        ({"colour": 1}, r"frames\.colour: expected one of the fields"),
    ],
)
def test_bad_specs_are_refused(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FrameSpec.from_mapping(raw)


def test_spec_key_depends_on_every_field() -> None:
    assert FrameSpec().key() == FrameSpec().key()
    assert FrameSpec().key() != FrameSpec(quality=81).key()


# ------------------------------------------------------------------ the generator


def test_frame_stream_sends_at_a_fixed_rate_per_client() -> None:
    params = {"fps": 10, "demand_s": 0.05}
    tasks = generate("frame-stream", params, ["a", "b"], 2.0, seed=7)
    assert [t.task_id for t in tasks] == list(range(40))
    assert [t.arrival for t in tasks] == sorted(t.arrival for t in tasks)
    for client in ("a", "b"):
        arrivals = np.array([t.arrival for t in tasks if t.client == client])
        assert len(arrivals) == 20
        assert 0 <= arrivals[0] < 0.1
        assert np.allclose(np.diff(arrivals), 0.1)
    assert {(t.size, t.cls) for t in tasks} == {(0.05, "frame")}
    assert tasks == generate("frame-stream", params, ["a", "b"], 2.0, seed=7)
    assert tasks != generate("frame-stream", params, ["a", "b"], 2.0, seed=8)


def test_frame_stream_zero_phase_and_defaults() -> None:
    tasks = generate("frame-stream", {"fps": 30, "phase": "zero"}, ["a"], 1.0, 0)
    assert len(tasks) == 30
    assert tasks[0].arrival == 0.0
    assert tasks[0].size == DEFAULT_DEMAND_S
    assert generators()["frame-stream"].min_service_time({"fps": 1}) == DEFAULT_DEMAND_S


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "params.fps: expected a number in"),
        ({"fps": MAX_FPS + 1}, r"params\.fps: expected a number in \(0, 30\], found 31"),
        ({"fps": 0}, "params.fps"),
        ({"fps": 10, "demand_s": 0}, "params.demand_s"),
        ({"fps": 10, "phase": "late"}, "params.phase"),
        ({"fps": 10, "frames": {"width": 5}}, r"params\.frames\.width"),
        ({"fps": 10, "rate": 3}, "params.rate: expected one of the fields"),
        ({"fps": 10, "matrix_samples": 101},
         r"params\.matrix_samples: expected an integer in \[0, 100\], found 101"),
        ({"fps": 10, "matrix_samples": True}, r"params\.matrix_samples"),
    ],
)
def test_frame_stream_refuses_bad_params(params: dict[str, object], message: str) -> None:
    with pytest.raises(TestbedError, match=message):
        generate("frame-stream", params, ["a"], 1.0, 0)
