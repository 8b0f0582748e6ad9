"""A background CPU load: one process burning a fixed duty cycle of one core.

``python -m nodes.cpu_load --duty 0.6`` spins for 60% of every 10 ms period and sleeps
for the rest, until SIGTERM (or ``--seconds`` elapse). Started inside a node's namespace
and cgroup it competes with that node's services for the node's CPU, as another tenant's
work on a shared edge device would. Used by the ``load`` scenario event.
"""

from __future__ import annotations

import argparse
import time

PERIOD_S = 0.010


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duty", type=float, required=True,
                        help="share of one core to burn, in (0, 1]")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    args = parser.parse_args(argv)
    if not 0 < args.duty <= 1:
        parser.error(f"--duty: expected a number in (0, 1], found {args.duty}")
    burn(args.duty, args.seconds)


if __name__ == "__main__":
    main()
