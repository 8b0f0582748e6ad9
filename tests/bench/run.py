"""Run the harness benchmarks and print their results as one plain table.

``python -m tests.bench.run [--quick] [--json FILE]`` from the repository root, as root.

* dispatcher throughput and per-task overhead against a minimal aiohttp client
  (:mod:`tests.bench.bench_dispatch`);
* build/start/teardown time and memory of 10..200-host topologies against bare Mininet
  (:mod:`tests.bench.bench_scale`).

``--quick`` runs fewer tasks and only 10 and 50 hosts (about half a minute). Every
number is a measurement of this run; nothing is asserted about timing. The exit status
is 1 if a run left anything behind (an interface, a process, a namespace, a ledger).

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
from pathlib import Path
from typing import Any

TARGET_HOSTS = 200
TARGET_UP_S = 15.0
TARGET_DOWN_S = 5.0
TARGET_MEMORY_MB = 4096.0


def _cell(value: Any, digits: int = 2) -> str:
    """A table cell: floats rounded, NaN and None as ``-``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _target(ok: bool, text: str) -> str:
    return f"{text}: {'met' if ok else 'MISSED'}"


def summary_rows(dispatch: dict[str, Any], scale: list[dict[str, Any]]) -> list[list[Any]]:
    """benchmark | metric | harness | peer | harness/peer | target."""
    rows: list[list[Any]] = [
        ["dispatch", "saturation throughput, tasks/s", dispatch["dispatcher_tasks_per_s"],
         dispatch["peer_tasks_per_s"], dispatch["throughput_ratio"], ""],
        ["dispatch", "overhead per task p50, ms", dispatch["dispatcher_overhead_p50_ms"],
         dispatch["peer_overhead_p50_ms"], dispatch["overhead_p50_ratio"], ""],
        ["dispatch", "overhead per task p99, ms", dispatch["dispatcher_overhead_p99_ms"],
         dispatch["peer_overhead_p99_ms"], dispatch["overhead_p99_ratio"], ""],
    ]
    for row in scale:
        h, m, n = row["harness"], row["mininet"], row["hosts"]
        at_target = n == TARGET_HOSTS
        mem_mb, mn_mem_mb = h["pss_kb"] / 1024, m["pss_kb"] / 1024
        rows += [
            [f"scale {n}", "up until all answer, s", h["up_s"], m["up_s"], row["up_ratio"],
             _target(h["up_s"] < TARGET_UP_S, f"< {TARGET_UP_S:g} s") if at_target else ""],
            [f"scale {n}", "teardown, s", h["down_s"], m["down_s"], row["down_ratio"],
             _target(h["down_s"] < TARGET_DOWN_S, f"< {TARGET_DOWN_S:g} s")
             if at_target else ""],
            [f"scale {n}", "memory (PSS), MB", mem_mb, mn_mem_mb, mem_mb / mn_mem_mb,
             _target(mem_mb < TARGET_MEMORY_MB, f"< {TARGET_MEMORY_MB / 1024:g} GB")
             if at_target else ""],
        ]
    return rows


def scale_detail_rows(scale: list[dict[str, Any]]) -> list[list[Any]]:
    """The harness's scale numbers split into their parts."""
    rows = []
    for row in scale:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about 30 s")
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
    from tests.bench import bench_dispatch, bench_scale

    info = machine()
    began = time.monotonic()
    with stop_on_signals():
        print("== dispatcher throughput and overhead")
        dispatch = bench_dispatch.run(args.quick)
        print("== scale: harness bring_up vs bare Mininet")
        scale = bench_scale.run(args.quick)
    info["wall_s"] = time.monotonic() - began
    info["backend"] = dispatch["backend"]
    left = dispatch["left_behind"] + [p for row in scale for side in ("harness", "mininet")
                                      for p in row[side]["left_behind"]]
    errors = dispatch["teardown_errors"] + [e for row in scale
                                            for side in ("harness", "mininet")
                                            for e in row[side]["teardown_errors"]]
    print()
    print(f"Results {info['date']}, `{info['command'].strip()}`, kernel {info['kernel']}, "
          f"{info['cpus']} CPUs, link shaping: {info['backend']}, {info['wall_s']:.0f} s")
    print()
    print(_table(["benchmark", "metric", "harness", "peer", "harness/peer", "target"],
                 summary_rows(dispatch, scale)))
    print()
    print(f"dispatch: {dispatch['n_saturation']} tasks per saturation round (medians of "
          f"{dispatch['rounds']} rounds, ratio = median of the per-round ratios; dispatcher "
          f"{', '.join(f'{v:.0f}' for v in dispatch['dispatcher_tasks_per_s_all'])}, peer "
          f"{', '.join(f'{v:.0f}' for v in dispatch['peer_tasks_per_s_all'])}), "
          f"{dispatch['n_low']} tasks at {bench_dispatch.LOW_RATE:g}/s for the overhead, "
          f"at most {dispatch['max_inflight']} in flight")
    print()
    print(_table(SCALE_DETAIL_HEADER, scale_detail_rows(scale)))
    print()
    print(f"left behind: {left or 'nothing'}; teardown errors: {errors or 'none'}")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "dispatch": dispatch,
                                         "scale": scale}, indent=1, default=str))
    return 1 if left or errors else 0


if __name__ == "__main__":
    sys.exit(main())
