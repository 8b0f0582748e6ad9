"""What one run of an ``armada-fleet`` scenario gives, per policy label, on either
executor: latency, lost frames, switches, herding, replicas and scaling decisions.

Both executors write the same stream records under ``metadata.json``'s ``driver``
(:func:`~testbed.systems.armada.fleet.stream_record` in emulation, the
:class:`~testbed.systems.armada.sim.FleetSim` details in the simulator), so one reader serves the
paper-scale sweep and the comparison of the executors.

Herding (users moving together after re-probes) is measured from the users' switch
events during the stream: a *herd* is every switch onto the same replica within
:data:`HERD_WINDOW_S`; :func:`herd_share` is the share of switches that joined a herd of
at least :data:`HERD_MIN` users.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERD_WINDOW_S = 1.0
HERD_MIN = 3


def herd_share(events: Sequence[Mapping[str, Any]]) -> float | None:
    """The share of switches that joined a herd (module docstring); None: no switch."""
    if not events:
        return None
    herded = 0
    by_target: dict[str, list[float]] = {}
    for e in events:
        by_target.setdefault(str(e["target"]), []).append(float(e["t"]))
    for times in by_target.values():
        times.sort()
        for t in times:
            near = sum(abs(u - t) <= HERD_WINDOW_S for u in times)
            herded += near >= HERD_MIN
    return herded / len(events)


def measure_run(folder: Path) -> dict[str, dict[str, Any]]:
    """Per policy label of the run in ``folder``: ``mean_ms``, ``p95_ms`` (served frames),
    ``lost`` and ``lost_share`` (frames not served), ``switches_per_user``,
    ``herd_share``, running ``replicas`` after the stream, ``scaling`` (decisions during
    it) and ``sim_wall_s`` (the simulator's wall time; None in emulation). A policy whose
    replay failed is absent."""
    from testbed.analysis.traces import read_traces

    meta = json.loads((folder / "metadata.json").read_text())
    df = read_traces(folder)
    out: dict[str, dict[str, Any]] = {}
    for stream in meta["driver"]["streams"]:
        label = stream["policy"]
        rows = df[df["policy"] == label]
        ok = rows[rows["outcome"] == "ok"]["latency_s"].to_numpy(dtype=float) * 1e3
        users = max(1, len(stream["switches"]))
        out[label] = {
            "mean_ms": float(ok.mean()) if ok.size else None,
            "p95_ms": float(np.percentile(ok, 95)) if ok.size else None,
            "lost": int(len(rows) - ok.size),
            "lost_share": 1.0 - ok.size / max(1, len(rows)),
            "switches_per_user": sum(stream["switches"].values()) / users,
            "herd_share": herd_share(stream.get("switch_events", [])),
            "replicas": sum(v["status"] == "running" for v in stream["replicas_after"]),
            "scaling": len(stream["scaling_during"]),
            "sim_wall_s": stream.get("sim_wall_s")}
    return out
