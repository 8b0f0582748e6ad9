"""The face-recognition workload's face frames: JPEG frames that each show a face the
bundled frontal-face Haar cascade detects, and that cascade with the workload's settings.

A face-recognition task detects the face in every frame it is sent before it computes the
face's descriptor (:mod:`workloads.armada_face_descriptors`), so the frames must hold faces
the task's detector finds:

* **Face detection** (:class:`FaceCascade`, :func:`overlap`): the frontal-face cascade
  bundled with OpenCV and the ``detectMultiScale`` settings the frame builder and the face
  task share.
* **Face frames** (:class:`FaceFrameSpec`, :func:`build_face_frames`,
  :func:`load_face_frames`): frames cut around the faces of Debian's ``opencv-doc`` sample
  media (:data:`FACE_SOURCES`; nothing is downloaded), each checked with the cascade, and
  cached beside the object-detection frames (:mod:`workloads.armada_frames`).

OpenCV is imported only when frames are built or detected, so checking a
:class:`FaceFrameSpec` (the generator does) needs no OpenCV. ``docs/face_recognition.md``
describes the workload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from testbed.checks import is_int
from testbed.errors import TestbedError
from workloads.armada_frames import (
    FrameSequence,
    FramesUnavailable,
    cache_dir,
    data_dir,
    encode_jpeg,
    import_cv2,
    manifest_entry,
    manifest_header,
    read_cached_set,
    write_cached_set,
)

# --- face detection --------------------------------------------------------------------

#: The frontal-face cascade bundled with the OpenCV wheel (``cv2.data.haarcascades``).
CASCADE_FILE = "haarcascade_frontalface_default.xml"
#: ``detectMultiScale`` settings, shared by the frame builder and the face task: pyramid
#: scale 1.1, 5 neighbours (3 lets through hair and shirt patterns), faces >= 30 px.
SCALE_FACTOR = 1.1
MIN_NEIGHBOURS = 5
MIN_FACE_PX = 30

Box = tuple[int, int, int, int]


class FaceCascade:
    """The bundled frontal-face Haar cascade with this workload's settings.

    One instance is not safe to share between threads; build one per thread.
    """

    def __init__(self) -> None:
        cv2 = import_cv2()
        self._cv2 = cv2
        path = cv2.data.haarcascades + CASCADE_FILE
        self._cascade = cv2.CascadeClassifier(path)
        if self._cascade.empty():
            raise FramesUnavailable(f"{path}: OpenCV could not load this cascade")

    def detect(self, image: np.ndarray) -> list[Box]:
        """Faces in the BGR ``image`` as ``(x, y, w, h)``, largest first.

        The cascade runs on the histogram-equalised grey image. Ties in area keep the
        cascade's order, so the result is deterministic.
        """
        cv2 = self._cv2
        grey = cv2.equalizeHist(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY))
        rects = self._cascade.detectMultiScale(
            grey, scaleFactor=SCALE_FACTOR, minNeighbors=MIN_NEIGHBOURS,
            minSize=(MIN_FACE_PX, MIN_FACE_PX),
        )
        boxes = [tuple(int(v) for v in r) for r in np.asarray(rects).reshape(-1, 4)]
        return sorted(boxes, key=lambda b: -b[2] * b[3])  # type: ignore[return-value]


def overlap(a: Box, b: Box) -> float:
    """Intersection over union of two ``(x, y, w, h)`` boxes."""
    ix = max(0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


# --- face frames -------------------------------------------------------------------------


@dataclass(frozen=True)
class FaceSource:
    """One face in the sample media: ``file`` (``frame`` for a video) and its box.

    The boxes are what the cascade (:class:`FaceCascade`) found in a survey of the
    media; they anchor the crops and every built frame is checked again.
    """

    file: str
    frame: int | None
    box: Box


MEGAMIND = "Megamind.avi"
_MEGAMIND_FACES: tuple[tuple[int, Box], ...] = (
    (3, (211, 173, 152, 152)), (12, (259, 186, 188, 188)), (21, (261, 193, 183, 183)),
    (33, (238, 189, 134, 134)), (39, (218, 170, 162, 162)), (45, (210, 170, 178, 178)),
    (51, (214, 180, 180, 180)), (87, (263, 166, 147, 147)), (90, (247, 160, 143, 143)),
    (111, (366, 137, 185, 185)), (123, (376, 158, 186, 186)), (132, (409, 174, 142, 142)),
    (144, (393, 165, 188, 188)), (150, (386, 166, 198, 198)), (156, (209, 157, 172, 172)),
    (162, (197, 144, 173, 173)), (168, (192, 149, 176, 176)), (174, (186, 155, 192, 192)),
    (180, (203, 126, 220, 220)), (186, (270, 173, 157, 157)), (192, (274, 174, 169, 169)),
    (201, (222, 71, 331, 331)), (210, (224, 74, 329, 329)), (219, (216, 63, 340, 340)),
    (228, (223, 66, 330, 330)), (234, (226, 112, 284, 284)), (240, (237, 102, 279, 279)),
    (246, (257, 67, 277, 277)), (252, (261, 62, 269, 269)), (258, (257, 41, 297, 297)),
)
#: Every face the frames are cut from: three photos of real people, then 30 frames of
#: ``Megamind.avi`` (an animated trailer: two characters, frontal, 134-340 px faces).
FACE_SOURCES: tuple[FaceSource, ...] = (
    FaceSource("messi5.jpg", None, (225, 94, 38, 38)),
    FaceSource("basketball1.png", None, (72, 91, 41, 41)),
    FaceSource("basketball2.png", None, (73, 91, 38, 38)),
    *(FaceSource(MEGAMIND, frame, box) for frame, box in _MEGAMIND_FACES),
)
#: Most face frames one set may hold.
MAX_FACE_FRAMES = 1000
FACE_MIN_SIDE, FACE_MAX_SIDE = 128, 1280
#: How a crop varies: the face's share of the frame height is ``1 / zoom``, its centre
#: is moved by up to ``SHIFT`` of the frame size, contrast and brightness change by
#: ``CONTRAST`` and ``BRIGHTNESS``, and half the crops (at random) are mirrored.
ZOOM = (1.6, 3.0)
SHIFT = 0.15
CONTRAST = (0.8, 1.2)
BRIGHTNESS = (-25.0, 25.0)
#: A built frame is kept when the largest face the cascade finds in it overlaps (IoU >=
#: this) the place the source face was put, so that face is the frame's subject; a frame
#: failing this is drawn again. Smaller detections may remain (Megamind's background
#: diners, at times a false positive).
MIN_OVERLAP = 0.4
MAX_ATTEMPTS = 8
#: Seeds the crop variations (fixed: the frames are the same for every workload seed).
FRAMES_SEED = 20_240_601
FACES_FORMAT = 1


@dataclass(frozen=True)
class FaceFrameSpec:
    """How many face frames to build and how: ``width x height``, ``count``, ``quality``."""

    width: int = 320
    height: int = 240
    count: int = 100
    quality: int = 85

    def __post_init__(self) -> None:
        self.check(asdict(self))

    @staticmethod
    def check(raw: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` (``images.<field>: expected ..., found ...``)."""
        known = [f.name for f in fields(FaceFrameSpec)]
        for name in raw:
            if name not in known:
                raise ValueError(
                    f"images.{name}: expected one of the fields {', '.join(known)}, "
                    f"found an unknown field"
                )
        bounds = {
            "width": (FACE_MIN_SIDE, FACE_MAX_SIDE),
            "height": (FACE_MIN_SIDE, FACE_MAX_SIDE),
            "count": (1, MAX_FACE_FRAMES),
            "quality": (10, 100),
        }
        for name, (lo, hi) in bounds.items():
            value = raw.get(name, lo)
            if not is_int(value) or not lo <= value <= hi:
                raise ValueError(
                    f"images.{name}: expected an integer in [{lo}, {hi}], found {value!r}"
                )
        width, height = raw.get("width", 320), raw.get("height", 240)
        if not 0.5 <= width / height <= 2.0:
            raise ValueError(
                f"images.width: expected width / height in [0.5, 2], found {width}x{height}"
            )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> FaceFrameSpec:
        """A spec from a (scenario) mapping; absent fields take their defaults."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"images: expected a mapping, found {raw!r}")  # noqa: TRY004 - the generator contract
        cls.check(raw)
        return cls(**raw)

    def key(self) -> str:
        """A short digest naming this spec's cache folder."""
        text = json.dumps({"kind": "faces", "format": FACES_FORMAT, **asdict(self)},
                          sort_keys=True)
        return "faces-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class FaceFrames(FrameSequence):
    """Built face frames: JPEG bytes, the source of each and where its face was put."""

    spec: FaceFrameSpec
    frames: tuple[bytes, ...]
    sources: tuple[int, ...]
    faces: tuple[Box, ...]
    folder: Path | None = None


def _read_sources(cv2: Any, media: Path) -> list[np.ndarray]:
    """The image behind every :data:`FACE_SOURCES` entry (BGR), in that order."""
    names = sorted({s.file for s in FACE_SOURCES})
    for name in names:
        if not (media / name).is_file():
            raise FramesUnavailable(
                f"{media / name}: sample media not found; install Debian's opencv-doc "
                f"package (apt-get install opencv-doc, which setup.sh does) or point "
                f"$TESTBED_OPENCV_DATA at a folder holding {', '.join(names)}"
            )
    wanted = {s.frame for s in FACE_SOURCES if s.file == MEGAMIND}
    video: dict[int, np.ndarray] = {}
    capture = cv2.VideoCapture(str(media / MEGAMIND))
    if not capture.isOpened():
        raise FramesUnavailable(f"{media / MEGAMIND}: OpenCV cannot open this video")
    try:
        for index in range(max(f for f in wanted if f is not None) + 1):
            ok, image = capture.read()
            if not ok:
                raise FramesUnavailable(f"{media / MEGAMIND}: the video ends at frame {index}")
            if index in wanted:
                video[index] = image
    finally:
        capture.release()
    images = []
    for source in FACE_SOURCES:
        if source.frame is not None:
            images.append(video[source.frame])
            continue
        image = cv2.imread(str(media / source.file), cv2.IMREAD_COLOR)
        if image is None:
            raise FramesUnavailable(f"{media / source.file}: OpenCV cannot decode this image")
        images.append(image)
    return images


def _crop(
    cv2: Any, image: np.ndarray, box: Box, spec: FaceFrameSpec, rng: np.random.Generator
) -> tuple[np.ndarray, Box]:
    """One variation of the face ``box`` of ``image``: the frame and the face's box in it."""
    rows, cols = image.shape[:2]
    x, y, w, h = box
    zoom = rng.uniform(*ZOOM)
    shift_x, shift_y = rng.uniform(-SHIFT, SHIFT, size=2)
    alpha, beta = rng.uniform(*CONTRAST), rng.uniform(*BRIGHTNESS)
    mirror = bool(rng.integers(2))
    win_h = h * zoom
    win_w = win_h * spec.width / spec.height
    shrink = min(1.0, cols / win_w, rows / win_h)  # a window larger than the image
    win_w, win_h = win_w * shrink, win_h * shrink
    centre_x = x + w / 2 - shift_x * win_w
    centre_y = y + h / 2 - shift_y * win_h
    left = min(max(0.0, centre_x - win_w / 2), cols - win_w)
    top = min(max(0.0, centre_y - win_h / 2), rows - win_h)
    left_px, top_px = round(left), round(top)
    right_px = min(cols, left_px + max(1, round(win_w)))
    bottom_px = min(rows, top_px + max(1, round(win_h)))
    window = image[top_px:bottom_px, left_px:right_px]
    scale_x = spec.width / window.shape[1]
    scale_y = spec.height / window.shape[0]
    enlarge = scale_x > 1
    interpolation = cv2.INTER_CUBIC if enlarge else cv2.INTER_AREA
    frame = cv2.resize(window, (spec.width, spec.height), interpolation=interpolation)
    frame = cv2.convertScaleAbs(frame, alpha=alpha, beta=beta)
    face_x = round((x - left_px) * scale_x)
    face = (face_x, round((y - top_px) * scale_y), round(w * scale_x), round(h * scale_y))
    if mirror:
        frame = cv2.flip(frame, 1)
        face = (spec.width - face[0] - face[2], face[1], face[2], face[3])
    return frame, face


def build_face_frames(spec: FaceFrameSpec, media: Path | None = None) -> FaceFrames:
    """Build the face frames of ``spec`` (no cache involved).

    Frame ``k`` is cut from source ``k mod len(FACE_SOURCES)``: a window around the
    source face, zoomed, shifted, contrast-changed and possibly mirrored as drawn from
    ``SeedSequence(FRAMES_SEED, spawn_key=(k, attempt))``, resized to ``width x height``
    and JPEG-encoded. The encoded frame is decoded again and kept only if the largest
    face the cascade finds in it is where the source face was put (:data:`MIN_OVERLAP`);
    otherwise the next attempt is drawn.
    Raises :class:`FramesUnavailable` for missing media or OpenCV and
    :class:`TestbedError` if a frame fails :data:`MAX_ATTEMPTS` times.
    """
    cv2 = import_cv2()
    images = _read_sources(cv2, data_dir() if media is None else media)
    cascade = FaceCascade()
    frames: list[bytes] = []
    sources: list[int] = []
    faces: list[Box] = []
    for k in range(spec.count):
        index = k % len(FACE_SOURCES)
        source = FACE_SOURCES[index]
        for attempt in range(MAX_ATTEMPTS):
            rng = np.random.default_rng(np.random.SeedSequence(FRAMES_SEED, spawn_key=(k, attempt)))
            frame, face = _crop(cv2, images[index], source.box, spec, rng)
            data = encode_jpeg(cv2, frame, spec.quality, "face frame")
            decoded = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
            found = cascade.detect(decoded)
            if found and overlap(face, found[0]) >= MIN_OVERLAP:
                frames.append(data)
                sources.append(index)
                faces.append(face)
                break
        else:
            raise TestbedError(
                f"face frame {k} ({source.file}"
                f"{'' if source.frame is None else f' frame {source.frame}'}): the cascade "
                f"found no face in {MAX_ATTEMPTS} crops; try a larger width x height"
            )
    return FaceFrames(spec, tuple(frames), tuple(sources), tuple(faces))


#: Most face frame sets kept in the cache folder (the least recently written go first).
MAX_CACHED_FACE_SETS = 4


def _read_cached_faces(folder: Path, spec: FaceFrameSpec, version: str) -> FaceFrames | None:
    """The face frames cached in ``folder`` if its manifest matches ``spec``, else None."""
    cached = read_cached_set(folder, manifest_header(FACES_FORMAT, version, spec))
    if cached is None:
        return None
    entries, frames = cached
    sources: list[int] = []
    faces: list[Box] = []
    try:
        for entry in entries:
            sources.append(int(entry["source"]))
            x, y, w, h = (int(v) for v in entry["face"])
            faces.append((x, y, w, h))
    except (ValueError, KeyError, TypeError):
        return None
    if len(frames) != spec.count:
        return None
    return FaceFrames(spec, tuple(frames), tuple(sources), tuple(faces), folder)


def _write_cached_faces(root: Path, frames: FaceFrames, version: str) -> Path:
    """Write a face set atomically (temporary folder, then rename) and prune old ones."""
    manifest = {
        **manifest_header(FACES_FORMAT, version, frames.spec),
        "files": [
            {**manifest_entry(k, data, "face"), "source": source, "face": list(face)}
            for k, (data, source, face) in enumerate(
                zip(frames.frames, frames.sources, frames.faces, strict=True))
        ],
    }
    return write_cached_set(root, frames.spec.key(), manifest, frames.frames,
                            MAX_CACHED_FACE_SETS, lambda p: p.name.startswith("faces-"))


def load_face_frames(
    spec: FaceFrameSpec | None = None, *, cache: Path | None = None, media: Path | None = None
) -> FaceFrames:
    """The face frames of ``spec`` (default :class:`FaceFrameSpec`), cached when possible.

    The cache is the object-detection frames' folder (:func:`workloads.armada_frames.cache_dir`,
    or ``cache``), one ``faces-<digest>`` sub-folder per spec with a ``manifest.json``
    recording the spec, the OpenCV version, and every file's sha256, source and face box;
    a set whose manifest does not match is built again. ``media`` overrides
    :func:`workloads.armada_frames.data_dir`. Raises :class:`FramesUnavailable` when the media or
    OpenCV is missing.
    """
    spec = FaceFrameSpec() if spec is None else spec
    root = cache_dir() if cache is None else cache
    version = str(import_cv2().__version__)
    cached = _read_cached_faces(root / spec.key(), spec, version)
    if cached is not None:
        return cached
    built = build_face_frames(spec, media)
    folder = _write_cached_faces(root, built, version)
    return FaceFrames(built.spec, built.frames, built.sources, built.faces, folder)
