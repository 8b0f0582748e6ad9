"""Userspace Open vSwitch driven by the os-ken learning switch, on real namespaces.

h1 -- s1 (private userspace OVS, OpenFlow 1.3, os-ken controller) -- h2, plus a plain tap
device as a third port (the kind of port the userspace delayer attaches). Needs root
and Debian's openvswitch-switch package (its binaries; the system service is not used).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import select
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.emulation import ovs as ovs_module
from testbed.emulation.controller import start_controller, wait_connected
from testbed.emulation.ledger import Ledger, clean_stale, process_start_time
from testbed.emulation.osken_switch import is_group_address
from testbed.emulation.ovs import NETDEV_TAP, UserspaceOVSSwitch, is_alive, start_ovs
from testbed.errors import EmulationError
from testbed.poll import wait_until

needs_ovs = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ovs-vswitchd") is None
    or shutil.which("mnexec") is None,
    reason="needs root, Open vSwitch binaries and Mininet's mnexec")

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000


def _gone(pid: int, start: int | None) -> bool:
    return not is_alive(pid, start)


def _interfaces(prefix: str) -> list[str]:
    return [name for name in os.listdir("/sys/class/net") if name.startswith(prefix)]


def _mininet_shells(prefix: str) -> list[int]:
    """Pids of Mininet node shells (``bash ... mininet:<name>``) of this test's nodes."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if f"mininet:{prefix}".encode() in cmdline and is_alive(int(proc.name)):
            pids.append(int(proc.name))
    return pids


@pytest.fixture
def prefix() -> str:
    """A run-unique name prefix (short: Mininet adds '-ethN', Linux allows 15 chars)."""
    return "o" + secrets.token_hex(2)


@pytest.fixture
def ledger(tmp_path: Path, prefix: str) -> Iterator[Ledger]:
    ledger = Ledger(f"test-ovs-{prefix}", root=tmp_path / "ledgers")
    yield ledger
    assert ledger.teardown() == []


@pytest.fixture
def no_other_userspace_ovs() -> None:
    if Path(f"/sys/class/net/{NETDEV_TAP}").exists():
        pytest.skip("another userspace Open vSwitch runs in the root namespace")


def _open_tap(name: str) -> int:
    """Attach to the existing persistent tap ``name``; returns its fd (non-blocking)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def _arp_request(src_mac: bytes, src_ip: str, dst_ip: str) -> bytes:
    ip = [bytes(int(x) for x in addr.split(".")) for addr in (src_ip, dst_ip)]
    header = b"\xff" * 6 + src_mac + b"\x08\x06"
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + src_mac + ip[0] + b"\x00" * 6 + ip[1]
    return header + body


def _read_arp_reply(fd: int, to_mac: bytes, timeout: float) -> bytes | None:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        frame = os.read(fd, 2048)
        if frame[:6] == to_mac and frame[12:14] == b"\x08\x06" and frame[20:22] == b"\x00\x02":
            return frame
    return None


@pytest.mark.emulation
@needs_ovs
@pytest.mark.usefixtures("no_other_userspace_ovs")
def test_learning_switch_end_to_end(tmp_path: Path, ledger: Ledger, prefix: str) -> None:
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.topo import Topo

    setLogLevel("warning")
    ovs = start_ovs(ledger, tmp_path / "ovs")
    controller = start_controller(ledger, log_path=tmp_path / "controller.log")
    pids = [(p, process_start_time(p)) for p in (ovs.ovsdb_pid, ovs.vswitchd_pid,
                                                 controller.pid)]
    bridge, tap = f"{prefix}s1", f"{prefix}tap"
    topo = Topo()  # built from a Topo, Mininet starts OVS switches in one batch
    topo.addSwitch(bridge, cls=UserspaceOVSSwitch, dpid="1")
    for host in ("h1", "h2"):
        topo.addLink(topo.addHost(f"{prefix}{host}"), bridge)
    net = Mininet(topo=topo, build=False, controller=None, waitConnected=False)
    tap_fd = None
    try:
        assert os.environ["OVS_RUNDIR"] == str(ovs.workdir)
        net.addController(controller.remote(f"{prefix}c0"))
        net.build()
        h1, h2 = net.get(f"{prefix}h1", f"{prefix}h2")
        net.start()
        connect_s = wait_connected(ovs, bridge, timeout=15)
        assert ovs.vsctl("get", "Bridge", bridge, "fail_mode").strip() == "secure"
        assert ovs.vsctl("get", "Bridge", bridge, "datapath_type").strip() == "netdev"

        first = h1.cmd("ping -c 3 -i 0.2 -W 2", h2.IP())  # ARP + packet-ins, then flows
        assert " 0% packet loss" in first, first
        ping = h1.cmd("ping -c 20 -i 0.05 -W 2", h2.IP())
        assert " 0% packet loss" in ping, ping
        rtt = re.search(r"= [\d.]+/([\d.]+)/", ping)

        server = h2.popen(["iperf3", "-s", "-1", "-p", "5201"])
        try:
            wait_until(lambda: "5201" in h2.cmd("ss -Hltn 'sport = :5201'"), 5, "iperf3 server")
            out = h1.cmd(f"iperf3 -c {h2.IP()} -p 5201 -t 2 -J --connect-timeout 3000")
            result = json.loads(out)
            assert "error" not in result, result.get("error")
            mbit = result["end"]["sum_received"]["bits_per_second"] / 1e6
            assert mbit > 10, f"TCP through OVS only reached {mbit:.1f} Mbit/s"
        finally:
            server.kill()
            server.wait()

        flows = ovs.ofctl("-O", "OpenFlow13", "dump-flows", bridge)
        learned = [line for line in flows.splitlines() if "priority=10" in line]
        for host in (h1, h2):
            assert any(f"dl_dst={host.MAC()}" in line for line in learned), flows
        assert any("priority=0" in line and "CONTROLLER" in line for line in flows.splitlines())

        # A plain tap (as the userspace delayer makes) works as a netdev port: a frame
        # written into it reaches h1, and h1's unicast reply comes back out of it.
        subprocess.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"], check=True)
        tap_fd = _open_tap(tap)
        subprocess.run(["ip", "link", "set", tap, "up"], check=True)
        ovs.vsctl("add-port", bridge, tap)
        assert ovs.vsctl("get", "Interface", tap, "error").strip() in ("[]", "")
        mac = bytes.fromhex("02a0" + secrets.token_hex(4))
        reply = None
        deadline = time.monotonic() + 5
        while reply is None and time.monotonic() < deadline:
            os.write(tap_fd, _arp_request(mac, "10.0.0.99", h1.IP()))
            reply = _read_arp_reply(tap_fd, mac, 0.3)
        assert reply is not None, "no ARP reply came back through the tap port"
        assert reply[6:12] == bytes.fromhex(h1.MAC().replace(":", ""))
        print(f"\nOVS start {ovs.start_s * 1000:.0f} ms, controller listening "
              f"{controller.start_s * 1000:.0f} ms, connected after {connect_s:.2f} s, "
              f"ping avg {rtt.group(1) if rtt else '?'} ms, TCP {mbit:.0f} Mbit/s")
    finally:
        if tap_fd is not None:
            os.close(tap_fd)
        if Path(f"/sys/class/net/{tap}").exists():
            subprocess.run(["ip", "link", "del", tap], check=False)
        net.stop()
        controller.stop()
        ovs.stop()
    assert "OVS_RUNDIR" not in os.environ or os.environ["OVS_RUNDIR"] != str(ovs.workdir)
    assert [pid for pid, start in pids if not _gone(pid, start)] == []
    assert not Path(f"/sys/class/net/{NETDEV_TAP}").exists()
    assert _interfaces(prefix) == []
    assert _mininet_shells(prefix) == []
    assert ledger.open_entries() == []


@pytest.mark.emulation
@needs_ovs
@pytest.mark.usefixtures("no_other_userspace_ovs")
def test_switch_without_controller_is_a_standalone_bridge(tmp_path: Path, ledger: Ledger,
                                                          prefix: str) -> None:
    """Switches added one by one (not batched) and no controller: a learning bridge."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    setLogLevel("warning")
    with start_ovs(ledger, tmp_path / "ovs") as ovs:
        net = Mininet(topo=None, build=False, controller=None, waitConnected=False)
        try:
            s1 = net.addSwitch(f"{prefix}s1", cls=UserspaceOVSSwitch, ovs=ovs, dpid="1")
            for name in ("h1", "h2"):
                net.addLink(net.addHost(f"{prefix}{name}"), s1)
            net.build()
            net.start()
            assert ovs.vsctl("get", "Bridge", s1.name, "fail_mode").strip() == "standalone"
            assert net.pingAll(timeout=2) == 0
        finally:
            net.stop()
    assert _interfaces(prefix) == []
    assert not Path(f"/sys/class/net/{NETDEV_TAP}").exists()


@pytest.mark.emulation
@needs_ovs
@pytest.mark.usefixtures("no_other_userspace_ovs")
def test_teardown_after_vswitchd_crash_removes_its_taps(tmp_path: Path, ledger: Ledger,
                                                        prefix: str) -> None:
    """A killed ovs-vswitchd leaves persistent taps; the ledger's undo removes them."""
    ovs = start_ovs(ledger, tmp_path / "ovs")
    bridge = f"{prefix}s1"
    ovs.vsctl("add-br", bridge, "--", "set", "Bridge", bridge, "datapath_type=netdev")
    ovs.register_bridge(bridge)
    assert Path(f"/sys/class/net/{NETDEV_TAP}").exists()
    start = process_start_time(ovs.vswitchd_pid)
    os.kill(ovs.vswitchd_pid, 9)
    wait_until(lambda: _gone(ovs.vswitchd_pid, start), 5, "ovs-vswitchd to die")
    assert Path(f"/sys/class/net/{bridge}").exists()  # left behind by the crash
    assert ledger.teardown() == []
    assert not Path(f"/sys/class/net/{NETDEV_TAP}").exists()
    assert _interfaces(prefix) == []
    assert _gone(ovs.ovsdb_pid, None)
    ovs.stop()  # restores the environment; nothing is left to remove


CRASHING_RUN = """
import sys, time
from pathlib import Path
from testbed.emulation.controller import start_controller
from testbed.emulation.ledger import Ledger
from testbed.emulation.ovs import start_ovs
root, workdir, bridge = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
ledger = Ledger("crashed", root=root)
ovs = start_ovs(ledger, workdir)
controller = start_controller(ledger)
ovs.vsctl("add-br", bridge, "--", "set", "Bridge", bridge, "datapath_type=netdev")
ovs.register_bridge(bridge)
print(ovs.ovsdb_pid, ovs.vswitchd_pid, controller.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.emulation
@needs_ovs
@pytest.mark.usefixtures("no_other_userspace_ovs")
def test_crashed_run_is_cleaned_from_its_ledger(tmp_path: Path, prefix: str) -> None:
    """The owner dies with kill -9; clean_stale removes daemons, controller and taps."""
    root, bridge = tmp_path / "ledgers", f"{prefix}s1"
    owner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_RUN, str(root), str(tmp_path / "ovs"), bridge],
        stdout=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline() if owner.stdout else ""
        pids = [int(pid) for pid in line.split()]
        assert len(pids) == 3, f"the crashing run did not start: {line!r}"
        starts = [process_start_time(pid) for pid in pids]
        assert Path(f"/sys/class/net/{bridge}").exists()
    finally:
        owner.kill()
        owner.wait()
    report = clean_stale(root)
    assert report == {"crashed": []}
    assert [pid for pid, start in zip(pids, starts) if not _gone(pid, start)] == []
    assert not Path(f"/sys/class/net/{NETDEV_TAP}").exists()
    assert _interfaces(prefix) == []


@pytest.mark.emulation
@needs_ovs
@pytest.mark.usefixtures("no_other_userspace_ovs")
def test_refuses_a_second_userspace_ovs_in_the_namespace(
        tmp_path: Path, ledger: Ledger, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check looks for the datapath tap; stand one in under a name of our own."""
    fake = f"{prefix}nd"
    monkeypatch.setattr(ovs_module, "NETDEV_TAP", fake)
    subprocess.run(["ip", "tuntap", "add", "dev", fake, "mode", "tap"], check=True)
    try:
        with pytest.raises(EmulationError, match="only one userspace ovs-vswitchd"):
            start_ovs(ledger, tmp_path / "ovs")
    finally:
        subprocess.run(["ip", "link", "del", fake], check=False)
    assert ledger.open_entries() == []


def test_group_addresses_are_never_learned_destinations() -> None:
    assert is_group_address("ff:ff:ff:ff:ff:ff")
    assert is_group_address("01:00:5e:00:00:fb")
    assert is_group_address("33:33:00:00:00:01")
    assert not is_group_address("02:00:00:00:00:01")


STARTER = """
import sys
from pathlib import Path
from testbed.emulation.ledger import Ledger
from testbed.emulation.ovs import start_ovs
from testbed.errors import EmulationError
ledger = Ledger(sys.argv[1], root=Path(sys.argv[2]))
try:
    ovs = start_ovs(ledger, Path(sys.argv[3]))
except EmulationError as exc:
    print("refused", exc, flush=True)
    sys.exit(0 if ledger.teardown() == [] else 1)
print("started", flush=True)
sys.stdin.read()  # hold it until the test says stop
sys.exit(0 if ledger.teardown() == [] else 1)
"""


@pytest.mark.emulation
@needs_ovs
@pytest.mark.usefixtures("no_other_userspace_ovs")
def test_two_starts_in_quick_succession_never_both_pass(tmp_path: Path) -> None:
    """Two runs start their OVS at once: one runs it, the other refuses in one line
    naming that run (before the lock, both passed the check: the datapath tap appears
    only with the first bridge)."""
    runs = ["ovs-first", "ovs-second"]
    starters = [subprocess.Popen([sys.executable, "-c", STARTER, run, str(tmp_path / "l"),
                                  str(tmp_path / run)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for run in runs]
    try:
        outcomes = [starter.stdout.readline().strip() for starter in starters]
    finally:
        for starter in starters:
            starter.communicate("", timeout=60)
    assert sorted(o.split()[0] for o in outcomes if o) == ["refused", "started"], outcomes
    winner = runs[[o.split()[0] for o in outcomes].index("started")]
    refusal = next(o for o in outcomes if o.startswith("refused"))
    assert f"the machine's userspace Open vSwitch is in use by run {winner}" in refusal
    assert all(s.returncode == 0 for s in starters)  # each removed what it made
    assert ovs_module.locks.is_free(ovs_module.OVS_LOCK)
    assert list((tmp_path / "l").iterdir()) == []
