"""The tier server's parameters (:mod:`nodes.offloading.tier_server`), importable without aiohttp.

The scenario loader checks a ``tier_server`` service's ``params`` against
:class:`TierServerParams`; ``speed``, ``time_scale`` and ``task_timeout`` are not the
scenario's to give there: the executor passes the node's speed, the scenario's time
compression and its task timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.config import option

#: How a task holds its worker: a timed wait, or a thread burning one CPU.
MODELS = ("hold", "compute")
#: The most workers one tier server may have.
MAX_WORKERS = 4_096
#: Default of the longest wall time one task may hold a worker (``size / speed /
#: time_scale``): an hour, longer than any run's task timeout, so a size of 1e308 or
#: 2**63 cannot hold a worker forever.
MAX_HOLD_S = 3600.0


@dataclass(frozen=True)
class TierServerParams:
    """``python -m nodes.offloading.tier_server`` (see ``docs/services.md``)."""

    workers: int = option(required=True, lo=1, hi=MAX_WORKERS,
                          help="workers; one FIFO queue feeds them")
    speed: float = option(required=True, gt=0,
                          help="speed factor: a task of size x model seconds needs x / S")
    time_scale: float = option(required=True, lo=1,
                               help="model-time compression: service times are divided by it")
    mu: float = option(required=True, gt=0,
                       help="nominal per-worker service rate, reported as mu * speed")
    window_s: float = option(10.0, gt=0, help="arrival-rate window, wall seconds")
    window_model_s: float | None = option(
        None, gt=0, help="arrival-rate window in model seconds; replaces --window-s with "
                         "window_model_s / time_scale, so the window covers the same model "
                         "time whatever the compression")
    max_hold_s: float = option(MAX_HOLD_S, gt=0,
                               help="longest wall time one task may hold a worker; a "
                                    "larger size is refused with 400")
    task_timeout: float | None = option(
        None, gt=0, help="the run's task timeout, model seconds: a task whose service "
                         "time size / S exceeds it could only time out, so it is refused "
                         "with 400 (an emulated server gets the scenario's)")
    model: str = option("hold", choices=MODELS,
                        help="hold: a timed wait; compute: a thread busy-loops one CPU")
