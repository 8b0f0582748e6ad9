"""Hosts configured by one batch sent without waiting: a failed batch names its host."""

from __future__ import annotations

import os

import pytest
from mininet.net import Mininet

from testbed.emulation.batched_nodes import BatchedHost, finish_config, send
from testbed.emulation.ledger import Ledger
from testbed.errors import EmulationError

pytestmark = pytest.mark.emulation


def test_failed_host_command_is_reported_with_the_hosts_name() -> None:
    ledger = Ledger(f"tbt-batched-{os.getpid()}")
    net = Mininet(topo=None, controller=None, build=False, inNamespace=False)
    try:
        good = net.addHost("bh1", cls=BatchedHost)
        bad = net.addHost("bh2", cls=BatchedHost)
        for host in (good, bad):
            ledger.record_process(host.pid, what=f"mininet host {host.name}", term="SIGHUP")
        send(good, "ip link set dev lo up")
        send(bad, "ip link set dev nosuchdev0 up")
        with pytest.raises(EmulationError, match=r"failed on 1 hosts; first bh2: .*nosuchdev0"):
            finish_config([good, bad])
        assert not good.waiting and not bad.waiting  # both shells free for the next command
        assert "UP" in good.cmd("ip link show lo")
    finally:
        net.stop()
        assert ledger.teardown() == []
