"""The Application Manager's auto-scaling rule, pure.

:func:`plan_scaling` turns what the manager knows of an application (its active
replicas, their utilisation, where its users are, the deployer's expected locations)
into at most one action: a replica more near a crowd or the busiest replica, or one
fewer where demand has fallen. The service (:mod:`nodes.armada.app_manager`) applies it
every poll; it imports no HTTP library, so a simulated manager applies the same rule.
Thresholds are in ``docs/armada.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nodes.armada.configs import MIN_REPLICAS
from nodes.armada.geo import block, encode
from nodes.armada.selection import DEFAULT_PRECISION


@dataclass(frozen=True)
class ScalingPolicy:
    """Thresholds of :func:`plan_scaling` (see ``docs/armada.md``)."""

    precision: int = DEFAULT_PRECISION
    users_per_replica: int = 4
    scale_up_util: float = 0.75
    scale_down_util: float = 0.25
    min_replicas: int = MIN_REPLICAS
    max_replicas: int = 12


@dataclass(frozen=True)
class ReplicaState:
    """What scaling needs to know about one active replica."""

    task_id: str
    lat: float
    lon: float
    running: bool
    utilisation: float | None
    order: int  # creation order: larger is newer


@dataclass(frozen=True)
class ScalingAction:
    """One decision: add a replica near ``(lat, lon)`` or remove ``task_id``."""

    action: str  # "up" or "down"
    reason: str  # "users", "load" or "demand"
    lat: float
    lon: float
    task_id: str | None = None


def plan_scaling(
    replicas: Sequence[ReplicaState],
    users: Sequence[tuple[float, float]],
    policy: ScalingPolicy,
    locations: Sequence[tuple[float, float]] = (),
) -> ScalingAction | None:
    """At most one scaling action for an application. Pure.

    Users are grouped by GeoHash cell at ``policy.precision``; the demand of a cell is
    ``ceil(users in its 3x3 block / users_per_replica)`` replicas in that block (blocks,
    not cells, so users on both sides of a cell edge add up). Each expected deployment
    location demands one replica in its block, so the deployer's locations keep a
    presence. In order:

    * up, ``users``: the most crowded cell whose demand exceeds its replicas gets one at
      its users' centroid;
    * up, ``load``: mean utilisation above ``scale_up_util``: one near the busiest;
    * down, ``demand``: above the minimum, with mean utilisation below
      ``scale_down_util``, the replica serving the fewest users (the newest on ties)
      whose removal leaves every demand met.
    """
    p = policy.precision
    cell_of = {r.task_id: encode(r.lat, r.lon, p) for r in replicas}
    user_cells = [encode(lat, lon, p) for lat, lon in users]
    wants: list[tuple[set[str], int, list[tuple[float, float]]]] = []  # serving, demand, users
    for cell in sorted(set(user_cells)):
        area = block(*users[user_cells.index(cell)], p)
        near = [u for u, c in zip(users, user_cells, strict=True) if c in area]
        serving = {t for t, c in cell_of.items() if c in area}
        wants.append((serving, math.ceil(len(near) / policy.users_per_replica), near))
    can_grow = len(replicas) < policy.max_replicas
    short = [w for w in wants if w[1] > len(w[0])]
    if short and can_grow:
        _, _, near = max(short, key=lambda w: len(w[2]))
        return ScalingAction("up", "users", sum(u[0] for u in near) / len(near),
                             sum(u[1] for u in near) / len(near))
    measured = [r for r in replicas if r.running and r.utilisation is not None]
    mean = sum(r.utilisation for r in measured) / len(measured) if measured else 0.0
    if mean > policy.scale_up_util and can_grow:
        busiest = max(measured, key=lambda r: r.utilisation)
        return ScalingAction("up", "load", busiest.lat, busiest.lon)
    if len(replicas) <= policy.min_replicas or mean >= policy.scale_down_util:
        return None
    for lat, lon in locations:
        area = block(lat, lon, p)
        wants.append(({t for t, c in cell_of.items() if c in area}, 1, []))

    def users_served(replica: ReplicaState) -> int:
        area = block(replica.lat, replica.lon, p)
        return sum(c in area for c in user_cells)

    for replica in sorted(replicas, key=lambda r: (users_served(r), -r.order)):
        if all(len(serving - {replica.task_id}) >= demand for serving, demand, _ in wants):
            return ScalingAction("down", "demand", replica.lat, replica.lon, replica.task_id)
    return None
