"""Scale benchmark: build, start and tear down topologies of N hosts on one Linux bridge.

Sizes 10, 50, 100, 200, 400 and 1000 hosts (``--quick``: 10 and 50), the harness and
bare Mininet alternating in one run; every figure is printed with the machine's 1-minute
load average when its measurement began and ended (``os.getloadavg``), since bring-up
times on two cores depend on what else runs. Before each side starts, the benchmark
waits (up to 10 s) until no more processes are runnable than there are cores, so one
side's exiting processes do not slow the other. ``keys`` gives the 1000-host figures.

Harness side: a scenario built in code (one client + N-1 servers, every host linked to
one Linux-bridge switch with 1 ms one-way delay, so the userspace delayer serves every
link where the kernel has no netem; every host runs a tier server, the client its local
tier) is brought up with the executor's :func:`~testbed.emulation.executor.bring_up`,
which returns once every service answers ``/health``. Measured: the time to validate
the scenario, the time until every service answers (split into helpers, network build
and services), one request from the client to the farthest server across the bridge,
the frames the delayer relayed during bring-up and their worst p99 lateness, the
memory of everything the run started (PSS and RSS of the launcher and its
children, the delayer and every Mininet node shell), and the teardown time
(``stop_network`` + ``ledger.teardown``).

Peer: bare Mininet building and starting N empty hosts on a ``LinuxBridge`` with plain
veth links and no controller (``build + start``), then ``net.stop()``; its bridge and
root-namespace interfaces carry a prefix reserved like a run's and are written in a
ledger too, so a crash leaves nothing that ``testbed clean`` could not remove. One
Linux bridge takes at most 1023 ports: past that the harness builds a fabric of
bridges (:class:`testbed.emulation.names.Fabric`) and the peer is reported as not built,
with the reason.

Run alone: ``python -m tests.bench.bench_scale [--quick | --sizes N ...]`` (as root).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.emulation.ledger import process_start_time
from tests.bench import Sandbox, cell, cpu_ms, load1, memory_kb, percentile, process_group, ratio

LINK_DELAY_MS = 1.0
SERVICE_PORT = 8000
SIZES = (10, 50, 100, 200, 400, 1000)
QUICK_SIZES = (10, 50)
#: A Linux bridge takes at most 1024 ports (BR_MAX_PORTS); one is kept spare.
BRIDGE_PORT_LIMIT = 1023


def runnable() -> int:
    """Processes running or ready to run right now (``procs_running`` of /proc/stat)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("procs_running"):
            return int(line.split()[1])
    return 0


def settle(timeout: float = 10.0) -> float:
    """Wait until at most one process per core besides this one is runnable in two
    samples 0.5 s apart (the previous measurement's processes have ended), at most
    ``timeout`` seconds; the seconds waited. The 1-minute load average decays too
    slowly to wait on."""
    began = time.monotonic()
    quiet = 0
    while quiet < 2 and time.monotonic() - began < timeout:
        quiet = quiet + 1 if runnable() <= (os.cpu_count() or 1) + 1 else 0
        time.sleep(0.5)
    return time.monotonic() - began


def scenario_dict(n: int) -> dict[str, Any]:
    """``n`` hosts (client ``c1`` and servers ``h1``..``h<n-1>``) on switch ``sw``."""
    hosts = [{"name": "c1", "role": "client", "tier": "local"}]
    hosts += [{"name": f"h{i}", "role": "server", "tier": "edge"} for i in range(1, n)]
    services = [{"name": f"t-{h['name']}", "program": "tier_server", "node": h["name"],
                 "port": SERVICE_PORT, "params": {"workers": 4, "mu": 1.0}} for h in hosts]
    return {
        "name": f"bench-scale-{n}",
        "seed": 1,
        "topology": {
            "nodes": [*hosts, {"name": "sw", "role": "switch"}],
            "links": [{"a": h["name"], "b": "sw", "delay_ms": LINK_DELAY_MS} for h in hosts],
        },
        "services": services,
        "workload": {"generator": "bursty-pareto", "params": {"rate": 1.0, "mu": 1.0}},
        "policies": ["jsq"],
        "duration": 10,
        "time_scale": 1,
    }


def _harness_pids(topo: Any) -> list[int]:
    """Every process the run started: launcher and children, delayer, node shells."""
    infra = topo.infra
    pids = [infra.launcher.pid, *process_group(infra.launcher.pid)]
    if infra.delayer is not None and infra.delayer.pid is not None:
        pids.append(infra.delayer.pid)
    pids += [h.pid for h in topo.net.hosts.values()]
    pids += [s.pid for s in topo.net.switches.values()]
    return pids


def _probe_farthest(topo: Any) -> float:
    """Seconds for one ``/health`` from the client to the last server, across the bridge."""
    from testbed.emulation.probe import http_json, in_netns

    svc = topo.scenario.services[-1]
    url = topo.url(svc, "c1", "/health")

    def get() -> float:
        began = time.monotonic()
        status, _ = http_json(url, timeout=5.0)
        if status != 200:
            raise RuntimeError(f"{url} answered {status}")
        return time.monotonic() - began

    return in_netns(topo.net.hosts["c1"].pid, get)


def _delayer_traffic(topo: Any) -> dict[str, Any]:
    """Frames the delayer forwarded so far (all links, both directions) and the worst
    per-direction p99 lateness of their release, in ms (None without a delayer)."""
    delayer = topo.infra.delayer
    if delayer is None:
        return {"delayer_frames": None, "delayer_late_p99_ms": None}
    frames, late = 0, 0.0
    for link in topo.net.links.values():
        stats = delayer.stats(link.link_id)
        for direction in (stats["a_to_b"], stats["b_to_a"]):
            frames += direction["forwarded"]
            late = max(late, direction["late_p99_us"] or 0.0)
    return {"delayer_frames": frames, "delayer_late_p99_ms": late / 1000.0}


def _spawn_intervals(pids: list[int]) -> dict[str, float]:
    """Mean time between consecutive service starts (kernel start times, 10 ms ticks)
    in the first and the second half of the start order, in ms: whether spawning slows
    down as services accumulate."""
    ticks = [process_start_time(pid) for pid in pids]
    ticks = [t for t in ticks if t is not None]
    half = len(ticks) // 2
    if half < 2:
        return {"spawn_ms_first_half": math.nan, "spawn_ms_second_half": math.nan}
    per_tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    return {"spawn_ms_first_half": (ticks[half - 1] - ticks[0]) / (half - 1) * per_tick_ms,
            "spawn_ms_second_half": (ticks[-1] - ticks[half]) / (len(ticks) - half - 1)
            * per_tick_ms}


def run_harness(n: int, progress: Any = print) -> dict[str, Any]:
    """Bring up, measure and tear down the ``n``-host scenario with the harness."""
    from testbed.emulation.executor import bring_up
    from testbed.emulation.network import stop_network
    from testbed.scenario.loader import scenario_from_dict

    out: dict[str, Any] = {"hosts": n}
    began = time.monotonic()
    scenario = scenario_from_dict(scenario_dict(n), source=f"<bench-scale-{n}>")
    out["load_s"] = time.monotonic() - began
    stamps: list[float] = []

    def note(message: str) -> None:
        stamps.append(time.monotonic())
        progress(f"  [{n} hosts] {message}")

    with Sandbox(f"scale{n}") as sandbox:
        out["settle_s"] = settle()
        out["load_before"] = load1()
        began = time.monotonic()
        topo = bring_up(scenario, sandbox.ledger, sandbox.workdir, sandbox.prefix, note)
        out["up_s"] = time.monotonic() - began
        out["load_up"] = load1()
        try:
            helpers, network, services = stamps
            out["helpers_s"] = helpers - began
            out["network_s"] = network - helpers
            out["services_s"] = services - network
            out["services"] = len(topo.services)
            out.update(_delayer_traffic(topo))
            out["probe_ms"] = _probe_farthest(topo) * 1000.0
            pids = _harness_pids(topo)
            out.update(memory_kb(pids))
            service_cpu = [cpu_ms(r.pid) for r in topo.services.values() if r.pid]
            out["service_cpu_ms_p50"] = percentile(service_cpu, 50)
            out.update(_spawn_intervals([r.pid for r in topo.services.values() if r.pid]))
            sandbox.snapshot(pids)
        finally:
            began = time.monotonic()
            stop_network(topo.net)
            out["stop_network_s"] = time.monotonic() - began
            began = time.monotonic()
            out["teardown_errors"] = sandbox.teardown()
            out["ledger_teardown_s"] = time.monotonic() - began
            out["down_s"] = out["stop_network_s"] + out["ledger_teardown_s"]
            out["load_down"] = load1()
        out["left_behind"] = sandbox.verify()
    return out


def run_mininet(n: int) -> dict[str, Any]:
    """Build and start ``n`` empty hosts on one Linux bridge with bare Mininet; stop."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("error")
    out: dict[str, Any] = {"hosts": n, "built": True}
    if n + 1 > BRIDGE_PORT_LIMIT:
        return {**out, "built": False,
                "reason": f"{n} hosts need {n} ports on one Linux bridge, which takes "
                          f"at most {BRIDGE_PORT_LIMIT}"}
    with Sandbox(f"mn{n}") as sandbox:
        out["settle_s"] = settle()
        out["load_before"] = load1()
        began = time.monotonic()
        net = Mininet(topo=None, controller=None, switch=LinuxBridge, build=False,
                      autoSetMacs=True, waitConnected=False, inNamespace=False)
        try:
            # Intents under the sandbox's reserved prefix, left unconfirmed to keep the
            # peer's cost at one ledger line per name: undo removes them while the
            # prefix is reserved for this ledger, i.e. until it is gone.
            bridge = f"{sandbox.prefix}s0"
            sandbox.ledger.intend_interface("bridge", bridge, sandbox.prefix)
            switch = net.addSwitch(bridge)
            for i in range(1, n + 1):
                host = net.addHost(f"h{i}")
                sandbox.ledger.record_process(host.pid, what=f"mininet host h{i}")
                root_end = f"{bridge}-e{i}"
                sandbox.ledger.intend_interface("link", root_end, sandbox.prefix)
                net.addLink(host, switch, intfName1=f"h{i}-eth0", intfName2=root_end)
            net.build()
            net.start()
            out["up_s"] = time.monotonic() - began
            out["load_up"] = load1()
            pids = [h.pid for h in net.hosts] + [switch.pid]
            out.update(memory_kb(pids))
            sandbox.snapshot(pids)
        finally:
            began = time.monotonic()
            net.stop()
            out["down_s"] = time.monotonic() - began
            out["load_down"] = load1()
            out["teardown_errors"] = sandbox.teardown()
        out["left_behind"] = sandbox.verify()
    return out


def run(quick: bool, progress: Any = print, sizes: Sequence[int] | None = None
        ) -> dict[str, Any]:
    """Harness and bare Mininet at each size; ``{"rows": [...]}``, one row per size with
    both sides (``harness``, ``mininet``) and the ratios harness/Mininet."""
    rows = []
    for n in sizes or (QUICK_SIZES if quick else SIZES):
        harness = run_harness(n, progress)
        progress(f"  [{n} hosts] harness up {harness['up_s']:.2f} s (load "
                 f"{harness['load_before']:.1f} -> {harness['load_up']:.1f}), down "
                 f"{harness['down_s']:.2f} s (load {harness['load_down']:.1f}), "
                 f"PSS {harness['pss_kb'] / 1024:.0f} MB")
        mininet = run_mininet(n)
        if mininet["built"]:
            progress(f"  [{n} hosts] mininet up {mininet['up_s']:.2f} s (load "
                     f"{mininet['load_before']:.1f} -> {mininet['load_up']:.1f}), down "
                     f"{mininet['down_s']:.2f} s, PSS {mininet['pss_kb'] / 1024:.0f} MB")
        else:
            progress(f"  [{n} hosts] mininet not built: {mininet['reason']}")
        rows.append({"hosts": n, "harness": harness, "mininet": mininet,
                     "up_ratio": ratio(harness["up_s"], mininet.get("up_s")),
                     "network_ratio": ratio(harness["network_s"], mininet.get("up_s")),
                     "down_ratio": ratio(harness["down_s"], mininet.get("down_s"))})
    return {"rows": rows}


def keys(result: dict[str, Any]) -> dict[str, float]:
    """The 1000-host bring-up and teardown times (absent when 1000 hosts were not run)."""
    for row in result["rows"]:
        if row["hosts"] == 1000:
            return {"scale.hosts_1000_up_s": row["harness"]["up_s"],
                    "scale.hosts_1000_teardown_s": row["harness"]["down_s"]}
    return {}


def table(result: dict[str, Any]) -> str:
    """One line per size: each side's up and down time with the load averages."""
    header = ["hosts", "up s", "load", "network s", "services s", "spawn ms 1st/2nd half",
              "down s", "load", "mininet up s", "load", "mininet down s", "up ratio",
              "down ratio"]
    lines = [header]
    for row in result["rows"]:
        h, m = row["harness"], row["mininet"]
        lines.append([row["hosts"], h["up_s"], f"{h['load_before']:.1f}->{h['load_up']:.1f}",
                      h["network_s"], h["services_s"],
                      f"{h['spawn_ms_first_half']:.1f}/{h['spawn_ms_second_half']:.1f}",
                      h["down_s"], f"{h['load_down']:.1f}",
                      m.get("up_s"), f"{m['load_before']:.1f}->{m['load_up']:.1f}"
                      if m["built"] else m["reason"][:30], m.get("down_s"),
                      row["up_ratio"], row["down_ratio"]])
    cells = [[cell(c) for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))
                     for line in cells)


def main(argv: list[str] | None = None) -> int:
    """Run the scale benchmark (as root) and print its table and keys."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_scale",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 and 50 hosts only")
    parser.add_argument("--sizes", type=int, nargs="+", metavar="N",
                        help="these host counts instead")
    args = parser.parse_args(argv)
    if any(n < 2 for n in args.sizes or ()):
        parser.error("--sizes: expected host counts of at least 2")
    result = run(args.quick, sizes=args.sizes)
    print(table(result))
    for key, value in keys(result).items():
        print(f"{key} = {value:.2f}")
    left = [p for row in result["rows"] for side in ("harness", "mininet")
            for p in row[side].get("left_behind", [])]
    if left:
        print(f"LEFT BEHIND: {left}")
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
