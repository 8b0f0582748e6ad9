"""The face-recognition workload's generator ``face-recognition`` and its plan file.

The storage experiments of the Armada paper run real-time face recognition: a task
detects the face in every frame, computes its 128-dimensional descriptor and then reads
(nearest-neighbour match) or writes (insert a labelled descriptor) the face data kept
by the storage layer. The workload has three parts, one module each:

* the face frames a client sends and the cascade a task detects faces with
  (:mod:`workloads.armada_face_frames`);
* the synthetic descriptors, their records and the initial data set
  (:mod:`workloads.armada_face_descriptors`);
* here, **the generator** ``face-recognition`` (:class:`FaceRecognition`): the
  read-only, write-only and read-followed-by-write workloads of 1000 frames, with the
  identity and observation of every frame in a side file, the plan
  (:class:`FacePlan`, :func:`write_plan`, :func:`read_plan`).

Validating params needs no OpenCV. ``docs/face_recognition.md`` describes the workload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.checks import is_int, is_number
from testbed.errors import TestbedError
from workloads.armada_face_descriptors import INITIAL_KEY, INITIAL_RECORDS, IdentityModel
from workloads.armada_face_frames import FaceFrameSpec
from workloads.armada_frame_stream import PHASES, stream_phase
from workloads.trace import Task, read_side_file, write_side_file

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
