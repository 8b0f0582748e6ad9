"""A switch with more links than one bridge takes is built as a fabric of bridges.

The per-bridge port limit is lowered to 3 so six hosts on one switch span three leaf
bridges (two hosts and a trunk each) under a root bridge; every host must reach every
other, the scenario still sees one switch, and teardown leaves nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.emulation.executor import bring_up
from testbed.emulation.ledger import Ledger
from testbed.emulation.names import reserve_prefix
from testbed.emulation.network import stop_network
from testbed.scenario.loader import scenario_from_dict
from tests.bench.bench_scale import scenario_dict

pytestmark = pytest.mark.emulation

SYS_NET = Path("/sys/class/net")


def test_six_hosts_on_three_leaf_bridges_all_reach_each_other(tmp_path: Path) -> None:
    raw = scenario_dict(6)
    raw["services"] = raw["services"][:1]  # the network is under test, not the services
    for link in raw["topology"]["links"]:
        link["delay_ms"] = 0.0
    scenario = scenario_from_dict(raw, source="<fabric test>")
    ledger = Ledger(f"tbt-fabric-{os.getpid()}")
    prefix = reserve_prefix(ledger)
    try:
        topo = bring_up(scenario, ledger, tmp_path, prefix, lambda _line: None, max_ports=3)
        try:
            net = topo.net
            root = f"{prefix}s0"
            leaves = [f"{root}f{k}" for k in range(3)]
            assert net.switches["sw"].name == root
            assert [leaf.name for leaf in net.fabrics["sw"]] == leaves
            for bridge, ports in [(root, 3), *((leaf, 3) for leaf in leaves)]:
                assert len(os.listdir(SYS_NET / bridge / "brif")) == ports, bridge
            failed = []
            for name, host in net.hosts.items():
                for other in net.hosts:
                    if other != name:
                        out = host.cmd(f"ping -c 1 -W 2 {net.ip(other)}")
                        if " 0% packet loss" not in out:
                            failed.append(f"{name}->{other}")
            assert failed == []
        finally:
            stop_network(topo.net)
    finally:
        assert ledger.teardown() == []
    assert not [n for n in os.listdir(SYS_NET) if n.startswith(prefix)]
