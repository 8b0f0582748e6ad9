"""The CPU-quota model replayed through the calibration's own protocol, as a table.

The calibration (``docs/results/armada/calibration.md``) timed frames back to back at
each CPU share, so its times include CFS throttling. The simulator instead draws a
frame's demand at one core and throttles it with :func:`testbed.systems.armada.sim.cfs_finish`.
Feeding the one-core demands back to back through that model, with the calibration
client's turn-around between frames, should give each share's measured times; this
module does that and prints measured against modelled p50, mean and p90, the table in
``docs/simulator.md``:

``python -m testbed.systems.armada.sim_quota_check [--calibration FILE]``
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.systems.armada.sim import cfs_finish
from testbed.systems.armada.sim_calibration import Calibration, load_calibration, quantile

#: The calibration client's pause between a reply and its next request (s).
TURN_AROUND_S = 0.0005


@dataclass(frozen=True)
class QuotaCheck:
    """One share: the measured frame times and the model's, seconds."""

    cores: float
    measured: tuple[float, ...]
    modelled: tuple[float, ...]


def back_to_back(demands: Sequence[float], cores: float,
                 turn_around_s: float = TURN_AROUND_S) -> list[float]:
    """Each frame's time from request to reply when ``demands`` (one-core CPU seconds)
    run one after another on a replica of ``cores`` cores, as the calibration ran them."""
    t, period_end, used, took = 0.0, 0.0, 0.0, []
    for demand in demands:
        end, period_end, used = cfs_finish(t, demand, cores, period_end, used)
        took.append(end - t)
        t = end + turn_around_s
    return took


def check(calibration: Calibration) -> list[QuotaCheck]:
    """Every measured share against the model fed the one-core frames in mixed order
    (every 7th of the sorted demands, or the next stride sharing no factor with their
    count so that each frame comes once, so sizes alternate as in a real stream)."""
    one = next(s for s in calibration.shares if s.cores == 1.0)
    demands = sorted(one.frame_s)
    n = len(demands)
    stride = next(s for s in itertools.count(7) if math.gcd(s, n) == 1)
    order = [demands[(stride * k) % n] for k in range(n)]
    return [QuotaCheck(s.cores, tuple(sorted(s.frame_s)),
                       tuple(sorted(back_to_back(order, s.cores))))
            for s in calibration.shares]


def table(rows: Sequence[QuotaCheck]) -> list[str]:
    """The markdown table of measured against modelled p50, mean and p90 (ms)."""
    def ms(values: tuple[float, ...], q: float | None) -> str:
        value = sum(values) / len(values) if q is None else quantile(values, q)
        return f"{value * 1000:.1f}"

    lines = [("| cores | measured p50 | model p50 | measured mean | model mean | "
              "measured p90 | model p90 |"), "|---|---|---|---|---|---|---|"]
    for row in rows:
        cells = [ms(values, q) for q in (0.5, None, 0.9)
                 for values in (row.measured, row.modelled)]
        lines.append(f"| {row.cores:g} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.systems.armada.sim_quota_check",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=Path, default=None,
                        help="a calibration JSON (default: the shipped one)")
    args = parser.parse_args(argv)
    print("\n".join(table(check(load_calibration(args.calibration)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
