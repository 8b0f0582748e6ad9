"""Run the harness benchmarks and print their results as plain tables.

``python -m tests.bench.run [--quick] [--json FILE]`` from the repository root, as root:

* dispatcher throughput and per-task overhead against a minimal aiohttp client
  (:mod:`tests.bench.bench_dispatch`);
* the link shapers (compiled and Python) against a plain veth: frame rate with accurate
  delays, TCP over one and three delayed hops (:mod:`tests.bench.bench_shaper`);
* bring-up and teardown of 10..1000-host topologies against bare Mininet
  (:mod:`tests.bench.bench_scale`);
* the simulator against SimPy on the continuum model and on a bare M/M/c
  (:mod:`tests.bench.bench_sim`, always at its quick size here, with 5 rounds unless
  ``--quick``), run first, on the machine before any emulation has loaded it.

``--quick`` runs every benchmark at its small size. Every number is a measurement of
this run; nothing is asserted about timing. The headline figures are printed against
their goals and written under ``keys`` in the JSON file. The exit status is 1 if a run
left anything behind (an interface, a process, a namespace, a ledger).

``--sim`` runs instead the three benchmarks that need no root: the simulator's speed
against SimPy and Ciw (:mod:`tests.bench.bench_sim`), the decision time per policy
(:mod:`tests.bench.bench_policies`) and Armada's simulator at paper scale
(:mod:`tests.bench.bench_armada_sim`), each with ``--quick`` if given (``--json`` is
ignored).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.bench import cell
from tests.bench.bench_shaper import BUSY_RATE, KEY_SUFFIX
from tests.bench.bench_shaper import LATE_LIMIT_US as BUSY_LATE_US

#: The goals of the headline figures: key -> (what is compared, goal, description).
GOALS: dict[str, tuple[str, float, str]] = {
    "shaper.tcp_ratio_vs_veth": (">=", 0.8, "TCP through one delayed link / veth"),
    "shaper.tcp_3hop_ratio_vs_veth": (">=", 0.6, "TCP through 3 delayed hops / veth"),
    "scale.hosts_1000_up_s": ("<", 60.0, "1000 hosts up until every service answers, s"),
    "scale.hosts_1000_teardown_s": ("<", 15.0, "1000 hosts torn down, s"),
    "sim.continuum_hybrid_ratio_vs_simpy": (">=", 5.0, "continuum with hybrid / SimPy"),
    "sim.mmc_ratio_vs_simpy": (">=", 3.0, "bare M/M/c / SimPy"),
}
#: Frames per second the shaper should keep with accurate delays, and the fallbacks when
#: the load generator cannot offer that much over plain veth.
SHAPER_FRAMES_GOAL = 500_000.0
SHAPER_OF_VETH = 0.8
SHAPER_FRAMES_FLOOR = 200_000.0
#: What the every-CPU-busy row measures; its limit, BUSY_LATE_US, is the frame goal's
#: 0.2 ms.
BUSY_WHAT = f"p99 lateness at {BUSY_RATE // 1000}k frames/s, every CPU busy, us"
#: The compiled shaper's configurations other than the default, by key suffix, each judged
#: against the same goals.
SHAPER_VARIANTS = {suffix: how for suffix, how in KEY_SUFFIX.values() if suffix}


def shaper_goal(veth_fps: float) -> float:
    """The accurate frame rate to reach given what the generator offers over veth."""
    if math.isnan(veth_fps) or veth_fps >= SHAPER_FRAMES_GOAL:
        return SHAPER_FRAMES_GOAL
    return max(SHAPER_OF_VETH * veth_fps, SHAPER_FRAMES_FLOOR)


def goal_rows(keys: Mapping[str, float]) -> list[list[Any]]:
    """key | value | goal | met/MISSED (``not measured`` when a key is absent or NaN)."""
    def judged(key: str, op: str, goal: float, what: str) -> list[Any]:
        value = keys.get(key, math.nan)
        if value is None or math.isnan(value):
            return [key, what, None, f"{op} {goal:g}", "not measured"]
        ok = value >= goal if op == ">=" else value < goal
        return [key, what, value, f"{op} {goal:g}", "met" if ok else "MISSED"]

    veth = keys.get("shaper.frames_per_s_veth", math.nan)
    rows = [judged("shaper.frames_per_s_accurate", ">=", shaper_goal(veth),
                   "frames/s, p99 lateness < 0.2 ms, receiver fed"),
            ["shaper.frames_per_s_veth", "load generator over plain veth", veth, "", ""]]
    rows += [judged(key, *goal) for key, goal in GOALS.items()]
    rows.append(judged("shaper.late_p99_us_cpus_busy", "<", BUSY_LATE_US, BUSY_WHAT))
    # The same goals for the compiled shaper's other configurations.
    for suffix, how in SHAPER_VARIANTS.items():
        rows.append(judged(f"shaper.frames_per_s_accurate{suffix}", ">=", shaper_goal(veth),
                           f"frames/s as above, {how}"))
        rows += [judged(f"{key}{suffix}", op, goal, f"{what}, {how}")
                 for key, (op, goal, what) in GOALS.items() if key.startswith("shaper.")]
        rows.append(judged(f"shaper.late_p99_us_cpus_busy{suffix}", "<", BUSY_LATE_US,
                           f"{BUSY_WHAT}, {how}"))
    return rows


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_rows(dispatch: dict[str, Any]) -> list[list[Any]]:
    """metric | harness | peer | harness/peer of the dispatcher benchmark."""
    return [
        ["saturation throughput, tasks/s", dispatch["dispatcher_tasks_per_s"],
         dispatch["peer_tasks_per_s"], dispatch["throughput_ratio"]],
        ["overhead per task p50, ms", dispatch["dispatcher_overhead_p50_ms"],
         dispatch["peer_overhead_p50_ms"], dispatch["overhead_p50_ratio"]],
        ["overhead per task p99, ms", dispatch["dispatcher_overhead_p99_ms"],
         dispatch["peer_overhead_p99_ms"], dispatch["overhead_p99_ratio"]],
    ]


def scale_detail_rows(scale: dict[str, Any]) -> list[list[Any]]:
    """The harness's scale numbers split into their parts."""
    rows = []
    for row in scale["rows"]:
        h = row["harness"]
        rows.append([row["hosts"], h["load_s"], h["helpers_s"], h["network_s"],
                     row["network_ratio"], h["services_s"], h["service_cpu_ms_p50"],
                     h["delayer_frames"], h["delayer_late_p99_ms"], h["probe_ms"],
                     h["stop_network_s"], h["ledger_teardown_s"],
                     h["rss_kb"] / 1024, h["processes"]])
    return rows


SCALE_DETAIL_HEADER = ["hosts", "load s", "helpers s", "network s", "network/mininet",
                       "services s", "svc CPU ms p50", "delayer frames",
                       "late p99 ms", "probe ms", "stop_network s",
                       "ledger teardown s", "RSS sum MB", "processes"]


def machine() -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "kernel": platform.release(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "command": "python -m tests.bench.run " + " ".join(sys.argv[1:])}


def _left_and_errors(dispatch: dict[str, Any], shaper: dict[str, Any],
                     scale: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """What any benchmark left behind, and the teardown errors it reported."""
    sides = [dispatch, *(row[side] for row in scale["rows"] for side in ("harness", "mininet"))]
    return ([p for side in sides for p in side.get("left_behind", [])]
            + shaper.get("leftovers", []),
            [e for side in sides for e in side.get("teardown_errors", [])])


def _timed(name: str, run: Callable[[], dict[str, Any]], took: dict[str, float]
           ) -> dict[str, Any]:
    print(f"== {name}", flush=True)
    began = time.monotonic()
    result = run()
    took[name] = time.monotonic() - began
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every benchmark at its small size")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results")
    parser.add_argument("--sim", action="store_true",
                        help="only the simulator and decision-time benchmarks (no root)")
    args = parser.parse_args(argv)
    if args.sim:
        from tests.bench import bench_armada_sim, bench_policies, bench_sim

        options = ["--quick"] if args.quick else []
        return (bench_sim.main(options) or bench_policies.main(options)
                or bench_armada_sim.main(options))  # last: it pins the process to one core
    if os.geteuid() != 0:
        print("the benchmarks build network namespaces and links: run them as root")
        return 2
    if not (Path.cwd() / "tests" / "bench" / "bench_dispatch.py").is_file():
        print("run from the repository root (the launcher imports tests.bench from there)")
        return 2
    from testbed.emulation.executor import stop_on_signals
    from tests.bench import bench_dispatch, bench_scale, bench_shaper, bench_sim

    info = machine()
    began = time.monotonic()
    took: dict[str, float] = {}
    with stop_on_signals():
        # The simulator first: its rounds last a fraction of a second each, so the
        # tail of the 1000-host teardown (processes exiting, memory handed back) would
        # move them; at the quick size with 5 paired rounds unless --quick.
        bench_scale.settle()
        sim = _timed("simulator against SimPy",
                     lambda: bench_sim.measure(*bench_sim.COMBINED, 3 if args.quick else 5),
                     took)
        dispatch = _timed("dispatcher throughput and overhead",
                          lambda: bench_dispatch.run(args.quick), took)
        shaper = _timed("link shapers against plain veth",
                        lambda: bench_shaper.run(args.quick), took)
        scale = _timed("scale: harness bring_up vs bare Mininet",
                       lambda: bench_scale.run(args.quick), took)
    info["wall_s"] = time.monotonic() - began
    info["wall_s_per_benchmark"] = took
    info["backend"] = dispatch["backend"]
    keys = {**bench_shaper.keys(shaper), **bench_scale.keys(scale), **bench_sim.keys(sim)}
    left, errors = _left_and_errors(dispatch, shaper, scale)
    print()
    print(f"Results {info['date']}, `{info['command'].strip()}`, kernel {info['kernel']}, "
          f"{info['cpus']} CPUs, link shaping: {info['backend']}, {info['wall_s']:.0f} s")
    print()
    print(_table(["key", "what", "value", "goal", ""], goal_rows(keys)))
    print()
    print(_table(["dispatch", "harness", "peer", "harness/peer"], summary_rows(dispatch)))
    print(f"dispatch: {dispatch['n_saturation']} tasks per saturation round (medians of "
          f"{dispatch['rounds']} rounds, ratio = median of the per-round ratios; dispatcher "
          f"{', '.join(f'{v:.0f}' for v in dispatch['dispatcher_tasks_per_s_all'])}, peer "
          f"{', '.join(f'{v:.0f}' for v in dispatch['peer_tasks_per_s_all'])}), "
          f"{dispatch['n_low']} tasks at {bench_dispatch.LOW_RATE:g}/s for the overhead, "
          f"at most {dispatch['max_inflight']} in flight")
    print()
    print(bench_shaper.table(shaper))
    print()
    print(bench_scale.table(scale))
    print()
    print(_table(SCALE_DETAIL_HEADER, scale_detail_rows(scale)))
    print()
    bench_sim.print_tables(sim)
    print()
    print(f"left behind: {left or 'nothing'}; teardown errors: {errors or 'none'}")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "keys": keys, "dispatch": dispatch,
                                         "shaper": shaper, "scale": scale, "sim": sim},
                                        indent=1, default=str))
    return 1 if left or errors else 0


if __name__ == "__main__":
    sys.exit(main())
