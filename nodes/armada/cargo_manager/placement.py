"""Where the Cargo Manager puts an application's next replica (:func:`pick_cargo`).

``nearest`` serves the expected location farthest from the replicas chosen so far with
the Cargo nearest to it; ``random`` draws uniformly (the baseline; seeded). The rule is
pure (no I/O, no clock; the caller passes the random generator), so tests check it on
its own; :meth:`nodes.armada.cargo_manager.service.CargoManager.pick` calls it with the
trusted live Cargos that have room for the quota.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from nodes.armada.geo import haversine_km


@dataclass(frozen=True)
class CargoView:
    """What Cargo selection needs to know about one candidate."""

    cargo_id: str
    lat: float
    lon: float
    free_bytes: int


def pick_cargo(
    candidates: Sequence[CargoView],
    locations: Sequence[tuple[float, float]],
    holding: Sequence[tuple[float, float]],
    strategy: str,
    rng: random.Random,
) -> CargoView | None:
    """The next Cargo for an application's data, or None without candidates. Pure.

    ``candidates`` can all take the data; ``holding`` are where the application's other
    replicas are (or will be). ``random`` draws one uniformly. ``nearest`` takes the
    expected location farthest from every holding replica (the first on ties) and returns
    the candidate nearest to it (more free space, then the id, on ties).
    """
    if not candidates:
        return None
    ordered = sorted(candidates, key=lambda c: c.cargo_id)
    if strategy == "random":
        return rng.choice(ordered)

    def gap(location: tuple[float, float]) -> float:
        return min((haversine_km(*location, *h) for h in holding), default=math.inf)

    target = max(locations, key=gap)
    return min(ordered, key=lambda c: (haversine_km(*target, c.lat, c.lon), -c.free_bytes,
                                       c.cargo_id))
