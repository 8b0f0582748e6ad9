"""The :class:`Runtime` protocol every node runtime implements, and
:class:`RunningService`, what a started program leaves behind (the factory is
:func:`testbed.emulation.runtimes.runtime_for`; the package docstring says why)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from testbed.scenario.model import Node, Service

if TYPE_CHECKING:
    from testbed.emulation.built_network import BuiltNetwork
    from testbed.emulation.ledger import Ledger
    from testbed.emulation.topology_view import TopologyView


@dataclass
class RunningService:
    """One started program: ``pid`` and ``start`` (its start time, so a recycled pid is
    never signalled) for a process, ``handle`` for a program exec'd in a container."""

    service: Service
    pid: int | None = None
    start: int | None = None
    handle: Any = None


class Runtime(Protocol):
    """What the executor asks of a node's runtime."""

    name: str
    #: Whether a crash also ends the node's background load (``load`` events).
    crash_ends_load: bool

    def needs_engine(self) -> bool:
        """Whether a run with such a node needs the testbed's private Docker engine."""
        ...

    def add_host(self, built: BuiltNetwork, node: Node, ledger: Ledger, prefix: str,
                 infra: Any) -> Any:
        """Add ``node``'s Mininet host to ``built.net`` (and what it needs, e.g. its
        cgroup); returns the host."""
        ...

    def spawn(self, topo: TopologyView, svc: Service, module: str, argv: list[str],
              log: Any) -> RunningService:
        """Start ``python -m module argv`` for ``svc`` on its node, logging to ``log``."""
        ...

    def end(self, topo: TopologyView, running: RunningService,
            sig: signal.Signals) -> None:
        """Stop one program with ``sig`` (SIGKILL: no grace) and wait until it ended."""
        ...

    def crash(self, topo: TopologyView, node: str,
              running: list[RunningService]) -> Callable[[], None]:
        """Kill every program of ``node`` at once (``running``: its services and load,
        already removed from the topology's records); return once they are dead, with a
        function that collects what is left."""
        ...

    def node_down(self, topo: TopologyView, node: str) -> bool:
        """Whether the node itself (not only its services) must be brought back."""
        ...

    def bring_back(self, topo: TopologyView, node: str) -> None:
        """Bring the node itself back after a crash, before its services start."""
        ...
