"""The face-recognition workload's face data: synthetic descriptors, their records and the
initial data set the storage layer starts with.

A face-recognition task attaches a 128-dimensional descriptor to the face it detects and
reads (nearest-neighbour match) or writes (insert a labelled descriptor) the face data the
storage layer keeps:

* **The identity model** (:class:`IdentityModel`): no face-embedding model can be
  downloaded here, so descriptors are synthetic: identity ``i`` has a centre drawn from
  the seed, and every observation of it is that centre plus independent noise. The
  detection a task runs is real (:mod:`workloads.armada_face_frames`); the descriptor it
  attaches to the face is the model's.
* **Records** (:func:`encode_record`, :func:`decode_record`): the paper's ``<ID (8
  bytes), vector (128 x 8 bytes)>`` pairs, 1032 bytes each.
* **The initial data set** (:func:`initial_records`): 1000 labelled descriptors, one per
  known identity.

Which identity and observation every frame of a trace shows is the generator's plan
(:mod:`workloads.armada_faces`). ``docs/face_recognition.md`` describes the workload.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from testbed.checks import is_int, is_number

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
