"""Builds a scenario's topology on Mininet and tears it down.

Naming (:func:`testbed.emulation.names.interface_plan`): Mininet hosts keep the
scenario's node names (their interfaces live in their own network namespaces).
Everything in the root namespace carries the run's reserved prefix (``tb`` + 4 base-36
characters, :func:`testbed.emulation.names.reserve_prefix`) so that exactly what this run
made can be found and removed: a switch ``s<i>`` becomes the bridge ``<prefix>s<i>`` and
its ports ``<prefix>s<i>-e<port>`` (Mininet's Linux bridge adopts the interfaces whose
names contain the bridge's name). Before anything is built, every name is checked
against Linux's 15 characters and against the interfaces that already exist (Mininet
deletes an existing bridge or veth of the same name, so building over one is refused).
Each bridge and switch port is recorded in the ledger before it is made, with the
prefix, and confirmed with its ifindex once it exists.

A Linux-bridge switch with more links than one bridge takes (``max_ports``, below the
kernel's 1023) is built as a fabric (:class:`testbed.emulation.names.Fabric`): a root
bridge and leaf bridges ``<bridge>f<k>`` joined by plain veth trunks, the switch's links
spread over the leaves. The scenario still sees one switch: ``switches`` maps it to the
root bridge, ``fabrics`` lists its leaves.
"""

from __future__ import annotations

import os
from typing import Any

from mininet.log import setLogLevel, warn
from mininet.net import Mininet

from testbed.emulation import links as linkmod
from testbed.emulation.batched_nodes import (
    LEAVE_DOWN,
    BatchedBridge,
    BatchedHost,
    finish_config,
    send,
)
from testbed.emulation.built_network import BuiltNetwork
from testbed.emulation.firewall_guard import guard_bridges
from testbed.emulation.ledger import Entry, Ledger
from testbed.emulation.names import (
    BRIDGE_MAX_PORTS,
    InterfacePlan,
    check_absent,
    interface_plan,
)
from testbed.emulation.runtimes import runtime_for
from testbed.scenario.model import Topology

# Hosts talk IPv4; IPv6 start-up chatter would be flooded to every port of the bridges.
IPV6_OFF = "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"


def build_network(topology: Topology, prefix: str, ledger: Ledger, backend: str,
                  services: Any, seed: int = 0,
                  max_ports: int = BRIDGE_MAX_PORTS) -> BuiltNetwork:
    """Create hosts, switches and shaped links, start them, and record every resource.

    ``seed`` seeds each link's loss and jitter draws (``seed * 1000 + link index``).
    ``services`` is the object that provides what the node runtimes need (the delayer
    for userspace shaping, the Docker engine for docker nodes, OVS and the controller
    for ``switch: ovs``); see :class:`testbed.emulation.executor.Infrastructure`.
    ``max_ports`` is the most ports one Linux bridge is given before a switch is built
    as a fabric of bridges.
    """
    setLogLevel(os.environ.get("TESTBED_MININET_LOG", "error"))
    plan = interface_plan(topology, prefix,
                          max_ports if topology.switch == "linuxbridge" else None)
    check_absent(plan.root_names)
    switch_cls: Any = BatchedBridge
    controller = None
    if topology.switch == "ovs":
        switch_cls = services.ovs_switch_class()
        controller = services.controller.remote(f"{prefix}c0")
    net = Mininet(topo=None, controller=None, switch=switch_cls, build=False,
                  autoSetMacs=True, waitConnected=False, inNamespace=False)
    built = BuiltNetwork(net=net, hosts={}, switches={}, links={}, backend=backend,
                         delayer=services.delayer)
    bridges = []
    try:
        bridges = _add_nodes(built, topology, plan, ledger, services)
        _add_trunks(built, plan, ledger)
        for index, (link, names, (on_a, on_b)) in enumerate(
                zip(topology.links, plan.links, plan.attach, strict=True)):
            a = built.bridges[on_a] if on_a else built.hosts[link.a]
            b = built.bridges[on_b] if on_b else built.hosts[link.b]
            spec = {**link.to_dict(), "seed": seed * 1000 + index}
            ports = [ledger.intend_interface("link", name, prefix) for name in names
                     if name.startswith(prefix)]
            created = linkmod.make_link(net, a, b, spec, backend, services.delayer, names,
                                        **_raised_later(backend, a, b))
            ledger.confirm_interfaces(ports)
            built.links[f"{link.a}-{link.b}"] = created
        if controller is not None:
            net.addController(controller)
        net.build()
        finish_config(built.hosts.values())
        net.start()
        ledger.confirm_interfaces(bridges)
        if topology.switch == "linuxbridge":
            guard_bridges(ledger, list(built.bridges))
        if controller is not None:
            for switch in built.switches.values():
                services.wait_switch_connected(switch)
    except BaseException:
        stop_network(built)
        raise
    return built


def _add_nodes(built: BuiltNetwork, topology: Topology, plan: InterfacePlan,
               ledger: Ledger, services: Any) -> list[Entry]:
    """Add hosts and switches to Mininet; the bridges' intents (made at ``net.start``)."""
    net = built.net
    bridges = []
    for node in topology.nodes:
        if node.role == "switch":
            fabric = plan.fabrics.get(node.name)
            names = fabric.bridges if fabric else (plan.switches[node.name],)
            for name in names:
                bridges.append(ledger.intend_interface("bridge", name, plan.prefix))
                built.bridges[name] = net.addSwitch(name, **services.switch_params())
            built.switches[node.name] = built.bridges[names[0]]
            if fabric:
                built.fabrics[node.name] = [built.bridges[leaf] for leaf in fabric.leaves]
            continue
        host = runtime_for(node).add_host(built, node, ledger, plan.prefix, services)
        ledger.record_process(host.pid, what=f"mininet host {node.name}", term="SIGHUP")
        if isinstance(host, BatchedHost):
            send(host, IPV6_OFF)  # the shells work side by side; collected below
        else:
            host.cmd(IPV6_OFF)
        built.hosts[node.name] = host
    finish_config(built.hosts.values())
    return bridges


def _raised_later(backend: str, *ends: Any) -> dict[str, Any]:
    """Mininet link options that skip raising each end in its own round trip when the
    end's node raises it in its batch (a batched host or bridge; delayer TAPs only, the
    netem link class configures its interfaces itself)."""
    if backend != "userspace":
        return {}
    return {f"params{i}": dict(LEAVE_DOWN) for i, end in enumerate(ends, start=1)
            if isinstance(end, (BatchedHost, BatchedBridge))}


def _add_trunks(built: BuiltNetwork, plan: InterfacePlan, ledger: Ledger) -> None:
    """Join every fabric's leaf bridges to its root with plain veth pairs (unshaped: a
    fabric stands for one switch)."""
    for fabric in plan.fabrics.values():
        root = built.bridges[fabric.root]
        for leaf, (leaf_end, root_end) in zip(fabric.leaves, fabric.trunks, strict=True):
            ends = [ledger.intend_interface("link", name, plan.prefix)
                    for name in (leaf_end, root_end)]
            built.net.addLink(built.bridges[leaf], root, intfName1=leaf_end,
                              intfName2=root_end, params1=dict(LEAVE_DOWN),
                              params2=dict(LEAVE_DOWN))
            ledger.confirm_interfaces(ends)


def stop_network(built: BuiltNetwork) -> None:
    """Stop Mininet's nodes and links (the ledger removes whatever this leaves)."""
    try:
        if built.delayer is not None and built.delayer.alive():
            linkmod.release_all(built.delayer, list(built.links.values()))
        built.net.stop()
    except Exception as exc:  # noqa: BLE001 - the ledger still removes every resource
        warn(f"mininet stop failed ({exc}); the run ledger removes what is left\n")
