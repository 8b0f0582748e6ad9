"""The Spinner's placement: which node should run a new task. Pure.

Filters first, then a sort, as in the paper's scheduler:

* **filters**: the node is alive, was registered with the run secret (a node a user
  token registered is never sent it, so it cannot be asked to start a task), has the
  task's CPU and memory free, and carries every tag the task requires (affinity); nodes
  already running a replica of the same application are avoided (anti-affinity, so one
  failure takes down one replica) unless no other node fits;
* **sort**: nodes inside the 3x3 GeoHash block around the wanted location come first,
  the least loaded (reserved CPU fraction) among them, so replicas spread over the nodes
  near their users; outside the block the nearest comes first.

:func:`rank_nodes` returns every acceptable node in order (the Spinner tries them in
turn when a Captain refuses) and, when none fits, a reason counting why each was refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodes.armada.geo import block, encode, haversine_km
from nodes.armada.selection import DEFAULT_PRECISION

EPSILON = 1e-9  # CPU shares are sums of floats


@dataclass(frozen=True)
class NodeView:
    """A node as the scheduler sees it."""

    node_id: str
    lat: float
    lon: float
    cpu: float
    memory_mb: int
    free_cpu: float
    free_memory_mb: int
    tags: frozenset[str] = field(default_factory=frozenset)
    alive: bool = True
    apps: frozenset[str] = field(default_factory=frozenset)  # applications it runs
    #: Registered with the run secret; a node a user token registered takes no task.
    trusted: bool = True

    @property
    def load(self) -> float:
        """Fraction of the node's CPU already reserved by tasks."""
        return 1.0 - self.free_cpu / self.cpu if self.cpu > 0 else 1.0


@dataclass(frozen=True)
class TaskRequest:
    """What a new task needs and where it is wanted."""

    app: str
    cpu: float
    memory_mb: int
    lat: float
    lon: float
    tags: frozenset[str] = field(default_factory=frozenset)  # required on the node


@dataclass(frozen=True)
class Ranking:
    """The acceptable nodes, best first; ``reason`` says why there are none."""

    nodes: list[NodeView]
    colocated: bool  # anti-affinity had to be relaxed
    reason: str


def refusal(node: NodeView, request: TaskRequest) -> str | None:
    """Why ``node`` cannot take ``request`` (a hard filter), or None when it can."""
    if not node.alive:
        return "not alive"
    if not node.trusted:
        return "registered with a user token"
    if node.free_cpu + EPSILON < request.cpu:
        return "too little free CPU"
    if node.free_memory_mb < request.memory_mb:
        return "too little free memory"
    missing = sorted(request.tags - node.tags)
    if missing:
        return f"missing tag {missing[0]!r}"
    return None


def rank_nodes(
    nodes: Iterable[NodeView], request: TaskRequest, precision: int = DEFAULT_PRECISION
) -> Ranking:
    """Every node that can take ``request``, best first (see the module docstring)."""
    fits: list[NodeView] = []
    refused: Counter[str] = Counter()
    for node in nodes:
        why = refusal(node, request)
        if why is None:
            fits.append(node)
        else:
            refused[why] += 1
    if not fits:
        detail = ", ".join(f"{n} {why}" for why, n in sorted(refused.items())) or "no nodes"
        reason = (
            f"no node can host {request.cpu:g} CPU / {request.memory_mb} MB: {detail}"
        )
        return Ranking([], False, reason)
    spread = [n for n in fits if request.app not in n.apps]
    colocated = not spread
    area = block(request.lat, request.lon, precision)

    def key(node: NodeView) -> tuple[int, float, float]:
        distance = haversine_km(request.lat, request.lon, node.lat, node.lon)
        if encode(node.lat, node.lon, precision) in area:
            return (0, node.load, distance)
        return (1, distance, node.load)

    return Ranking(sorted(spread or fits, key=key), colocated, "")
