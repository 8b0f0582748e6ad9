"""How a node runs its programs: one :class:`~testbed.emulation.runtimes.base.Runtime`
per runtime name, chosen by :func:`runtime_for`.

A scenario node names its runtime (``runtime: process`` or ``docker``,
``docs/scenario.md``). Everything the executor and the network builder do that depends
on it goes through the node's runtime instead of a branch on the name at each place:
building the node's host, starting a program in it, stopping one, crashing the node,
telling whether the node itself is down and bringing it back.
:mod:`~testbed.emulation.runtimes.process` runs programs as processes in the host's
network namespace (under a cgroup when the node has limits);
:mod:`~testbed.emulation.runtimes.docker` runs them inside a service container that
shares the host's namespace. A new runtime is one more module and one entry in
:data:`RUNTIMES`.
"""

from __future__ import annotations

from collections.abc import Iterable

from testbed.emulation.runtimes.base import RunningService, Runtime
from testbed.emulation.runtimes.docker import DockerRuntime
from testbed.emulation.runtimes.process import ProcessRuntime
from testbed.errors import EmulationError
from testbed.scenario.model import Node

RUNTIMES: dict[str, Runtime] = {r.name: r for r in (ProcessRuntime(), DockerRuntime())}


def runtime_for(node: Node) -> Runtime:
    """The runtime ``node`` names (the scenario loader has checked the name)."""
    try:
        return RUNTIMES[node.runtime]
    except KeyError:
        raise EmulationError(f"node {node.name}: runtime {node.runtime!r} is not one of "
                             f"{', '.join(sorted(RUNTIMES))}") from None


def uses_engine(nodes: Iterable[Node]) -> bool:
    """Whether any of ``nodes`` (hosts, not switches) runs in a runtime that needs the
    testbed's private Docker engine."""
    return any(runtime_for(n).needs_engine() for n in nodes if not n.is_switch)


__all__ = ["RUNTIMES", "RunningService", "Runtime", "runtime_for", "uses_engine"]
