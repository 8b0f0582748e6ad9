"""A background CPU load: one process burning a fixed duty cycle of one core.

``python -m nodes.cpu_load --duty 0.6`` spins for 60% of every 10 ms period and sleeps
for the rest, until SIGTERM (or ``--seconds`` elapse). Started inside a node's namespace
and cgroup it competes with that node's services for the node's CPU, as another tenant's
work on a shared edge device would. Used by the ``load`` scenario event.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from nodes.config import option, parse_argv

PERIOD_S = 0.010


@dataclass(frozen=True)
class CpuLoadParams:
    """``python -m nodes.cpu_load`` (no aiohttp: this module is its own config module)."""

    duty: float = option(required=True, gt=0, hi=1, help="share of one core to burn")
    seconds: float | None = option(gt=0, help="stop after this long (default: at SIGTERM)")


def burn(duty: float, seconds: float | None) -> None:
    """Spin ``duty`` of every period until ``seconds`` pass (forever when None)."""
    end = None if seconds is None else time.monotonic() + seconds
    busy = duty * PERIOD_S
    while end is None or time.monotonic() < end:
        start = time.monotonic()
        while time.monotonic() - start < busy:
            pass
        rest = PERIOD_S - (time.monotonic() - start)
        if rest > 0:
            time.sleep(rest)


def main(argv: Sequence[str] | None = None) -> None:
    """Burn the duty cycle of the command line."""
    params = parse_argv(CpuLoadParams, argv, "python -m nodes.cpu_load",
                        __doc__.splitlines()[0])
    burn(params.duty, params.seconds)


if __name__ == "__main__":
    main()
