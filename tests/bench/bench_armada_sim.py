"""Armada's simulator twin at paper scale: wall time of one fleet point on one core.

``python -m tests.bench.bench_armada_sim [--quick]`` from the repository root (no root).

One point is what ``armada-paper-scale`` replays for one policy and replication: an
``armada-fleet`` scenario for the simulator only (nodes of 1, 2 and 4 cores, replicas of
one core, auto-scaling on), every user streaming one frame a second for 60 s after the
replica set has settled, the SDK (``armada``, frame probes) choosing. The process is
pinned to one core. Points: 20 nodes / 100 users, 100 / 500 and 200 / 1000 (``--quick``:
the first two).

The peer is real time: the emulation runs the same point in wall time equal to its model
time (settling plus streaming), so ``model s / wall s`` is how much faster than an
emulation the simulator covers the point (an emulation of 200 nodes does not fit on this
machine, so its time is its model time, not a measurement). The issue's goal is under
60 s of wall time for 200 nodes and 1000 users; the line says whether it is met. Nothing
is asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from testbed.scenario import scenario_from_dict
from testbed.systems.armada.paper_scale_experiment import fleet_params
from testbed.systems.armada.sim_calibration import load_calibration
from testbed.systems.armada.sim_replay import replay_one

POINTS = ((20, 100), (100, 500), (200, 1000))
STREAM_S = 60.0
GOAL_S = 60.0
FRAME_S = 0.0054  # a frame's detection at one core (the calibration scales it)


def measure(nodes: int, users: int) -> dict[str, Any]:
    """One replay of ``armada`` on a fresh fleet of ``nodes`` and ``users``."""
    scenario = scenario_from_dict({
        "name": "bench-armada-sim", "policies": ["armada"],
        "build": {"builder": "armada-fleet",
                  "params": fleet_params(nodes, users, 1000, STREAM_S)}})
    frames: dict[str, list[dict[str, Any]]] = {}
    task = 0
    for client in scenario.clients():
        frames[client.name] = []
        for k in range(int(STREAM_S)):
            task += 1
            frames[client.name].append({"task_id": task, "arrival": k + 0.37,
                                        "size": FRAME_S, "cls": "frame"})
    calibration = load_calibration()
    began = time.perf_counter()
    done = replay_one(scenario, "armada", 0, calibration, frames)
    wall = time.perf_counter() - began
    model = float(done["details"]["settled_at"]) + STREAM_S
    served = sum(r["outcome"] == "ok" for r in done["rows"])
    return {"nodes": nodes, "users": users, "wall_s": wall, "model_s": model,
            "frames": len(done["rows"]), "served": served}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_armada_sim",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20/100 and 100/500 only")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    points = POINTS[:2] if args.quick else POINTS
    print(f"Armada simulator, one policy (armada), {STREAM_S:g} s of 1 fps streaming after "
          "settling, one core; peer: the model time an emulation takes in wall time")
    print(f"{'nodes':>5} {'users':>5} {'frames':>7} {'served':>7} {'wall s':>7} "
          f"{'model s':>8} {'model/wall':>10}")
    for nodes, users in points:
        row = measure(nodes, users)
        print(f"{nodes:>5} {users:>5} {row['frames']:>7} {row['served']:>7} "
              f"{row['wall_s']:>7.1f} {row['model_s']:>8.0f} "
              f"{row['model_s'] / row['wall_s']:>10.1f}")
        if (nodes, users) == POINTS[-1]:
            met = "met" if row["wall_s"] < GOAL_S else "MISSED"
            print(f"goal: 200 nodes, 1000 users under {GOAL_S:g} s on one core: {met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
