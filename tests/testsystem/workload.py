"""The echo workload: every client pings at a fixed rate, sizes all equal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workloads.trace import Task


class EchoPings:
    """``rate`` pings per model second per client (a number in (0, 100])."""

    name = "echo-pings"

    def validate(self, params: Mapping[str, Any]) -> None:
        """Only ``rate``, a number in (0, 100]."""
        for key in params:
            if key != "rate":
                raise ValueError(f"params.{key}: expected the key rate, found <unknown key>")
        rate = params.get("rate", 2)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= 100:
            raise ValueError(f"params.rate: expected a number in (0, 100], found {rate!r}")

    def generate(self, params: Mapping[str, Any], clients: Sequence[str], duration: float,
                 seed: int) -> list[Task]:
        """Evenly spaced pings from every client, offset by a seeded phase per client."""
        gap = 1.0 / float(params.get("rate", 2))
        tasks = []
        for k, client in enumerate(clients):
            at = gap * ((seed + k) % 7) / 7.0
            while at < duration:
                tasks.append((at, client))
                at += gap
        tasks.sort()
        return [Task(i, client, at, 0.005, "ping") for i, (at, client) in enumerate(tasks)]
