"""The face-recognition workload: face frames, the identity model, records, the generator.

The storage experiments of the Armada paper run real-time face recognition: a task
detects the face in every frame, computes its 128-dimensional descriptor and then reads
(nearest-neighbour match) or writes (insert a labelled descriptor) the face data kept
by the storage layer. This module holds the pure parts of that workload:

* **Face frames** (:class:`FaceFrameSpec`, :func:`build_face_frames`,
  :func:`load_face_frames`): JPEG frames that each show at least one face the bundled
  frontal-face Haar cascade detects. The faces come from Debian's ``opencv-doc`` sample
  media (:data:`FACE_SOURCES`); nothing is downloaded.
* **The identity model** (:class:`IdentityModel`): no face-embedding model can be
  downloaded here, so descriptors are synthetic: identity ``i`` has a centre drawn from
  the seed, and every observation of it is that centre plus independent noise. The
  detection a task runs is real; the descriptor it attaches to the face is the model's.
* **Records** (:func:`encode_record`, :func:`decode_record`): the paper's ``<ID (8
  bytes), vector (128 x 8 bytes)>`` pairs, 1032 bytes each.
* **The initial data set** (:func:`initial_records`): 1000 labelled descriptors, one per
  known identity.
* **The generator** ``face-recognition`` (:class:`FaceRecognition`): the read-only,
  write-only and read-followed-by-write workloads of 1000 frames, with the identity and
  observation of every frame in a side file (:func:`write_plan`, :func:`read_plan`).

OpenCV is imported only when frames are built or detected, so validating params (the
generator does) needs no OpenCV. ``docs/face_recognition.md`` describes the workload.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from testbed.checks import is_int, is_number
from testbed.errors import TestbedError
from workloads.armada_frame_stream import PHASES, stream_phase
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
from workloads.trace import Task, read_side_file, write_side_file

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


# --- the identity model ------------------------------------------------------------------

DIM = 128
#: Spread of the identity centres and of one observation's noise, per component. With
#: them, two observations of one identity lie 0.399 +- 0.025 apart and observations of
#: two identities 1.038 +- 0.065 (Euclidean; mean +- sd), close to the scale of dlib's
#: face descriptors (whose customary threshold is 0.6).
CENTRE_SCALE = 0.06
NOISE_SCALE = 0.025
_CENTRES, _NOISE = 0, 1


def _chi(k: int) -> tuple[float, float]:
    """Mean and standard deviation of the chi distribution with ``k`` degrees of freedom."""
    mean = math.sqrt(2.0) * math.exp(math.lgamma((k + 1) / 2) - math.lgamma(k / 2))
    return mean, math.sqrt(max(0.0, k - mean * mean))


class IdentityModel:
    """Synthetic face descriptors: a centre per identity plus noise per observation.

    Identity ``i`` (``0 <= i < identities``) has the centre ``centre_scale * z`` with ``z``
    standard normal in ``dim`` dimensions, drawn from ``SeedSequence(seed, spawn_key=(0,
    i))``; its observation ``key`` (an integer >= 0: one photo of the person) is the
    centre plus ``noise_scale * z'`` drawn from ``SeedSequence(seed, spawn_key=(1, i,
    key))``. A descriptor therefore depends on ``(seed, identity, key)`` only, not on how
    many identities there are or which other descriptors were drawn.

    The Euclidean distance between two observations of one identity is ``sqrt(2) *
    noise_scale * chi_dim``; between observations of two identities it is ``sqrt(2 *
    (centre_scale**2 + noise_scale**2)) * chi_dim``. :attr:`threshold` lies the same
    number of standard deviations (:attr:`margin`) from both means.
    """

    def __init__(
        self,
        identities: int,
        dim: int = DIM,
        seed: int = 0,
        centre_scale: float = CENTRE_SCALE,
        noise_scale: float = NOISE_SCALE,
    ) -> None:
        for name, value in (("identities", identities), ("dim", dim), ("seed", seed)):
            if not is_int(value) or value < (name != "seed"):
                bound = 0 if name == "seed" else 1
                raise ValueError(f"{name}: expected an integer >= {bound}, found {value!r}")
        for name, scale in (("centre_scale", centre_scale), ("noise_scale", noise_scale)):
            if not is_number(scale, finite=True) or not scale > 0:
                raise ValueError(f"{name}: expected a finite number > 0, found {scale!r}")
        self.identities = identities
        self.dim = dim
        self.seed = seed
        self.centre_scale = float(centre_scale)
        self.noise_scale = float(noise_scale)
        self._centres: dict[int, np.ndarray] = {}

    def _check(self, identity: int, key: int) -> None:
        if not is_int(identity) or not 0 <= identity < self.identities:
            raise ValueError(
                f"identity: expected an integer in [0, {self.identities - 1}], found {identity!r}"
            )
        if not is_int(key) or key < 0:
            raise ValueError(f"observation key: expected an integer >= 0, found {key!r}")

    def centre(self, identity: int) -> np.ndarray:
        """The centre of ``identity`` (a read-only float64 vector of length ``dim``)."""
        self._check(identity, 0)
        centre = self._centres.get(int(identity))
        if centre is None:
            seq = np.random.SeedSequence(self.seed, spawn_key=(_CENTRES, int(identity)))
            centre = self.centre_scale * np.random.default_rng(seq).standard_normal(self.dim)
            centre.flags.writeable = False
            self._centres[int(identity)] = centre
        return centre

    def descriptor(self, identity: int, observation_key: int) -> np.ndarray:
        """Observation ``observation_key`` of ``identity``: a new float64 vector."""
        self._check(identity, observation_key)
        seq = np.random.SeedSequence(
            self.seed, spawn_key=(_NOISE, int(identity), int(observation_key))
        )
        noise = self.noise_scale * np.random.default_rng(seq).standard_normal(self.dim)
        return self.centre(identity) + noise

    def _moments(self) -> tuple[float, float, float, float]:
        """Mean and sd of same-identity, then different-identity, distances."""
        mean, sd = _chi(self.dim)
        same = math.sqrt(2.0) * self.noise_scale
        other = math.sqrt(2.0 * (self.centre_scale**2 + self.noise_scale**2))
        return same * mean, same * sd, other * mean, other * sd

    @property
    def threshold(self) -> float:
        """The recommended match threshold (Euclidean distance; a match is ``<=``)."""
        same_mean, same_sd, other_mean, other_sd = self._moments()
        return (same_mean * other_sd + other_mean * same_sd) / (same_sd + other_sd)

    @property
    def margin(self) -> float:
        """How many standard deviations :attr:`threshold` lies from both distance means."""
        same_mean, same_sd, _, _ = self._moments()
        return (self.threshold - same_mean) / same_sd


#: The default model's threshold (``IdentityModel(1).threshold``), about 0.577.
THRESHOLD = IdentityModel(1).threshold


# --- records -------------------------------------------------------------------------------

ID_BYTES = 8
RECORD_BYTES = ID_BYTES + DIM * 8
MAX_ID = 2**64 - 1
_ID = struct.Struct(">Q")
_VECTOR = np.dtype("<f8")


def _vector(vector: Any) -> np.ndarray:
    """``vector`` as a finite float64 array of length :data:`DIM`, or :class:`ValueError`."""
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"record vector: expected {DIM} numbers, found {exc}") from None
    if array.ndim != 1 or array.size != DIM:
        raise ValueError(f"record vector: expected {DIM} numbers, found shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(
            f"record vector: expected finite numbers, found {array[bad[0]]} at index {bad[0]}"
        )
    return array


def encode_record(record_id: int, vector: Any) -> bytes:
    """``<ID, vector>`` as 1032 bytes: the ID as an 8-byte big-endian unsigned integer,
    then :data:`DIM` little-endian float64 values.

    Raises :class:`ValueError` naming what is wrong (an ID out of ``[0, 2**64 - 1]``, a
    vector of another length or with a non-finite value).
    """
    if not is_int(record_id) or not 0 <= record_id <= MAX_ID:
        raise ValueError(f"record id: expected an integer in [0, 2**64 - 1], found {record_id!r}")
    return _ID.pack(int(record_id)) + _vector(vector).astype(_VECTOR).tobytes()


def decode_record(data: bytes) -> tuple[int, np.ndarray]:
    """The ``(id, vector)`` of one 1032-byte record; :class:`ValueError` if malformed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"record: expected bytes, found {type(data).__name__}")  # noqa: TRY004 - one error type for callers
    if len(data) != RECORD_BYTES:
        raise ValueError(f"record: expected {RECORD_BYTES} bytes, found {len(data)}")
    (record_id,) = _ID.unpack_from(data)
    vector = np.frombuffer(data, dtype=_VECTOR, offset=ID_BYTES).astype(np.float64)
    return record_id, _vector(vector)


def encode_records(records: Iterable[tuple[int, Any]]) -> bytes:
    """Records one after another (a data-set file: ``n * 1032`` bytes, no header)."""
    return b"".join(encode_record(record_id, vector) for record_id, vector in records)


def decode_records(data: bytes) -> list[tuple[int, np.ndarray]]:
    """Every record of :func:`encode_records` output; :class:`ValueError` naming the
    record (by index) that is malformed, or a length that is not a multiple of 1032."""
    if len(data) % RECORD_BYTES:
        raise ValueError(
            f"records: expected a multiple of {RECORD_BYTES} bytes, found {len(data)}"
        )
    view = memoryview(data)
    out = []
    for index in range(len(data) // RECORD_BYTES):
        try:
            out.append(decode_record(view[index * RECORD_BYTES : (index + 1) * RECORD_BYTES]))
        except ValueError as exc:
            raise ValueError(f"records[{index}]: {exc}") from None
    return out


# --- the initial data set ------------------------------------------------------------------

#: Labelled descriptors every data replica starts with (the paper's 1000).
INITIAL_RECORDS = 1000
#: The observation key of the initial descriptors; frame ``k`` of a trace is observation
#: ``k + 1`` (:class:`FacePlan`'s ``observation``), so no frame repeats an initial one.
INITIAL_KEY = 0


def initial_records(
    seed: int, count: int = INITIAL_RECORDS, model: IdentityModel | None = None
) -> list[tuple[int, np.ndarray]]:
    """The initial data set: one labelled descriptor for each identity ``0 .. count-1``.

    Record ``i`` is ``(i, model.descriptor(i, INITIAL_KEY))``: the ID of a record is the
    identity it shows. Identities ``>= count`` are unknown to the store until a write
    inserts them. ``model`` defaults to ``IdentityModel(count, seed=seed)``; a given
    model must have that seed and at least ``count`` identities.
    """
    if not is_int(count) or count < 1:
        raise ValueError(f"count: expected an integer >= 1, found {count!r}")
    model = IdentityModel(count, seed=seed) if model is None else model
    if model.seed != seed or model.identities < count:
        raise ValueError(
            f"model: expected seed {seed} and >= {count} identities, found seed "
            f"{model.seed} and {model.identities} identities"
        )
    return [(i, model.descriptor(i, INITIAL_KEY)) for i in range(count)]


# --- the generator -------------------------------------------------------------------------

MODES = ("read", "write", "read-write")
MAX_FPS = 30.0
MAX_TRACE_FRAMES = 100_000
MAX_IDENTITIES = 10_000_000
DEFAULT_FPS = 5.0
#: The nominal compute demand of one frame: decoding and the face cascade on a 320x240
#: face frame, CPU seconds on one core of the development host (docs/face_recognition.md).
DEFAULT_DEMAND_S = 0.03
#: The share of frames showing a known identity when ``known_share`` is not given.
DEFAULT_KNOWN_SHARE = {"read": 1.0, "write": 0.0, "read-write": 0.5}
DEFAULTS: dict[str, Any] = {
    "mode": None,
    "frames": 1000,
    "fps": DEFAULT_FPS,
    "phase": "random",
    "identities": 2000,
    "initial": INITIAL_RECORDS,
    "known_share": None,
    "demand_s": DEFAULT_DEMAND_S,
    "images": {},
}
PLAN_NAME = "face_recognition.json"
PLAN_FORMAT = 1
_PLAN, _PHASES = 2, 3


def _integer(params: Mapping[str, Any], key: str, low: int, high: int) -> int:
    value = params.get(key, DEFAULTS[key])
    if not is_int(value) or not low <= value <= high:
        raise ValueError(f"params.{key}: expected an integer in [{low}, {high}], found {value!r}")
    return value


def _number(params: Mapping[str, Any], key: str, low: float, high: float, *,
            open_low: bool) -> float:
    value = params.get(key, DEFAULTS[key])
    ok = (
        is_number(value, finite=True)
        and (low < value if open_low else low <= value)
        and value <= high
    )
    if not ok:
        bounds = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise ValueError(f"params.{key}: expected a number in {bounds}, found {value!r}")
    return float(value)


def normalised(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every default filled in (params must be valid)."""
    out = dict(DEFAULTS)
    out.update(params)
    if out["known_share"] is None:
        out["known_share"] = DEFAULT_KNOWN_SHARE[out["mode"]]
    for key in ("fps", "known_share", "demand_s"):
        out[key] = float(out[key])
    out["images"] = asdict(FaceFrameSpec.from_mapping(out["images"]))
    return out


@dataclass(frozen=True, eq=False)
class FacePlan:
    """What every frame of a face-recognition trace shows, indexed by task id.

    ``identity[k]`` is the person in task ``k``'s frame, ``observation[k]`` the
    observation key of its descriptor (``k + 1``), ``known[k]`` whether the identity is
    in the initial data set (``identity < initial``) and ``image[k]`` the face frame to
    send (an index into the :class:`FaceFrames` of ``images``).
    """

    mode: str
    seed: int
    identities: int
    initial: int
    images: FaceFrameSpec
    identity: np.ndarray
    observation: np.ndarray
    known: np.ndarray
    image: np.ndarray

    @property
    def frames(self) -> int:
        """Number of frames (= tasks)."""
        return int(self.identity.size)

    def model(self) -> IdentityModel:
        """The identity model behind the descriptors (default scales, this seed)."""
        return IdentityModel(self.identities, seed=self.seed)

    def descriptor(self, task_id: int) -> np.ndarray:
        """The descriptor of task ``task_id``'s face."""
        return self.model().descriptor(int(self.identity[task_id]),
                                       int(self.observation[task_id]))


def build_plan(params: Mapping[str, Any], seed: int) -> FacePlan:
    """Draw the identity of every frame (params must be valid).

    Three streams, ``default_rng(SeedSequence(seed, spawn_key=(2, j)))`` for ``j = 0, 1,
    2``: ``random(frames)`` of stream 0 decides known (``u < known_share``),
    ``integers(0, initial, frames)`` of stream 1 and ``integers(initial, identities,
    frames)`` of stream 2 (when there are unknown identities) give the known and the
    unknown identity of every frame, of which the frame uses one. So frame ``k`` does not
    depend on how many frames follow it, and the identities a share picks stay put when
    ``known_share`` changes.
    """
    p = normalised(params)
    frames, initial, identities = int(p["frames"]), int(p["initial"]), int(p["identities"])

    def stream(index: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_PLAN, index)))

    known = stream(0).random(frames) < p["known_share"]
    known_identity = stream(1).integers(0, initial, size=frames)
    if identities > initial:
        unknown_identity = stream(2).integers(initial, identities, size=frames)
    else:
        unknown_identity = known_identity  # known_share is 1 here (validated)
    identity = np.where(known, known_identity, unknown_identity).astype(np.int64)
    images = FaceFrameSpec(**p["images"])
    task_ids = np.arange(frames, dtype=np.int64)
    return FacePlan(
        mode=p["mode"], seed=seed, identities=identities, initial=initial, images=images,
        identity=identity, observation=task_ids + 1, known=identity < initial,
        image=task_ids % images.count,
    )


class FaceRecognition:
    """Generator ``face-recognition`` (see ``docs/face_recognition.md``).

    Params: ``mode`` (required: ``read``, ``write`` or ``read-write``), ``frames``
    (tasks in the trace, default 1000), ``fps`` (per client, in (0, 30], default 5),
    ``phase`` (``random`` | ``zero``), ``identities`` (the population, default 2000),
    ``initial`` (records in the initial data set = known identities ``0 .. initial-1``,
    default 1000), ``known_share`` (the chance that a frame shows a known identity;
    default 1 for read, 0 for write, 0.5 for read-write), ``demand_s`` (the nominal
    compute demand of a frame, default :data:`DEFAULT_DEMAND_S`), ``images`` (a
    :class:`FaceFrameSpec` mapping).

    The frames are dealt to the clients in turn: client ``i`` gets ``frames // clients``
    frames, one more for the first ``frames % clients``, and sends its ``m``-th at
    ``phase_i + m / fps``. ``phase`` ``random`` draws ``phase_i`` uniformly from ``[0, 1 /
    fps)`` with ``SeedSequence(seed, spawn_key=(3, i))``. Tasks are sorted by arrival
    (ties by client order) and numbered ``0..frames-1`` in that order; ``cls`` is the
    mode and ``size`` is ``demand_s``. What each frame shows is the plan
    (:meth:`plan`), which depends on params and seed only, not on the clients.
    """

    name = "face-recognition"

    def validate(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` (``params.<field>: expected ..., found ...``)."""
        if not isinstance(params, Mapping):
            raise ValueError(f"params: expected a mapping, found {params!r}")  # noqa: TRY004 - the generator contract
        known = tuple(sorted(DEFAULTS))
        for key in params:
            if key not in DEFAULTS:
                raise ValueError(f"params.{key}: expected one of the fields {', '.join(known)}, "
                                 f"found an unknown field")
        if params.get("mode") not in MODES:
            found = repr(params["mode"]) if "mode" in params else "nothing"
            raise ValueError(f"params.mode: expected one of {', '.join(MODES)}, found {found}")
        _integer(params, "frames", 1, MAX_TRACE_FRAMES)
        _number(params, "fps", 0.0, MAX_FPS, open_low=True)
        if params.get("phase", "random") not in PHASES:
            raise ValueError(f"params.phase: expected one of {', '.join(PHASES)}, "
                             f"found {params['phase']!r}")
        identities = _integer(params, "identities", 1, MAX_IDENTITIES)
        initial = _integer(params, "initial", 1, MAX_IDENTITIES)
        if initial > identities:
            raise ValueError(f"params.initial: expected at most identities ({identities}), "
                             f"found {initial}")
        if params.get("known_share") is not None:
            share = _number(params, "known_share", 0.0, 1.0, open_low=False)
        else:
            share = DEFAULT_KNOWN_SHARE[params["mode"]]
        if share < 1.0 and identities == initial:
            raise ValueError(
                f"params.identities: expected more than initial ({initial}) so that frames "
                f"can show unknown identities (known_share {share:g} < 1), found {identities}"
            )
        _number(params, "demand_s", 0.0, math.inf, open_low=True)
        if "images" in params:
            try:
                FaceFrameSpec.from_mapping(params["images"])
            except ValueError as exc:
                raise ValueError(f"params.{exc}") from None

    def min_service_time(self, params: Mapping[str, Any]) -> float:
        """Every frame has the same nominal demand, ``demand_s``."""
        return float(params.get("demand_s", DEFAULT_DEMAND_S))

    def expected_tasks(self, params: Mapping[str, Any], clients: int, duration: float) -> float:
        """Exactly ``frames`` tasks, whatever the clients and duration."""
        del clients, duration
        return float(normalised(params)["frames"])

    def write_side_files(self, folder: Path, params: Mapping[str, Any], seed: int) -> None:
        """Write who each frame shows, beside the trace: the stand-in for a face-embedding
        model (``write_plan``)."""
        write_plan(folder, params, seed)

    def generate(
        self, params: Mapping[str, Any], clients: Sequence[str], duration: float, seed: int
    ) -> list[Task]:
        """All ``frames`` tasks, sorted by arrival, ids ``0..frames-1`` (params valid).

        Raises :class:`TestbedError` when the last frame would arrive at or after
        ``duration`` (the trace always holds every frame; lengthen the run or raise
        ``fps``).
        """
        p = normalised(params)
        frames, interval = int(p["frames"]), 1.0 / p["fps"]
        due: list[tuple[float, int]] = []
        for index in range(len(clients)):
            count = frames // len(clients) + (index < frames % len(clients))
            phase = stream_phase(p["phase"], interval, seed, (_PHASES, index))
            due.extend((phase + m * interval, index) for m in range(count))
        due.sort()
        last = due[-1][0]
        if last >= duration:
            raise TestbedError(
                f"workload 'face-recognition': {frames} frames at {p['fps']:g} fps over "
                f"{len(clients)} client(s) need a duration > {last:.3f} s, found {duration:g}"
            )
        return [
            Task(task_id, clients[index], arrival, p["demand_s"], p["mode"])
            for task_id, (arrival, index) in enumerate(due)
        ]

    def plan(self, params: Mapping[str, Any], seed: int) -> FacePlan:
        """What every frame shows, for the trace of ``(params, seed)`` (validated here)."""
        self.validate(params)
        return build_plan(params, seed)


# --- the plan file -------------------------------------------------------------------------


def write_plan(folder: str | Path, params: Mapping[str, Any], seed: int) -> Path:
    """Build the plan of ``(params, seed)`` and write ``face_recognition.json`` to ``folder``.

    Call it after the trace is written, with the params and seed recorded in
    ``trace.json``. The file holds ``format``, ``generator``, ``params`` and ``seed`` (as
    given), ``trace_sha256`` (from ``trace.json`` in the folder, or null), ``mode``,
    ``identities``, ``initial``, ``images`` (the full :class:`FaceFrameSpec`), ``model``
    (``dim``, ``centre_scale``, ``noise_scale``, ``threshold``) and ``frames``: per task
    id ``[identity, observation, image]``. Raises :class:`TestbedError` for invalid params.
    """
    generator = FaceRecognition()
    try:
        plan = generator.plan(params, seed)
    except ValueError as exc:
        raise TestbedError(f"workload {generator.name!r}: {exc}") from exc
    model = plan.model()
    content = {
        "mode": plan.mode,
        "identities": plan.identities,
        "initial": plan.initial,
        "images": asdict(plan.images),
        "model": {"dim": model.dim, "centre_scale": model.centre_scale,
                  "noise_scale": model.noise_scale, "threshold": model.threshold},
        "frames": np.column_stack((plan.identity, plan.observation, plan.image)).tolist(),
    }
    return write_side_file(folder, PLAN_NAME, PLAN_FORMAT, generator.name, params, seed, content,
                           "face-recognition plan")


def read_plan(folder: str | Path) -> FacePlan:
    """Read ``face_recognition.json`` from ``folder``.

    Raises :class:`TestbedError` naming the file if it is missing or malformed, or if a
    ``trace.json`` in the folder records another sha256, params or seed than the plan was
    written for.
    """
    doc, path = read_side_file(folder, PLAN_NAME, PLAN_FORMAT, "face-recognition plan", "plan")
    try:
        mode, seed = str(doc["mode"]), int(doc["seed"])
        identities, initial = int(doc["identities"]), int(doc["initial"])
        images = FaceFrameSpec(**doc["images"])
        table = np.asarray(doc["frames"], dtype=np.int64).reshape(-1, 3)
    except (KeyError, TypeError, ValueError) as exc:
        raise TestbedError(f"{path}: malformed plan: {exc}") from exc
    identity, observation, image = table[:, 0], table[:, 1], table[:, 2]
    ok = (
        mode in MODES
        and 1 <= initial <= identities
        and bool(np.all((identity >= 0) & (identity < identities)))
        and bool(np.all((image >= 0) & (image < images.count)))
        and bool(np.all(observation > INITIAL_KEY))
    )
    if not ok:
        raise TestbedError(f"{path}: expected a mode of {', '.join(MODES)}, identities below "
                           f"{identities}, images below {images.count} and observations > 0")
    return FacePlan(mode=mode, seed=seed, identities=identities, initial=initial,
                    images=images, identity=identity, observation=observation,
                    known=identity < initial, image=image)
