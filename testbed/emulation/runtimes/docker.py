"""The ``docker`` runtime: a node's programs run inside its service container
(:class:`testbed.emulation.docker_runtime.DockerHost`), which shares the Mininet host's
network namespace; a crash kills the whole container and a join starts it again."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.emulation.runtimes.base import RunningService
from testbed.scenario.model import Node, Service

if TYPE_CHECKING:
    from testbed.emulation.built_network import BuiltNetwork
    from testbed.emulation.ledger import Ledger
    from testbed.emulation.topology_view import TopologyView


class DockerRuntime:
    """Programs exec'd in the node's service container (see the module docstring)."""

    name = "docker"
    #: A crash kills the whole service container, background load included.
    crash_ends_load = True

    def needs_engine(self) -> bool:
        """The run's private Docker engine holds the containers."""
        return True

    def add_host(self, built: BuiltNetwork, node: Node, ledger: Ledger, prefix: str,
                 infra: Any) -> Any:
        """A :class:`~testbed.emulation.docker_runtime.DockerHost` with the node's limits,
        volumes and the run secret's folder mounted read-only."""
        from docker.types import Mount

        from testbed.emulation.docker_runtime import DockerHost

        folder = str(infra.secret_file.folder)
        return built.net.addHost(
            node.name, cls=DockerHost, engine=infra.engine, image=infra.image,
            ledger=infra.ledger, run_prefix=infra.prefix, cpu=node.cpu,
            memory_mb=node.memory_mb, workdir=str(infra.workdir), volumes=dict(node.volumes),
            mounts=[Mount(target=folder, source=folder, type="bind", read_only=True)],
            engine_access=node.name in infra.engine_nodes,
            cpuset=infra.partition.hosts_list if infra.partition else None)

    def spawn(self, topo: TopologyView, svc: Service, module: str, argv: list[str],
              log: Path) -> RunningService:
        """Exec the program in the service container, told where the run secret is."""
        host = topo.net.hosts[svc.node]
        handle = host.exec_service([sys.executable, "-m", module, *argv], log=str(log),
                                   env=topo.service_env())
        return RunningService(svc, handle=handle)

    def end(self, topo: TopologyView, running: RunningService,
            sig: signal.Signals) -> None:
        """SIGKILL at once for a crash; otherwise SIGTERM, then SIGKILL after a grace."""
        host = topo.net.hosts[running.service.node]
        if sig == signal.SIGKILL:
            running.handle.signal(signal.SIGKILL)
        host.stop_service(running.handle)

    def crash(self, topo: TopologyView, node: str,
              running: list[RunningService]) -> Callable[[], None]:
        """SIGKILL every process of the service container at once (services and load);
        the returned function waits for the engine's record and removes the containers
        the node's services had started."""
        host = topo.net.hosts[node]
        host.kill()
        return host.settle_crash

    def node_down(self, topo: TopologyView, node: str) -> bool:
        """Whether the service container is down (after a crash)."""
        return not topo.net.hosts[node].running()

    def bring_back(self, topo: TopologyView, node: str) -> None:
        """Start the service container again if it is down."""
        host = topo.net.hosts[node]
        if not host.running():
            host.restart()
