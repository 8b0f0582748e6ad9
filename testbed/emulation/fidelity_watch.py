"""Takes an emulation run's fidelity measures while its replays run.

:class:`FidelityWatch` brackets the replays of :func:`testbed.emulation.executor.run_emulation`:
on entry it probes the round trip of every client-to-target path (a few TCP connects
from inside the client's namespace, right after bring-up, before any event), resets the
userspace delayer's release-lateness count and starts a
:class:`~testbed.host_monitor.HostMonitor`; on exit it stops the monitor and reads the
delayer's count. :meth:`FidelityWatch.verdict` adds the dispatch lag of the rows and
the lateness of the replays' events (the lines the event scheduler logged,
``topo.event_records``) and hands everything to :func:`testbed.analysis.fidelity.judge`. The thresholds and the judgement
live there; this module only measures.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from testbed.analysis import fidelity
from testbed.emulation.probe import in_netns
from testbed.errors import EmulationError
from testbed.host_monitor import HostMonitor

if TYPE_CHECKING:
    from testbed.emulation.topology_view import TopologyView

#: Connects timed per path, after one warm-up connect (ARP, bridge learning).
PROBES = 5
PROBE_TIMEOUT_S = 2.0
#: Connected to on a target that runs no service: its RST answers after one round trip.
CLOSED_PORT = 9
MONITOR_INTERVAL_S = 0.5
MAX_PROBE_THREADS = 16


def tcp_rtt_ms(ip: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> float | None:
    """One TCP handshake's round trip to ``ip:port`` in ms (SYN to SYN-ACK, or to the RST
    of a closed port); ``None`` when nothing came back in time."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    began = time.perf_counter()
    try:
        sock.connect((ip, port))
    except ConnectionRefusedError:
        pass
    except OSError:
        return None
    finally:
        sock.close()
    return (time.perf_counter() - began) * 1000


def probe_path(path: Mapping[str, Any], ip: str, port: int,
               probes: int = PROBES) -> dict[str, Any]:
    """``path`` (from :func:`testbed.analysis.fidelity.probe_plan`) with its measured RTT: the
    median (``measured_ms``) and minimum of ``probes`` connects, or an ``error``. Runs in
    the client's network namespace."""
    tcp_rtt_ms(ip, port)
    samples = [ms for ms in (tcp_rtt_ms(ip, port) for _ in range(probes)) if ms is not None]
    out = {**path, "samples": len(samples), "measured_ms": None, "min_ms": None,
           "error": None}
    if samples:
        out.update(measured_ms=statistics.median(samples), min_ms=min(samples))
    else:
        out["error"] = f"no TCP answer from {ip}:{port} within {PROBE_TIMEOUT_S:g} s"
    return out


def probe_rtts(topo: TopologyView, plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every planned path probed, one thread per client (its paths one after another)."""
    scenario, net = topo.scenario, topo.net
    by_client: dict[str, list[dict[str, Any]]] = {}
    for path in plan:
        by_client.setdefault(path["client"], []).append(path)

    def port_of(node: str) -> int:
        services = scenario.services_on(node)
        return services[0].port if services else CLOSED_PORT

    def client_paths(client: str) -> list[dict[str, Any]]:
        return in_netns(net.hosts[client].pid, lambda: [
            probe_path(p, net.ip(p["target"]), port_of(p["target"]))
            for p in by_client[client]])

    if not by_client:
        return []
    with ThreadPoolExecutor(max_workers=min(len(by_client), MAX_PROBE_THREADS)) as pool:
        done = dict(zip(by_client, pool.map(client_paths, by_client), strict=True))
    return [path for client in by_client for path in done[client]]


class FidelityWatch:
    """The measures of one run's replays; use as ``with FidelityWatch(topo) as watch:``
    around the replays, then :meth:`verdict` with their rows."""

    def __init__(self, topo: TopologyView,
                 progress: Callable[[str], None] = lambda _line: None) -> None:
        self.topo = topo
        self.progress = progress
        self.rtt: list[dict[str, Any]] | None = None
        self.monitor: HostMonitor | None = None
        self.host: dict[str, Any] | None = None
        self.lateness: dict[str, Any] | None = None
        self.absent: dict[str, str] = {}
        self._delayer = topo.infra.delayer if topo.net.backend == "userspace" else None

    def start(self) -> Self:
        """Probe the paths, reset the shaper's lateness count, start the host monitor."""
        began = time.monotonic()
        plan = fidelity.probe_plan(self.topo.scenario)
        self.rtt = probe_rtts(self.topo, plan)
        if not plan:
            self.rtt, self.absent["rtt"] = None, "the scenario has no client-to-target path"
        self.progress(f"fidelity guard: RTT of {len(plan)} path(s) probed in "
                      f"{time.monotonic() - began:.1f} s")
        if self._delayer is None:
            self.absent["shaper_lateness"] = \
                f"the {self.topo.net.backend} backend reports no release lateness"
        else:
            self._delayer.lateness(reset=True)
        self.monitor = HostMonitor(interval_s=MONITOR_INTERVAL_S).start()
        return self

    def stop(self) -> None:
        """Stop the monitor and read the shaper's count (once; safe to call again)."""
        if self.monitor is None or self.host is not None:
            return
        self.host = self.monitor.stop().to_dict()
        if self._delayer is not None:
            try:
                late = self._delayer.lateness()
            except EmulationError as exc:
                self.absent["shaper_lateness"] = f"the delayer did not report: {exc}"
                return
            if late["count"]:
                self.lateness = {"count": late["count"], "p50_ms": late["p50_us"] / 1000,
                                 "p99_ms": late["p99_us"] / 1000,
                                 "max_ms": late["max_us"] / 1000}
            else:
                self.absent["shaper_lateness"] = "no frame crossed a delayed link"

    def verdict(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """The judged measures (:func:`testbed.analysis.fidelity.judge`), with ``rows``' dispatch
        lag; the run's ``metadata.json`` keeps it as ``fidelity``."""
        self.stop()
        absent = dict(self.absent)
        lag = fidelity.dispatch_lag(rows)
        if lag is None:
            absent["dispatch_lag"] = "no row records a scheduled send (" \
                                     f"kinds {', '.join(fidelity.LAG_KINDS)})"
        scenario = self.topo.scenario
        events = fidelity.event_lateness(
            self.topo.event_records,
            fidelity.DEFAULT_THRESHOLDS.event_allowance(scenario.duration))
        if events is None:
            absent["event_lateness"] = (
                "no replay logged the scenario's events"
                if scenario.events else "the scenario has no events")
        measures = {
            "host_idle_share": self.host["idle_share"] if self.host else None,
            "host_min_idle_share": self.host["min_idle_share"] if self.host else None,
            "host_seconds": self.host["duration_s"] if self.host else None,
            "dispatch_lag": lag,
            "shaper_lateness": self.lateness,
            "rtt": self.rtt,
            "event_lateness": events,
        }
        return fidelity.judge(measures, absent=absent)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
