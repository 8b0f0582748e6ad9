"""A started network as the harness sees it: the Mininet network, its hosts, switches,
links and bridges by the scenario's names, each node's cgroup and the shaping in use.

Built by :func:`testbed.emulation.network.build_network`; read by the executor and the
node runtimes, which is why it lives apart from the builder (the builder asks the
runtimes to add hosts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mininet.net import Mininet
from mininet.node import Host

from testbed.emulation.cgroups import NodeCgroup
from testbed.errors import EmulationError


@dataclass
class BuiltNetwork:
    """A started Mininet network and the harness's view of it."""

    net: Mininet
    hosts: dict[str, Host]  # scenario node name -> Mininet host
    switches: dict[str, Any]  # scenario switch name -> Mininet switch (a fabric's root)
    links: dict[str, Any]  # "a-b" -> Mininet link
    bridges: dict[str, Any] = field(default_factory=dict)  # bridge name -> Mininet switch
    fabrics: dict[str, list[Any]] = field(default_factory=dict)  # switch -> leaf switches
    cgroups: dict[str, NodeCgroup] = field(default_factory=dict)
    backend: str = "userspace"
    delayer: Any = None
    extras: dict[str, Any] = field(default_factory=dict)

    def ip(self, node: str) -> str:
        """The address other hosts reach ``node`` at."""
        return self.hosts[node].IP()

    def link(self, spec: str) -> Any:
        """A link by ``a-b`` (either order)."""
        if spec in self.links:
            return self.links[spec]
        a, _, b = spec.partition("-")
        if f"{b}-{a}" in self.links:
            return self.links[f"{b}-{a}"]
        raise EmulationError(f"no link {spec!r}; links are {sorted(self.links)}")

