"""Link shaper benchmark: the compiled shaper and the Python delayer against a plain veth.

Every path is a chain of bare network namespaces (``unshare --net`` processes recorded in
the sandbox's ledger): one link (``src -- dst``) or three links through two forwarding
namespaces (``src -- r1 -- r2 -- dst``). A link is a plain veth pair (the peer) or a TAP
pair of the delayer with 1 ms one-way delay, relayed by the compiled shaper (``shaper-c``)
or by the Python loop (``delayer-py``), with a queue of :data:`QUEUE` packets per
direction (above the bandwidth-delay product). ``shaper-c-partitioned`` is the compiled
shaper with a CPU partition (:mod:`testbed.emulation.cpu_partition`): the delayer on the
last CPU, and the hosts' processes (the load generator, its sink, iperf3) on the others,
as a run with ``TESTBED_SHAPER_CPUS`` confines its services. ``shaper-c-threaded-other``
is the compiled shaper with links in the ``threaded`` receive mode
(:mod:`testbed.emulation.tap_rx`: the receiving namespace's stack runs in the TAP's NAPI
kernel thread instead of inside the shaper's writes) and the shaper's thread at normal
priority (``SCHED_OTHER``) instead of the delayer's default ``SCHED_FIFO`` 50: it shows
what the real-time priority costs the hosts' own processes at high frame rates, and what
it buys once they keep every CPU busy. Measured in one run:

* the UDP load generator (``udpload.c``, built here with gcc: ``sendmmsg`` in bursts of
  32, 18-byte payloads, never catching up on a missed schedule in one long burst) sending
  as fast as it can over a plain veth, and the sink's receive rate beside it;
* per data path, a ladder of offered rates over one delayed link: the frames the shaper
  relayed per second, their release lateness p99 (the delayer's ``lateness`` histogram,
  reset per step), what the sink in the receiving namespace got (the receiver's
  throughput beside the shaper), the delayer's CPU use and the whole machine's busy
  share (the NAPI threads of ``shaper-c-threaded-other`` are kernel threads, not the
  delayer's).
  The accurate rate is the
  highest relayed rate whose p99 lateness stays under 0.2 ms with no frame lost inside
  the shaper and at least 99 % of the relayed frames reaching the sink (a link on time
  to a starved receiver does not count); the same under 0.7 ms is printed beside it.
  Three ladders per kind (one with ``--quick``), interleaved between the kinds; each
  figure is the median of the ladders' figures. A stricter reading is printed beside it:
  each ladder's highest qualifying rate with no missed step below it;
* per kind, the p99 lateness at :data:`BUSY_RATE` frames/s while every CPU also runs a
  busy loop at normal priority, as CPU-bound services on the hosts would (the median of
  as many runs as ladders);
* TCP goodput with ``iperf3`` through one delayed link and through three, each against
  the same path of plain veths.

Every figure is paired with its peer in the same run and printed with the load average
beside it: other work on the machine moves them a lot. TCP throughputs are medians of
interleaved rounds and its ratios the median of the per-round ratios. Run it with
``python -m tests.bench.bench_shaper [--quick]`` (as root).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.emulation.cpu_partition import Partition, partition
from tests.bench import Sandbox, load1, ratio

DELAY_MS = 1.0
LATE_LIMIT_US = 200.0
PY_LATE_LIMIT_US = 700.0
#: The share of the relayed frames the receiving sink must get for a step to count as
#: accurate: a link on time to a starved receiver is not (the plain veth's sink gets all).
RECEIVER_SHARE = 0.99
UDP_PORT = 9000
IPERF_PORT = 5201
PAYLOAD = 18
#: TCP buffer limits (min default max) in every namespace, veth peer included: the default
#: 6 MB maximum caps one flow at about 3 MB in flight, under a 2-6 ms RTT's bandwidth-delay
#: product at 10+ Gbit/s, so the buffers and not the link would be measured.
TCP_BUFFERS = "4096 131072 67108864"
#: Packets a delayed direction may hold. It holds every packet in flight, so ``queue``
#: bounds its rate at ``queue x MSS / delay``: the default 1000 allows 11.6 Gbit/s at 1 ms,
#: under what the plain veth (no queue cap at all) carries here. 10000 allows 116 Gbit/s,
#: so the shaper and not its queue setting is measured, as a researcher would size the
#: queue above a fast link's bandwidth-delay product.
QUEUE = 10_000
LADDER = (20_000, 30_000, 40_000, 60_000, 80_000, 120_000, 160_000, 200_000, 225_000,
          250_000, 275_000, 300_000, 350_000, 400_000, 450_000, 500_000, 600_000, 800_000,
          1_000_000)
#: Interleaved TCP rounds of the full run: one transfer through a 2-CPU machine's three
#: busy threads (sender, receiver, shaper) varies by up to 1.5x with where the scheduler
#: puts them, so the ratio is the median of five paired rounds.
TCP_ROUNDS = 5
#: Frame-rate ladders per kind in the full run, interleaved between the kinds: on 2 CPUs
#: one ladder's accurate rate is a noisy figure (three ladders of one run gave 227k, 230k
#: and 105k frames/s for ``shaper-c-threaded``), so the figure is the median.
LADDERS = 3
#: What relays each kind of delayed path: the delayer's data path, the links' receive mode,
#: the compiled shaper's SCHED_FIFO priority (None: the delayer's default; 0:
#: SCHED_OTHER) and whether the delayer and the hosts have CPUs of their own
#: (:func:`bench_partition`).
KINDS: dict[str, tuple[str, str, int | None, bool]] = {
    "shaper-c": ("c", "inline", None, False), "shaper-c-partitioned": ("c", "inline", None, True),
    "shaper-c-threaded-other": ("c", "threaded", 0, False),
    "delayer-py": ("python", "inline", None, False)}
#: Each compiled kind's headline keys: the suffix they carry (the default kind's have
#: none) and how the kind differs from the default.
KEY_SUFFIX: dict[str, tuple[str, str]] = {
    "shaper-c": ("", "the default"),
    "shaper-c-partitioned": ("_partitioned", "CPU partition"),
    "shaper-c-threaded-other": ("_threaded_other", "threaded receive, SCHED_OTHER")}
#: Frames/s offered while every CPU also runs a busy loop (a modest rate: what is measured
#: is whether the shaper gets the CPU when its releases are due, not its capacity).
BUSY_RATE = 20_000
UDPLOAD_SOURCE = Path(__file__).with_name("udpload.c")


@dataclass
class Path_:
    """A chain of namespaces: ``pids[0]`` sends to ``dst_ip`` in ``pids[-1]``."""

    pids: list[int]
    dst_ip: str
    entries: list[Any] = field(default_factory=list)
    link_ids: list[str] = field(default_factory=list)
    #: The CPU list the hosts' processes run on (None: every CPU).
    cpus: str | None = None

    def argv(self, pid: int) -> list[str]:
        """The command prefix that runs a host's process in the namespace of ``pid``, on the
        hosts' CPUs."""
        return ["nsenter", "-t", str(pid), "-n",
                *(["taskset", "-c", self.cpus] if self.cpus else [])]


class Lab:
    """Namespaces and links for the benchmark, every one recorded in the sandbox ledger."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.ledger = sandbox.ledger
        self.udpload = sandbox.workdir / "udpload"
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(self.udpload), str(UDPLOAD_SOURCE)],
                       check=True, capture_output=True, text=True)
        self._n = 0

    def sh(self, pid: int, command: str, timeout: float = 60) -> str:
        """Run ``command`` in the network namespace of ``pid``; its stdout (raise on error)."""
        return _checked(["nsenter", "-t", str(pid), "-n", "sh", "-c", command], timeout,
                        f"{command!r} in netns of {pid}")

    def netns(self, entries: list[Any]) -> int:
        """A fresh network namespace held by a recorded ``sleep`` process; its pid."""
        from testbed.poll import wait_until

        proc = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
        entries.append(self.ledger.record_process(proc.pid, role="bench-shaper-netns"))
        root = Path("/proc/self/ns/net").stat().st_ino
        wait_until(lambda: Path(f"/proc/{proc.pid}/ns/net").stat().st_ino != root,
                   what="the namespace to exist")
        self.sh(proc.pid, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                          "net.ipv6.conf.default.disable_ipv6=1 net.ipv4.ip_forward=1 "
                          f"net.ipv4.tcp_rmem='{TCP_BUFFERS}' net.ipv4.tcp_wmem='{TCP_BUFFERS}' && "
                          "ip link set lo up")
        return proc.pid

    def path(self, hops: int, delayer: Any = None, rx: str = "inline",
             cpus: str | None = None) -> Path_:
        """``hops`` links in a chain; veth pairs, or the delayer's TAP pairs (receive mode
        ``rx``) when given; the hosts' processes run on CPU list ``cpus`` (None: any)."""
        entries: list[Any] = []
        pids = [self.netns(entries) for _ in range(hops + 1)]
        self._n += 1
        tag = f"{self.sandbox.prefix}{self._n}"
        link_ids: list[str] = []
        for i in range(hops):
            a, b = f"{tag}l{i}a", f"{tag}l{i}b"
            if delayer is None:
                self.sh(pids[i], f"ip link add {a} type veth peer name {b} netns {pids[i + 1]}")
            else:
                link_ids.append(f"{tag}-l{i}")
                delayer.add_link(link_ids[-1], (pids[i], a), (pids[i + 1], b),
                                 delay_ms=DELAY_MS, queue=QUEUE, rx=rx)
            net = f"10.{200 + self._n % 50}.{i}"
            self.sh(pids[i], f"ip addr add {net}.1/24 dev {a} && ip link set {a} up")
            self.sh(pids[i + 1], f"ip addr add {net}.2/24 dev {b} && ip link set {b} up")
        first, last = f"10.{200 + self._n % 50}.0", f"10.{200 + self._n % 50}.{hops - 1}"
        if hops > 1:
            self.sh(pids[0], f"ip route add default via {first}.2")
            self.sh(pids[-1], f"ip route add default via {last}.1")
            for i in range(1, hops):  # router i: left of it net i-1, right net i
                left, right = f"10.{200 + self._n % 50}.{i - 1}", f"10.{200 + self._n % 50}.{i}"
                for j in range(hops):
                    subnet = f"10.{200 + self._n % 50}.{j}"
                    if j > i:
                        self.sh(pids[i], f"ip route add {subnet}.0/24 via {right}.2")
                    elif j < i - 1:
                        self.sh(pids[i], f"ip route add {subnet}.0/24 via {left}.1")
        path = Path_(pids, f"{last}.2", entries, link_ids, cpus)
        self.sh(pids[0], f"ping -n -c 1 -W 5 {path.dst_ip}")  # ARP out of the way
        return path

    # -- load ------------------------------------------------------------------------------
    def udp(self, path: Path_, rate: float, seconds: float) -> dict[str, float]:
        """Send at ``rate`` frames/s (0: flat out) for ``seconds``; sender and sink rates."""
        sink = subprocess.Popen(
            [*path.argv(path.pids[-1]), str(self.udpload), "sink", str(UDP_PORT),
             f"{seconds + 0.3:g}"], stdout=subprocess.PIPE, text=True)
        entry = self.ledger.record_process(sink.pid, role="bench-shaper-sink")
        try:
            assert sink.stdout is not None
            if sink.stdout.readline().strip() != "ready":
                raise RuntimeError("the UDP sink did not start")
            out = self.host_run(path, [str(self.udpload), "send", path.dst_ip, str(UDP_PORT),
                                       f"{rate:g}", f"{seconds:g}", str(PAYLOAD)],
                                seconds + 30)
            got = sink.stdout.read()
            sink.wait(timeout=10)
        finally:
            self._end(sink, entry)
        sent, sent_s = _frames(out)
        received, _ = _frames(got)
        return {"sent": sent, "sent_fps": sent / sent_s, "received": received,
                "received_fps": received / sent_s}

    def busy(self, path: Path_, delayer: Any, rate: float, seconds: float) -> dict[str, Any]:
        """Send at ``rate`` over ``path`` while one busy loop per CPU runs at normal
        priority (each ends by itself shortly after); the lateness and the sink's share."""
        from testbed.poll import wait_until

        loop = f"import time\nend = time.monotonic() + {seconds + 3:g}\n" \
               "while time.monotonic() < end: pass"
        hogs = []
        try:
            for _ in range(os.cpu_count() or 1):
                proc = subprocess.Popen([sys.executable, "-c", loop])
                hogs.append((proc, self.ledger.record_process(proc.pid,
                                                              role="bench-shaper-busy")))
            delayer.lateness(reset=True)
            load = self.udp(path, rate, seconds)
            wait_until(lambda: delayer.stats(path.link_ids[0])["a_to_b"]["held"] == 0,
                       what="the queue")
            late = delayer.lateness()
        finally:
            for proc, entry in hogs:
                self._end(proc, entry)
        return {"late_p99_us": late["p99_us"], "late_max_us": late["max_us"],
                "received_share": load["received"] / max(load["sent"], 1)}

    @staticmethod
    def host_run(path: Path_, argv: list[str], timeout: float) -> str:
        """Run ``argv`` as the sending host's process of ``path``; its stdout (raise on
        error)."""
        return _checked([*path.argv(path.pids[0]), *argv], timeout,
                        f"{argv[0]} in netns of {path.pids[0]}")

    def _end(self, proc: subprocess.Popen, entry: Any) -> None:
        """Forget a helper that exited; end (through the ledger) one that did not."""
        if proc.poll() is not None:
            self.ledger.forget(entry)
        else:
            self.ledger.release(entry)
            proc.wait(timeout=10)

    def tcp(self, path: Path_, seconds: float) -> float:
        """iperf3 TCP goodput from the first to the last namespace, Mbit/s."""
        server = subprocess.Popen([*path.argv(path.pids[-1]), "iperf3", "-s", "-1", "-p",
                                   str(IPERF_PORT)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        entry = self.ledger.record_process(server.pid, role="bench-shaper-iperf3")
        try:
            from testbed.poll import wait_until

            wait_until(lambda: self.sh(path.pids[-1], f"ss -Hltn sport = :{IPERF_PORT}").strip(),
                       what="iperf3 to listen")
            out = self.host_run(path, ["iperf3", "-c", path.dst_ip, "-p", str(IPERF_PORT),
                                       "-t", f"{seconds:g}", "-J", "--connect-timeout",
                                       "3000"], seconds + 30)
            server.wait(timeout=10)
        finally:
            self._end(server, entry)
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def _checked(argv: list[str], timeout: float, what: str) -> str:
    """Run ``argv``; its stdout, or a RuntimeError naming ``what`` with its stderr."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{what}: {out.stderr.strip()}")
    return out.stdout


def _frames(line: str) -> tuple[int, float]:
    """Frames and seconds from udpload's summary line."""
    fields = dict(part.split("=") for part in line.split())
    return int(fields["frames"]), float(fields["seconds"])


def _cpu_s(pid: int) -> float:
    from testbed.calibrate import process_cpu_seconds

    return process_cpu_seconds(pid)


def _machine_ticks() -> tuple[int, int]:
    """Busy and total clock ticks of all CPUs so far (``/proc/stat``; idle and iowait are
    not busy)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _busy_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total else math.nan


def bench_partition() -> Partition | None:
    """The CPU partition of the ``partitioned`` kinds: the delayer on the highest usable
    CPU, the hosts on the others (None with fewer than 2 usable CPUs)."""
    usable = os.sched_getaffinity(0)
    return partition(str(max(usable))) if len(usable) >= 2 else None


def sweep(lab: Lab, path: Path_, delayer: Any, link_id: str, seconds: float,
          ceiling: float, progress: Any) -> list[dict[str, Any]]:
    """Offered rates up the ladder (to 1.1 x ``ceiling``) until two steps in a row miss
    0.2 ms."""
    from testbed.poll import wait_until

    steps: list[dict[str, Any]] = []
    misses = 0
    for rate in LADDER:
        if rate > ceiling * 1.1:
            break
        before = delayer.stats(link_id)["a_to_b"]
        delayer.lateness(reset=True)
        cpu0, t0, ticks = _cpu_s(delayer.pid), time.monotonic(), _machine_ticks()
        load = lab.udp(path, rate, seconds)
        busy = _busy_pct(ticks, _machine_ticks())
        wait_until(lambda: delayer.stats(link_id)["a_to_b"]["held"] == 0, what="the queue")
        cpu = 100 * (_cpu_s(delayer.pid) - cpu0) / (time.monotonic() - t0)
        late = delayer.lateness()
        after = delayer.stats(link_id)["a_to_b"]
        relayed = after["forwarded"] - before["forwarded"]
        lost = sum(after[k] - before[k] for k in ("dropped_queue", "dropped_write"))
        step = {"offered_fps": rate, "sent_fps": load["sent_fps"],
                "relayed_fps": relayed / seconds, "received_fps": load["received_fps"],
                "lost_in_shaper": lost, "late_p99_us": late["p99_us"],
                "late_max_us": late["max_us"], "cpu_pct": cpu, "machine_busy_pct": busy}
        steps.append(step)
        progress(f"    offered {rate:>9,}/s  sent {load['sent_fps']:>9,.0f}/s  "
                 f"relayed {step['relayed_fps']:>9,.0f}/s  "
                 f"sink {step['received_fps']:>10,.0f}/s  p99 {late['p99_us'] or 0:8.1f} us  "
                 f"max {late['max_us'] or 0:9.1f} us  cpu {cpu:5.1f} %  machine {busy:5.1f} %")
        ok = (late["p99_us"] or 0) < LATE_LIMIT_US and lost == 0
        misses = 0 if ok else misses + 1
        # No stop when the sender falls short of the offered rate: with the shaper's
        # thread taking its CPU at times it often does, and still sends more at the next
        # step (the ladder ends at the generator's veth rate anyway).
        if misses >= 2:
            break
    return steps


def qualifies(step: dict[str, Any], limit_us: float) -> bool:
    """Whether a step's p99 lateness is under ``limit_us``, it lost nothing inside the
    shaper and its sink received at least :data:`RECEIVER_SHARE` of the relayed frames."""
    return (step["late_p99_us"] is not None and step["late_p99_us"] < limit_us
            and step["lost_in_shaper"] == 0
            and step["received_fps"] >= RECEIVER_SHARE * step["relayed_fps"])


def accurate_step(steps: list[dict[str, Any]], limit_us: float) -> dict[str, Any] | None:
    """The qualifying step (:func:`qualifies`) with the highest relayed rate (None if none)."""
    good = [s for s in steps if qualifies(s, limit_us)]
    return max(good, key=lambda s: s["relayed_fps"], default=None)


def accurate_unbroken(steps: list[dict[str, Any]], limit_us: float) -> float:
    """The highest relayed rate among the ladder's steps before its first one that does
    not qualify (0 if the first does not): a stricter reading, which a step that happens
    to qualify above a miss cannot lift."""
    best = 0.0
    for step in steps:
        if not qualifies(step, limit_us):
            break
        best = max(best, float(step["relayed_fps"]))
    return best


def accurate(steps: list[dict[str, Any]], limit_us: float) -> float:
    """The relayed rate of :func:`accurate_step` (0 if no step qualifies)."""
    step = accurate_step(steps, limit_us)
    return float(step["relayed_fps"]) if step else 0.0


def paired_ratio(mine: list[float], peer: list[float]) -> float:
    """The median of the per-round ratios ``mine[i] / peer[i]`` (NaN for no rounds):
    each round's two transfers ran seconds apart, so load drifting across the rounds
    moves both sides of a ratio alike."""
    if len(mine) != len(peer):
        raise ValueError(f"{len(mine)} rounds against {len(peer)} of the peer")
    return _median([ratio(a, b) for a, b in zip(mine, peer)])


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def run(quick: bool, progress: Any = print) -> dict[str, Any]:
    """Measure veth, the compiled shaper and the Python delayer in one run.

    Every path exists at once (both delayers running, the idle one costs nothing), so the
    TCP transfers interleave veth, compiled and Python in rounds; the throughputs are
    medians over the rounds and each ratio is the median of the per-round ratios (a
    round's transfers are seconds apart, so background load moves both sides alike).
    """
    from testbed.emulation.delayer import start_delayer
    from testbed.emulation.shaper.build import build

    seconds, tcp_s, rounds, ladders = (0.6, 2.0, 1, 1) if quick else (1.0, 3.0, TCP_ROUNDS,
                                                                       LADDERS)
    result: dict[str, Any] = {"delay_ms": DELAY_MS, "late_limit_us": LATE_LIMIT_US,
                              "load_start": load1()}
    kinds = dict(KINDS)
    try:
        build()
    except (RuntimeError, OSError) as exc:
        result["build_error"] = str(exc)
        kinds = {k: v for k, v in kinds.items() if v[0] != "c"}
    split = bench_partition()
    if split is None:
        result["partition_skipped"] = "a CPU partition needs at least 2 usable CPUs"
        kinds = {k: v for k, v in kinds.items() if not v[3]}
    with Sandbox("shaper") as sandbox:
        lab = Lab(sandbox)
        by_process = {
            (data_path, fifo, own): start_delayer(
                lab.ledger, sandbox.workdir / (f"{data_path}-{'default' if fifo is None else fifo}"
                                               f"{'-partitioned' if own else ''}"),
                data_path=data_path, fifo=fifo, cpus=split if own else None)
            for data_path, fifo, own in sorted({(v[0], v[2], v[3]) for v in kinds.values()},
                                               key=lambda key: (key[0], key[1] is not None,
                                                                key[2]))}
        delayers = {name: by_process[(data_path, fifo, own)]
                    for name, (data_path, _, fifo, own) in kinds.items()}
        paths = {"veth": (lab.path(1), lab.path(3))}
        for name, (_, rx, _, own) in kinds.items():
            cpus = split.hosts_list if own and split else None
            paths[name] = (lab.path(1, delayers[name], rx, cpus),
                           lab.path(3, delayers[name], rx, cpus))
        veth = lab.udp(paths["veth"][0], 0, seconds)
        veth["load"] = load1()
        result["veth"] = veth
        progress(f"  veth: generator {veth['sent_fps']:,.0f} frames/s (sink "
                 f"{veth['received_fps']:,.0f}/s), load {veth['load']:.1f}")
        for name, delayer in delayers.items():
            ping = delayer.ping()
            result[name] = {"scheduling": ping["scheduling"], "rx": kinds[name][1],
                            "cpus": ping.get("cpus"), "load_before_ladder": load1(),
                            "ladders": []}
        for n in range(ladders):  # interleaved, so drifting load moves every kind alike
            for name, delayer in delayers.items():
                out = result[name]
                progress(f"  {name}: frame-rate ladder {n + 1}/{ladders} over one "
                         f"{DELAY_MS:g} ms link ({out['scheduling']}, {out['rx']} receive, "
                         f"load {load1():.1f})")
                out["ladders"].append(sweep(lab, paths[name][0], delayer,
                                            paths[name][0].link_ids[0], seconds,
                                            veth["sent_fps"], progress))
        for _ in range(ladders):  # interleaved like the ladders
            for name, delayer in delayers.items():
                busy = lab.busy(paths[name][0], delayer, BUSY_RATE, seconds)
                result[name].setdefault("busy_runs", []).append(busy)
                progress(f"  {name}: {BUSY_RATE:,} frames/s with every CPU busy: p99 "
                         f"{busy['late_p99_us'] or 0:.0f} us, max {busy['late_max_us'] or 0:.0f}"
                         f" us, sink {100 * busy['received_share']:.1f} %")
        for name in delayers:
            out = result[name]
            for key, limit in (("accurate_fps", LATE_LIMIT_US),
                               ("accurate_fps_0.7ms", PY_LATE_LIMIT_US)):
                out[f"{key}_ladders"] = [accurate(steps, limit) for steps in out["ladders"]]
                out[key] = _median(out[f"{key}_ladders"])
            out["accurate_fps_unbroken_ladders"] = [accurate_unbroken(steps, LATE_LIMIT_US)
                                                    for steps in out["ladders"]]
            out["accurate_fps_unbroken"] = _median(out["accurate_fps_unbroken_ladders"])
            out["busy_late_p99_us"] = _median([b["late_p99_us"] or math.nan
                                               for b in out["busy_runs"]])
        tcp: dict[tuple[str, int], list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for rnd in range(rounds):
            for hops in (1, 3):
                for kind, pair in paths.items():
                    delayer = delayers.get(kind)
                    cpu0, t0 = (_cpu_s(delayer.pid) if delayer else 0.0), time.monotonic()
                    mbit = lab.tcp(pair[0 if hops == 1 else 1], tcp_s)
                    tcp.setdefault((kind, hops), []).append(mbit)
                    if delayer is not None and hops == 1:
                        cpu.setdefault(kind, []).append(
                            100 * (_cpu_s(delayer.pid) - cpu0) / (time.monotonic() - t0))
                progress(f"  TCP round {rnd + 1}, {hops} hop(s): " + ", ".join(
                    f"{kind} {tcp[(kind, hops)][-1]:,.0f}" for kind in paths) +
                    f" Mbit/s (load {load1():.1f})")
        for kind in paths:
            target = result[kind]
            target["tcp_1hop_mbit"] = _median(tcp[(kind, 1)])
            target["tcp_3hop_mbit"] = _median(tcp[(kind, 3)])
            target["tcp_runs_mbit"] = {"1": tcp[(kind, 1)], "3": tcp[(kind, 3)]}
            for hops in (1, 3):
                target[f"tcp_{hops}hop_ratio"] = paired_ratio(tcp[(kind, hops)],
                                                              tcp[("veth", hops)])
            if kind in cpu:
                target["tcp_1hop_cpu_pct"] = _median(cpu[kind])
        for delayer in by_process.values():
            delayer.stop()
        result["load_end"] = load1()
        sandbox.snapshot()
        errors = sandbox.teardown()
        result["leftovers"] = errors + sandbox.verify()
    return result


def keys(result: dict[str, Any]) -> dict[str, float]:
    """The run's headline figures under their JSON keys (NaN where not measured)."""
    out = {"shaper.frames_per_s_veth": float(result.get("veth", {}).get("sent_fps",
                                                                         math.nan))}
    for kind, (suffix, _) in KEY_SUFFIX.items():
        r = result.get(kind, {})
        for key, field_ in (("frames_per_s_accurate", "accurate_fps"),
                            ("tcp_ratio_vs_veth", "tcp_1hop_ratio"),
                            ("tcp_3hop_ratio_vs_veth", "tcp_3hop_ratio"),
                            ("late_p99_us_cpus_busy", "busy_late_p99_us")):
            out[f"shaper.{key}{suffix}"] = float(r.get(field_, math.nan))
    return out


def table(result: dict[str, Any]) -> str:
    """Every kind of delayed path side by side with the veth peer (frame rates: the median
    of the ladders, each ladder's figure beside it)."""
    veth = result["veth"]
    rows = [("", "frames/s p99<0.2ms", "per ladder", "every step below", "frames/s p99<0.7ms",
             "TCP 1 hop Mbit/s", "ratio", "TCP 3 hops Mbit/s", "ratio", "CPU % (TCP)",
             "p99 us, CPUs busy")]
    rows.append(("veth", f"{veth['sent_fps']:,.0f} (generator)", "", "", "",
                 f"{veth['tcp_1hop_mbit']:,.0f}", "1.00", f"{veth['tcp_3hop_mbit']:,.0f}",
                 "1.00", "", ""))
    for name in KINDS:
        r = result.get(name)
        if r is None:
            continue
        rows.append((name, f"{r['accurate_fps']:,.0f}",
                     ", ".join(f"{x / 1000:.0f}k" for x in r["accurate_fps_ladders"]),
                     f"{r['accurate_fps_unbroken']:,.0f}",
                     f"{r['accurate_fps_0.7ms']:,.0f}",
                     f"{r['tcp_1hop_mbit']:,.0f}", f"{r['tcp_1hop_ratio']:.2f}",
                     f"{r['tcp_3hop_mbit']:,.0f}", f"{r['tcp_3hop_ratio']:.2f}",
                     f"{r['tcp_1hop_cpu_pct']:.0f}", f"{r['busy_late_p99_us']:,.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    runs = veth.get("tcp_runs_mbit", {})
    lines.append(f"TCP: medians of {len(runs.get('1', []))} interleaved rounds, ratio = median "
                 "of the per-round ratios; Mbit/s per round: " + "; ".join(
                     f"{name} {hops} hop(s) " + ", ".join(
                         f"{x:,.0f}" for x in result[name]["tcp_runs_mbit"][hops])
                     for name in ("veth", *KINDS) if name in result
                     for hops in ("1", "3")))
    lines.append("every step below: the same rule, but a ladder's figure is its highest "
                 "qualifying rate with no missed step below it (median of the ladders)")
    lines.append(f"p99 us, CPUs busy: release lateness at {BUSY_RATE:,} frames/s with a busy "
                 "loop per CPU, per run: " + "; ".join(
                     f"{name} " + ", ".join(f"{b['late_p99_us'] or 0:,.0f}"
                                            for b in result[name]["busy_runs"])
                     for name in KINDS if name in result))
    lines.append(f"load average {result['load_start']:.1f} at the start, "
                 f"{result['load_end']:.1f} at the end")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter steps and transfers")
    parser.add_argument("--json", help="write the full result here")
    args = parser.parse_args(argv)
    result = run(args.quick)
    print(table(result))
    print(json.dumps(keys(result), indent=1))
    if result.get("leftovers"):
        print(f"LEFT BEHIND: {result['leftovers']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
