"""Measure what the link-shaping backend really delivers on this machine.

``calibrate`` builds ``h1 -- s1 -- h2`` (a Linux bridge, no controller), shapes only the
``h1 -- s1`` link and measures:

* RTT with ``ping`` (``probes`` echoes 10 ms apart) for each one-way delay ``D``. The delay
  applies in each direction of the one shaped link and ``s1 -- h2`` is unshaped, so the
  expected RTT is ``2 * D`` (plus a few tens of microseconds of forwarding);
* TCP throughput with ``iperf3`` (bounded duration) for each bandwidth, with no delay;
* a baseline row with the link unshaped (delay 0, no bandwidth cap), both quantities.

Every shaping engine present is measured in turn (``--backend auto``): ``netem`` where the
kernel has it, the userspace delayer with its compiled data path (``shaper-c``) where that is
built, and with its Python one (``delayer-py``); each row names its engine. With the
userspace engines each throughput row also reports the delayer's CPU use (percent of one
core) during the transfer. Its names carry a prefix reserved on the
machine like a run's (:func:`testbed.emulation.names.reserve_prefix`, held until its
ledger is gone), so it never meets a live run's bridge. Every process, bridge and
interface the calibration creates is recorded in a run ledger (interfaces as intents
before they are made, confirmed after) and removed in a ``finally``; after a crash
``testbed clean`` removes them and frees the prefix.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.emulation.cpu_partition import confine, env_partition
from testbed.emulation.delayer import DelayerClient, start_delayer
from testbed.emulation.ledger import Entry, Ledger
from testbed.emulation.links import ShapedLink, make_link, set_link_params
from testbed.emulation.names import reserve_prefix
from testbed.emulation.shaper import load as load_shaper
from testbed.emulation.shaping import detect_backend, resolve_backend
from testbed.errors import EmulationError

IPERF_PORT = 5201
#: The shaping engines: netem, and the userspace delayer on each of its data paths.
ENGINES = {"netem": ("netem", None), "shaper-c": ("userspace", "c"),
           "delayer-py": ("userspace", "python")}
RTT_RE = re.compile(r"time=([\d.]+) ms")


@dataclass
class Pair:
    """The calibration network: ``h1 -- s1 -- h2`` with ``link`` the shaped h1-s1 link."""

    net: Any
    h1: Any
    h2: Any
    s1: Any
    link: ShapedLink
    delayer: DelayerClient | None
    backend: str
    #: The hosts' CPU list when a CPU partition (``TESTBED_SHAPER_CPUS``) is in effect.
    host_cpus: str | None = None


def engines_for(requested: str = "auto") -> list[str]:
    """The engines to calibrate: every one present for ``auto``, the userspace data paths
    present for ``userspace``, or the one named (refused if it is not present here)."""
    if requested in ENGINES:
        backend, data_path = ENGINES[requested]
        resolve_backend(backend)
        if data_path == "c":
            lib, why = load_shaper()
            if lib is None:
                raise EmulationError(f"shaping engine 'shaper-c' is not built: {why}")
        return [requested]
    backends = [resolve_backend(requested)] if requested != "auto" else \
        [*(["netem"] if detect_backend() == "netem" else []), "userspace"]
    engines = []
    for backend in backends:
        if backend == "netem":
            engines.append("netem")
        else:
            engines += [*(["shaper-c"] if load_shaper()[0] is not None else []), "delayer-py"]
    return engines


@contextmanager
def pair_network(backend: str, ledger: Ledger, prefix: str | None = None,
                 link_spec: Any = None, data_path: str | None = None) -> Iterator[Pair]:
    """Build the two-host network, yield it, and remove everything it made on exit.

    ``data_path`` picks the delayer's (``c``, ``python``; None: detection) for the
    userspace backend. With a CPU partition (``TESTBED_SHAPER_CPUS``, see
    :mod:`testbed.emulation.cpu_partition`) the delayer and the two hosts' shells are
    confined as a run's would be (pass :attr:`Pair.host_cpus` to :func:`iperf_mbit`).

    Without ``prefix``, one is reserved for ``ledger`` (given back when the ledger is
    removed); a given one must be reserved by the caller. Names fit Linux's 15 bytes:
    prefix + ``s1e1``.
    """
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    split = None
    if backend == "userspace":
        try:
            split = env_partition()
        except ValueError as exc:
            raise EmulationError(str(exc)) from None
    prefix = prefix or reserve_prefix(ledger)
    entries: list[Entry] = []
    net = Mininet(topo=None, build=False, controller=None, switch=LinuxBridge)
    workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    entries.append(ledger.record("dir", path=str(workdir)))
    delayer = None
    try:
        if backend == "userspace":
            delayer = start_delayer(ledger, workdir, data_path=data_path, cpus=split)
            assert delayer.entry is not None
            entries.append(delayer.entry)
        h1 = net.addHost(f"{prefix}h1", ip="10.0.0.1/24")
        h2 = net.addHost(f"{prefix}h2", ip="10.0.0.2/24")
        s1 = net.addSwitch(f"{prefix}s1", dpid="1")
        for node in (h1, h2, s1):
            entries.append(ledger.record_process(node.pid, role=node.name))
        for host in (h1, h2) if split else ():
            confine(split.hosts, host.pid)  # what their shells run inherits it
        s1e1, s1e2 = f"{prefix}s1e1", f"{prefix}s1e2"
        made = [ledger.intend_interface("link", s1e1, prefix)]
        entries.extend(made)
        link = make_link(net, h1, s1, link_spec, backend, delayer,
                         intf_names=(f"{prefix}h1e0", s1e1), link_id=f"{prefix}-h1-s1")
        ledger.confirm_interfaces(made)
        made = [ledger.intend_interface("link", s1e2, prefix)]
        entries.extend(made)
        net.addLink(h2, s1, intfName1=f"{prefix}h2e0", intfName2=s1e2)
        ledger.confirm_interfaces(made)
        made = [ledger.intend_interface("bridge", s1.name, prefix)]
        entries.extend(made)
        net.build()
        net.start()
        ledger.confirm_interfaces(made)
        yield Pair(net, h1, h2, s1, link, delayer, backend,
                   split.hosts_list if split else None)
    finally:
        try:
            net.stop()
        finally:
            for entry in reversed(entries):
                ledger.release(entry)


def ping_rtts(src: Any, dst_ip: str, count: int, interval: float = 0.01) -> list[float]:
    """RTTs in ms of ``count`` echoes ``interval`` s apart (after a 2-echo warm-up).

    Lost echoes are simply missing from the list (no ``-w``: with a deadline ping keeps
    sending until ``count`` replies arrive).
    """
    src.cmd(f"ping -c 2 -i 0.2 -W 2 {dst_ip}")  # ARP and bridge learning out of the way
    out = src.cmd(f"ping -n -c {count} -i {interval} -W 2 {dst_ip}")
    return [float(v) for v in RTT_RE.findall(out)]


def _wait_listening(node: Any, port: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not node.cmd(f"ss -Hltn sport = :{port}").strip():
        if time.monotonic() > deadline:
            raise EmulationError(f"{node.name}: nothing listens on port {port}")
        time.sleep(0.02)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def iperf_mbit(client: Any, server: Any, server_ip: str, seconds: float, ledger: Ledger,
               port: int = IPERF_PORT, cpu_pid: int | None = None,
               cpus: str | None = None) -> tuple[float, float | None]:
    """TCP goodput client -> server in Mbit/s over ``seconds``; plus ``cpu_pid``'s CPU %.
    Both ends run on CPU list ``cpus`` when given (the hosts' side of a partition)."""
    pin = ["taskset", "-c", cpus] if cpus else []
    proc = server.popen([*pin, "iperf3", "-s", "-1", "-p", str(port)])
    entry = ledger.record_process(proc.pid, role="iperf3-server")
    try:
        _wait_listening(server, port)
        cpu0, wall0 = (process_cpu_seconds(cpu_pid) if cpu_pid else 0.0), time.monotonic()
        run = client.popen([*pin, "iperf3", "-c", server_ip, "-p", str(port), "-t", f"{seconds:g}",
                            "-J", "--connect-timeout", "3000"])
        try:
            out, err = run.communicate(timeout=seconds + 20)
        except subprocess.TimeoutExpired:
            run.kill()
            out, err = run.communicate()
        cpu = None
        if cpu_pid:
            cpu = 100 * (process_cpu_seconds(cpu_pid) - cpu0) / (time.monotonic() - wall0)
        try:
            report = json.loads(out)
            return report["end"]["sum_received"]["bits_per_second"] / 1e6, cpu
        except (ValueError, KeyError) as exc:
            raise EmulationError(f"iperf3 {client.name} -> {server_ip} failed: "
                                 f"{out[-500:]!r} {err[-500:]!r}") from exc
    finally:
        ledger.release(entry)
        proc.wait(timeout=5)


def _row(backend: str, delay: float, bw: float | None, rtts: Sequence[float] | None,
         mbit: float | None, cpu: float | None) -> dict[str, Any]:
    return {
        "backend": backend,
        "configured_delay_ms": delay,
        "expected_rtt_ms": 2 * delay if rtts is not None else None,
        "rtt_p50_ms": float(np.percentile(rtts, 50)) if rtts else None,
        "rtt_p99_ms": float(np.percentile(rtts, 99)) if rtts else None,
        "configured_bw_mbit": bw,
        "measured_bw_mbit": mbit,
        "delayer_cpu_pct": cpu,
    }


def calibrate(backend: str = "auto", delays_ms: Sequence[float] = (5, 20, 100),
              bws_mbit: Sequence[float] = (10, 100), probes: int = 200,
              iperf_seconds: float = 3.0, ledger: Ledger | None = None) -> list[dict]:
    """Measure RTT per one-way delay and TCP throughput per bandwidth for every engine of
    :func:`engines_for` ``(backend)``; one dict per case, ``backend`` naming the engine."""
    engines = engines_for(backend)
    own = ledger is None
    ledger = ledger or Ledger(f"calibrate-{os.getpid()}-{time.time_ns()}")
    results: list[dict] = []
    try:
        for engine in engines:
            results += _calibrate_engine(engine, delays_ms, bws_mbit, probes, iperf_seconds,
                                         ledger)
    finally:
        if own:
            ledger.teardown()
    return results


def _calibrate_engine(engine: str, delays_ms: Sequence[float], bws_mbit: Sequence[float],
                      probes: int, iperf_seconds: float, ledger: Ledger) -> list[dict]:
    """The calibration cases of one engine, on a network of its own."""
    backend, data_path = ENGINES[engine]
    results = []
    with pair_network(backend, ledger, data_path=data_path) as pair:
        ip2 = pair.h2.IP()
        cpu_pid = pair.delayer.pid if pair.delayer else None
        mbit, cpu = iperf_mbit(pair.h1, pair.h2, ip2, iperf_seconds, ledger, cpu_pid=cpu_pid,
                               cpus=pair.host_cpus)
        results.append(_row(engine, 0.0, None, ping_rtts(pair.h1, ip2, probes), mbit, cpu))
        for delay in delays_ms:
            set_link_params(pair.link, delay_ms=float(delay), bw_mbit=None)
            rtts = ping_rtts(pair.h1, ip2, probes)
            results.append(_row(engine, float(delay), None, rtts, None, None))
        for bw in bws_mbit:
            set_link_params(pair.link, delay_ms=0.0, bw_mbit=float(bw))
            mbit, cpu = iperf_mbit(pair.h1, pair.h2, ip2, iperf_seconds, ledger,
                                   cpu_pid=cpu_pid, cpus=pair.host_cpus)
            results.append(_row(engine, 0.0, float(bw), None, mbit, cpu))
    return results


JSON_KEYS = ("backend", "configured_delay_ms", "expected_rtt_ms", "rtt_p50_ms", "rtt_p99_ms",
             "configured_bw_mbit", "measured_bw_mbit")


def as_json_cases(results: Sequence[dict]) -> list[dict]:
    """The documented ``--json`` form: exactly :data:`JSON_KEYS` per measured case."""
    return [{key: result.get(key) for key in JSON_KEYS} for result in results]


def format_table(results: Sequence[dict]) -> str:
    """A fixed-width text table of :func:`calibrate` results ('-' where not measured)."""
    columns = [("backend", "backend", "{}"), ("delay ms", "configured_delay_ms", "{:g}"),
               ("exp RTT ms", "expected_rtt_ms", "{:.2f}"), ("RTT p50", "rtt_p50_ms", "{:.2f}"),
               ("RTT p99", "rtt_p99_ms", "{:.2f}"), ("bw Mbit/s", "configured_bw_mbit", "{:g}"),
               ("measured Mbit/s", "measured_bw_mbit", "{:.1f}"),
               ("delayer CPU %", "delayer_cpu_pct", "{:.1f}")]
    rows = [[title for title, _, _ in columns]]
    for result in results:
        rows.append([fmt.format(result[key]) if result.get(key) is not None else "-"
                     for _, key, fmt in columns])
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows)
