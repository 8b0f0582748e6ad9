"""Run limits: what a run will need, estimated before anything is built, and refused
in one line when this machine cannot hold it.

A run that does not fit used to fail late and badly: a workload of ``rate: 1e9`` died
in a numpy allocation of 37 GiB, one of ``rate: 1e7`` grew until the OOM killer ended
it, thousands of hosts were brought up without a word. :func:`check_run` is called by
the runner before the trace is materialised; it adds up

* the **workload**: the tasks the generator says it will make (its optional
  ``expected_tasks(params, clients, duration)`` hook; a generator without one is not
  counted), times what a materialised task costs (:data:`TRACE_BYTES`) and what its
  result rows cost in every replay (:data:`ROW_BYTES` x policies x repetitions);
* the **emulation** (emulation executor only): one shell per host, every service at
  its program's registered ``memory_mb``, one client process per client node at its
  system's ``client_memory_mb`` (each reading the whole trace), the helpers (launcher,
  delayer, Open vSwitch and its controller, the Docker engine) and a container per
  Docker node;
* the **harness** process itself (:data:`HARNESS_MB`),

and compares the sum with what this process may still use
(:func:`testbed.machine.memory`: ``MemAvailable``, cgroup and address-space limits), and
the processes the emulation starts with the room the kernel has for more
(:func:`testbed.machine.process_room`).
The per-item costs are measured on the project's VM (``docs/scenario.md``, "Limits");
they are estimates, so a run well inside the machine is never refused by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.errors import TestbedError
from testbed.machine import GIB, MIB, Memory, memory, process_room
from testbed.scenario.model import Scenario

#: What one materialised task costs while the trace is generated and written (bytes;
#: measured 368 B generating and writing 1e6 tasks of the built-in Poisson generator).
TRACE_BYTES = 400
#: What one task's result row costs per replay, from the executor's rows to the written
#: Parquet/CSV (bytes; measured 1.67 KB: a simulated run of 161 k tasks peaked at 559 MB
#: with one policy and 827 MB with two).
ROW_BYTES = 1800
#: The harness process itself: Python, numpy, pandas, matplotlib (MiB; measured 290 MB
#: peak in the simulated runs above once their rows are taken out).
HARNESS_MB = 300.0
#: One emulated host's shell (MiB; bare Mininet: 62 MB PSS for 200 hosts).
HOST_MB = 0.5
#: One helper process: the launcher, the delayer, an Open vSwitch daemon or controller
#: (MiB; the bench's 10-host run holds about 55 MB for launcher and delayer together).
HELPER_MB = 40.0
#: The private Docker engine (dockerd and containerd) and each container's shim (MiB).
DOCKER_ENGINE_MB = 120.0
CONTAINER_MB = 20.0


@dataclass(frozen=True)
class Estimate:
    """What a run needs: counts and bytes per part (``tasks`` ``None``: not known)."""

    executor: str
    tasks: float | None
    replays: int
    workload_bytes: float
    hosts: int = 0
    services: int = 0
    clients: int = 0
    helpers: int = 0
    emulation_bytes: float = 0.0
    harness_bytes: float = HARNESS_MB * MIB

    @property
    def processes(self) -> int:
        """Processes the emulation starts (host shells, services, clients, helpers)."""
        return self.hosts + self.services + self.clients + self.helpers

    @property
    def total_bytes(self) -> float:
        """Everything added up."""
        return self.workload_bytes + self.emulation_bytes + self.harness_bytes

    def describe(self) -> str:
        """The parts in a few words, for the refusal and the run's metadata."""
        tasks = "an unknown number of" if self.tasks is None else f"{self.tasks:.1e}"
        parts = [(f"workload {tasks} tasks x {self.replays} replay(s) "
                  f"{_gib(self.workload_bytes)} GiB")]
        if self.executor == "emulation":
            parts.append(f"emulation {self.processes} processes ({self.hosts} hosts, "
                         f"{self.services} services, {self.clients} clients, "
                         f"{self.helpers} helpers) {_gib(self.emulation_bytes)} GiB")
        parts.append(f"harness {_gib(self.harness_bytes)} GiB")
        return ", ".join(parts)


def _gib(value: float) -> str:
    return f"{value / GIB:.1f}" if math.isfinite(value) else "inf"


def expected_tasks(scenario: Scenario) -> float | None:
    """How many tasks the scenario's generator says it will make (``None``: it does
    not say). Asks the generator's ``expected_tasks`` hook; nothing is generated."""
    from testbed.registry import generators

    generator = generators()[scenario.workload.generator]
    hook = getattr(generator, "expected_tasks", None)
    if hook is None:
        return None
    found = float(hook(scenario.workload.params, len(scenario.clients()), scenario.duration))
    return found if not math.isnan(found) else math.inf


def estimate(scenario: Scenario, executor: str) -> Estimate:
    """What running ``scenario`` on ``executor`` needs (see the module docstring)."""
    from testbed.registry import find_program, get_system

    tasks = expected_tasks(scenario)
    replays = max(1, len(scenario.policies)) * scenario.repetitions
    counted = tasks or 0.0
    workload = counted * TRACE_BYTES + counted * replays * ROW_BYTES
    if executor != "emulation":
        return Estimate(executor, tasks, replays, workload)
    hosts = [n for n in scenario.topology.nodes if not n.is_switch]
    clients = len(scenario.clients())
    service_mb = 0.0
    for svc in scenario.services:
        found = find_program(svc.program)
        service_mb += found[1].memory_mb if found is not None else HELPER_MB
    docker = sum(1 for n in hosts if n.runtime == "docker")
    ovs = scenario.topology.switch == "ovs" and any(n.is_switch
                                                    for n in scenario.topology.nodes)
    helpers = 2 + (3 if ovs else 0) + (2 if docker else 0)  # launcher, delayer; ovsdb,
    # vswitchd, controller; dockerd, containerd
    emulation_mb = (len(hosts) * HOST_MB + service_mb
                    + clients * get_system(scenario.system).client_memory_mb
                    + (2 + (3 if ovs else 0)) * HELPER_MB
                    + ((DOCKER_ENGINE_MB + docker * CONTAINER_MB) if docker else 0.0))
    emulation = emulation_mb * MIB + clients * counted * TRACE_BYTES
    return Estimate(executor, tasks, replays, workload, hosts=len(hosts),
                    services=len(scenario.services), clients=clients,
                    helpers=helpers + docker, emulation_bytes=emulation)


def check_run(scenario: Scenario, executor: str, machine: Memory | None = None,
              room: int | None = -1) -> Estimate:
    """Refuse, in one line with the numbers, a run this machine cannot hold.

    ``machine`` defaults to what this process may use now (:func:`testbed.machine.memory`),
    ``room`` to the processes the kernel can still give out
    (:func:`testbed.machine.process_room`; ``None``: unknown, not checked). Returns the
    estimate when the run fits.
    """
    found = estimate(scenario, executor)
    room = process_room() if room == -1 else room
    if room is not None and found.processes > room:
        raise TestbedError(
            f"{scenario.source}: this run starts about {found.processes} processes "
            f"({found.hosts} hosts, {found.services} services, {found.clients} clients, "
            f"{found.helpers} helpers), more than the {room} the kernel can still give out "
            "(pid_max, threads-max, ulimit -u); use fewer hosts, services or clients")
    have = machine if machine is not None else memory()
    need = found.total_bytes
    if need <= have.available:
        return found
    if found.workload_bytes >= found.emulation_bytes:
        hint = "lower the workload's rate or duration, or run fewer policies or repetitions"
    else:
        hint = "use fewer hosts, services or clients"
    raise TestbedError(
        f"{scenario.source}: this run needs about {_gib(need)} GiB ({found.describe()}), "
        f"more than the {_gib(have.available)} GiB available ({have.bound_by}; the machine "
        f"has {_gib(have.total)} GiB); {hint}")
