"""The userspace link delayer: delay, jitter, loss and queue caps where the kernel has no netem.

One delayer process serves every delayed link of a run. A link is a pair of TAP devices,
one created inside each end's network namespace under the interface name the topology
wants; the delayer holds both file descriptors and forwards Ethernet frames between them.
Each direction of a link is shaped on its own:

* **delay** ``delay_ms``: one-way, applied to every frame of the direction;
* **jitter** ``jitter_ms``: a per-frame offset drawn uniformly from ``[-J, J]`` (the delay
  never goes below zero). A direction never reorders: a frame is released no earlier than
  its predecessor, so under load jitter skews the delay upwards rather than reordering
  (netem reorders when jitter exceeds the inter-frame gap; a FIFO wire does not);
* **loss** ``loss_pct``: per-frame Bernoulli drop drawn from a per-direction RNG seeded from
  the link's ``seed``, so a rerun with the same seed drops the same frame numbers;
* **queue** ``queue``: at most this many packets held per direction (netem's ``limit``,
  Mininet's ``max_queue_size``; a GSO frame of the compiled path counts as its segments);
  arrivals beyond it are dropped (drop-tail);
* **up/down**: a link that is down drops every frame, held frames included. The TAP
  devices stay administratively up, so addresses and routes survive a down/up cycle.

Timing: the process sets its timer slack to 1 ns and asks for SCHED_FIFO priority 50 (if
permitted). It waits with ``epoll`` for readiness of any number of TAPs and the control
socket, plus one ``timerfd`` armed (absolute, CLOCK_MONOTONIC, ns resolution) at the next
release time, so waiting neither rounds to milliseconds nor has ``select``'s 1024-fd limit.
Because every direction is FIFO with monotone release times, a deque per direction plus a
heap of the directions' head release times is enough.

Control: a unix stream socket speaking JSON lines; each request ``{"op": ..., ...}`` gets
exactly one reply ``{"ok": true, ...}`` or ``{"ok": false, "error": reason}``. A bad request
never stops the delayer. Operations: ``ping``, ``add_link``, ``set``, ``up``, ``remove``,
``remove_all``, ``stats``, ``lateness``. Closing the TAP fds removes the devices, so ending
the process removes every link it served.

Lateness: every forwarded frame's release lateness (written minus due, ns) goes into the
direction's bounded sample (``stats``: p99 and max of its last 4096 frames) and into one
process-wide :class:`LatenessHistogram` over every frame since it was last reset
(``lateness``), which a run's fidelity guard reads: a shaper that releases late adds delay
the scenario did not ask for.

Data paths: the frames are relayed either by the compiled shaper
(:mod:`testbed.emulation.shaper`, ``shaper-c``: its own thread, TAPs with virtio-net headers
so TCP segmentation offloads cross a link whole) or by this module's Python loop
(``delayer-py``: plain TAPs). The compiled one is used when its library loads; otherwise the
delayer logs one line saying why and relays in Python. ``--data-path`` (or the environment
variable ``TESTBED_SHAPER``: ``auto``, ``c``, ``python``) forces one. ``ping`` reports the
data path in use; both have the semantics above and answer ``stats``/``lateness`` alike.

Run as ``python -m testbed.emulation.delayer --control /path/ctl.sock``; from Python use
:func:`start_delayer` and :class:`DelayerClient`.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import fcntl
import hashlib
import heapq
import json
import math
import os
import random
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.emulation.cpu_partition import CPUS_ENV, Partition, confine, cpu_list, partition
from testbed.emulation.ledger import Entry, Ledger
from testbed.emulation.netns import setns
from testbed.emulation.shaper import LIBRARY, CShaper
from testbed.emulation.shaper import load as load_shaper
from testbed.emulation.tap_rx import RX_MODES, check_rx, env_rx, set_threaded, tap_flags
from testbed.errors import EmulationError

_libc = ctypes.CDLL(None, use_errno=True)

PR_SET_TIMERSLACK = 29
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUNSETOFFLOAD = 0x400454D0
TUNSETVNETHDRSZ = 0x400454D8
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN = 0x01, 0x02, 0x04, 0x08
TUN_F_USO4, TUN_F_USO6 = 0x20, 0x40
VNET_HDR_LEN = 12
CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1
MAX_FRAME = 65535
MAX_REQUEST = 1 << 20
LATE_SAMPLES = 4096
#: Sub-buckets per power of two in :class:`LatenessHistogram` (relative error <= 1/16).
LATE_SUB_BITS = 5
DEFAULT_QUEUE = 1000
LINK_PARAMS = ("delay_ms", "jitter_ms", "loss_pct", "queue", "seed")
#: Names of the two data paths, as ``ping`` reports them and run metadata records them.
DATA_PATHS = {"c": "shaper-c", "python": "delayer-py"}
DATA_PATH_ENV = "TESTBED_SHAPER"
#: Tuning of the compiled shaper's loop threads: SCHED_FIFO priority (0: SCHED_OTHER), how
#: close (us) a release must be to be awaited by polling rather than sleeping, and how many
#: threads share the links (default 1: on 2 CPUs a second thread measured slower, as the
#: threads then compete with the hosts' own processes).
FIFO_ENV, SPIN_ENV = "TESTBED_SHAPER_FIFO", "TESTBED_SHAPER_SPIN_US"
THREADS_ENV = "TESTBED_SHAPER_THREADS"


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


class _TimerFd:
    """A CLOCK_MONOTONIC timerfd armed at absolute nanosecond deadlines.

    Python 3.11 has no ``os.timerfd_*``; ctypes reaches the libc calls.
    """

    def __init__(self) -> None:
        self.fd = _check(_libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC),
                         "timerfd_create")
        self.armed_at: int | None = None

    def arm(self, deadline_ns: int) -> None:
        """Fire at ``deadline_ns`` (time.monotonic_ns() scale); a past deadline fires now."""
        if deadline_ns == self.armed_at:
            return
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(max(deadline_ns, 1), 1_000_000_000)
        _check(_libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None),
               "timerfd_settime")
        self.armed_at = deadline_ns

    def clear(self) -> None:
        """Consume the expiration count so level-triggered epoll stops reporting it."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.armed_at = None


def _disable_ipv6(ifname: str) -> None:
    """Turn IPv6 off on a new TAP (this thread's namespace), if the kernel has IPv6.

    Emulated hosts talk IPv4; IPv6 start-up chatter (router and neighbour solicitations)
    would otherwise be flooded to every bridge port and relayed by the delayer, a cost
    that grows with the square of the number of hosts.
    """
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as fh:
            fh.write("1")
    except FileNotFoundError:
        pass


def set_offloads(fd: int, offload: bool) -> None:
    """Turn a virtio-net-header TAP's checksum/TSO/USO offloads on or off (at any time).

    With offloads on, the host's stack hands the TAP whole 64 KB TCP segments with partial
    checksums, described by the header in front of each frame; writing the frame with that
    header to the peer TAP hands the segment on whole. USO is tried first (kernels >= 6.2).
    Off, the stack segments and checksums before the TAP (in software, also for sockets
    that were sending segments) and the header stays empty: every frame is one packet.
    """
    if not offload:
        fcntl.ioctl(fd, TUNSETOFFLOAD, 0)
        return
    base = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
    try:
        fcntl.ioctl(fd, TUNSETOFFLOAD, base | TUN_F_USO4 | TUN_F_USO6)
    except OSError:
        fcntl.ioctl(fd, TUNSETOFFLOAD, base)


def open_tap(netns_pid: int, ifname: str, home_ns: int, vnet: bool = False,
             offload: bool = True, rx: str = "inline") -> int:
    """Create TAP ``ifname`` inside the network namespace of ``netns_pid``; return its fd.

    The device lives in the namespace where ``/dev/net/tun`` was opened, so the calling
    thread enters the target namespace for the open and returns to ``home_ns`` after.
    ``vnet`` makes a TAP whose frames carry a virtio-net header and (``offload``)
    segmentation offloads (the compiled data path); without it frames are plain Ethernet
    (the Python one). ``rx`` ``threaded`` opens it for NAPI (see
    :mod:`testbed.emulation.tap_rx`; the caller then switches NAPI to its thread).
    """
    if not ifname or len(ifname.encode()) > 15:
        raise ValueError(f"interface name must be 1..15 bytes, got {ifname!r}")
    target = os.open(f"/proc/{netns_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(target)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                flags = IFF_TAP | IFF_NO_PI | (IFF_VNET_HDR if vnet else 0) | tap_flags(rx)
                fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", ifname.encode(), flags))
                if vnet:
                    fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
                    set_offloads(fd, offload)
                _disable_ipv6(ifname)
            except OSError:
                os.close(fd)
                raise
        finally:
            setns(home_ns)
    finally:
        os.close(target)
    return fd


class LatenessHistogram:
    """Counts of release lateness (ns) in log-spaced buckets: constant memory, O(1) adds.

    Values below ``2**LATE_SUB_BITS`` ns are exact; above, each power of two is split in
    ``2**(LATE_SUB_BITS - 1)`` buckets, so a quantile read as its bucket's upper edge
    overstates the true value by at most 1/16 (it never understates it).
    """

    def __init__(self) -> None:
        self.counts = [0] * (64 << LATE_SUB_BITS)  # every shift a 64-bit value can need
        self.n = 0
        self.max_ns = 0

    @classmethod
    def from_counts(cls, counts: list[int], n: int, max_ns: int) -> LatenessHistogram:
        """A histogram holding counts taken elsewhere (the compiled shaper's, same layout)."""
        hist = cls()
        if len(counts) != len(hist.counts):
            raise ValueError(f"expected {len(hist.counts)} buckets, got {len(counts)}")
        hist.counts, hist.n, hist.max_ns = list(counts), n, max_ns
        return hist

    def add(self, ns: int) -> None:
        """Count one lateness; negatives (a clock oddity) count as 0."""
        ns = max(ns, 0)
        shift = max(ns.bit_length() - LATE_SUB_BITS, 0)
        self.counts[(shift << LATE_SUB_BITS) | (ns >> shift)] += 1
        self.n += 1
        self.max_ns = max(self.max_ns, ns)

    @staticmethod
    def _upper(key: int) -> int:
        shift, mantissa = key >> LATE_SUB_BITS, key & ((1 << LATE_SUB_BITS) - 1)
        return ((mantissa + 1) << shift) - 1

    def quantile(self, q: float) -> int | None:
        """The ``q`` quantile in ns (bucket upper edge, capped at the maximum seen)."""
        if not self.n:
            return None
        rank = max(1, math.ceil(q * self.n))
        seen = 0
        for key, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(self._upper(key), self.max_ns)
        return self.max_ns

    def summary(self) -> dict[str, Any]:
        """``count`` frames and their lateness ``p50_us``, ``p99_us``, ``max_us`` (None
        when no frame was released)."""
        def us(ns: int | None) -> float | None:
            return None if ns is None else ns / 1000

        return {"count": self.n, "p50_us": us(self.quantile(0.5)),
                "p99_us": us(self.quantile(0.99)), "max_us": us(self.max_ns if self.n else None)}


def seed_text(params: dict[str, Any], name: str) -> str:
    """What a direction's loss/jitter draws are seeded from: the link's seed and the
    direction's side (``a>b`` or ``b>a`` of ``name``), so the two sides draw apart."""
    return f"{params['seed']}/{name.rsplit(':', 1)[1]}"


@dataclass
class Direction:
    """One direction of a link: frames read from ``src_fd`` are written to ``dst_fd``."""

    key: int
    name: str
    src_fd: int
    dst_fd: int
    delay_ns: int = 0
    jitter_ns: int = 0
    loss: float = 0.0
    limit: int = DEFAULT_QUEUE
    rng: random.Random = field(default_factory=random.Random)
    up: bool = True
    queue: collections.deque = field(default_factory=collections.deque)
    last_release: int = 0
    scheduled: int | None = None
    late_ns: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=LATE_SAMPLES))
    counters: collections.Counter = field(default_factory=collections.Counter)
    max_frame: int = 0

    def configure(self, params: dict[str, Any], reseed: bool) -> None:
        """Apply validated link parameters; ``reseed`` restarts the loss/jitter draws."""
        self.delay_ns = round(params["delay_ms"] * 1e6)
        self.jitter_ns = round(params["jitter_ms"] * 1e6)
        self.loss = float(params["loss_pct"])
        self.limit = int(params["queue"])
        if reseed:
            self.rng = random.Random(seed_text(params, self.name))

    def set_up(self, up: bool) -> None:
        """Bring the direction up or down (down drops its held frames)."""
        self.up = up
        if not up:
            self.clear("down")

    def clear(self, reason: str) -> None:
        """Drop every held frame (counted under ``dropped_<reason>``)."""
        self.counters[f"dropped_{reason}"] += len(self.queue)
        self.queue.clear()
        self.scheduled = None

    def stats(self) -> dict[str, Any]:
        late = sorted(self.late_ns)
        p99 = late[min(len(late) - 1, math.ceil(0.99 * len(late)) - 1)] / 1000 if late else None
        out: dict[str, Any] = {k: self.counters.get(k, 0) for k in STAT_COUNTERS}
        out.update(held=len(self.queue), held_bytes=sum(len(f) for _, f in self.queue),
                   max_frame=self.max_frame, late_p99_us=p99,
                   late_max_us=late[-1] / 1000 if late else None)
        return out


STAT_COUNTERS = ("received", "forwarded", "dropped_loss", "dropped_queue", "dropped_down",
                 "dropped_write", "read_errors")
#: Read errors meaning the TAP is gone: its direction stops; any other error is counted.
DEVICE_GONE = (errno.EBADFD, errno.ENODEV, errno.EIO, errno.EBADF)
#: Most segments one 64 KB GSO frame carries (64 KB / 1448-byte MSS is 45). A queue shorter
#: than this could never admit a whole GSO frame, so such a direction reads single packets.
MAX_GSO_SEGMENTS = 64


@dataclass
class CDirection:
    """One direction of a link relayed by the compiled shaper (same interface as
    :class:`Direction` for the control plane)."""

    name: str
    shaper: CShaper
    handle: int
    src_fd: int
    #: The link may offload (``add_link``'s ``offload``); the source TAP offloads now.
    offload: bool = True
    offloads_on: bool = True
    removed: bool = False

    def configure(self, params: dict[str, Any], reseed: bool) -> None:
        """Apply validated link parameters; ``reseed`` restarts the loss/jitter draws
        from a 64-bit seed derived from the link's seed and this direction's side.

        Loss and the queue count packets: a direction with loss, or a queue too short for
        a whole GSO frame, turns its source TAP's offloads off so that it reads single
        packets (a GSO frame would be dropped whole, ~44 packets at once), and back on when
        neither holds."""
        wanted = self.offload and params["loss_pct"] == 0 \
            and params["queue"] >= MAX_GSO_SEGMENTS
        if wanted != self.offloads_on:
            set_offloads(self.src_fd, wanted)
            self.offloads_on = wanted
        seed = None
        if reseed:
            digest = hashlib.blake2b(seed_text(params, self.name).encode(), digest_size=8)
            seed = int.from_bytes(digest.digest(), "little")
        self.shaper.configure(self.handle, round(params["delay_ms"] * 1e6),
                              round(params["jitter_ms"] * 1e6), float(params["loss_pct"]),
                              int(params["queue"]), seed)

    def set_up(self, up: bool) -> None:
        """Bring the direction up or down (down drops its held frames)."""
        self.shaper.set_up(self.handle, up)

    def stats(self) -> dict[str, Any]:
        """The direction's counters, held packets/bytes, largest frame (Ethernet bytes,
        virtio-net header excluded) and lateness p99/max (us), as :class:`Direction`."""
        raw = self.shaper.stats(self.handle)
        out: dict[str, Any] = {k: raw[k] for k in STAT_COUNTERS}
        out["max_frame"] = raw["max_frame"] - VNET_HDR_LEN if raw["max_frame"] else 0

        def us(ns: int | None) -> float | None:
            return None if ns is None else ns / 1000

        out.update(held=raw["held"], held_bytes=raw["held_bytes"],
                   late_p99_us=us(raw["late_p99_ns"]), late_max_us=us(raw["late_max_ns"]))
        return out


@dataclass
class LinkState:
    """Both directions of one link and the TAP fds it owns."""

    link_id: str
    fds: tuple[int, int]
    ab: Direction | CDirection
    ba: Direction | CDirection
    params: dict[str, Any]
    up: bool = True


def _number(req: dict, key: str, low: float, high: float, integer: bool = False) -> float:
    value = req[key]
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"{key} must be {'an integer' if integer else 'a number'}, "
                         f"got {value!r}")
    if not (low <= value <= high) or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{key} must be in [{low}, {high}], got {value!r}")
    return value


def validate_params(req: dict, defaults: dict[str, Any]) -> dict[str, Any]:
    """Merge the shaping parameters present in ``req`` into ``defaults`` after checking them."""
    params = dict(defaults)
    limits = {"delay_ms": (0, 3_600_000, False), "jitter_ms": (0, 3_600_000, False),
              "loss_pct": (0, 100, False), "queue": (1, 10_000_000, True),
              "seed": (-(2**63), 2**63 - 1, True)}
    for key, (low, high, integer) in limits.items():
        if key in req:
            params[key] = _number(req, key, low, high, integer)
    return params


class Delayer:
    """The event loop: TAP readiness, release timer and control requests."""

    def __init__(self, control_path: str, data_path: str = "auto",
                 rx: str = "inline", cpus: Partition | None = None) -> None:
        self.control_path = control_path
        self.cpus = cpus  # the CPU partition main() confined this process to, if any
        self.rx = check_rx(rx)  # links' receive mode unless their request names one
        self.shaper, self.data_path_reason = choose_data_path(data_path)
        self.data_path = DATA_PATHS["python" if self.shaper is None else "c"]
        self.home_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.epoll = select.epoll()
        self.timer = _TimerFd()
        self.links: dict[str, LinkState] = {}
        self.readers: dict[int, Direction] = {}
        self.clients: dict[int, tuple[socket.socket, bytearray]] = {}
        self.heap: list[tuple[int, int, Direction]] = []
        self.lateness = LatenessHistogram()
        self._keys = 0
        try:
            os.unlink(control_path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(control_path)
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.epoll.register(self.listener.fileno(), select.EPOLLIN)
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        if self.shaper is None:
            self.scheduling = _tune_process(realtime=True)
        else:
            _tune_process(realtime=False)  # the shaper's own thread asks for SCHED_FIFO
            prio = self.shaper.scheduling()
            self.scheduling = f"fifo{prio}" if prio > 0 else "other"

    # -- data path -----------------------------------------------------------------------
    def _read(self, d: Direction) -> None:
        now = time.monotonic_ns()
        counters, queue = d.counters, d.queue
        while True:
            try:
                frame = os.read(d.src_fd, MAX_FRAME)
            except BlockingIOError:
                return
            except OSError as exc:
                counters["read_errors"] += 1
                if exc.errno in DEVICE_GONE:  # deleted under us (`ip link del`): stop polling
                    self._unwatch(d)
                return  # any other error lost one frame at most: go on at the next event
            counters["received"] += 1
            d.max_frame = max(d.max_frame, len(frame))
            if not d.up:
                counters["dropped_down"] += 1
                continue
            if d.loss and d.rng.random() * 100.0 < d.loss:
                counters["dropped_loss"] += 1
                continue
            if len(queue) >= d.limit:
                counters["dropped_queue"] += 1
                continue
            delay = d.delay_ns
            if d.jitter_ns:
                delay = max(0, delay + round(d.rng.uniform(-d.jitter_ns, d.jitter_ns)))
            release = max(now + delay, d.last_release)
            d.last_release = release
            if release <= now and not queue:
                self._write(d, frame, release)
                continue
            queue.append((release, frame))
            if d.scheduled is None:
                d.scheduled = release
                heapq.heappush(self.heap, (release, d.key, d))

    def _unwatch(self, d: Direction) -> None:
        if self.readers.pop(d.src_fd, None) is not None:
            self.epoll.unregister(d.src_fd)

    def _write(self, d: Direction, frame: bytes, due: int) -> None:
        try:
            os.write(d.dst_fd, frame)
        except OSError:
            d.counters["dropped_write"] += 1
            return
        d.counters["forwarded"] += 1
        late = time.monotonic_ns() - due
        d.late_ns.append(late)
        self.lateness.add(late)

    def _release(self) -> None:
        heap = self.heap
        now = time.monotonic_ns()
        while heap and heap[0][0] <= now:
            due, _, d = heapq.heappop(heap)
            if d.scheduled != due:
                continue  # stale: the direction was cleared or rescheduled
            queue = d.queue
            while queue and queue[0][0] <= now:
                release, frame = queue.popleft()
                self._write(d, frame, release)
            if queue:
                d.scheduled = queue[0][0]
                heapq.heappush(heap, (d.scheduled, d.key, d))
            else:
                d.scheduled = None
            now = time.monotonic_ns()
        if heap:
            self.timer.arm(heap[0][0])

    # -- control -------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            conn.setblocking(False)
            self.clients[conn.fileno()] = (conn, bytearray())
            self.epoll.register(conn.fileno(), select.EPOLLIN)

    def _client(self, fd: int) -> None:
        conn, buf = self.clients[fd]
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.epoll.unregister(fd)
            del self.clients[fd]
            conn.close()
            return
        buf += data
        if len(buf) > MAX_REQUEST and b"\n" not in buf:
            buf.clear()
            self._reply(conn, {"ok": False, "error": "request line too long"})
            return
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if line.strip():
                self._reply(conn, self.handle_line(line))

    @staticmethod
    def _reply(conn: socket.socket, reply: dict[str, Any]) -> None:
        """Send one (small) reply line; a vanished or stuck client is not the delayer's error."""
        conn.settimeout(1.0)
        try:
            conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass
        finally:
            conn.setblocking(False)

    def handle_line(self, line: bytes) -> dict[str, Any]:
        """Answer one request line; every failure becomes ``{"ok": false, "error": ...}``."""
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise TypeError("a request must be a JSON object")
            op = req.get("op")
            handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if handler is None:
                raise ValueError(f"unknown op {op!r}; expected one of "
                                 "ping, add_link, set, up, remove, remove_all, stats, "
                                 "lateness")
            return {"ok": True, **handler(req)}
        except KeyError as exc:
            return {"ok": False, "error": f"missing field {exc}"}
        except Exception as exc:  # noqa: BLE001 - a request must never stop the data path
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def _link(self, req: dict) -> LinkState:
        link_id = req["id"]
        if link_id not in self.links:
            raise ValueError(f"no link {link_id!r}")
        return self.links[link_id]

    def op_ping(self, req: dict) -> dict[str, Any]:
        return {"pid": os.getpid(), "links": len(self.links), "scheduling": self.scheduling,
                "data_path": self.data_path, "data_path_reason": self.data_path_reason,
                "rx": self.rx, "cpus": self.cpus.as_dict() if self.cpus else None}

    def op_add_link(self, req: dict) -> dict[str, Any]:
        link_id = req["id"]
        if not isinstance(link_id, str) or not link_id:
            raise ValueError("id must be a non-empty string")
        if link_id in self.links:
            raise ValueError(f"link {link_id!r} already exists")
        ends = []
        for side in ("a", "b"):
            end = req[side]
            if not isinstance(end, dict) or not isinstance(end.get("pid"), int) \
                    or not isinstance(end.get("ifname"), str):
                raise TypeError(f"{side} must be {{pid: int, ifname: str}}")
            ends.append((end["pid"], end["ifname"]))
        offload = req.get("offload", True)
        if not isinstance(offload, bool):
            raise TypeError(f"offload must be true or false, got {offload!r}")
        rx = check_rx(req.get("rx", self.rx))
        defaults = {"delay_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0,
                    "queue": DEFAULT_QUEUE, "seed": 0}
        params = validate_params(req, defaults)
        fds: list[int] = []
        try:
            for pid, ifname in ends:
                try:
                    fds.append(open_tap(pid, ifname, self.home_ns,
                                        vnet=self.shaper is not None, offload=offload, rx=rx))
                except OSError as exc:
                    raise OSError(exc.errno, f"cannot create tap {ifname!r} in the "
                                  f"namespace of pid {pid}: {exc.strerror}") from exc
                if rx == "threaded":
                    set_threaded(pid, ifname)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        made: list[Direction | CDirection] = []
        try:
            for name, src, dst in ((f"{link_id}:a>b", fds[0], fds[1]),
                                   (f"{link_id}:b>a", fds[1], fds[0])):
                d = self._direction(name, src, dst, offload)
                made.append(d)
                d.configure(params, reseed=True)
        except OSError:
            for d in made:
                self._detach(d)
            for fd in fds:
                os.close(fd)
            raise
        self.links[link_id] = LinkState(link_id, (fds[0], fds[1]), made[0], made[1], params)
        return {"id": link_id, "rx": rx}

    def _direction(self, name: str, src: int, dst: int,
                   offload: bool) -> Direction | CDirection:
        """A relayed direction on the data path in use (the compiled one polls ``src``
        from its own thread, with offloads if ``offload``; the Python one registers it with
        this loop)."""
        if self.shaper is not None:
            return CDirection(name, self.shaper, self.shaper.add(src, dst), src, offload,
                              offload)
        self._keys += 1
        d = Direction(self._keys, name, src, dst)
        self.readers[src] = d
        self.epoll.register(src, select.EPOLLIN)
        return d

    def _detach(self, d: Direction | CDirection) -> None:
        """Stop relaying ``d`` and drop its held frames (before its fds are closed); safe
        to repeat, so a removal interrupted by SIGTERM can be finished by :meth:`close`."""
        if isinstance(d, CDirection):
            if not d.removed:
                d.removed = True
                d.shaper.remove(d.handle)
        else:
            d.clear("down")
            self._unwatch(d)

    def op_set(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        unknown = set(req) - {"op", "id", "direction", *LINK_PARAMS}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}; expected {list(LINK_PARAMS)}")
        direction = req.get("direction", "both")
        dirs = {"both": (link.ab, link.ba), "a>b": (link.ab,), "b>a": (link.ba,)}
        if direction not in dirs:
            raise ValueError(f"direction must be one of {list(dirs)}, got {direction!r}")
        params = validate_params(req, link.params)
        if direction == "both":
            link.params = params
        for d in dirs[direction]:
            d.configure(params, reseed="seed" in req)
        return {"id": link.link_id, "params": params}

    def op_up(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        up = req["up"]
        if not isinstance(up, bool):
            raise TypeError(f"up must be true or false, got {up!r}")
        link.up = up
        for d in (link.ab, link.ba):
            d.set_up(up)
        return {"id": link.link_id, "up": up}

    def op_remove(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        del self.links[link.link_id]  # first: an interrupted removal is never redone
        for d in (link.ab, link.ba):
            self._detach(d)
        for fd in link.fds:
            os.close(fd)
        return {"id": link.link_id}

    def op_remove_all(self, _req: dict) -> dict[str, Any]:
        """Remove every link at once.

        Closing a TAP waits for the kernel to unregister the device (about 15-20 ms
        each, mostly waiting), so the closes run on a thread pool instead of one by one.
        """
        links = list(self.links.values())
        removed = sorted(self.links)
        self.links.clear()  # first: an interrupted removal is never redone
        fds = []
        for link in links:
            for d in (link.ab, link.ba):
                self._detach(d)
            fds.extend(link.fds)
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(os.close, fds))
        return {"removed": removed}

    def op_stats(self, req: dict) -> dict[str, Any]:
        link = self._link(req)
        return {"id": link.link_id, "up": link.up, "params": link.params,
                "a_to_b": link.ab.stats(), "b_to_a": link.ba.stats()}

    def op_lateness(self, req: dict) -> dict[str, Any]:
        """Release lateness of every frame since the last reset; ``reset: true`` starts a
        new count after answering (a run resets it when its replays begin)."""
        reset = req.get("reset", False)
        if not isinstance(reset, bool):
            raise TypeError(f"reset must be true or false, got {reset!r}")
        if self.shaper is not None:
            copy = self.shaper.histogram(reset)
            return LatenessHistogram.from_counts(copy.counts, copy.n, copy.max_ns).summary()
        summary = self.lateness.summary()
        if reset:
            self.lateness = LatenessHistogram()
        return summary

    # -- loop ----------------------------------------------------------------------------
    def serve(self) -> None:
        """Run until SIGTERM/SIGINT."""
        listener_fd, timer_fd = self.listener.fileno(), self.timer.fd
        readers, clients = self.readers, self.clients
        while True:
            for fd, _ in self.epoll.poll():
                d = readers.get(fd)
                if d is not None:
                    self._read(d)
                elif fd == timer_fd:
                    self.timer.clear()
                elif fd == listener_fd:
                    self._accept()
                elif fd in clients:
                    self._client(fd)
            if self.heap:
                self._release()

    def close(self) -> None:
        """Remove every link (one failing does not stop the others), stop the compiled
        shaper and remove the control socket."""
        try:
            for link_id in list(self.links):
                try:
                    self.op_remove({"id": link_id})
                except OSError as exc:
                    print(f"delayer: removing link {link_id!r} failed: {exc}",
                          file=sys.stderr, flush=True)
        finally:
            if self.shaper is not None:
                self.shaper.close()
            try:
                os.unlink(self.control_path)
            except FileNotFoundError:
                pass


def env_number(name: str, default: float, low: float, high: float,
               integer: bool = True) -> float:
    """The number in environment variable ``name`` (``default`` if unset), checked to be
    an integer (or any number) in ``[low, high]``; a bad value raises ValueError naming the
    variable and what was expected."""
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return default
    kind = "an integer" if integer else "a number"
    wrong = ValueError(f"{name} must be {kind} in [{low:g}, {high:g}], got {text!r}")
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise wrong from None
    if not low <= value <= high:
        raise wrong
    return value


def env_data_path() -> str:
    """The data path asked for by ``TESTBED_SHAPER`` (``auto`` if unset), checked."""
    value = os.environ.get(DATA_PATH_ENV) or "auto"
    if value not in ("auto", *DATA_PATHS):
        raise ValueError(f"{DATA_PATH_ENV} must be one of {['auto', *DATA_PATHS]}, "
                         f"got {value!r}")
    return value


def choose_data_path(requested: str, library: Path = LIBRARY) -> tuple[CShaper | None, str]:
    """The compiled shaper (from ``library``) for ``auto``/``c`` when it loads, else None
    (the Python loop relays); plus the reason, logged in one line. ``c`` refuses to fall
    back."""
    if requested not in ("auto", *DATA_PATHS):
        raise ValueError(f"data path must be one of {['auto', *DATA_PATHS]}, "
                         f"got {requested!r}")
    shaper, reason = None, "requested"
    if requested != "python":
        lib, reason = load_shaper(library)
        if lib is not None:
            try:
                shaper = CShaper(lib, fifo_priority=int(env_number(FIFO_ENV, 50, 0, 99)),
                                 spin_ns=round(env_number(SPIN_ENV, 30, 0, 1e6, False) * 1000),
                                 threads=int(env_number(THREADS_ENV, 1, 1, 64)))
            except OSError as exc:
                reason = str(exc)
        if shaper is None and requested == "c":
            raise EmulationError(f"the compiled shaper was requested but cannot be used: "
                                 f"{reason}")
    name = DATA_PATHS["python" if shaper is None else "c"]
    print(f"delayer data path: {name} ({reason})", file=sys.stderr, flush=True)
    return shaper, reason


def _tune_process(realtime: bool) -> str:
    """Ask for precise timers, room for many TAP fds and (``realtime``) SCHED_FIFO 50.

    Returns the scheduling class obtained (``fifo50`` or ``other``).
    """
    _libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not realtime:
        return "other"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        return "fifo50"
    except (PermissionError, OSError):
        return "other"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control", required=True, help="path of the control unix socket")
    parser.add_argument("--data-path", choices=("auto", *DATA_PATHS),
                        default=env_data_path(),
                        help=f"who relays frames (default: ${DATA_PATH_ENV} or auto)")
    parser.add_argument("--rx", choices=RX_MODES, default=env_rx(),
                        help="where receiving hosts process the frames of links that do not "
                             "name a mode (default: $TESTBED_SHAPER_RX or inline)")
    parser.add_argument("--cpus",
                        help=f"run only on these CPUs, a CPU list (default: ${CPUS_ENV}; "
                             "unset: every CPU); see testbed.emulation.cpu_partition")
    args = parser.parse_args(argv)
    try:
        cpus = (partition(args.cpus, "--cpus") if args.cpus is not None
                else partition(os.environ.get(CPUS_ENV)))
    except ValueError as exc:
        parser.error(str(exc))
    if cpus is not None:
        confine(cpus.shaper)  # before the shaper's threads exist: they inherit it

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delayer = Delayer(args.control, args.data_path, args.rx, cpus)
    try:
        delayer.serve()
    finally:
        delayer.close()


# -- client --------------------------------------------------------------------------------
class DelayerClient:
    """Synchronous client of one delayer's control socket (safe to share between threads)."""

    def __init__(self, path: str | Path, timeout: float = 10.0, ledger: Ledger | None = None,
                 entry: Entry | None = None) -> None:
        self.path = str(path)
        self.timeout = timeout
        self._ledger, self._entry = ledger, entry
        self._sock: socket.socket | None = None
        self._file: Any = None
        self._lock = threading.Lock()
        self.process: subprocess.Popen | None = None

    @property
    def entry(self) -> Entry | None:
        """The ledger entry of the delayer process when this client started it."""
        return self._entry

    @property
    def pid(self) -> int | None:
        """The delayer's pid when this client started it."""
        return self._entry.data["pid"] if self._entry else None

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self._sock, self._file = sock, sock.makefile("rb")

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return the reply; a refused request raises EmulationError."""
        with self._lock:
            try:
                if self._sock is None:
                    self._connect()
                assert self._sock is not None
                self._sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
                line = self._file.readline()
                if not line:
                    raise ConnectionError("the delayer closed the control connection")
            except OSError as exc:
                self._close()
                raise EmulationError(f"delayer at {self.path} does not answer {op!r}: "
                                     f"{exc}") from exc
        reply = json.loads(line)
        if not reply.get("ok"):
            raise EmulationError(f"delayer refused {op!r}: {reply.get('error')}")
        return reply

    def ping(self) -> dict[str, Any]:
        return self.request("ping")

    def add_link(self, link_id: str, a: tuple[int, str], b: tuple[int, str],
                 **params: Any) -> dict[str, Any]:
        """Create TAP ``a[1]`` in the namespace of pid ``a[0]`` and ``b[1]`` likewise, linked."""
        return self.request("add_link", id=link_id, a={"pid": a[0], "ifname": a[1]},
                            b={"pid": b[0], "ifname": b[1]}, **params)

    def set(self, link_id: str, direction: str = "both", **params: Any) -> dict[str, Any]:
        return self.request("set", id=link_id, direction=direction, **params)

    def up(self, link_id: str, up: bool) -> dict[str, Any]:
        return self.request("up", id=link_id, up=up)

    def remove(self, link_id: str) -> dict[str, Any]:
        return self.request("remove", id=link_id)

    def remove_all(self) -> list[str]:
        """Remove every link of this delayer at once; returns their ids."""
        return self.request("remove_all")["removed"]

    def stats(self, link_id: str) -> dict[str, Any]:
        return self.request("stats", id=link_id)

    def lateness(self, reset: bool = False) -> dict[str, Any]:
        """Release lateness over every link since the last reset (``count``, ``p50_us``,
        ``p99_us``, ``max_us``); ``reset`` starts a new count after this answer."""
        reply = self.request("lateness", reset=reset)
        return {k: reply[k] for k in ("count", "p50_us", "p99_us", "max_us")}

    def alive(self) -> bool:
        """Whether the delayer answers a ping."""
        try:
            self.ping()
            return True
        except EmulationError:
            return False

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def close(self) -> None:
        """Close the control connection (the delayer keeps running)."""
        with self._lock:
            self._close()

    def stop(self) -> None:
        """End the delayer this client started (its TAPs vanish with it)."""
        self.close()
        if self._ledger is not None and self._entry is not None:
            self._ledger.release(self._entry)


def start_delayer(ledger: Ledger, workdir: str | Path, timeout: float = 10.0,
                  data_path: str | None = None, rx: str | None = None,
                  fifo: int | None = None, cpus: Partition | None = None) -> DelayerClient:
    """Start a delayer process, record it in ``ledger`` and wait until it answers.

    ``data_path`` (``auto``, ``c``, ``python``) forces who relays frames; None leaves it to
    the environment (``TESTBED_SHAPER``) or detection. ``rx`` (``inline``, ``threaded``)
    is the receive mode of links that do not name one; None leaves it to
    ``TESTBED_SHAPER_RX`` (see :mod:`testbed.emulation.tap_rx`). ``fifo`` is the compiled
    shaper's SCHED_FIFO priority (0: SCHED_OTHER); None leaves it to ``TESTBED_SHAPER_FIFO``.
    ``cpus`` confines the delayer to its ``shaper`` CPUs; None leaves it to
    ``TESTBED_SHAPER_CPUS`` (see :mod:`testbed.emulation.cpu_partition`).
    """
    if fifo is not None and not 0 <= fifo <= 99:
        raise EmulationError(f"fifo: expected a priority from 0 (SCHED_OTHER) to 99, got {fifo}")
    env = None if fifo is None else {**os.environ, FIFO_ENV: str(fifo)}
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    control = workdir / "delayer.sock"
    log_path = workdir / "delayer.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.emulation.delayer", "--control", str(control),
             *(["--data-path", data_path] if data_path else []),
             *(["--rx", check_rx(rx)] if rx else []),
             *(["--cpus", cpu_list(cpus.shaper)] if cpus else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            cwd=str(Path(__file__).resolve().parents[3]), env=env)
    entry = ledger.record_process(proc.pid, role="delayer", control=str(control))
    client = DelayerClient(control, ledger=ledger, entry=entry)
    client.process = proc
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            ledger.forget(entry)
            tail = log_path.read_text(errors="replace")[-2000:]
            raise EmulationError(f"the delayer exited with {proc.returncode}: {tail}")
        if control.exists() and client.alive():
            return client
        if time.monotonic() > deadline:
            ledger.release(entry)
            raise EmulationError(f"the delayer did not answer on {control} within {timeout} s")
        time.sleep(0.01)


if __name__ == "__main__":
    main()
