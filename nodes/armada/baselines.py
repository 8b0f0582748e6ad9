"""The selection rules the Armada SDK is compared with, as pure functions.

The in-host user agent (:mod:`nodes.armada.user`) wraps them in clients that query the
Beacon like the SDK but choose without probing; keeping the rules here, free of I/O and
of aiohttp, lets them be tested (and reused by a simulator) on their own:

* ``geo-nearest``: the replica on the node nearest to the user (great-circle distance);
  on a failure the next-nearest;
* ``random``: one drawn uniformly among the working replicas at each round (seeded);
  kept until it fails;
* ``edge-to-cloud``: the nearest replica that is not on a cloud node; once a frame fails
  at the edge, only the cloud's replicas from then on;
* ``reconnect`` (the server-reconnect client of ``armada-failover``): one server at a
  time; after a failure the first candidate of a new query that has not failed yet.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

#: Selection baselines of the fleet experiments (the ``reconnect`` rule is separate:
#: it drives a client of its own, see :func:`reconnect_order`).
BASELINES = ("geo-nearest", "random", "edge-to-cloud")


class Listed(Protocol):
    """What the rules read of a replica: its task and the node it runs on."""

    @property
    def task_id(self) -> str: ...

    @property
    def node_id(self) -> str | None: ...


R = TypeVar("R", bound=Listed)


def check_baseline(policy: str) -> str:
    """``policy`` if it names a baseline; a ``ValueError`` naming the known ones if not."""
    if policy not in BASELINES:
        raise ValueError(f"policy: expected one of {', '.join(BASELINES)}, found {policy!r}")
    return policy


def baseline_choice(policy: str, working: Sequence[R], current: str | None,
                    distance_km: Mapping[str, float], cloud_nodes: Collection[str],
                    edge_failed: bool, rng: random.Random) -> R | None:
    """The replica ``policy`` chooses among the ``working`` ones (None: none fits).

    ``current`` is the task id chosen before (``random`` keeps it while it works),
    ``distance_km`` the user's distance to each task's node, ``edge_failed`` whether a
    frame has failed at the edge (``edge-to-cloud`` then keeps to ``cloud_nodes``).
    Ties go to the lower task id, so a choice never depends on listing order.
    """
    check_baseline(policy)
    if policy == "random":
        still = next((r for r in working if current is not None and r.task_id == current), None)
        if still is not None or not working:
            return still
        return rng.choice(sorted(working, key=lambda r: r.task_id))
    if policy == "edge-to-cloud":
        working = [r for r in working if (r.node_id in cloud_nodes) == edge_failed]
    nearest = sorted(working, key=lambda r: (distance_km.get(r.task_id, math.inf), r.task_id))
    return nearest[0] if nearest else None


def fails_over_to_cloud(policy: str, failed_node: str | None,
                        cloud_nodes: Collection[str]) -> bool:
    """Whether a failure on ``failed_node`` sends an ``edge-to-cloud`` user to the cloud
    for good (a failure on the cloud itself does not)."""
    return policy == "edge-to-cloud" and failed_node not in cloud_nodes


def reconnect_order(candidates: Iterable[Mapping[str, Any]],
                    failed_urls: Collection[str]) -> list[Mapping[str, Any]]:
    """The candidates a server-reconnect client tries, in the Application Manager's
    order, skipping every url that has failed already."""
    return [c for c in candidates if c.get("url") not in failed_urls]
