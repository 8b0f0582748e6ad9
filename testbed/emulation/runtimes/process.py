"""The ``process`` runtime: a node's programs are processes in its host's network
namespace, started by the run's launcher (under the node's cgroup when it has CPU or
memory limits) and recorded in the ledger."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.emulation.batched_nodes import BatchedHost
from testbed.emulation.cgroups import NodeCgroup
from testbed.emulation.exits import wait_exits
from testbed.emulation.ledger import process_start_time
from testbed.emulation.runtimes.base import RunningService
from testbed.errors import EmulationError
from testbed.scenario.model import Node, Service

if TYPE_CHECKING:
    from testbed.emulation.built_network import BuiltNetwork
    from testbed.emulation.ledger import Ledger
    from testbed.emulation.topology_view import TopologyView

#: How long a crash waits for its SIGKILLed programs to be gone.
CRASH_WAIT_S = 10.0


class ProcessRuntime:
    """Programs as processes in the host's namespace (see the module docstring)."""

    name = "process"
    #: A crash kills the node's services; its background load (other tenants) runs on.
    crash_ends_load = False

    def needs_engine(self) -> bool:
        """No container engine."""
        return False

    def add_host(self, built: BuiltNetwork, node: Node, ledger: Ledger, prefix: str,
                 infra: Any) -> Any:
        """A batched Mininet host, and the node's cgroup when it has limits."""
        host = built.net.addHost(node.name, cls=BatchedHost)
        if node.cpu is not None or node.memory_mb is not None:
            built.cgroups[node.name] = NodeCgroup(ledger, prefix, node.name, node.cpu,
                                                  node.memory_mb)
        return host

    def spawn(self, topo: TopologyView, svc: Service, module: str, argv: list[str],
              log: Path) -> RunningService:
        """Start the program through the launcher in the host's namespace and cgroup,
        in the run's work folder (a relative path a service is given lands in the run),
        and record it in the ledger."""
        host = topo.net.hosts[svc.node]
        cgroup = topo.net.cgroups.get(svc.node)
        assert topo.infra.launcher is not None
        pid = topo.infra.launcher.spawn(host.pid, module, argv, log,
                                        cgroups=cgroup.procs_files if cgroup else None,
                                        cwd=topo.workdir, env=topo.service_env())
        topo.infra.ledger.record_process(pid, what=f"{module} on {svc.node}")
        return RunningService(svc, pid=pid, start=process_start_time(pid))

    def end(self, topo: TopologyView, running: RunningService,
            sig: signal.Signals) -> None:
        """Signal the process, SIGKILL it after 5 s, and collect its exit status."""
        assert running.pid is not None and topo.infra.launcher is not None
        try:
            os.kill(running.pid, sig)
        except ProcessLookupError:
            return
        if topo.infra.launcher.wait(running.pid, timeout=5.0) is None:
            os.kill(running.pid, signal.SIGKILL)
            topo.infra.launcher.wait(running.pid, timeout=5.0)

    def crash(self, topo: TopologyView, node: str,
              running: list[RunningService]) -> Callable[[], None]:
        """SIGKILL every program at once and wait for their exits (pidfds); the returned
        function collects their exit statuses."""
        for program in running:
            with suppress(ProcessLookupError):
                os.kill(program.pid, signal.SIGKILL)  # type: ignore[arg-type]
        if not wait_exits([(r.pid, r.start) for r in running], timeout=CRASH_WAIT_S):
            raise EmulationError(f"crash of {node}: its services still run "
                                 f"{CRASH_WAIT_S:g} s after SIGKILL")
        launcher = topo.infra.launcher

        def collect() -> None:
            for program in running:
                launcher.wait(program.pid, timeout=5.0)
        return collect

    def node_down(self, topo: TopologyView, node: str) -> bool:
        """A process node itself never goes down: only its programs do."""
        return False

    def bring_back(self, topo: TopologyView, node: str) -> None:
        """Nothing to bring back before the programs start."""
