"""The Cargo's in-memory vector index: the records of one application, for reads and
nearest-neighbour matches.

The store (:mod:`nodes.armada.cargo.store`) is the durable copy; the service rebuilds an
index from it at start and puts every committed row in it, so reading one record and
``match`` never touch SQLite. A match is exact: the Euclidean distance to every record, computed with
numpy.
"""

from __future__ import annotations

import math

import numpy as np


class VectorIndex:
    """The records of one application in memory, for reads and nearest-neighbour matches."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids = np.empty(0, dtype=np.int64)
        self.vectors = np.empty((0, dim), dtype=np.float64)
        self.size = 0
        self.where: dict[int, int] = {}
        self.versions: dict[int, tuple[int, str]] = {}

    def put(self, rid: int, blob: bytes, ts: int, origin: str) -> None:
        """Store a committed row (an older version than the one held is ignored)."""
        version = (ts, origin)
        held = self.versions.get(rid)
        if held is not None and held > version:
            return
        pos = self.where.get(rid)
        if pos is None:
            if self.size == len(self.ids):
                grown = max(64, 2 * self.size)
                self.ids = np.resize(self.ids, grown)
                vectors = np.empty((grown, self.dim), dtype=np.float64)
                vectors[: self.size] = self.vectors[: self.size]
                self.vectors = vectors
            pos = self.size
            self.size += 1
            self.where[rid] = pos
            self.ids[pos] = rid
        self.vectors[pos] = np.frombuffer(blob, dtype="<f8")
        self.versions[rid] = version

    def get(self, rid: int) -> np.ndarray | None:
        pos = self.where.get(rid)
        return None if pos is None else self.vectors[pos]

    def match(self, vector: np.ndarray) -> tuple[int, float] | None:
        """The id of the record nearest to ``vector`` and its Euclidean distance."""
        if not self.size:
            return None
        diff = self.vectors[: self.size] - vector
        squared = np.einsum("ij,ij->i", diff, diff)
        best = int(np.argmin(squared))
        return int(self.ids[best]), float(math.sqrt(squared[best]))
