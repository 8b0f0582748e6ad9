"""The emulation executor: one scenario, built once, every policy replayed on it.

Lifecycle of a run (every resource goes into the run ledger as it is created and is
removed in reverse order on success, exception, SIGINT or SIGTERM):

1. start the run's helpers: the userspace delayer (when the kernel has no netem), the
   service launcher, a private Docker engine (docker nodes), userspace OVS and the
   os-ken controller (``switch: ovs``);
2. build the topology on Mininet and start every service, waiting until each answers;
3. hand the running topology to the scenario's system's driver (:class:`Driver`): it
   prepares once, then replays the trace for each repetition and policy (applying the
   scenario's events on schedule through :meth:`EmulatedTopology.schedule_events`); the
   network and services are restored after every replay. The fidelity guard
   (:class:`~testbed.emulation.fidelity_watch.FidelityWatch`) measures the host, the
   shaper and the paths meanwhile; its verdict is the details' ``fidelity``;
4. tear everything down. The caller (:mod:`testbed.runner`) materialised the trace
   before and writes traces, summary, plots and metadata after.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nodes.secret import RunSecret
from testbed.analysis.fidelity import DEFAULT_THRESHOLDS
from testbed.emulation import links as linkmod
from testbed.emulation.built_network import BuiltNetwork
from testbed.emulation.cpu_partition import Partition, env_partition
from testbed.emulation.events import EventScheduler, cost_warnings, join_cost_s, warning_text
from testbed.emulation.fidelity_watch import FidelityWatch
from testbed.emulation.gate import Gate
from testbed.emulation.launcher import LauncherClient, start_launcher
from testbed.emulation.ledger import Ledger
from testbed.emulation.names import BRIDGE_MAX_PORTS, reserve_prefix
from testbed.emulation.network import build_network, stop_network
from testbed.emulation.probe import wait_http_ok_each
from testbed.emulation.run_secret import SecretFile, start_run_secret
from testbed.emulation.runtimes import RunningService, Runtime, runtime_for, uses_engine
from testbed.emulation.shaping import resolve_backend, shaping_engine, shaping_rx
from testbed.errors import EmulationError
from testbed.replays import replay_each, replay_groups
from testbed.scenario.model import Event, Scenario, Service

Progress = Callable[[str], None]
SERVICE_START_TIMEOUT_S = 60.0
#: ``{ip:NODE}`` in a service parameter stands for NODE's address in the emulated network.
ADDRESS_REF = re.compile(r"\{ip:([a-z][a-z0-9]{0,7})\}")


class Interrupted(BaseException):
    """Raised in the main thread when SIGINT or SIGTERM asks the run to stop.

    ``teardown_errors`` lists what the teardown could not remove (empty: all went);
    ``exit_code`` is the shell's convention, 128 + the signal (130 SIGINT, 143 SIGTERM).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.teardown_errors: list[str] = []

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class SignalGuard:
    """What :func:`stop_on_signals` installed: the first signal raises
    :class:`Interrupted`; once teardown began (:meth:`shield`), later signals only say that
    teardown goes on, so a second Ctrl-C never cuts it short."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.shielded = False
        self.raised = False

    def handler(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
        if not self.shielded:
            self.shielded = True  # teardown follows: no later signal may interrupt it
            self.raised = True
            raise Interrupted(signum)
        print(f"testbed: {signal.Signals(signum).name} received; still removing what the "
              "run created", file=sys.stderr, flush=True)

    def shield(self) -> None:
        """From now on a signal is remembered, not raised (teardown runs)."""
        self.shielded = True

    def deferred(self) -> Interrupted | None:
        """The stop a signal asked for during teardown, to raise once teardown ended."""
        if self.received is not None and not self.raised:
            return Interrupted(self.received)
        return None


@contextmanager
def stop_on_signals() -> Iterator[SignalGuard]:
    """Turn SIGINT/SIGTERM into :class:`Interrupted` so ``finally`` blocks tear down."""
    guard = SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    old = {sig: signal.signal(sig, guard.handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield guard
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def engine_nodes(scenario: Scenario) -> set[str]:
    """The ``docker`` nodes whose services are given the node's engine: those running a
    program whose ``context`` asks for ``docker_socket`` (e.g. a node agent that starts
    task containers in its pod)."""
    from testbed.registry import find_program

    engine = {n.name for n in scenario.topology.nodes
              if not n.is_switch and runtime_for(n).needs_engine()}
    return {svc.node for svc in scenario.services
            if svc.node in engine and "docker_socket" in find_program(svc.program)[1].context}


@dataclass
class Infrastructure:
    """The long-lived helpers of one run, started on demand and recorded in the ledger."""

    ledger: Ledger
    workdir: Path
    backend: str
    prefix: str
    delayer: Any = None
    launcher: LauncherClient | None = None
    engine: Any = None
    ovs: Any = None
    controller: Any = None
    secret_file: SecretFile | None = None
    engine_nodes: set[str] = field(default_factory=set)
    #: The CPUs of the delayer and of the hosts (``TESTBED_SHAPER_CPUS``), None: shared.
    partition: Partition | None = None

    def start(self, scenario: Scenario) -> None:
        from testbed.registry import get_system

        if self.backend == "userspace":  # checked before anything is made
            try:
                self.partition = env_partition()
            except ValueError as exc:
                raise EmulationError(str(exc)) from None
        self.secret_file = start_run_secret(self.ledger, self.prefix)
        if self.backend == "userspace":
            from testbed.emulation.delayer import start_delayer

            self.delayer = start_delayer(self.ledger, self.workdir, cpus=self.partition)
        self.launcher = start_launcher(self.ledger, self.workdir,
                                       preload=get_system(scenario.system).preload,
                                       cpus=self.partition.hosts if self.partition else None)
        self.engine_nodes = engine_nodes(scenario)
        if uses_engine(scenario.topology.nodes):
            from testbed.emulation.docker_engine import ensure_base_image, start_engine

            self.engine = start_engine(self.ledger)
            self.image = ensure_base_image(self.engine.client)
        if scenario.topology.switch == "ovs":
            from testbed.emulation.controller import start_controller
            from testbed.emulation.ovs import start_ovs

            self.ovs = start_ovs(self.ledger, self.workdir)
            self.controller = start_controller(self.ledger)

    def versions(self) -> dict[str, str]:
        """The versions of the helper daemons this run started (Docker engine, Open
        vSwitch), so a run's metadata says what emulated it."""
        import subprocess

        found: dict[str, str] = {}
        if self.engine is not None:
            info = self.engine.client.version()
            found["docker_engine"] = str(info.get("Version", "unknown"))
            found["docker_api"] = str(info.get("ApiVersion", "unknown"))
        if self.ovs is not None:
            out = subprocess.run(["ovs-vswitchd", "--version"], capture_output=True,
                                 text=True, timeout=10, check=False).stdout
            found["openvswitch"] = out.splitlines()[0].split()[-1] if out.strip() else "unknown"
        return found

    # Hooks used by testbed.emulation.network while it builds the topology.
    def ovs_switch_class(self) -> Any:
        from testbed.emulation.ovs import UserspaceOVSSwitch

        return UserspaceOVSSwitch

    def switch_params(self) -> dict:
        return {}

    def wait_switch_connected(self, switch: Any) -> None:
        from testbed.emulation.controller import wait_connected

        wait_connected(self.ovs, switch.name, timeout=30.0)


@dataclass
class EmulatedTopology:
    """A built, started scenario: network, helpers and services."""

    scenario: Scenario
    infra: Infrastructure
    net: BuiltNetwork
    workdir: Path
    services: dict[str, RunningService] = field(default_factory=dict)
    loads: dict[str, list[RunningService]] = field(default_factory=dict)
    gates: dict[str, Gate] = field(default_factory=dict)
    #: What actions cost on this machine, measured at bring-up: ``service_start_s`` (per
    #: service, from its start until it answered), ``container_start_s`` (per ``docker``
    #: node, its service container's start).
    costs: dict[str, Any] = field(default_factory=dict)
    #: Every replay's ``events.jsonl`` lines, for the fidelity guard.
    event_records: list[dict[str, Any]] = field(default_factory=list)

    # ----- services -------------------------------------------------------------------
    def runtime(self, node: str) -> Runtime:
        """The runtime ``node`` runs its programs in (:mod:`testbed.emulation.runtimes`)."""
        return runtime_for(self.scenario.node(node))

    def service_argv(self, svc: Service) -> list[str]:
        """The command line of a service: address, the values its program takes from
        the scenario (``Program.context``), then its params with ``{ip:NODE}`` expanded,
        rendered by the program's Config (``--key value`` when it has none)."""
        from testbed.registry import find_program, resolve

        _, program = find_program(svc.program)
        argv = ["--host", "0.0.0.0", "--port", str(svc.port)]
        host = self.net.hosts.get(svc.node) if self.net is not None else None  # None: argv only
        socket = getattr(host, "engine_socket", None)
        context = {"speed": self.scenario.node(svc.node).speed,
                   "time_scale": self.scenario.time_scale,
                   "task_timeout": self.scenario.task_timeout,
                   "docker_socket": str(socket) if socket else None,
                   "docker_pod": host.container_name if socket else None}
        for key in program.context:
            value = context[key]
            if value is not None:
                argv += [f"--{key.replace('_', '-')}",
                         value if isinstance(value, str) else repr(value)]
        params = self.expand_all(svc.params)
        declared = resolve(program.config) if program.config else None
        if declared is not None and dataclasses.is_dataclass(declared):
            from nodes.config import to_argv

            return argv + to_argv(declared, params)
        for key, value in params.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        return argv

    def expand_all(self, value: Any) -> Any:
        """:meth:`expand` applied to every string inside a params structure."""
        if isinstance(value, str):
            return self.expand(value)
        if isinstance(value, dict):
            return {k: self.expand_all(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.expand_all(v) for v in value]
        return value

    def expand(self, text: str) -> str:
        """Replace every ``{ip:NODE}`` in ``text`` with NODE's address (services that must
        that must find each other name their peers' nodes so)."""

        def address(match: re.Match[str]) -> str:
            node = match.group(1)
            if node not in self.net.hosts:
                raise EmulationError(f"{text!r}: {{ip:{node}}} names no host of the "
                                     f"topology ({', '.join(sorted(self.net.hosts))})")
            return self.net.ip(node)

        return ADDRESS_REF.sub(address, text)

    @property
    def secret(self) -> RunSecret:
        """The run secret the services check (``secret.header()`` for a request)."""
        assert self.infra.secret_file is not None
        return self.infra.secret_file.secret

    def service_env(self) -> dict[str, str]:
        """The environment every started program gets: where the run secret is."""
        assert self.infra.secret_file is not None
        return self.infra.secret_file.env()

    def spawn(self, svc: Service, module: str, argv: list[str], log: Path) -> RunningService:
        """Start ``python -m module`` on ``svc.node`` in its runtime (namespace, limits),
        told where the run secret is (``TESTBED_SECRET_FILE``)."""
        return self.runtime(svc.node).spawn(self, svc, module, argv, log)

    def start_service(self, svc: Service) -> None:
        from testbed.registry import find_program

        module = find_program(svc.program)[1].module
        self.services[svc.name] = self.spawn(svc, module,
                                             self.service_argv(svc),
                                             self.workdir / f"service-{svc.name}.log")

    def end(self, running: RunningService, sig: signal.Signals) -> None:
        """Stop one started program with ``sig`` and wait until it has ended."""
        self.runtime(running.service.node).end(self, running, sig)

    def stop_service(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop a service: SIGKILL for a crash, SIGTERM for a graceful leave."""
        running = self.services.pop(name, None)
        if running is not None:
            self.end(running, sig)

    def set_load(self, node_name: str, cpu: float) -> None:
        """Replace the node's background load with ``cpu`` (share of the machine).

        The load is ``ceil(cpu * cores)`` burner processes of equal duty cycle, run like a
        service of the node, so a node's CPU limit applies to its load too.
        """
        for running in self.loads.pop(node_name, []):
            self.end(running, signal.SIGTERM)
        if cpu <= 0:
            return
        demand = cpu * (os.cpu_count() or 1)
        count = math.ceil(demand - 1e-9)
        where = Service(name=f"load-{node_name}", program="cpu_load", node=node_name)
        self.loads[node_name] = [
            self.spawn(where, "nodes.cpu_load", ["--duty", repr(demand / count)],
                       self.workdir / f"load-{node_name}-{i}.log")
            for i in range(count)]

    def url(self, svc: Service, client: str, path: str = "") -> str:
        """How ``client`` reaches ``svc`` (loopback when both share a host)."""
        ip = "127.0.0.1" if svc.node == client else self.net.ip(svc.node)
        return f"http://{ip}:{svc.port}{path}"

    def wait_services(self, names: list[str] | None = None) -> dict[str, float]:
        """Wait until every (or each named) service answers ``/health`` on its own host;
        the seconds until each did."""
        wanted = [svc for svc in self.scenario.services if names is None or svc.name in names]
        targets = [(self.net.hosts[svc.node].pid, f"http://127.0.0.1:{svc.port}/health")
                   for svc in wanted]
        answered = wait_http_ok_each(targets, SERVICE_START_TIMEOUT_S)
        return {svc.name: seconds for svc, seconds in zip(wanted, answered, strict=True)}

    def schedule_events(self, start_at: float, policy: str, repetition: int
                        ) -> EventScheduler:
        """Start applying the scenario's events of the replay of ``policy`` (repetition
        ``repetition``) at ``start_at + at / time_scale`` (wall epoch); the caller stops
        the returned scheduler when its replay ends, which logs every event's line in
        ``events.jsonl`` (:mod:`testbed.emulation.events`)."""
        return EventScheduler(self, start_at, policy, repetition,
                              self.workdir / "events.jsonl", self.event_records).start()

    def log_event_lines(self, lines: Sequence[Mapping[str, Any]]) -> None:
        """Append event lines (:func:`testbed.event_log.log_line`) of a replay whose
        driver applies its own events (one line per event, as the scheduler writes) to
        ``events.jsonl`` and to the records the fidelity guard judges."""
        with (self.workdir / "events.jsonl").open("a") as fh:
            fh.writelines(json.dumps(dict(line)) + "\n" for line in lines)
        self.event_records.extend(dict(line) for line in lines)

    # ----- events ---------------------------------------------------------------------
    def apply_event(self, event: Event) -> None:
        """Carry out one change now, and return once it is complete (a join: the node's
        services answer)."""
        settle = self.event_effect(event)
        if settle is not None:
            settle()

    def event_effect(self, event: Event) -> Callable[[], None] | None:
        """Make ``event``'s change take effect now (a join: once the node's services
        answer; the scheduler prepares one ahead instead, :meth:`prepare_join`). Returns
        what is left to do once it has (the engine's record of a killed container, the
        exit statuses of killed services), or ``None``."""
        action = event.action
        if action in ("link_down", "link_up"):
            linkmod.set_link_up(self.net.link(event.target), action == "link_up")
        elif action == "link_change":
            linkmod.set_link_params(self.net.link(event.target), **dict(event.params))
        elif action == "leave":
            self._end_all([self.services.pop(svc.name)
                           for svc in self.scenario.services_on(event.target)
                           if svc.name in self.services], signal.SIGTERM)
            self._set_node_links(event.target, up=False)
        elif action == "join":
            self._set_node_links(event.target, up=True)
            self._start_missing(event.target)
        elif action == "crash":
            return self.crash_node(event.target)
        elif action == "load":
            self.set_load(event.target, float(event.params["cpu"]))
        else:
            raise EmulationError(f"event action {action!r} is not supported by emulation")
        return None

    def crash_node(self, node: str) -> Callable[[], None]:
        """Every program of ``node`` dies abruptly: its services (and on a ``docker``
        node its whole service container, background load included; its volumes and
        network stay) are SIGKILLed. Returns once they are dead; the returned function
        collects what is left (exit statuses, the engine's record of the container)."""
        killed = [self.services.pop(svc.name) for svc in self.scenario.services_on(node)
                  if svc.name in self.services]
        runtime = self.runtime(node)
        if runtime.crash_ends_load:
            self.loads.pop(node, None)
        return runtime.crash(self, node, killed)

    def _end_all(self, running: list[RunningService], sig: signal.Signals) -> None:
        """:meth:`end` several programs, signalled together rather than one by one."""
        if len(running) == 1:
            self.end(running[0], sig)
            return
        threads = [threading.Thread(target=self.end, args=(r, sig)) for r in running]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _set_node_links(self, node: str, up: bool) -> None:
        for link in self.scenario.topology.links:
            if node in (link.a, link.b):
                linkmod.set_link_up(self.net.link(link.name), up)

    def _missing(self, node: str | None = None) -> list[Service]:
        return [s for s in self.scenario.services if s.name not in self.services
                and (node is None or s.node == node)]

    def join_pending(self, node: str) -> bool:
        """Whether a join of ``node`` has services (or a container) to start."""
        return bool(self._missing(node)) or self.runtime(node).node_down(self, node)

    def join_cost_s(self, node: str) -> float:
        """Estimated wall seconds to bring ``node``'s services back (measured at
        bring-up, :attr:`costs`)."""
        return join_cost_s(self.scenario, node, self.costs)

    def can_prepare_join(self, node: str) -> bool:
        """Whether ``node`` has a gate (:mod:`testbed.emulation.gate`): its rules are
        installed on first use; a kernel without ``xt_recent`` has none, and its joins
        are applied at their instant instead, as late as their start takes."""
        if node not in self.gates:
            host = self.net.hosts[node]
            gate = Gate(host.pid, [i.IP() for i in host.intfList() if i.IP()])
            try:
                gate.install()
            except EmulationError:
                return False
            self.gates[node] = gate
        return True

    def prepare_join(self, node: str) -> None:
        """Start ``node``'s stopped services (its container first, on a ``docker``
        node) behind its closed gate and wait until they answer: to every other host the
        node still looks crashed, until :meth:`commit_join`."""
        self.gates[node].close()
        self._start_missing(node)

    def commit_join(self, node: str) -> None:
        """The join takes effect: ``node``'s links come up and its gate opens."""
        self._set_node_links(node, up=True)
        self.gates[node].open()

    def _start_missing(self, node: str | None = None) -> None:
        """Start the stopped services (of ``node``, or of every node) and wait until they
        answer; a crashed ``docker`` node's container is started again first."""
        missing = self._missing(node)
        for name in sorted({s.node for s in missing} | ({node} if node else set())):
            self.runtime(name).bring_back(self, name)
        for svc in missing:
            self.start_service(svc)
        if missing:
            self.wait_services([s.name for s in missing])

    def restore(self, events: tuple[Event, ...]) -> None:
        """Undo the effects of ``events`` so the next policy starts from the same state
        (every gate open, every service answering)."""
        topology = self.scenario.topology
        for event in events:
            if event.action.startswith("link_"):
                link = topology.link(*event.link_ends)
                built = self.net.link(event.target)
                linkmod.set_link_params(built, delay_ms=link.delay_ms,
                                        jitter_ms=link.jitter_ms, loss_pct=link.loss_pct,
                                        bw_mbit=link.bw_mbit)
                linkmod.set_link_up(built, True)
            elif event.action in ("leave", "join"):
                self._set_node_links(event.target, up=True)
        for gate in self.gates.values():
            gate.open()
        for node in list(self.loads):
            self.set_load(node, 0.0)
        self._start_missing()


def bring_up(scenario: Scenario, ledger: Ledger, workdir: Path, prefix: str,
             progress: Progress, max_ports: int = BRIDGE_MAX_PORTS) -> EmulatedTopology:
    """Start the helpers, build the network and start every service (a switch with more
    than ``max_ports`` links is built as a fabric of bridges)."""
    backend = resolve_backend(scenario.executor.shaping)
    infra = Infrastructure(ledger=ledger, workdir=workdir, backend=backend, prefix=prefix)
    t0 = time.monotonic()
    infra.start(scenario)
    progress(f"helpers up ({backend} shaping) in {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    with ledger.phase():  # one fsync for the hundreds of records of a large network
        net = build_network(scenario.topology, prefix, ledger, backend, infra, scenario.seed,
                            max_ports)
    progress(f"network of {len(net.hosts)} hosts and {len(net.switches)} switches built in "
             f"{time.monotonic() - t0:.1f} s")
    topo = EmulatedTopology(scenario=scenario, infra=infra, net=net, workdir=workdir)
    t0 = time.monotonic()
    spawning: dict[str, float] = {}  # when each service's start began
    try:
        with ledger.phase():
            for svc in scenario.services:
                spawning[svc.name] = time.monotonic()
                topo.start_service(svc)
        waiting = time.monotonic()
        answered = topo.wait_services()
    except BaseException:
        stop_network(net)
        raise
    progress(f"{len(scenario.services)} services answering in {time.monotonic() - t0:.1f} s")
    topo.costs = {
        "service_start_s": {name: waiting + seconds - spawning[name]
                            for name, seconds in answered.items()},
        "container_start_s": {name: host.container_start_s
                              for name, host in net.hosts.items()
                              if getattr(host, "container_start_s", None) is not None}}
    return topo


@contextmanager
def emulated_topology(scenario: Scenario, ledger: Ledger, workdir: Path, prefix: str,
                      progress: Progress, teardown_errors: list[str]
                      ) -> Iterator[EmulatedTopology]:
    """The scenario brought up (:func:`bring_up`) for the ``with`` body, torn down after.

    SIGINT and SIGTERM become :class:`Interrupted` meanwhile; on every exit the network
    is stopped and every resource ``ledger`` recorded is torn down. What the teardown
    could not remove is appended to ``teardown_errors`` and reported through
    ``progress``.
    """
    with stop_on_signals() as guard:
        try:
            topo = bring_up(scenario, ledger, workdir, prefix, progress)
            try:
                yield topo
            finally:
                guard.shield()
                stop_network(topo.net)
        finally:
            guard.shield()
            errors = ledger.teardown()
            teardown_errors.extend(errors)
            if errors:
                progress("teardown left errors: " + "; ".join(errors))
            stopping = sys.exc_info()[1]
            if isinstance(stopping, Interrupted):
                stopping.teardown_errors = list(errors)
        late = guard.deferred()  # a signal that came during teardown stops the run now
        if late is not None:
            late.teardown_errors = list(errors)
            raise late


def event_timing(topo: EmulatedTopology, progress: Progress) -> dict[str, Any]:
    """What the scheduled events cost here (``costs``, measured at bring-up), how late
    one may be (``allowed_model_s``), where the replays log them, and the joins that
    cannot be prepared in time at this ``time_scale`` (``warnings``, also one progress
    line); ``metadata.json`` keeps it as ``event_timing``."""
    scenario = topo.scenario
    allowed = DEFAULT_THRESHOLDS.event_allowance(scenario.duration)
    warnings = cost_warnings(scenario, topo.costs, allowed) if scenario.events else []
    line = warning_text(warnings, scenario.time_scale)
    if line:
        progress(line)
    return {"log": str(topo.workdir / "events.jsonl"), "costs": topo.costs,
            "allowed_model_s": allowed, "warnings": warnings}


class Driver(Protocol):
    """How a system replays its scenario's policies on the emulated topology.

    A system registers a factory ``make_driver(scenario) -> Driver`` as
    ``System.emulate``. :func:`run_emulation` calls :meth:`prepare` once after
    bring-up, :meth:`replay` for every repetition and policy (restoring the network and
    services after each), then :meth:`details` for the run's metadata.

    A driver whose comparison needs its policies side by side (their users on the
    network at once, hit by the same events: a failover study) defines
    ``replay_together(topo, policies, repetition, progress)`` instead of using
    :meth:`replay`; it is called once per repetition with every policy.
    """

    def prepare(self, topo: EmulatedTopology, run: str, trace_dir: Path,
                progress: Progress) -> None:
        """Get the running topology ready for the first replay."""
        ...

    def replay(self, topo: EmulatedTopology, policy: str, repetition: int,
               progress: Progress) -> list[dict[str, Any]]:
        """Replay the materialised trace once with ``policy``; the trace rows."""
        ...

    def details(self) -> dict[str, Any]:
        """What the driver learned beyond the rows (recorded in ``metadata.json``)."""
        ...


def run_emulation(scenario: Scenario, run: str, trace_dir: Path, workdir: Path,
                  progress: Progress, driver: Driver,
                  ledger_root: Path | None = None) -> dict[str, Any]:
    """Run every repetition and policy of ``scenario`` with ``driver``; returns rows and
    run details (``fidelity``: the verdict of :func:`testbed.analysis.fidelity.judge`)."""
    ledger = Ledger(run, root=ledger_root)
    prefix = reserve_prefix(ledger)  # held until the ledger is gone (teardown or clean)
    started = time.time()
    details: dict[str, Any] = {"ledger": str(ledger.path)}
    errors: list[str] = []
    with emulated_topology(scenario, ledger, workdir, prefix, progress, errors) as topo:
        details["shaping_backend"] = topo.net.backend
        details["shaping_engine"] = shaping_engine(topo.net.backend, topo.infra.delayer)
        details["shaping_rx"] = shaping_rx(topo.net.backend, topo.infra.delayer)
        details["shaping_cpus"] = (topo.infra.partition.as_dict() if topo.infra.partition
                                   else None)
        details["helper_versions"] = topo.infra.versions()
        details["hosts"] = {name: {"ip": host.IP(), "pid": host.pid,
                                   "runtime": scenario.node(name).runtime}
                            for name, host in topo.net.hosts.items()}
        driver.prepare(topo, run, trace_dir, progress)
        details["event_timing"] = event_timing(topo, progress)
        together = getattr(driver, "replay_together", None)

        def restore() -> None:  # after every replay, failed or not
            topo.restore(scenario.events)

        with FidelityWatch(topo, progress) as watch:
            if together is not None:
                rows, failed = replay_groups(
                    scenario.repetitions, scenario.policies,
                    lambda group, rep: together(topo, group, rep, progress), progress,
                    restore)
            else:
                rows, failed = replay_each(
                    scenario.repetitions, scenario.policies,
                    lambda policy, rep: driver.replay(topo, policy, rep, progress), progress,
                    restore)
        details["fidelity"] = watch.verdict(rows)
        details["failed"] = failed
        details["driver"] = driver.details()
    details["rows"] = rows
    details["wall_s"] = time.time() - started
    details["teardown_errors"] = errors
    return details
