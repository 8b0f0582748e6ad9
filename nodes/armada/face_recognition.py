"""Face recognition for the Armada face task: real detection, synthetic descriptors, matching.

* **Detection is real.** :func:`detect_faces` decodes a JPEG and runs OpenCV's bundled
  frontal-face Haar cascade with the settings of :mod:`workloads.armada_face_frames` (the
  frames of the workload are built to be detectable with exactly these). Every thread
  keeps its own cascade, built and run once on a blank image the first time
  (:func:`warm_up`), so no request pays for loading it.
* **The descriptor is synthetic.** No face-embedding model can be downloaded here, so
  :func:`describe` does not look at the pixels: the frame's request says which person it
  shows and which observation (photo) of that person it is, and the descriptor is the
  :class:`~workloads.armada_face_descriptors.IdentityModel`'s for that pair. It stands in
  for an embedding network: a 128-dimensional float64 vector, close to the person's other
  descriptors and far from everyone else's. A descriptor is only made for a face the
  cascade found.
* **Matching** (:func:`match`, :class:`FaceIndex`) is a nearest-neighbour search by
  Euclidean distance with numpy; a match needs ``distance <= threshold``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import cv2
import numpy as np

from workloads.armada_face_descriptors import DIM, IdentityModel
from workloads.armada_face_frames import Box, FaceCascade

_local = threading.local()


def cascade() -> FaceCascade:
    """This thread's cascade, built and warmed on first use (cascades are not shared)."""
    found = getattr(_local, "cascade", None)
    if found is None:
        found = _local.cascade = FaceCascade()
        found.detect(np.zeros((240, 320, 3), dtype=np.uint8))  # OpenCV's scratch buffers
    return found


def warm_up() -> None:
    """Build and run this thread's cascade now, so the first frame is not slower."""
    cascade()


def decode(jpeg: bytes) -> np.ndarray:
    """The BGR image of ``jpeg``; :class:`ValueError` if OpenCV cannot decode it."""
    image = cv2.imdecode(np.frombuffer(jpeg, dtype=np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("the JPEG image could not be decoded")
    return image


def detect_faces(jpeg: bytes) -> list[Box]:
    """The faces in a JPEG frame as ``(x, y, w, h)`` boxes, largest first."""
    return cascade().detect(decode(jpeg))


def subject(faces: list[Box]) -> Box | None:
    """The face a frame's identity refers to: the largest one (None without faces)."""
    return max(faces, key=lambda b: b[2] * b[3]) if faces else None


def describe(model: IdentityModel, face: Box | None, identity: int, observation: int) -> (
        np.ndarray):
    """The descriptor of ``face``, which the request says is ``identity``'s photo
    ``observation``: the identity model's vector for that pair (the stand-in for an
    embedding model). Raises :class:`ValueError` without a face or for an identity or
    observation the model refuses.
    """
    if face is None:
        raise ValueError("no face to describe")
    return model.descriptor(identity, observation)


def _as_vector(vector: Any) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    if array.shape != (DIM,):
        raise ValueError(f"descriptor: expected {DIM} numbers, found shape {array.shape}")
    return array


def match(descriptor: Any, records: Iterable[tuple[int, Any]], threshold: float) -> (
        tuple[int, float] | None):
    """The nearest record to ``descriptor``, as ``(id, distance)``, if within ``threshold``.

    ``records`` are ``(id, vector)`` pairs, put into a :class:`FaceIndex` in order (a
    repeated id replaces the earlier vector). The distance is Euclidean, ties go to the
    earliest id, and None means no record is within ``threshold`` (or there is none).
    """
    index = FaceIndex()
    for record_id, vector in records:
        index.put(record_id, vector)
    return index.match(descriptor, threshold)


class FaceIndex:
    """Labelled descriptors in one growing float64 matrix, searched exhaustively.

    A key/record store like the Cargo's: :meth:`put` inserts a record or replaces the
    vector of an id already held, so an id names one descriptor (one person here).
    """

    def __init__(self) -> None:
        self._ids = np.zeros(64, dtype=np.uint64)
        self._vectors = np.zeros((64, DIM))
        self._where: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._where

    def put(self, record_id: int, vector: Any) -> bool:
        """Insert or replace the record ``record_id``; True if it was new."""
        array = _as_vector(vector)
        position = self._where.get(int(record_id))
        new = position is None
        if position is None:
            position = len(self._where)
            if position == len(self._ids):
                self._ids = np.concatenate((self._ids, np.zeros_like(self._ids)))
                self._vectors = np.concatenate((self._vectors, np.zeros_like(self._vectors)))
            self._ids[position] = record_id
            self._where[int(record_id)] = position
        self._vectors[position] = array
        return new

    def match(self, descriptor: Any, threshold: float) -> tuple[int, float] | None:
        """``(id, distance)`` of the nearest descriptor within ``threshold``, else None."""
        query = _as_vector(descriptor)
        size = len(self._where)
        if size == 0:
            return None
        distances = np.linalg.norm(self._vectors[:size] - query, axis=1)
        best = int(np.argmin(distances))
        distance = float(distances[best])
        if distance > threshold:
            return None
        return int(self._ids[best]), distance
