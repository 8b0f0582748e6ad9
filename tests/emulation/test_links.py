"""Shaped Mininet links (h1 -- s1 -- h2, Linux bridge) with the backend this machine has.

The h1-s1 link is the shaped one; s1-h2 is a plain veth pair, so RTT h1 -> h2 is twice the
one-way delay of h1-s1. Names carry a prefix reserved on the machine like a run's;
everything is in a run ledger.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.calibrate import Pair, iperf_mbit, pair_network, ping_rtts
from testbed.emulation.cpu_partition import parse_cpu_list
from testbed.emulation.ledger import Ledger, is_running, process_start_time
from testbed.emulation.links import LinkParams, make_link, set_link_params, set_link_up
from testbed.emulation.names import reserved_by
from testbed.emulation.shaping import htb_commands, resolve_backend
from testbed.errors import EmulationError
from tests.emulation.rtt_checks import assert_adds, p50

pytestmark = pytest.mark.emulation


def _ledger(tag: str) -> Ledger:
    return Ledger(f"tbt-links-{tag}-{os.getpid()}-{time.time_ns()}")


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    ledger = _ledger("module")
    try:
        with pair_network(resolve_backend("auto"), ledger, link_spec={"delay_ms": 5}) as made:
            yield made
    finally:
        assert ledger.teardown() == []


@pytest.fixture(autouse=True)
def _reset_link(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "pair" in request.fixturenames:
        made = request.getfixturevalue("pair")
        set_link_up(made.link, True)
        set_link_params(made.link, delay_ms=0.0, jitter_ms=0.0, loss_pct=0.0, bw_mbit=None)


@pytest.mark.timing
@pytest.mark.parametrize("delay_ms", [5, 20])
def test_rtt_is_twice_the_one_way_delay(pair: Pair, delay_ms: float) -> None:
    """The delay a link adds to the round trip is twice its one-way delay, against the
    same path unshaped and with the userspace shaper's reported lateness as allowance
    (:mod:`tests.emulation.rtt_checks`)."""
    set_link_params(pair.link, delay_ms=0.0)
    base = p50(ping_rtts(pair.h1, pair.h2.IP(), 100))
    if pair.delayer is not None:
        pair.delayer.lateness(reset=True)
    set_link_params(pair.link, delay_ms=float(delay_ms))
    rtts = ping_rtts(pair.h1, pair.h2.IP(), 200)
    assert len(rtts) == 200
    late = pair.delayer.lateness() if pair.delayer is not None else None
    assert_adds(rtts, base, 2 * delay_ms, late)


def test_tcp_bandwidth_cap_through_a_delayed_link(pair: Pair) -> None:
    set_link_params(pair.link, delay_ms=2.0, bw_mbit=10.0)
    ledger = _ledger("iperf")
    try:
        mbit, _ = iperf_mbit(pair.h1, pair.h2, pair.h2.IP(), 3.0, ledger)
    finally:
        assert ledger.teardown() == []
    assert abs(mbit - 10.0) <= 1.0, mbit


def test_runtime_loss_change_reaches_the_shaper(pair: Pair) -> None:
    set_link_params(pair.link, loss_pct=20.0, seed=3)
    assert pair.link.shape == LinkParams(loss_pct=20.0, seed=3)
    rtts = ping_rtts(pair.h1, pair.h2.IP(), 200, interval=0.005)
    # per direction 20 %, round trip 1 - 0.8 ** 2 = 36 %: 128 of 200 expected, sd 6.8
    assert 95 <= len(rtts) <= 160, len(rtts)


def test_link_down_drops_everything_and_up_restores(pair: Pair) -> None:
    set_link_up(pair.link, False)
    assert ping_rtts(pair.h1, pair.h2.IP(), 5, interval=0.05) == []
    assert pair.h1.intfs[0].isUp()  # the interface itself stays up, with its address
    set_link_up(pair.link, True)
    assert len(ping_rtts(pair.h1, pair.h2.IP(), 5, interval=0.05)) == 5


def test_bad_link_parameters_are_refused_before_anything_changes(pair: Pair) -> None:
    before = pair.link.shape
    with pytest.raises(EmulationError, match="loss_pct"):
        set_link_params(pair.link, loss_pct=150.0)
    with pytest.raises(EmulationError, match="bw_mbit"):
        set_link_params(pair.link, bw_mbit=0)
    assert pair.link.shape == before
    with pytest.raises(EmulationError, match="backend"):
        make_link(pair.net, pair.h1, pair.h2, None, "carrier-pigeon")


def test_backend_resolution_and_htb_commands() -> None:
    assert resolve_backend("userspace") == "userspace"
    assert resolve_backend("auto") in ("netem", "userspace")
    with pytest.raises(EmulationError, match="must be one of"):
        resolve_backend("fast")
    if resolve_backend("auto") == "userspace":
        with pytest.raises(EmulationError, match="no sch_netem"):
            resolve_backend("netem")
    assert htb_commands("tbtx0", 10) == [
        "tc qdisc add dev tbtx0 root handle 5:0 htb default 1",
        "tc class add dev tbtx0 parent 5:0 classid 5:1 htb rate 10.000000Mbit burst 15k"]


def test_teardown_leaves_no_interface_bridge_or_process() -> None:
    ledger = _ledger("teardown")
    try:
        with pair_network(resolve_backend("auto"), ledger, link_spec={"delay_ms": 1}) as made:
            assert len(ping_rtts(made.h1, made.h2.IP(), 3, interval=0.05)) == 3
            prefix = made.s1.name[:-2]
            pids = [made.h1.pid, made.h2.pid, made.s1.pid]
            if made.delayer is not None:
                pids.append(made.delayer.pid)
            starts = [process_start_time(p) for p in pids]
            root_names = [made.s1.name, *(i.name for i in made.s1.intfList() if i.name != "lo")]
            assert all(name.startswith(prefix) for name in root_names), root_names
            assert len(f"{prefix}s1e1") <= 15
            assert reserved_by(prefix) == ledger.run_id  # no other run can take it
            confirmed = [e.data for e in ledger.open_entries() if e.kind in ("link", "bridge")]
            assert sorted(d["name"] for d in confirmed) == sorted(root_names)
            assert all(d["prefix"] == prefix and "ifindex" in d for d in confirmed)
        assert ledger.open_entries() == []
        assert reserved_by(prefix) == ledger.run_id  # until the ledger is gone
    finally:
        assert ledger.teardown() == []
    assert not ledger.path.exists()
    assert reserved_by(prefix) is None
    for pid, start in zip(pids, starts):
        # Gone, or a zombie waiting for this test process (Mininet's Popen) to collect it.
        assert not is_running(pid, start), pid
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout
    assert prefix not in links
    for name in root_names:
        assert not Path(f"/sys/class/net/{name}").exists()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a partition needs 2 CPUs")
def test_calibration_network_honours_a_cpu_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``TESTBED_SHAPER_CPUS`` set, the calibration's delayer runs on the CPU named
    and what the hosts run (their shells' commands, iperf3) on the others, as in a run."""
    last = max(os.sched_getaffinity(0))
    hosts = sorted(set(os.sched_getaffinity(0)) - {last})
    monkeypatch.setenv("TESTBED_SHAPER_CPUS", str(last))
    ledger = _ledger("cpus")
    try:
        with pair_network("userspace", ledger, link_spec={"delay_ms": 1}) as made:
            assert made.delayer is not None
            assert made.delayer.ping()["cpus"] == {"shaper": [last], "hosts": hosts}
            assert made.host_cpus is not None
            listed = made.h1.cmd("grep Cpus_allowed_list /proc/self/status").split()[-1]
            assert parse_cpu_list(listed) == set(hosts)
            mbit, _ = iperf_mbit(made.h1, made.h2, made.h2.IP(), 1.0, ledger,
                                 cpus=made.host_cpus)
            assert mbit > 0
    finally:
        assert ledger.teardown() == []
