"""The userspace delayer on its own: two bare network namespaces joined by its TAP links.

Each test gets two namespaces (``unshare --net`` processes) and a delayer, all recorded in
a ledger and removed afterwards; everything is named with the ``tbt`` prefix. The tests of
the relaying semantics run once per data path: the compiled shaper (``c``, built here if
its library is missing or stale) and the Python loop (``python``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from testbed.calibrate import RTT_RE
from testbed.emulation.cpu_partition import Partition, partition
from testbed.emulation.delayer import DelayerClient, start_delayer
from testbed.emulation.delayer.server import Delayer
from testbed.emulation.ledger import Ledger, is_running, process_start_time
from testbed.emulation.shaper.build import build as build_shaper
from testbed.emulation.tap_rx import is_threaded
from testbed.errors import EmulationError
from testbed.poll import wait_until
from tests.emulation.rtt_checks import assert_adds, p50

pytestmark = pytest.mark.emulation

IP_A, IP_B = "10.77.0.1", "10.77.0.2"
DATA_PATH_NAMES = {"c": "shaper-c", "python": "delayer-py"}


def _own_netns(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    except FileNotFoundError:
        return False


@dataclass
class Pair:
    """Two namespaces (pids ``a`` and ``b``) and the delayer serving their links."""

    ledger: Ledger
    a: int
    b: int
    delayer: DelayerClient

    def sh(self, pid: int, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(pid), "-n", "sh", "-c", command],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def link(self, link_id: str = "tbt-l1", names: tuple[str, str] = ("tbtA0", "tbtB0"),
             **params: object) -> None:
        """Make a link, address both ends and resolve ARP (so it does not skew counts).

        Loss is switched on after the first exchange so the ARP resolution cannot fail.
        """
        loss = params.pop("loss_pct", 0.0)
        self.delayer.add_link(link_id, (self.a, names[0]), (self.b, names[1]), **params)
        for pid, name, ip in ((self.a, names[0], IP_A), (self.b, names[1], IP_B)):
            out = self.sh(pid, f"ip link set lo up && ip addr add {ip}/24 dev {name} && "
                               f"ip link set {name} up")
            assert out.returncode == 0, out.stderr
        assert self.sh(self.a, f"ping -n -c 1 -W 5 {IP_B}").returncode == 0
        if loss:
            self.delayer.set(link_id, loss_pct=loss, seed=params.get("seed", 0))

    def ping(self, count: int, interval: float = 0.01, extra: str = "") -> str:
        return self.sh(self.a, f"ping -n -c {count} -i {interval} -W 1 {extra} {IP_B}").stdout

    def rtts(self, count: int, interval: float = 0.01) -> list[float]:
        return [float(v) for v in RTT_RE.findall(self.ping(count, interval))]


@contextmanager
def delayer_pair(data_path: str = "auto", rx: str | None = None,
                 fifo: int | None = None, cpus: Partition | None = None) -> Iterator[Pair]:
    """Two namespaces and a delayer relaying on ``data_path`` (links in receive mode
    ``rx`` unless named; the compiled shaper at SCHED_FIFO priority ``fifo``; confined to
    the ``shaper`` CPUs of ``cpus``), recorded in a ledger and torn down on exit."""
    ledger = Ledger(f"tbt-delayer-{os.getpid()}-{time.time_ns()}")
    try:
        pids = []
        for _ in range(2):
            proc = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
            ledger.record_process(proc.pid, role="tbt-netns")
            wait_until(lambda p=proc.pid: _own_netns(p), what="the namespace to exist")
            pids.append(proc.pid)
            subprocess.run(["nsenter", "-t", str(proc.pid), "-n", "sysctl", "-qw",
                            "net.ipv6.conf.default.disable_ipv6=1"], check=True)  # no stray ND
        workdir = f"/tmp/tbt-delayer-{os.getpid()}-{time.time_ns()}"
        ledger.record("dir", path=workdir)
        if data_path == "c":
            build_shaper()
        delayer = start_delayer(ledger, workdir, data_path=data_path, rx=rx, fifo=fifo,
                                cpus=cpus)
        if data_path != "auto":
            assert delayer.ping()["data_path"] == DATA_PATH_NAMES[data_path]
        yield Pair(ledger, pids[0], pids[1], delayer)
        delayer.close()
    finally:
        assert ledger.teardown() == []


@pytest.fixture(params=["c", "python"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    with delayer_pair(request.param) as made:
        yield made


def check_rtts(pair: Pair, count: int, base_ms: float, expected_ms: float) -> None:
    """Ping ``count`` times and check the RTT gained ``expected_ms`` over ``base_ms``
    (see :mod:`tests.emulation.rtt_checks`)."""
    pair.delayer.lateness(reset=True)
    rtts = pair.rtts(count)
    assert len(rtts) == count
    assert_adds(rtts, base_ms, expected_ms, pair.delayer.lateness())


def delayed_rtts(pair: Pair, delay_ms: float, count: int, base_ms: float) -> None:
    """Set ``tbt-l1``'s delay both ways and check the RTT gained twice that."""
    pair.delayer.set("tbt-l1", delay_ms=delay_ms)
    check_rtts(pair, count, base_ms, 2 * delay_ms)


def unshaped_rtt(pair: Pair) -> float:
    """Make ``tbt-l1`` with no delay and return the path's median RTT (ms)."""
    pair.link(delay_ms=0)
    return p50(pair.rtts(100))


@pytest.mark.timing
@pytest.mark.parametrize("delay_ms", [5, 20])
def test_delay_gives_twice_the_one_way_delay_as_rtt(pair: Pair, delay_ms: float) -> None:
    delayed_rtts(pair, delay_ms, 200, unshaped_rtt(pair))
    stats = pair.delayer.stats("tbt-l1")
    for side in ("a_to_b", "b_to_a"):  # every echo crossed the link both ways, delayed
        assert stats[side]["forwarded"] >= 200, stats
        assert 0 <= stats[side]["late_p99_us"] <= stats[side]["late_max_us"], stats


def test_lateness_counts_every_forwarded_frame_since_the_reset(pair: Pair) -> None:
    pair.link(delay_ms=2)
    pair.delayer.lateness(reset=True)
    assert pair.delayer.lateness() == {"count": 0, "p50_us": None, "p99_us": None,
                                       "max_us": None}
    assert len(pair.rtts(20)) == 20
    late = pair.delayer.lateness(reset=True)
    stats = pair.delayer.stats("tbt-l1")  # read after: it counts every frame since link-up
    forwarded = stats["a_to_b"]["forwarded"] + stats["b_to_a"]["forwarded"]
    assert 40 <= late["count"] <= forwarded
    assert 0 <= late["p50_us"] <= late["p99_us"] <= late["max_us"]
    assert pair.delayer.lateness()["count"] == 0
    with pytest.raises(EmulationError, match="reset must be true or false"):
        pair.delayer.request("lateness", reset="yes")


@pytest.mark.timing
def test_runtime_change_of_delay(pair: Pair) -> None:
    base = unshaped_rtt(pair)
    delayed_rtts(pair, 5, 50, base)
    delayed_rtts(pair, 30, 50, base)
    pair.delayer.set("tbt-l1", direction="a>b", delay_ms=0)
    check_rtts(pair, 50, base, 30)


def test_seeded_loss_is_per_direction_and_about_right(pair: Pair) -> None:
    pair.link(loss_pct=20.0, seed=7)
    pair.ping(500, interval=0.002)
    ab = pair.delayer.stats("tbt-l1")["a_to_b"]
    # 500 requests at p = 0.2: mean 100 drops, sd 8.9; 4.5 sd either side
    assert 500 <= ab["received"] <= 510
    assert 60 <= ab["dropped_loss"] <= 140, ab
    assert ab["forwarded"] + ab["dropped_loss"] == ab["received"]


def test_loss_draws_repeat_with_the_same_seed(pair: Pair) -> None:
    """Same seed, same frame numbers dropped: the loss pattern of a link is reproducible."""
    patterns = []
    for n in range(2):
        pair.link(f"tbt-s{n}", names=(f"tbtA{n}", f"tbtB{n}"), loss_pct=30.0, seed=11)
        out = pair.ping(100, interval=0.002)
        patterns.append({line.split("icmp_seq=")[1].split()[0]
                         for line in out.splitlines() if "icmp_seq=" in line})
        pair.delayer.remove(f"tbt-s{n}")
    assert patterns[0] == patterns[1]
    assert 30 <= len(patterns[0]) <= 70  # about 0.7 ** 2 of 100 round trips survive


def test_queue_cap_drops_beyond_the_limit(pair: Pair) -> None:
    pair.link(delay_ms=300, queue=10)
    before = pair.delayer.stats("tbt-l1")["a_to_b"]
    burst = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             f"[s.sendto(b'x', ('{IP_B}', 9)) for _ in range(50)]")
    assert pair.sh(pair.a, f'python3 -c "{burst}"').returncode == 0  # 50 frames in < 1 ms
    wait_until(lambda: pair.delayer.stats("tbt-l1")["a_to_b"]["held"] == 0, what="release")
    after = pair.delayer.stats("tbt-l1")["a_to_b"]
    assert after["dropped_queue"] - before["dropped_queue"] == 40, after
    assert after["forwarded"] - before["forwarded"] == 10, after


def test_jitter_never_reorders(pair: Pair) -> None:
    """Jittered frames leave in order, each way within [5, 15] ms plus the FIFO wait
    behind the frame before; the upper bound also allows the releases' own lateness as the
    delayer reports it for these echoes (a stalled host delays a release, it does not
    change the drawn delay)."""
    pair.link(delay_ms=10, jitter_ms=5)
    pair.delayer.lateness(reset=True)
    out = pair.ping(300, interval=0.002)
    late = pair.delayer.lateness()
    seqs = [int(line.split("icmp_seq=")[1].split()[0])
            for line in out.splitlines() if "icmp_seq=" in line]
    rtts = [float(v) for v in RTT_RE.findall(out)]
    assert len(seqs) == 300 and seqs == sorted(seqs)
    allowance_ms = 2 * late["max_us"] / 1000
    assert min(rtts) >= 10 - 0.5, min(rtts)
    assert max(rtts) <= 30 + 5 + allowance_ms, (max(rtts), late)
    assert np.std(rtts) > 1.0  # the jitter is really there


def test_link_down_drops_everything_and_up_restores(pair: Pair) -> None:
    pair.link(delay_ms=1)
    pair.delayer.up("tbt-l1", False)
    assert "0 received" in pair.ping(5, interval=0.05)
    stats = pair.delayer.stats("tbt-l1")
    assert stats["up"] is False and stats["a_to_b"]["dropped_down"] >= 5
    pair.delayer.up("tbt-l1", True)
    assert len(pair.rtts(5, interval=0.05)) == 5


def test_bad_requests_get_errors_and_the_delayer_survives(pair: Pair) -> None:
    pair.link(delay_ms=1)
    path = pair.delayer.path
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(path)
        reader = raw.makefile("rb")
        for line in (b"not json", b"[1, 2]", b'{"op": "nope"}', b'{"op": "set"}',
                     b'{"op": "set", "id": "tbt-l1", "delay_ms": -1}',
                     b'{"op": "set", "id": "tbt-l1", "delay_ms": "5"}',
                     b'{"op": "set", "id": "tbt-l1", "bogus": 1}',
                     b'{"op": "up", "id": "tbt-l1", "up": "yes"}',
                     b'{"op": "add_link", "id": "x", "a": {"pid": 1}, "b": 3}'):
            raw.sendall(line + b"\n")
            reply = json.loads(reader.readline())
            assert reply["ok"] is False and reply["error"], line
    with pytest.raises(EmulationError, match="no link"):
        pair.delayer.stats("tbt-missing")
    with pytest.raises(EmulationError, match="already exists"):
        pair.delayer.add_link("tbt-l1", (pair.a, "tbtC0"), (pair.b, "tbtD0"))
    with pytest.raises(EmulationError, match="cannot create tap"):
        pair.delayer.add_link("tbt-l2", (999_999_999, "tbtC0"), (pair.b, "tbtD0"))
    assert pair.delayer.ping()["links"] == 1
    assert len(pair.rtts(5)) == 5


def test_a_deleted_tap_stops_its_direction_and_the_rest_goes_on(pair: Pair) -> None:
    """``ip link del`` of one TAP stops the direction reading it (a read error), while the
    delayer keeps answering and relaying other links."""
    pair.link(delay_ms=1)
    assert pair.sh(pair.a, "ip link del tbtA0").returncode == 0
    wait_until(lambda: pair.delayer.stats("tbt-l1")["a_to_b"]["read_errors"] >= 1,
               what="the read error of the deleted TAP")
    assert pair.sh(pair.b, "ip addr flush dev tbtB0").returncode == 0
    pair.link("tbt-l2", names=("tbtA1", "tbtB1"), delay_ms=1)
    assert len(pair.rtts(5)) == 5
    errors = pair.delayer.stats("tbt-l1")["a_to_b"]["read_errors"]
    assert pair.delayer.stats("tbt-l2")["a_to_b"]["read_errors"] == 0
    pair.delayer.remove("tbt-l1")
    assert pair.delayer.ping()["links"] == 1 and errors >= 1


@pytest.mark.timing
def test_many_links_keep_timing(pair: Pair) -> None:
    """200 links (400 TAPs, past select()'s 1024-fd limit with the rest) keep precise delays."""
    for n in range(1, 201):
        pair.delayer.add_link(f"tbt-m{n}", (pair.a, f"tbtM{n}a"), (pair.b, f"tbtM{n}b"))
    delayed_rtts(pair, 5, 100, unshaped_rtt(pair))
    assert pair.delayer.ping()["links"] == 201


def napi_threads(ifname: str) -> list[str]:
    """Names of the kernel threads running the NAPI instance of TAP ``ifname``."""
    names = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:  # the task ended while listed
            continue
        if name.startswith(f"napi/{ifname}-"):
            names.append(name)
    return names


@pytest.mark.parametrize("data_path", ["c", "python"])
def test_threaded_receive_taps_run_napi_in_a_thread_and_keep_the_delay(data_path: str) -> None:
    """A delayer started with ``rx="threaded"`` makes links whose TAPs hand received frames
    to a NAPI kernel thread, with the same delay as inline links; a link may name its own
    mode, a bad one is refused by name, and the threads end with their link."""
    with delayer_pair(data_path, rx="threaded") as pair:
        assert pair.delayer.ping()["rx"] == "threaded"
        base = unshaped_rtt(pair)
        assert is_threaded(pair.a, "tbtA0") and is_threaded(pair.b, "tbtB0")
        assert napi_threads("tbtA0") and napi_threads("tbtB0")
        delayed_rtts(pair, 5, 100, base)
        reply = pair.delayer.add_link("tbt-in", (pair.a, "tbtIn0"), (pair.b, "tbtIn1"),
                                      rx="inline")
        assert reply["rx"] == "inline" and not is_threaded(pair.a, "tbtIn0")
        with pytest.raises(EmulationError,
                           match=r"rx must be one of \['inline', 'threaded'\], got 'fast'"):
            pair.delayer.add_link("tbt-bad", (pair.a, "tbtX0"), (pair.b, "tbtX1"), rx="fast")
        pair.delayer.remove("tbt-l1")
        wait_until(lambda: not napi_threads("tbtA0") and not napi_threads("tbtB0"),
                   what="the NAPI threads of a removed link to end")


def test_the_compiled_shaper_at_normal_priority_keeps_the_delay() -> None:
    """``fifo=0`` runs the compiled shaper's thread as SCHED_OTHER (``ping`` says so) with
    the same delay; a priority outside 0-99 is refused before anything starts."""
    with delayer_pair("c", fifo=0) as pair:
        assert pair.delayer.ping()["scheduling"] == "other"
        base = unshaped_rtt(pair)
        delayed_rtts(pair, 5, 50, base)
    ledger = Ledger(f"tbt-unused-{os.getpid()}")
    with pytest.raises(EmulationError, match="fifo: expected a priority from 0"):
        start_delayer(ledger, "/nonexistent/tbt", fifo=100)
    assert not Path("/nonexistent/tbt").exists()
    assert ledger.teardown() == [] and not ledger.path.exists()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a partition needs 2 CPUs")
@pytest.mark.parametrize("data_path", ["c", "python"])
def test_a_cpu_partition_confines_every_thread_of_the_delayer(data_path: str) -> None:
    """With a partition the delayer and every thread it runs (the compiled shaper's loop
    included) may use only the shaper's CPUs, ``ping`` reports the partition, and the
    delay holds; a partition naming a CPU it may not use stops the delayer with a line
    naming ``--cpus``."""
    split = partition(str(max(os.sched_getaffinity(0))))
    assert split is not None
    with delayer_pair(data_path, cpus=split) as pair:
        assert pair.delayer.ping()["cpus"] == split.as_dict()
        tids = [int(t) for t in os.listdir(f"/proc/{pair.delayer.pid}/task")]
        assert len(tids) >= (2 if data_path == "c" else 1)
        assert {frozenset(os.sched_getaffinity(t)) for t in tids} == {split.shaper}
        base = unshaped_rtt(pair)
        delayed_rtts(pair, 5, 50, base)
    ledger = Ledger(f"tbt-unused-{os.getpid()}")
    workdir = Path(f"/tmp/tbt-delayer-cpus-{os.getpid()}-{time.time_ns()}")
    ledger.record("dir", path=str(workdir))
    try:
        with pytest.raises(EmulationError, match=r"--cpus: CPU 4096 is not one this process"):
            start_delayer(ledger, workdir, cpus=Partition(frozenset({4096}), frozenset({0})))
    finally:
        assert ledger.teardown() == [] and not ledger.path.exists()


def test_teardown_removes_taps_namespaces_and_the_delayer() -> None:
    with delayer_pair() as made:
        made.link(delay_ms=1)
        procs = [made.a, made.b, made.delayer.pid]
        starts = [process_start_time(p) for p in procs]
        ledger_path = made.ledger.path
    for pid, start in zip(procs, starts):
        assert not is_running(pid, start), pid  # gone, or a zombie its parent has yet to collect
    assert not ledger_path.exists()
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                                check=True).stdout
    assert "tbtA0" not in root_links and "tbtB0" not in root_links


def tso(pair: Pair, name: str) -> str:
    """``on`` or ``off``: TCP segmentation offload of TAP ``name`` in namespace a."""
    out = pair.sh(pair.a, f"ethtool -k {name}").stdout
    return next(line.split(":")[1].split()[0] for line in out.splitlines()
                if line.startswith("tcp-segmentation-offload"))


def test_compiled_path_taps_offload_segments_unless_told_not_to() -> None:
    """The compiled path's TAPs take whole TSO segments (so TCP crosses a link in 64 KB
    frames); ``offload: false`` (links to an Open vSwitch switch) makes the stack segment
    before the TAP, and the Python path's plain TAPs never offload."""
    with delayer_pair("c") as pair:
        pair.delayer.add_link("tbt-on", (pair.a, "tbtOn0"), (pair.b, "tbtOn1"))
        pair.delayer.add_link("tbt-off", (pair.a, "tbtOff0"), (pair.b, "tbtOff1"),
                              offload=False)
        assert (tso(pair, "tbtOn0"), tso(pair, "tbtOff0")) == ("on", "off")
        with pytest.raises(EmulationError, match="offload must be true or false"):
            pair.delayer.add_link("tbt-bad", (pair.a, "tbtX0"), (pair.b, "tbtX1"), offload=1)
    with delayer_pair("python") as pair:
        pair.delayer.add_link("tbt-py", (pair.a, "tbtPy0"), (pair.b, "tbtPy1"))
        assert tso(pair, "tbtPy0") == "off"


SINK = ("import socket; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('{IP_B}', 5001)); s.listen(); c, _ = s.accept(); "
        "exec('while c.recv(1 << 20): pass'); print('done')")


@contextmanager
def tcp_send(pair: Pair, nbytes: int) -> Iterator[subprocess.Popen]:
    """Send ``nbytes`` over TCP from a to b in 64 KB writes (so TSO makes 64 KB
    segments where the TAP offloads); yields the sink, which exits when all arrived.
    Sender and sink are ended on the way out, whatever the test did to the link."""
    sink = subprocess.Popen(["nsenter", "-t", str(pair.b), "-n", "python3", "-c", SINK],
                            stdout=subprocess.PIPE, text=True)
    sender = None
    try:
        wait_until(lambda: "5001" in pair.sh(pair.b, "ss -ltn").stdout, what="the sink")
        send = ("import socket; s = socket.create_connection"
                f"(('{IP_B}', 5001)); [s.sendall(b'x' * 65536) for _ in range({nbytes // 65536})]")
        sender = subprocess.Popen(["nsenter", "-t", str(pair.a), "-n", "python3", "-c", send])
        yield sink
    finally:
        for proc in (sender, sink):
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()


def test_loss_makes_the_compiled_path_read_single_packets() -> None:
    """With offloads a frame can be a 64 KB GSO segment of ~44 packets; loss counts packets,
    so a direction with loss turns its source TAP's offloads off (and on again at 0)."""
    with delayer_pair("c") as pair:
        pair.link("tbt-big", names=("tbtG0", "tbtG1"))
        with tcp_send(pair, 4 << 20) as sink:
            assert sink.communicate(timeout=30)[0].strip() == "done"
        assert pair.delayer.stats("tbt-big")["a_to_b"]["max_frame"] > 1514
        pair.delayer.remove("tbt-big")
        pair.link("tbt-lossy", names=("tbtL0", "tbtL1"), loss_pct=1.0)
        with tcp_send(pair, 4 << 20) as sink:
            assert sink.communicate(timeout=30)[0].strip() == "done"
        ab = pair.delayer.stats("tbt-lossy")["a_to_b"]
        assert ab["dropped_loss"] > 0 and 0 < ab["max_frame"] <= 1514, ab
        assert tso(pair, "tbtL0") == "off"
        pair.delayer.set("tbt-lossy", loss_pct=0.0)
        assert tso(pair, "tbtL0") == "on"


def test_queue_counts_the_packets_of_gso_frames() -> None:
    """``queue: N`` holds at most N packets even when frames are 64 KB TSO segments."""
    with delayer_pair("c") as pair:
        pair.link(delay_ms=50, queue=100)
        samples = []
        with tcp_send(pair, 2 << 20) as sink:  # at most 100 packets per 50 ms: about 1 s
            deadline = time.monotonic() + 30
            while sink.poll() is None and time.monotonic() < deadline:
                samples.append(pair.delayer.stats("tbt-l1")["a_to_b"])
            assert sink.communicate(timeout=1)[0].strip() == "done"
        stats = pair.delayer.stats("tbt-l1")["a_to_b"]
        assert stats["max_frame"] > 1514, stats  # TSO segments crossed the link
        assert max(s["held"] for s in samples) <= 100
        assert max(s["held_bytes"] for s in samples) <= 100 * 1514, max(
            s["held_bytes"] for s in samples)
        assert max(s["held"] for s in samples) > 44  # a GSO frame or more was held


def test_detaching_twice_and_closing_after_an_interrupted_removal(tmp_path: Path) -> None:
    """A removal cut short (SIGTERM between detaching a direction and closing its TAPs)
    leaves the delayer able to close: detaching is idempotent and close() goes on."""
    with delayer_pair("c") as pair:
        delayer = Delayer(str(tmp_path / "ctl.sock"), "c")
        try:
            for n in range(2):
                delayer.op_add_link({"id": f"tbt-x{n}", "a": {"pid": pair.a, "ifname": f"tbtX{n}"},
                                     "b": {"pid": pair.b, "ifname": f"tbtY{n}"}})
            first = delayer.links["tbt-x0"]
            delayer._detach(first.ab)
            delayer._detach(first.ab)
            delayer.op_remove({"id": "tbt-x0"})
            delayer._detach(delayer.links["tbt-x1"].ab)  # as if interrupted here
        finally:
            delayer.close()
        assert not (tmp_path / "ctl.sock").exists()
        assert pair.sh(pair.a, "ip link show tbtX1").returncode != 0  # the TAP is gone


def _blocks_sigterm(task: Path) -> bool:
    """Whether thread ``task`` (a /proc/PID/task/TID directory) blocks SIGTERM."""
    mask = next(line.split()[1] for line in (task / "status").read_text().splitlines()
                if line.startswith("SigBlk:"))
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def test_remove_under_traffic_then_sigterm_exits_cleanly() -> None:
    """Removing a link while TCP flows through it is safe; SIGTERM ends a compiled-path
    delayer with status 0 and its TAPs vanish (the loop thread blocks signals, so SIGTERM
    reaches the Python thread that handles it)."""
    with delayer_pair("c") as pair:
        pair.link(delay_ms=1)
        with tcp_send(pair, 64 << 20):  # the sender is ended too, blocked as it is
            wait_until(lambda: pair.delayer.stats("tbt-l1")["a_to_b"]["forwarded"] > 100,
                       what="traffic through the link")
            pair.delayer.remove("tbt-l1")
        assert pair.delayer.ping()["links"] == 0
        pair.link("tbt-l2", names=("tbtA1", "tbtB1"))
        proc = pair.delayer.process
        assert any(_blocks_sigterm(task) for task in Path(f"/proc/{proc.pid}/task").iterdir()
                   if task.name != str(proc.pid))  # the shaper's loop thread
        assert not _blocks_sigterm(Path(f"/proc/{proc.pid}/task/{proc.pid}"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert pair.sh(pair.a, "ip link show tbtA1").returncode != 0
