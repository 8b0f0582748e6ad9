"""The Cargo's record format: what one record counts against a quota, and the binary
data-set format.

A record is an ``id`` (8-byte integer, non-negative) and a float64 ``vector`` of the
application's dimension ``dim``; it counts ``8 + 8 * dim`` bytes (the paper's ``<ID,
vector>``). A binary data set is such records back to back, the id big-endian and the
vector little-endian, as the face workload (``workloads.armada_face_descriptors``) writes them; the
Cargo reads it as an initial data set, and the Cargo Manager sizes quotas with
:func:`record_bytes`. Kept apart from the service so both, and the tests, share one
definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nodes.armada.fields import MAX_RECORD_ID

#: An application's vector dimension when its allocation names none (face descriptors).
DEFAULT_DIM = 128
#: The bytes of a record's id.
ID_BYTES = 8


def record_bytes(dim: int) -> int:
    """What one record of dimension ``dim`` counts against a quota."""
    return ID_BYTES + 8 * dim


#: Upper bound of the bytes one record takes in a JSON data set (``{"id": ..., "vector":
#: [...]}``: 17-24 characters a float64 written by ``json``, plus separators and spacing).
JSON_RECORD_BYTES = (64, 32)  # fixed, per dimension


def source_limit(quota_records: int, dim: int, json_format: bool, most: int) -> int:
    """The most bytes a data set of ``quota_records`` records may take (its binary or
    JSON form), and never more than ``most``."""
    per = JSON_RECORD_BYTES[0] + JSON_RECORD_BYTES[1] * dim if json_format else record_bytes(dim)
    return min(most, quota_records * per)


def _record_dtype(dim: int) -> np.dtype:
    """The face workload's record (``workloads.armada_face_descriptors.encode_record``): the
    id as 8 bytes big-endian unsigned, then the vector as ``dim`` float64 little-endian."""
    return np.dtype([("id", ">u8"), ("vector", "<f8", (dim,))])


def pack_records(ids: Sequence[int], vectors: Any) -> bytes:
    """The binary data-set format: per record the id (uint64 big-endian) then the vector
    (float64 little-endian), as ``workloads.armada_face_descriptors.encode_records`` writes them."""
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2 or len(matrix) != len(ids):
        raise ValueError("expected one vector per id, all of one dimension")
    if any(not 0 <= int(i) <= MAX_RECORD_ID for i in ids):
        raise ValueError(f"ids must be integers in 0 .. {MAX_RECORD_ID}")
    packed = np.empty(len(ids), dtype=_record_dtype(matrix.shape[1]))
    packed["id"], packed["vector"] = ids, matrix
    return packed.tobytes()


def unpack_records(raw: bytes, dim: int) -> list[tuple[int, bytes]]:
    """Records of the binary format; raises ValueError for malformed data."""
    size = record_bytes(dim)
    if len(raw) % size:
        raise ValueError(f"{len(raw)} bytes is not a whole number of {size}-byte records "
                         f"(dim {dim})")
    packed = np.frombuffer(raw, dtype=_record_dtype(dim))
    if (packed["id"] > MAX_RECORD_ID).any():
        raise ValueError(f"ids must be at most {MAX_RECORD_ID}")
    if not np.isfinite(packed["vector"]).all():
        raise ValueError("vectors must be finite")
    return [(int(i), v.astype("<f8").tobytes()) for i, v in zip(packed["id"], packed["vector"],
                                                                 strict=True)]
