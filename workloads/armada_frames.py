"""Real camera frames for the object-detection workload, JPEG-encoded and cached on disk.

Nothing is downloaded: frames come from the sample media of Debian's ``opencv-doc``
package (``/usr/share/doc/opencv-doc/examples/data``), which ``setup.sh`` installs:

* ``video`` (the default): ``vtest.avi``, 795 frames of a pedestrian scene at 768x576 and
  10 fps; frames ``first, first + step, ...`` are taken, ``count`` of them.
* ``photos``: three still photos with people in them (``messi5.jpg``,
  ``basketball1.png``, ``basketball2.png``), repeated in that order up to ``count``.

Every frame is centre-cropped to the aspect ratio of ``width x height``, resized with
area interpolation and JPEG-encoded at ``quality``. The same :class:`FrameSpec` and
OpenCV version give the same bytes, so a set is encoded once and kept under a cache
folder (``$TESTBED_FRAME_CACHE``, else ``$XDG_CACHE_HOME/edge-testbed/frames``, else
``~/.cache/edge-testbed/frames``) in a sub-folder named by a digest of the spec; a
``manifest.json`` there records the spec, the OpenCV version and every file's sha256,
and a set whose manifest does not match is re-encoded. At most :data:`MAX_FRAMES`
frames per set and :data:`MAX_CACHED_SETS` sets are kept (the least recently written
sets are removed first). The face-recognition frames
(:mod:`workloads.armada_face_frames`) are cached the same way, in the same folder, with the
helpers here (:func:`read_cached_set`, :func:`write_cached_set`, :func:`encode_jpeg`).

The media folder can be moved with ``$TESTBED_OPENCV_DATA``. OpenCV is imported only when
frames are encoded, so validating a spec (the workload generator does) needs no OpenCV.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from testbed.checks import is_int
from testbed.errors import TestbedError

DEFAULT_DATA_DIR = Path("/usr/share/doc/opencv-doc/examples/data")
DATA_DIR_ENV = "TESTBED_OPENCV_DATA"
CACHE_DIR_ENV = "TESTBED_FRAME_CACHE"
VIDEO_FILE = "vtest.avi"
PHOTO_FILES = ("messi5.jpg", "basketball1.png", "basketball2.png")
SOURCES = ("video", "photos")
#: Most frames one set may hold (and so the most a stream cycles through).
MAX_FRAMES = 300
#: Most frame sets kept in the cache folder.
MAX_CACHED_SETS = 16
MIN_SIDE, MAX_SIDE = 64, 1920
MANIFEST = "manifest.json"
#: Bumped whenever the encoding procedure changes, which invalidates cached sets.
FORMAT_VERSION = 1


class FramesUnavailable(TestbedError):
    """The sample media (Debian's ``opencv-doc``) or OpenCV itself is missing."""


def _int_in(raw: Mapping[str, Any], name: str, lo: int, hi: int) -> None:
    """Refuse ``raw[name]`` unless it is an integer in ``[lo, hi]``."""
    value = raw[name]
    if not is_int(value) or not lo <= value <= hi:
        raise ValueError(f"frames.{name}: expected an integer in [{lo}, {hi}], found {value!r}")


@dataclass(frozen=True)
class FrameSpec:
    """Which frames to produce and how: source, size, count, sampling and JPEG quality.

    ``first`` and ``step`` select video frames (``first + k * step``); the photo source
    ignores them.
    """

    source: str = "video"
    width: int = 640
    height: int = 480
    count: int = 60
    first: int = 0
    step: int = 4
    quality: int = 80

    def __post_init__(self) -> None:
        self.check(asdict(self))

    @staticmethod
    def check(raw: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` (``frames.<field>: expected ..., found ...``)."""
        known = [f.name for f in fields(FrameSpec)]
        for name in raw:
            if name not in known:
                raise ValueError(
                    f"frames.{name}: expected one of the fields {', '.join(known)}, "
                    f"found an unknown field"
                )
        if "source" in raw and raw["source"] not in SOURCES:
            raise ValueError(
                f"frames.source: expected one of {', '.join(SOURCES)}, found {raw['source']!r}"
            )
        bounds = {
            "width": (MIN_SIDE, MAX_SIDE),
            "height": (MIN_SIDE, MAX_SIDE),
            "count": (1, MAX_FRAMES),
            "first": (0, 100_000),
            "step": (1, 100),
            "quality": (10, 100),
        }
        for name, (lo, hi) in bounds.items():
            if name in raw:
                _int_in(raw, name, lo, hi)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> FrameSpec:
        """A spec from a (scenario) mapping; absent fields take their defaults."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"frames: expected a mapping, found {raw!r}")  # noqa: TRY004 - the generator contract
        cls.check(raw)
        return cls(**raw)

    def key(self) -> str:
        """A short digest naming this spec's cache folder."""
        text = json.dumps({"format": FORMAT_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class FrameSequence(Sequence[bytes]):
    """A sequence of JPEG frames held in ``frames``; :meth:`frame` cycles through it."""

    frames: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        return self.frames[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.frames)

    def frame(self, index: int) -> bytes:
        """Frame ``index`` of an endless stream cycling through the set."""
        return self.frames[index % len(self.frames)]


@dataclass(frozen=True)
class FrameSet(FrameSequence):
    """An ordered set of JPEG frames; :meth:`frame` cycles through it endlessly."""

    spec: FrameSpec
    frames: tuple[bytes, ...]
    folder: Path | None = None


def data_dir() -> Path:
    """The folder holding the sample media (``$TESTBED_OPENCV_DATA`` or Debian's)."""
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def cache_dir() -> Path:
    """The default frame cache folder (see the module docstring)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "edge-testbed" / "frames"


def source_files(spec: FrameSpec, media: Path | None = None) -> list[Path]:
    """The media files ``spec`` reads, or :class:`FramesUnavailable` naming a missing one."""
    folder = data_dir() if media is None else media
    names = [VIDEO_FILE] if spec.source == "video" else list(PHOTO_FILES)
    paths = [folder / name for name in names]
    for path in paths:
        if not path.is_file():
            raise FramesUnavailable(
                f"{path}: sample media not found; install Debian's opencv-doc package "
                f"(apt-get install opencv-doc, which setup.sh does) or point "
                f"${DATA_DIR_ENV} at a folder holding {', '.join(names)}"
            )
    return paths


def import_cv2() -> Any:
    """Import OpenCV, or explain how to get it (:class:`FramesUnavailable`)."""
    try:
        import cv2  # optional heavy dependency, only needed to encode, build or detect
    except ImportError as exc:
        raise FramesUnavailable(
            f"OpenCV is not importable ({exc}); install opencv-python-headless<5"
        ) from exc
    return cv2


def encode_jpeg(cv2: Any, image: Any, quality: int, what: str = "frame") -> bytes:
    """``image`` (BGR) JPEG-encoded at ``quality``; :class:`TestbedError` naming ``what``."""
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        rows, cols = image.shape[:2]
        raise TestbedError(f"OpenCV failed to JPEG-encode a {cols}x{rows} {what}")
    return data.tobytes()


def _fit(cv2: Any, image: Any, width: int, height: int) -> Any:
    """Centre-crop ``image`` to the aspect ratio ``width:height`` and resize it."""
    rows, cols = image.shape[:2]
    if cols * height > rows * width:  # too wide: crop columns
        keep = max(1, round(rows * width / height))
        left = (cols - keep) // 2
        image = image[:, left : left + keep]
    elif cols * height < rows * width:  # too tall: crop rows
        keep = max(1, round(cols * height / width))
        top = (rows - keep) // 2
        image = image[top : top + keep]
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)


def _read_video(cv2: Any, path: Path, spec: FrameSpec) -> list[Any]:
    """Decode frames ``first + k * step`` (k < count) of the video at ``path``."""
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        raise FramesUnavailable(f"{path}: OpenCV cannot open this video")
    wanted = {spec.first + k * spec.step for k in range(spec.count)}
    last = max(wanted)
    images: list[Any] = []
    try:
        for index in range(last + 1):
            ok, image = capture.read()
            if not ok:
                raise TestbedError(
                    f"{path}: the video ends at frame {index}, but frames.first + "
                    f"(count - 1) * step = {last}; lower count, step or first"
                )
            if index in wanted:
                images.append(image)
    finally:
        capture.release()
    return images


def encode_frames(spec: FrameSpec, media: Path | None = None) -> list[bytes]:
    """Read, resize and JPEG-encode the frames of ``spec`` (no cache involved)."""
    paths = source_files(spec, media)
    cv2 = import_cv2()
    if spec.source == "video":
        images = _read_video(cv2, paths[0], spec)
    else:
        photos = []
        for path in paths:
            image = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if image is None:
                raise FramesUnavailable(f"{path}: OpenCV cannot decode this image")
            photos.append(image)
        images = [photos[k % len(photos)] for k in range(spec.count)]
    return [encode_jpeg(cv2, _fit(cv2, image, spec.width, spec.height), spec.quality)
            for image in images]


def manifest_header(file_format: int, version: str, spec: Any) -> dict[str, Any]:
    """What a cached set's ``manifest.json`` records before its files: the cache format,
    the OpenCV version and the spec (a dataclass); a set is reused only if all match."""
    return {"format": file_format, "opencv": version, "spec": asdict(spec)}


def manifest_entry(k: int, data: bytes, prefix: str = "frame") -> dict[str, Any]:
    """A cached frame's ``manifest.json`` entry: its file name and sha256."""
    return {"name": f"{prefix}_{k:05d}.jpg", "sha256": hashlib.sha256(data).hexdigest()}


def read_cached_set(
    folder: Path, header: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[bytes]] | None:
    """The manifest entries and frames of the set cached in ``folder``, or None.

    None when the folder or its ``manifest.json`` is missing or unreadable, when the
    manifest does not hold every key of ``header`` (format, OpenCV version, spec) with
    that value, or when a file is missing or its sha256 differs from the manifest's.
    """
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        if any(manifest.get(key) != value for key, value in header.items()):
            return None
        entries, frames = manifest["files"], []
        for entry in entries:
            data = (folder / entry["name"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                return None
            frames.append(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return entries, frames


def write_cached_set(
    root: Path, key: str, manifest: dict[str, Any], frames: Sequence[bytes],
    keep: int, family: Callable[[Path], bool],
) -> Path:
    """Write a set atomically (temporary folder, then rename) as ``root / key``; prune.

    ``manifest["files"]`` names each frame's file, in order. Of the sets under ``root``
    that ``family`` selects, the ``keep`` most recently written stay; the others (never
    this one) are removed.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    staging = root / f".{key}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for entry, data in zip(manifest["files"], frames, strict=True):
        (staging / entry["name"]).write_bytes(data)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    try:
        staging.rename(final)
    except OSError:  # another process cached the same set at the same moment
        shutil.rmtree(staging, ignore_errors=True)
    sets = [p for p in root.iterdir() if p.is_dir() and family(p)]
    sets.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in sets[keep:]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_frames(
    spec: FrameSpec | None = None, *, cache: Path | None = None, media: Path | None = None
) -> FrameSet:
    """The frames of ``spec`` (default :class:`FrameSpec`), from the cache when possible.

    ``cache`` overrides :func:`cache_dir`, ``media`` overrides :func:`data_dir`. Raises
    :class:`FramesUnavailable` when the media or OpenCV is missing.
    """
    spec = FrameSpec() if spec is None else spec
    root = cache_dir() if cache is None else cache
    header = manifest_header(FORMAT_VERSION, str(import_cv2().__version__), spec)
    folder = root / spec.key()
    cached = read_cached_set(folder, header)
    if cached is not None and len(cached[1]) == spec.count:
        return FrameSet(spec, tuple(cached[1]), folder)
    frames = encode_frames(spec, media)
    manifest = {**header, "files": [manifest_entry(k, data) for k, data in enumerate(frames)]}
    folder = write_cached_set(root, spec.key(), manifest, frames, MAX_CACHED_SETS,
                              lambda p: not p.name.startswith("."))
    return FrameSet(spec, tuple(frames), folder)

