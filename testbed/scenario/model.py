"""The scenario model: frozen dataclasses describing one experiment, nothing else.

Objects of this module are only ever built by :mod:`testbed.scenario.loader`, which
validates every field first, so the rest of the harness can trust them without checking
again. Mapping-valued fields (``params``) are private deep copies made by the loader;
treat them as read-only.

Units: ``Link`` delays are physical one-way milliseconds and never scaled; every other
duration (``Event.at``, ``Scenario.duration``, service demands) is model-time seconds,
which the emulation divides by ``Scenario.time_scale``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The smallest wall-clock duration the emulation times faithfully (seconds). A scenario
#: whose shortest compressed service time falls below it is refused.
TIMING_FLOOR_S = 0.001

ROLES = ("client", "server", "switch")
RUNTIMES = ("process", "docker")
SWITCHES = ("linuxbridge", "ovs")
NODE_ACTIONS = ("crash", "leave", "join", "load")
LINK_ACTIONS = ("link_down", "link_up", "link_change")
ACTIONS = NODE_ACTIONS + LINK_ACTIONS
EXECUTORS = ("emulation", "sim")
SHAPINGS = ("auto", "netem", "userspace")


@dataclass(frozen=True)
class Node:
    """One host or switch of the emulated network.

    ``cpu`` is the host's share of the whole machine (``None`` = not limited), ``speed``
    a factor dividing every service demand run there. Switches carry no runtime, CPU,
    memory or speed settings (``runtime`` is ``None`` and ``speed`` stays 1.0).
    """

    name: str
    role: str
    tier: str | None = None
    lat: float | None = None
    lon: float | None = None
    cpu: float | None = None
    speed: float = 1.0
    memory_mb: int | None = None
    runtime: str | None = "process"
    #: ``(name, absolute path)`` pairs: named volumes of a ``docker`` node, created for the
    #: run; its services keep there what must survive the container (crash, restart).
    volumes: tuple[tuple[str, str], ...] = ()

    @property
    def is_switch(self) -> bool:
        """Whether this node forwards packets instead of running services."""
        return self.role == "switch"

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form with every field set; switches show only what applies."""
        out: dict[str, Any] = {
            "name": self.name,
            "role": self.role,
            "tier": self.tier,
            "lat": self.lat,
            "lon": self.lon,
        }
        if not self.is_switch:
            out.update(
                cpu=self.cpu, speed=self.speed, memory_mb=self.memory_mb, runtime=self.runtime
            )
            if self.volumes:
                out["volumes"] = dict(self.volumes)
        return out


@dataclass(frozen=True)
class Link:
    """A bidirectional link; shaping applies the same way in each direction.

    ``bw_mbit`` and ``queue`` are ``None`` when unlimited / left to the shaper's default.
    """

    a: str
    b: str
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    bw_mbit: float | None = None
    queue: int | None = None

    @property
    def name(self) -> str:
        """The ``"a-b"`` form events use to name this link."""
        return f"{self.a}-{self.b}"

    def joins(self, x: str, y: str) -> bool:
        """Whether this link connects ``x`` and ``y`` (in either order)."""
        return {self.a, self.b} == {x, y}

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form with every field set."""
        return {
            "a": self.a,
            "b": self.b,
            "delay_ms": self.delay_ms,
            "jitter_ms": self.jitter_ms,
            "loss_pct": self.loss_pct,
            "bw_mbit": self.bw_mbit,
            "queue": self.queue,
        }


@dataclass(frozen=True)
class Topology:
    """Nodes, links and the kind of software switch that joins them."""

    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    switch: str = "linuxbridge"

    def node(self, name: str) -> Node:
        """The node called ``name``; ``KeyError`` if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def link(self, x: str, y: str) -> Link:
        """The link between ``x`` and ``y`` in either order; ``KeyError`` if none."""
        for link in self.links:
            if link.joins(x, y):
                return link
        raise KeyError(f"{x}-{y}")

    def path(self, src: str, dst: str) -> tuple[Link, ...]:
        """Links along the fewest-hop route from ``src`` to ``dst`` (empty if equal).

        Ties are broken by link declaration order, so the answer is deterministic; the
        simulator uses it to add up the physical delay between a client and a server.
        Raises ``KeyError`` when there is no route (the loader refuses such topologies).
        """
        came_from: dict[str, tuple[str, Link] | None] = {src: None}
        todo = deque([src])
        while todo:
            here = todo.popleft()
            if here == dst:
                hops: list[Link] = []
                while (step := came_from[here]) is not None:
                    here, link = step
                    hops.append(link)
                return tuple(reversed(hops))
            for link in self.links:
                if here in (link.a, link.b):
                    there = link.b if link.a == here else link.a
                    if there not in came_from:
                        came_from[there] = (here, link)
                        todo.append(there)
        raise KeyError(f"no route from {src} to {dst}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form, the same shape a topology file has."""
        return {
            "switch": self.switch,
            "nodes": [n.to_dict() for n in self.nodes],
            "links": [link.to_dict() for link in self.links],
        }


@dataclass(frozen=True)
class Service:
    """A registered program started on one node.

    ``params`` were checked by the program's registered ``Config`` when the scenario
    loaded. ``task_server`` is set for programs registered as task servers (clients
    replay trace tasks onto them); the loader guarantees such a service has a ``tier``.
    """

    name: str
    program: str
    node: str
    port: int = 8000
    tier: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    task_server: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form with every field set."""
        return {
            "name": self.name,
            "program": self.program,
            "node": self.node,
            "port": self.port,
            "tier": self.tier,
            "params": plain_copy(self.params),
        }


@dataclass(frozen=True)
class Workload:
    """Which generator makes the task trace, with what parameters and seed."""

    generator: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    seed: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form with every field set."""
        return {"generator": self.generator, "params": plain_copy(self.params), "seed": self.seed}


@dataclass(frozen=True)
class Event:
    """One scheduled change at model time ``at``.

    ``target`` is a node name for node actions and ``"a-b"`` (as the link is declared)
    for link actions. Random schedules in the file are already expanded into these.
    """

    at: float
    action: str
    target: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def link_ends(self) -> tuple[str, str] | None:
        """The two node names of a link action's target, ``None`` for node actions."""
        if self.action not in LINK_ACTIONS:
            return None
        a, b = self.target.split("-")
        return a, b

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form with every field set."""
        return {
            "at": self.at,
            "action": self.action,
            "target": self.target,
            "params": plain_copy(self.params),
        }


@dataclass(frozen=True)
class ExecutorDefaults:
    """How the scenario is run unless the command line says otherwise.

    ``poll_interval_ms`` is how often clients poll ``GET /state`` (wall ms), unless
    ``poll_interval_model_s`` gives it in model seconds: then the state a policy sees is
    equally stale in model time whatever the ``time_scale`` (a study can vary one without
    the other). ``state_timeout_s`` is how long a poll may take before the state counts
    as stale (wall s).
    """

    default: str = "emulation"
    poll_interval_ms: float = 100.0
    shaping: str = "auto"
    state_timeout_s: float = 1.0
    poll_interval_model_s: float | None = None

    def poll_interval_wall_s(self, time_scale: float) -> float:
        """How often clients poll, wall seconds, in a run compressed by ``time_scale``."""
        if self.poll_interval_model_s is not None:
            return self.poll_interval_model_s / time_scale
        return self.poll_interval_ms / 1000.0

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form with every field set (``poll_interval_model_s`` when given)."""
        out: dict[str, Any] = {
            "default": self.default,
            "poll_interval_ms": self.poll_interval_ms,
            "shaping": self.shaping,
            "state_timeout_s": self.state_timeout_s,
        }
        if self.poll_interval_model_s is not None:
            out["poll_interval_model_s"] = self.poll_interval_model_s
        return out


@dataclass(frozen=True)
class PolicyEntry:
    """One policy a scenario compares: the registered ``name``, the ``label`` that names
    it in traces, summaries and plots (the name unless given), and its ``params``.

    Two entries may share a name with different parameters (``random`` uniform beside
    ``random`` weighted by capacity); labels are unique within a scenario.
    """

    label: str
    name: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> str | dict[str, Any]:
        """The entry as a scenario writes it: the bare name when nothing else is set."""
        if self.label == self.name and not self.params:
            return self.name
        out: dict[str, Any] = {"name": self.name, "label": self.label}
        if self.params:
            out["params"] = plain_copy(self.params)
        return out


#: The scenario settings that :meth:`Scenario.with_overrides` may change.
OVERRIDABLE = ("policies", "seed", "duration", "repetitions", "time_scale", "task_timeout")


def default_task_timeout(duration: float) -> float:
    """How long a client waits for a task when the scenario does not say (model s): the
    run's duration, at least 60 s."""
    return max(float(duration), 60.0)


@dataclass(frozen=True)
class Scenario:
    """A whole experiment: network, services, workload, policies, events and timing.

    ``source`` is the file it came from (or a ``<...>`` label) and ``raw`` the parsed
    document before defaults, kept so :meth:`with_overrides` can re-derive defaults such
    as the workload seed; neither takes part in equality.
    """

    name: str
    topology: Topology
    services: tuple[Service, ...]
    system: str
    workload: Workload
    policies: tuple[str, ...]  # the entries' labels, in order
    duration: float
    description: str = ""
    seed: int = 1
    repetitions: int = 1
    time_scale: float = 1.0
    task_timeout: float = 60.0
    events: tuple[Event, ...] = ()
    executor: ExecutorDefaults = field(default_factory=ExecutorDefaults)
    #: name and parameters behind each label of ``policies`` (empty: every label is a
    #: registered name without parameters)
    policy_entries: tuple[PolicyEntry, ...] = ()
    source: str = field(default="<memory>", compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def node(self, name: str) -> Node:
        """The node called ``name``; ``KeyError`` if there is none."""
        return self.topology.node(name)

    def policy_entry(self, label: str) -> PolicyEntry:
        """The policy entry labelled ``label``: which registered policy to build and with
        which parameters. ``KeyError`` if the scenario compares no such label."""
        for entry in self.policy_entries:
            if entry.label == label:
                return entry
        if label in self.policies:
            return PolicyEntry(label=label, name=label)
        raise KeyError(label)

    def clients(self) -> tuple[Node, ...]:
        """The client hosts, in declaration order."""
        return tuple(n for n in self.topology.nodes if n.role == "client")

    def service(self, name: str) -> Service:
        """The service called ``name``; ``KeyError`` if there is none."""
        for service in self.services:
            if service.name == name:
                return service
        raise KeyError(name)

    def services_on(self, node: str) -> tuple[Service, ...]:
        """The services placed on ``node``, in declaration order."""
        return tuple(s for s in self.services if s.node == node)

    def task_servers(self) -> tuple[Service, ...]:
        """Every task-server service, in declaration order."""
        return tuple(s for s in self.services if s.task_server)

    def servers_for(self, client: str | Node) -> tuple[Service, ...]:
        """The task servers ``client`` may place tasks on.

        Those are the task servers on non-client nodes plus the ones on the client's own
        node (its local tier); another client's local server is not a candidate.
        """
        name = client.name if isinstance(client, Node) else client
        return tuple(
            s
            for s in self.task_servers()
            if s.node == name or self.topology.node(s.node).role != "client"
        )

    def resolved(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the topology inlined and every default filled.

        It is stored as run metadata, and loading it back yields an equal scenario. A
        scenario made by a builder keeps its ``build:`` (a system's driver may read the
        builder's parameters, which the built keys alone do not say); loading runs the
        builder again and every key given here replaces the builder's, so nothing
        changes.
        """
        build = self.raw.get("build") if isinstance(self.raw, dict) else None
        return {
            **({"build": plain_copy(build)} if build is not None else {}),
            "name": self.name,
            "system": self.system,
            "description": self.description,
            "seed": self.seed,
            "topology": self.topology.to_dict(),
            "services": [s.to_dict() for s in self.services],
            "workload": self.workload.to_dict(),
            "policies": [self.policy_entry(p).to_dict() for p in self.policies],
            "repetitions": self.repetitions,
            "duration": self.duration,
            "time_scale": self.time_scale,
            "task_timeout": self.task_timeout,
            "events": [e.to_dict() for e in self.events],
            "executor": self.executor.to_dict(),
        }

    def with_overrides(self, **overrides: Any) -> Scenario:
        """A copy with some top-level settings replaced and everything validated again.

        Accepted keywords are those in :data:`OVERRIDABLE`; a ``None`` value means "keep".
        Defaults derived from a changed value follow it (a new ``seed`` also reseeds a
        workload and random event schedules that did not name their own seed). Raises
        ``TypeError`` for other keywords and ``ScenarioError`` for invalid values.
        """
        unknown = sorted(set(overrides) - set(OVERRIDABLE))
        if unknown:
            raise TypeError(f"cannot override {', '.join(unknown)}; only {OVERRIDABLE}")
        if not _REBUILD:
            raise RuntimeError("testbed.scenario.loader has not installed its builder")
        data = plain_copy(self.raw)
        for key, value in overrides.items():
            if value is not None:
                data[key] = plain_copy(value)
        if overrides.get("policies") is not None:  # a label keeps its entry's definition
            labels = {p: self.policy_entry(p).to_dict() for p in self.policies}
            data["policies"] = [labels.get(p, p) if isinstance(p, str) else p
                                for p in data["policies"]]
        return _REBUILD[0](data, self.source)


#: How a changed document becomes a validated :class:`Scenario` again: the loader's
#: ``scenario_from_dict``, installed by :func:`install_rebuild` when the loader is
#: imported (``testbed.scenario`` imports it before this module can be used), so that
#: the model never imports the loader that imports it.
_REBUILD: list[Callable[[Any, str], Scenario]] = []


def install_rebuild(build: Callable[[Any, str], Scenario]) -> None:
    """Install the function :meth:`Scenario.with_overrides` validates a changed document
    with (the loader's ``scenario_from_dict``)."""
    _REBUILD[:] = [build]


def plain_copy(value: Any) -> Any:
    """A deep copy of a document or params structure as plain dicts and lists.

    Only ever applied to validated data, whose depth and size the loader has bounded.
    """
    if isinstance(value, Mapping):
        return {k: plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_copy(v) for v in value]
    return value
