"""The service candidate list: the paper's Algorithm 1, run by the Application Manager.

A candidate list is a short list (TopN, 3 by default) of replicas likely to give a user
low latency. The user's SDK then probes them end to end and picks one; this module only
has to avoid excluding a good replica, not to find the best one. Hence:

* geo-proximity uses a GeoHash of *reduced* precision plus the eight neighbouring cells,
  and inside that area distance does not rank replicas (a farther node may be faster);
* overloaded replicas (utilisation >= threshold) are excluded;
* replicas sharing a network-affiliation tag with the user come first;
* when fewer than TopN remain, the area widens one precision level at a time, then any
  replica qualifies by distance, and finally an overloaded one beats none.

Pure: no I/O. The contract (reasons, defaults) is ``docs/armada.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodes.armada.geo import block, encode, haversine_km

TOPN = 3
DEFAULT_PRECISION = 5  # cells of about 4.9 km x 4.9 km; the 3x3 area spans ~15 km
DEFAULT_OVERLOAD = 0.8
UTILISATION_STEP = 0.1  # utilisation ranks in steps, so measurement noise does not reorder


@dataclass(frozen=True)
class Replica:
    """What selection needs to know about one running replica (task)."""

    task_id: str
    lat: float
    lon: float
    utilisation: float | None = None  # None: not measured yet (a fresh replica)
    tags: frozenset[str] = field(default_factory=frozenset)
    running: bool = True


@dataclass(frozen=True)
class Candidate:
    """One entry of a candidate list, with why it is there."""

    replica: Replica
    distance_km: float
    reason: str  # "area", "wider:<precision>", "anywhere" or "overloaded"


def _utilisation(replica: Replica) -> float:
    return replica.utilisation or 0.0


def _rank_key(replica: Replica, distance: float, tags: frozenset[str]) -> tuple:
    """Affiliated first, then least utilised (in steps), then nearest."""
    step = int(_utilisation(replica) / UTILISATION_STEP)
    return (not (replica.tags & tags), step, distance)


def select_candidates(
    replicas: Iterable[Replica],
    lat: float,
    lon: float,
    tags: Iterable[str] = (),
    *,
    precision: int = DEFAULT_PRECISION,
    overload: float = DEFAULT_OVERLOAD,
    topn: int = TOPN,
) -> list[Candidate]:
    """The candidate list for a user at ``(lat, lon)`` with affiliation ``tags``.

    At most ``topn`` candidates, in preference order, no replica twice. Only running
    replicas are considered. An empty list means no replica is running.
    """
    user_tags = frozenset(tags)
    running = [r for r in replicas if r.running]
    distance = {r.task_id: haversine_km(lat, lon, r.lat, r.lon) for r in running}
    healthy = [r for r in running if _utilisation(r) < overload]
    chosen: list[Candidate] = []
    taken: set[str] = set()

    def add(pool: Sequence[Replica], reason: str) -> None:
        ordered = sorted(
            (r for r in pool if r.task_id not in taken),
            key=lambda r: _rank_key(r, distance[r.task_id], user_tags),
        )
        for replica in ordered[: topn - len(chosen)]:
            chosen.append(Candidate(replica, distance[replica.task_id], reason))
            taken.add(replica.task_id)

    cell = {r.task_id: encode(r.lat, r.lon, precision) for r in healthy}
    for level in range(precision, 0, -1):
        area = block(lat, lon, level)  # a GeoHash's prefix is its cell at lower precision
        in_area = [r for r in healthy if cell[r.task_id][:level] in area]
        add(in_area, "area" if level == precision else f"wider:{level}")
        if len(chosen) >= topn:
            return chosen
    by_distance = sorted(
        (r for r in healthy if r.task_id not in taken), key=lambda r: distance[r.task_id]
    )
    for replica in by_distance[: topn - len(chosen)]:
        chosen.append(Candidate(replica, distance[replica.task_id], "anywhere"))
        taken.add(replica.task_id)
    overloaded = sorted(
        (r for r in running if r.task_id not in taken),
        key=lambda r: (_utilisation(r), distance[r.task_id]),
    )
    for replica in overloaded[: topn - len(chosen)]:
        chosen.append(Candidate(replica, distance[replica.task_id], "overloaded"))
    return chosen


def replica_location(task: Mapping[str, Any]) -> tuple[float, float]:
    """Where a replica is (a Spinner task view): its node, or where it is wanted while
    it has none yet."""
    if task.get("node_lat") is not None:
        return task["node_lat"], task["node_lon"]
    return task["lat"], task["lon"]


class RunningView:
    """The running replicas' Spinner task views (``task_id``, ``node_id``, ``url``,
    location, ``utilisation``, ``node_tags``), read once so that many queries against the
    same view (the simulator answers thousands between two polls) do not rebuild it."""

    def __init__(self, running: Iterable[Mapping[str, Any]]) -> None:
        self.tasks = {t["task_id"]: t for t in running}
        self.replicas = [Replica(t["task_id"], *replica_location(t), t.get("utilisation"),
                                 frozenset(t.get("node_tags", [])))
                         for t in self.tasks.values()]

    def answer(self, lat: float, lon: float, tags: Iterable[str] = (), *,
               precision: int = DEFAULT_PRECISION, overload: float = DEFAULT_OVERLOAD,
               topn: int = TOPN) -> list[dict[str, Any]]:
        """The ``candidates`` of a query's answer (:func:`answer_candidates`)."""
        chosen = select_candidates(self.replicas, lat, lon, tags, precision=precision,
                                   overload=overload, topn=topn)
        tasks = self.tasks
        return [{"task_id": c.replica.task_id, "node_id": tasks[c.replica.task_id].get("node_id"),
                 "url": tasks[c.replica.task_id].get("url"), "lat": c.replica.lat,
                 "lon": c.replica.lon, "distance_km": round(c.distance_km, 3),
                 "utilisation": c.replica.utilisation, "tags": sorted(c.replica.tags),
                 "reason": c.reason}
                for c in chosen]


def answer_candidates(
    running: Iterable[Mapping[str, Any]],
    lat: float,
    lon: float,
    tags: Iterable[str] = (),
    *,
    precision: int = DEFAULT_PRECISION,
    overload: float = DEFAULT_OVERLOAD,
    topn: int = TOPN,
) -> list[dict[str, Any]]:
    """The ``candidates`` of a query's answer: :func:`select_candidates` over the running
    replicas' Spinner task views, each entry as ``docs/armada.md`` documents it."""
    return RunningView(running).answer(lat, lon, tags, precision=precision,
                                       overload=overload, topn=topn)
