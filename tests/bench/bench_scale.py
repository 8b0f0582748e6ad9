"""Scale benchmark: build, start and tear down topologies of N hosts on one Linux bridge.

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
ledger too, so a crash leaves nothing that ``testbed clean`` could not remove.
"""

from __future__ import annotations

import time
from typing import Any

from tests.bench import Sandbox, cpu_ms, memory_kb, percentile, process_group

LINK_DELAY_MS = 1.0
SERVICE_PORT = 8000


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
        began = time.monotonic()
        topo = bring_up(scenario, sandbox.ledger, sandbox.workdir, sandbox.prefix, note)
        out["up_s"] = time.monotonic() - began
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
            sandbox.snapshot(pids)
        finally:
            began = time.monotonic()
            stop_network(topo.net)
            out["stop_network_s"] = time.monotonic() - began
            began = time.monotonic()
            out["teardown_errors"] = sandbox.teardown()
            out["ledger_teardown_s"] = time.monotonic() - began
            out["down_s"] = out["stop_network_s"] + out["ledger_teardown_s"]
        out["left_behind"] = sandbox.verify()
    return out


def run_mininet(n: int) -> dict[str, Any]:
    """Build and start ``n`` empty hosts on one Linux bridge with bare Mininet; stop."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("error")
    out: dict[str, Any] = {"hosts": n}
    with Sandbox(f"mn{n}") as sandbox:
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
            pids = [h.pid for h in net.hosts] + [switch.pid]
            out.update(memory_kb(pids))
            sandbox.snapshot(pids)
        finally:
            began = time.monotonic()
            net.stop()
            out["down_s"] = time.monotonic() - began
            out["teardown_errors"] = sandbox.teardown()
        out["left_behind"] = sandbox.verify()
    return out


def run(quick: bool, progress: Any = print) -> list[dict[str, Any]]:
    """Harness and bare Mininet at each size; one row per size with both and ratios."""
    rows = []
    for n in (10, 50) if quick else (10, 50, 100, 200):
        harness = run_harness(n, progress)
        progress(f"  [{n} hosts] harness up {harness['up_s']:.2f} s, down "
                 f"{harness['down_s']:.2f} s, PSS {harness['pss_kb'] / 1024:.0f} MB")
        mininet = run_mininet(n)
        progress(f"  [{n} hosts] mininet up {mininet['up_s']:.2f} s, down "
                 f"{mininet['down_s']:.2f} s, PSS {mininet['pss_kb'] / 1024:.0f} MB")
        rows.append({"hosts": n, "harness": harness, "mininet": mininet,
                     "up_ratio": harness["up_s"] / mininet["up_s"],
                     "network_ratio": harness["network_s"] / mininet["up_s"],
                     "down_ratio": harness["down_s"] / mininet["down_s"]})
    return rows
