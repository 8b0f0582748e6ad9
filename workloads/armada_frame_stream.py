"""The ``frame-stream`` generator: every client streams camera frames at a fixed rate.

Client ``i`` sends frame ``k`` at ``phase_i + k / fps`` for every such instant in
``[0, duration)``. ``phase`` ``"random"`` (the default) draws ``phase_i`` uniformly from
``[0, 1 / fps)`` with ``SeedSequence(seed, spawn_key=(i,))``, so streams do not all fire
in the same instant; ``"zero"`` starts every stream at 0. Frame rates above
:data:`MAX_FPS` are refused: the emulation host has two cores and a real detector
behind every frame.

What the task rows mean here:

* ``cls`` is ``"frame"``;
* the frame number within its stream is the task's position among its client's tasks
  (the streaming client, :mod:`nodes.armada.sdk.streaming`, numbers them that way and sends
  source frame ``k mod len(frames)`` of the set described by ``frames``);
* ``size`` is the *nominal* processing demand: ``demand_s``, the expected detector time
  per frame in model seconds on a node of speed 1 (one full core of the development
  host). The detector task does not hold for ``size``: it runs the real detector and its
  time is measured. ``size`` exists for the trace schema, the simulator and policies
  that estimate service times. The default, :data:`DEFAULT_DEMAND_S`, is the HOG people
  detector's measured mean on 640x480 ``vtest.avi`` frames (docs/object_detection.md).

Params: ``fps`` (required, in ``(0, 30]``), ``demand_s`` (> 0), ``phase``
(``random`` | ``zero``), ``frames`` (a :class:`~workloads.armada_frames.FrameSpec` mapping,
validated here and recorded in ``trace.json``; the client loads the frames),
``matrix_samples`` (an integer in ``[0, 100]``, default 0: before the streams, each user
in turn sends this many frames straight to every replica, the user x node latency
matrix the emulation records beside the streams; the simulator has no replicas to
measure and ignores it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.checks import is_number
from workloads.armada_frames import FrameSpec
from workloads.trace import Task

MAX_FPS = 30.0
DEFAULT_DEMAND_S = 0.09
PHASES = ("random", "zero")
_KNOWN = ("demand_s", "fps", "frames", "phase", "matrix_samples")
MAX_MATRIX_SAMPLES = 100


def stream_phase(phase: str, interval: float, seed: int, spawn_key: tuple[int, ...]) -> float:
    """When a client's stream starts: 0 for ``phase`` ``"zero"``; for ``"random"``, a
    draw uniform in ``[0, interval)`` from ``SeedSequence(seed, spawn_key=spawn_key)``."""
    if phase != "random":
        return 0.0
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=spawn_key))
    return float(rng.uniform(0.0, interval))


class FrameStream:
    """Generator ``frame-stream`` (see the module docstring)."""

    name = "frame-stream"

    def validate(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` (``params.<field>: expected ..., found ...``)."""
        for key in params:
            if key not in _KNOWN:
                raise ValueError(
                    f"params.{key}: expected one of the fields {', '.join(_KNOWN)}, "
                    f"found an unknown field"
                )
        if "fps" not in params:
            raise ValueError(f"params.fps: expected a number in (0, {MAX_FPS:g}], found nothing")
        fps = params["fps"]
        if not is_number(fps, finite=True) or not 0 < fps <= MAX_FPS:
            raise ValueError(f"params.fps: expected a number in (0, {MAX_FPS:g}], found {fps!r}")
        demand = params.get("demand_s", DEFAULT_DEMAND_S)
        if not is_number(demand, finite=True) or not demand > 0:
            raise ValueError(f"params.demand_s: expected a finite number > 0, found {demand!r}")
        phase = params.get("phase", "random")
        if phase not in PHASES:
            raise ValueError(f"params.phase: expected one of {', '.join(PHASES)}, found {phase!r}")
        samples = params.get("matrix_samples", 0)
        if isinstance(samples, bool) or not isinstance(samples, int) \
                or not 0 <= samples <= MAX_MATRIX_SAMPLES:
            raise ValueError(f"params.matrix_samples: expected an integer in [0, "
                             f"{MAX_MATRIX_SAMPLES}], found {samples!r}")
        if "frames" in params:
            try:
                FrameSpec.from_mapping(params["frames"])
            except ValueError as exc:
                raise ValueError(f"params.{exc}") from None

    def min_service_time(self, params: Mapping[str, Any]) -> float:
        """Every frame has the same nominal demand, ``demand_s``."""
        return float(params.get("demand_s", DEFAULT_DEMAND_S))

    def expected_tasks(self, params: Mapping[str, Any], clients: int, duration: float) -> float:
        """At most ``ceil(fps x duration)`` frames per client."""
        return clients * math.ceil(float(params["fps"]) * duration)

    def generate(
        self, params: Mapping[str, Any], clients: Sequence[str], duration: float, seed: int
    ) -> list[Task]:
        """Every client's frames in ``[0, duration)``, sorted by arrival, ids ``0..n-1``."""
        interval = 1.0 / float(params["fps"])
        demand = self.min_service_time(params)
        due: list[tuple[float, int, str]] = []
        for index, client in enumerate(clients):
            phase = stream_phase(params.get("phase", "random"), interval, seed, (index,))
            count = max(0, math.ceil((duration - phase) / interval))
            times = phase + np.arange(count) * interval
            due.extend((float(t), index, client) for t in times if t < duration)
        due.sort()
        return [
            Task(task_id, client, arrival, demand, "frame")
            for task_id, (arrival, _, client) in enumerate(due)
        ]
