"""Armada frame streams in model time: the simulator twin of an emulated fleet. Pure.

:class:`FleetSim` replays one policy on one fleet the way the emulation driver does
(:mod:`testbed.systems.armada.fleet`): deploy the detector, let the replica set settle
with every user registered, then every user streams its frames of the trace while timed
actions hit the nodes. What decides is the emulation's own code, run on the simulation
clock:

* users choose with :class:`~nodes.armada.sdk.choice.Selection` (``armada``,
  ``armada-light``: query, probe every candidate with a real request, keep the current
  replica unless another probes faster by more than the switch margin, fail over at once,
  re-probe after a jittered delay) or :class:`~nodes.armada.sdk.choice.BaselineSelection`
  (``geo-nearest``, ``random``, ``edge-to-cloud``), seeded as the emulated users are
  (:func:`~testbed.systems.armada.model.user_seed`), with the same timeouts;
* the Application Manager answers every query with
  :func:`~nodes.armada.selection.answer_candidates` (Algorithm 1) over its last view of
  the replicas, remembers users for ``user_ttl_s``, and every ``poll_s`` replaces failed
  replicas, tops up to the minimum at the deployment's locations and applies
  :func:`~nodes.armada.scaling.plan_scaling` once per ``cooldown_s``;
* the Spinner places every replica with :func:`~nodes.armada.scheduler.rank_nodes`,
  health-checks the Captains every ``health_interval_s`` and declares a node dead after
  ``max_missed`` missed checks (a departing Captain deregisters at once), placing its
  replicas elsewhere.

Modelled, with what is left out said here:

* a replica is one worker serving its requests in FIFO order. A request's CPU demand
  (receiving it, decoding, detection, answering) is drawn from the calibration
  (:mod:`testbed.systems.armada.sim_calibration`) at one core; the worker runs it at one core
  under the CFS bandwidth quota its node's cgroup gives it (:func:`cfs_finish`): its
  share of cores x 100 ms per 100 ms period, the node's cores split evenly between the
  replicas on the node, less a background load (``load`` of ``cpu`` machine shares runs
  ``ceil(cpu x machine cores)`` burners next to the replica: it keeps
  ``max(cores - load, cores / (1 + burners))``). So a light load at a quarter of a core
  is served at one core's speed, and only sustained load is throttled, as the kernel
  does; drawing whole request times measured back to back at the share would throttle
  every request. Replayed back to back, the quota model gives the calibration's
  measured times at each share (``docs/simulator.md``). The share is fixed when service
  starts. A replica starts (spawn to healthy) in its calibrated start-up time at its
  share;
* the network: a request takes the propagation delay of the shortest-delay path plus each
  link's transmission of its bytes, the answer the propagation delay back; links never
  queue (frames of about 10 KB at 1 fps load them lightly), have no jitter or loss, and
  the control plane answers at once (the Beacon and the Application Manager share a
  host; their processing is not modelled). Connections are kept open, so no handshake;
* utilisation is measured as the Captain does (CPU seconds over the interval divided by
  the interval times the replica's CPU; a request's seconds count when it ends), once
  per Application Manager poll;
* ``crash``: the node's programs die; requests queued or running fail at once (the
  connection is reset) and new ones are refused after a round trip; its Captain misses
  every health check. ``leave``: the Captain deregisters and its links go down, so
  requests get no answer and time out. ``join``: links up, the Captain registers at
  once. Only fleets built by ``armada-fleet`` are replayed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nodes.armada.configs import AppManagerParams, SpinnerParams
from nodes.armada.scaling import ReplicaState, ScalingPolicy, plan_scaling
from nodes.armada.scheduler import NodeView, TaskRequest, rank_nodes
from nodes.armada.sdk.choice import (
    ArmadaUnavailable,
    BaselineSelection,
    Candidate,
    Selection,
)
from nodes.armada.selection import RunningView, replica_location
from testbed.errors import TestbedError
from testbed.latency import completed_columns
from testbed.systems.armada.model import (
    APP,
    FRAME_TIMEOUT_S,
    REGISTER_EVERY_S,
    REPROBE_S,
    REQUEST_TIMEOUT_S,
    SDK_POLICIES,
    SETTLE_QUIET_S,
    probe_kind,
)
from testbed.systems.armada.sim_calibration import Calibration

ACTIVE = ("pending", "starting", "running")  # replica states the manager counts
CONTROL = "ctl"
#: The kernel's default CFS bandwidth period: a quota of q cores is q x 100 ms per period.
CFS_PERIOD_S = 0.1


class Clock:
    """Model time and the queue of what happens next (a callback at an instant)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        """The current model time (what the users' event logs are timed by)."""
        return self.now

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` at model time ``when`` (not before now)."""
        heapq.heappush(self._queue, (max(when, self.now), next(self._order), fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` ``delay`` model seconds from now."""
        self.at(self.now + delay, fn, *args)

    def run_until(self, end: float) -> None:
        """Run everything due up to ``end``; the time is then ``end``."""
        while self._queue and self._queue[0][0] <= end:
            when, _, fn, args = heapq.heappop(self._queue)
            self.now = when
            fn(*args)
        self.now = max(self.now, end)


@dataclass(frozen=True)
class Link:
    """One link of the topology: its ends, one-way delay and bandwidth (None: unlimited)."""

    a: str
    b: str
    delay_s: float
    bw_bit_s: float | None


class Network:
    """One-way times between hosts along the shortest-delay path (module docstring)."""

    def __init__(self, links: Sequence[Link]) -> None:
        self.adjacent: dict[str, list[tuple[str, Link]]] = {}
        for link in links:
            self.adjacent.setdefault(link.a, []).append((link.b, link))
            self.adjacent.setdefault(link.b, []).append((link.a, link))
        self._paths: dict[str, dict[str, tuple[float, float]]] = {}

    def _from(self, source: str) -> dict[str, tuple[float, float]]:
        """From ``source`` to every host: (delay s, seconds per byte summed over links)."""
        if source not in self._paths:
            best: dict[str, tuple[float, float]] = {source: (0.0, 0.0)}
            queue = [(0.0, 0.0, source)]
            while queue:
                delay, per_byte, here = heapq.heappop(queue)
                if best.get(here, (math.inf,))[0] < delay:
                    continue
                for there, link in self.adjacent.get(here, ()):
                    step = 8.0 / link.bw_bit_s if link.bw_bit_s else 0.0
                    found = (delay + link.delay_s, per_byte + step)
                    if found[0] < best.get(there, (math.inf,))[0]:
                        best[there] = found
                        heapq.heappush(queue, (*found, there))
            self._paths[source] = best
        return self._paths[source]

    def one_way(self, a: str, b: str, nbytes: float = 0.0) -> float:
        """Seconds for ``nbytes`` to go from ``a`` to ``b``."""
        found = self._from(a).get(b)
        if found is None:
            raise TestbedError(f"no path between {a} and {b} in the scenario's links")
        return found[0] + nbytes * found[1]


@dataclass
class Node:
    """A Captain's node: where it is, what it has, and what happened to it."""

    name: str
    lat: float
    lon: float
    cores: float
    memory_mb: int
    tier: str
    tags: frozenset[str] = frozenset()
    up: bool = True  # its programs run (False after a crash or a leave)
    linked: bool = True  # its links are up (False after a leave)
    state: str = "alive"  # as the Spinner sees it: alive, dead or left
    missed: int = 0
    load_cores: float = 0.0
    burners: int = 0
    replicas: list[Replica] = field(default_factory=list)

    def share(self) -> float:
        """The cores one busy replica of the node gets (module docstring)."""
        return self.cores * self.kept() / max(1, len(self.replicas))

    def kept(self) -> float:
        """The fraction of the node's CPU its replicas keep next to a background load."""
        if self.load_cores <= 0:
            return 1.0
        return max(self.cores - self.load_cores, self.cores / (1 + self.burners)) / self.cores


def cfs_finish(start: float, demand: float, cores: float, period_end: float,
               used: float) -> tuple[float, float, float]:
    """When ``demand`` CPU seconds of a single worker started at ``start`` end under a
    CFS quota of ``cores`` (``cores`` x :data:`CFS_PERIOD_S` per period), given the end
    of the current period and the quota already used in it; returns the end and the
    period's new end and use. The worker runs at one core until the period's quota is
    used, then waits for the next period; periods follow one another without gaps, as
    the kernel's period timer does while the group is busy. ``cores`` >= 1 never
    throttles one worker."""
    if cores >= 1.0:
        return start + demand, period_end, used
    quota = cores * CFS_PERIOD_S
    t, left = start, demand
    while True:
        if t >= period_end - 1e-12:  # a new period (after idle ones, if any)
            period_end += (math.floor((t - period_end) / CFS_PERIOD_S + 1e-9) + 1) * CFS_PERIOD_S
            used = 0.0
        room = min(quota - used, period_end - t)
        if room <= 1e-12:  # throttled until the period ends
            t = period_end
            continue
        run = min(left, room)
        t, used, left = t + run, used + run, left - run
        if left <= 1e-12:
            return t, period_end, used


@dataclass
class Request:
    """One request from a user to a replica (a frame or a probe) and what became of it."""

    user: User
    url: str
    kind: str  # frame, probe_small (the calibration's kinds)
    nbytes: float
    u: float  # the quantile of its service time
    ok: Callable[[Request], None]
    fail: Callable[[str], None]
    sent: float = 0.0
    arrived: float = 0.0
    start: float = 0.0
    end: float = 0.0
    queue_at_arrival: int = 0
    demand: float = 0.0  # CPU seconds its service takes (at one core)
    settled: bool = False  # answered, failed or timed out: later news is ignored

    def finish(self, outcome: Callable[[], None]) -> None:
        """Deliver ``outcome`` once."""
        if not self.settled:
            self.settled = True
            outcome()


class Replica:
    """One detection task: placed on a node, starting, then serving FIFO (module doc)."""

    def __init__(self, sim: FleetSim, task_id: str, order: int, lat: float, lon: float) -> None:
        self.sim = sim
        self.task_id = task_id
        self.order = order
        self.lat, self.lon = lat, lon  # where it is wanted
        self.node: Node | None = None
        self.status = "pending"
        self.url = ""
        self.process_up = False  # its process runs (it may still be starting)
        self.ready_at: float | None = None
        self.placements = 0
        self.queue: deque[Request] = deque()
        self.serving: Request | None = None
        self.cpu_total = 0.0  # CPU seconds of the requests it served
        self.period_end = 0.0  # the end of its current CFS period, and the quota used in it
        self.period_used = 0.0
        self.sampled = (0.0, 0.0)  # (time, cpu_total) at the last utilisation sample
        self.utilisation: float | None = None

    def place(self, node: Node) -> None:
        """Start on ``node``: healthy after its calibrated start-up."""
        self.stop(None)
        self.leave_node()
        self.node = node
        self.process_up = True
        node.replicas.append(self)
        self.placements += 1
        self.url = f"sim://{node.name}/{self.task_id}/{self.placements}"
        self.status, self.ready_at, self.utilisation = "starting", None, None
        self.period_end, self.period_used = self.sim.clock.now, 0.0
        u = self.sim.rng_startup.random()
        self.sim.clock.after(self.sim.calibration.startup_s(node.share(), u), self._ready,
                             self.url)

    def _ready(self, url: str) -> None:
        if url == self.url and self.status == "starting" and self.process_up:
            self.status, self.ready_at = "running", self.sim.clock.now
            self.sampled = (self.sim.clock.now, self.cpu_total)

    def sample(self, now: float, task_cpu: float) -> None:
        """Utilisation since the last sample, as the Captain computes it (CPU seconds of
        the requests finished meanwhile over the interval times the task's CPU)."""
        when, used = self.sampled
        if self.status == "running" and self.node is not None and now > when:
            self.utilisation = (self.cpu_total - used) / ((now - when) * task_cpu)
        self.sampled = (now, self.cpu_total)

    def finish_at(self, start: float, demand: float, node: Node) -> float:
        """When ``demand`` CPU seconds started at ``start`` end on ``node``: under a CFS
        quota of the task's CPU or its share of the node (:meth:`Node.share`), whichever
        is less, running for the fraction of the time a background load leaves it
        (:func:`cfs_finish` with demand and quota in wall seconds at that speed)."""
        quota = min(self.sim.task_cpu, node.share())
        speed = node.kept()  # the share of time left between the burners
        end, self.period_end, self.period_used = cfs_finish(
            start, demand / speed, quota / speed, self.period_end, self.period_used)
        return end

    def arrive(self, request: Request) -> None:
        """A request reached the replica: queue it, serve it when its turn comes."""
        request.arrived = self.sim.clock.now
        request.queue_at_arrival = len(self.queue) + (self.serving is not None)
        self.queue.append(request)
        if self.serving is None:
            self._next()

    def _next(self) -> None:
        now = self.sim.clock.now
        while self.queue:
            request = self.queue.popleft()
            if request.settled:  # its client gave up while it waited: it left the queue
                continue
            assert self.node is not None
            self.serving, request.start = request, now
            request.demand = self.sim.calibration.service_s(request.kind, 1.0, request.u)
            end = self.finish_at(now, request.demand, self.node)
            self.sim.clock.at(end, self._done, request, self.url)
            return

    def _done(self, request: Request, url: str) -> None:
        if url != self.url or self.serving is not request:
            return  # the replica was stopped meanwhile
        now = self.sim.clock.now
        self.cpu_total += request.demand
        self.serving = None
        request.end = now
        # the answer (JSON of a few detections) is small: only its delay counts
        back = self.sim.net.one_way(self.node.name, request.user.name)
        self.sim.clock.after(back, request.finish, lambda: request.ok(request))
        self._next()

    def stop(self, reason: str | None) -> None:
        """The replica's process ends: its requests fail with ``reason`` after the way
        back (None: nothing comes back, the clients time out). The Spinner still lists
        it where it was until it is placed again or removed."""
        if not self.process_up:
            return
        self.process_up = False
        pending = ([self.serving] if self.serving is not None else []) + list(self.queue)
        self.serving, self.queue = None, deque()
        if reason is not None and self.node is not None:
            for request in pending:
                back = self.sim.net.one_way(self.node.name, request.user.name)
                self.sim.clock.after(back, request.finish, lambda r=request: r.fail(reason))

    def leave_node(self) -> None:
        """Its node forgets it (placed elsewhere or removed): no url any more."""
        if self.node is not None and self in self.node.replicas:
            self.node.replicas.remove(self)
        self.node, self.url = None, ""

    def view(self) -> dict[str, Any]:
        """The replica as the Spinner lists it (what the Application Manager reads)."""
        node = self.node
        return {"task_id": self.task_id, "node_id": node.name if node else None,
                "url": self.url or None, "status": self.status, "lat": self.lat,
                "lon": self.lon, "node_lat": node.lat if node else None,
                "node_lon": node.lon if node else None, "node_tags": sorted(node.tags)
                if node else [], "utilisation": self.utilisation, "ready_at": self.ready_at}


class Spinner:
    """Placement and health checks (module docstring)."""

    def __init__(self, sim: FleetSim, nodes: Sequence[Node], params: SpinnerParams) -> None:
        self.sim = sim
        self.nodes = {n.name: n for n in nodes}
        self.params = params
        self.pending: list[Replica] = []

    def place(self, replica: Replica) -> bool:
        """Place ``replica`` on the best node that can take it, or leave it pending."""
        sim = self.sim
        views = [NodeView(n.name, n.lat, n.lon, n.cores, n.memory_mb,
                          n.cores - sim.task_cpu * len(n.replicas),
                          n.memory_mb - sim.task_memory_mb * len(n.replicas), n.tags,
                          n.state == "alive", frozenset([sim.app] if n.replicas else []))
                 for n in self.nodes.values()]
        ranking = rank_nodes(views, TaskRequest(sim.app, sim.task_cpu, sim.task_memory_mb,
                                                replica.lat, replica.lon),
                             self.params.precision)
        if not ranking.nodes:
            replica.stop(None)
            replica.leave_node()
            replica.status = "pending"
            if replica not in self.pending:
                self.pending.append(replica)
            return False
        if replica in self.pending:
            self.pending.remove(replica)
        replica.place(self.nodes[ranking.nodes[0].node_id])
        return True

    def start(self) -> None:
        """Begin the health rounds."""
        self.sim.clock.after(self.params.health_interval_s, self._round)

    def _round(self) -> None:
        sim = self.sim
        for node in self.nodes.values():
            if node.state != "alive":
                continue
            if node.up:
                node.missed = 0
                continue
            # refused at once when the host is reachable; no answer before the timeout
            delay = (sim.net.one_way(CONTROL, node.name) * 2 if node.linked
                     else self.params.health_timeout_s)
            sim.clock.after(delay, self._missed, node)
        for replica in list(self.pending):
            if replica.status == "pending" and replica in sim.manager.replicas.values():
                self.place(replica)
        sim.clock.after(self.params.health_interval_s, self._round)

    def _missed(self, node: Node) -> None:
        if node.state != "alive" or node.up:
            return
        node.missed += 1
        if node.missed >= self.params.max_missed:
            self.lost(node, "dead")

    def lost(self, node: Node, state: str) -> None:
        """``node`` is dead or has left: its replicas keep their ids and go elsewhere."""
        node.state = state
        for replica in list(node.replicas):
            self.place(replica)

    def register(self, node: Node) -> None:
        """A Captain (re)registered."""
        node.state, node.missed = "alive", 0


class Manager:
    """The Application Manager of the one deployed application (module docstring)."""

    def __init__(self, sim: FleetSim, params: AppManagerParams, min_replicas: int,
                 locations: Sequence[tuple[float, float]]) -> None:
        self.sim = sim
        self.params = params
        self.min_replicas = min_replicas
        self.locations = list(locations)
        self.replicas: dict[str, Replica] = {}
        self.next_index = 1
        self.users: dict[str, tuple[float, float, float]] = {}
        self.scaling: list[dict[str, Any]] = []
        self.last_scaled = -math.inf
        self.failures = 0
        self._snapshot: list[dict[str, Any]] = []  # the replicas as of the last poll
        self._view: RunningView | None = None  # its running ones, read for queries

    @property
    def snapshot(self) -> list[dict[str, Any]]:
        """The replicas' Spinner views as of the last poll."""
        return self._snapshot

    @snapshot.setter
    def snapshot(self, views: list[dict[str, Any]]) -> None:
        self._snapshot = views
        self._view = None

    def deploy(self) -> None:
        """The deployment request: ``min_replicas`` near the locations, then polling."""
        for index in range(self.min_replicas):
            self.add(*self.locations[index % len(self.locations)])
        self.snapshot = [r.view() for r in self.replicas.values()]
        self.sim.clock.after(self.params.poll_s, self._poll)

    def add(self, lat: float, lon: float) -> Replica:
        """One more replica near ``(lat, lon)``."""
        replica = Replica(self.sim, f"{self.sim.app}-{self.next_index}", self.next_index + 1,
                          lat, lon)
        self.next_index += 1
        self.replicas[replica.task_id] = replica
        self.sim.spinner.place(replica)
        return replica

    def remove(self, task_id: str) -> None:
        """Stop a replica (its connections are reset) and forget it."""
        replica = self.replicas.pop(task_id)
        if replica in self.sim.spinner.pending:
            self.sim.spinner.pending.remove(replica)
        replica.stop("ServerDisconnectedError: the replica was stopped")
        replica.leave_node()
        replica.status = "exited"

    def active_users(self) -> list[tuple[float, float]]:
        """Users seen within the TTL (older ones forgotten)."""
        horizon = self.sim.clock.now - self.params.user_ttl_s
        self.users = {u: v for u, v in self.users.items() if v[2] >= horizon}
        return [(lat, lon) for lat, lon, _ in self.users.values()]

    def _poll(self) -> None:
        now = self.sim.clock.now
        for replica in self.replicas.values():
            replica.sample(now, self.sim.task_cpu)
        active = [r for r in self.replicas.values() if r.status in ACTIVE]
        while len(active) < self.min_replicas:
            where = self.locations[(self.next_index - 1) % len(self.locations)]
            active.append(self.add(*where))
        self._autoscale(active)
        self.snapshot = [r.view() for r in self.replicas.values()]
        self.sim.clock.after(self.params.poll_s, self._poll)

    def _autoscale(self, active: Sequence[Replica]) -> None:
        now = self.sim.clock.now
        if now - self.last_scaled < self.params.cooldown_s:
            return
        p = self.params
        policy = ScalingPolicy(p.precision, p.users_per_replica, p.scale_up_util,
                               p.scale_down_util, self.min_replicas, p.max_replicas)
        states = [ReplicaState(r.task_id, *replica_location(r.view()), r.status == "running",
                               r.utilisation, r.order) for r in active]
        action = plan_scaling(states, self.active_users(), policy, self.locations)
        if action is None:
            return
        self.last_scaled = now
        task_id = action.task_id or f"{self.sim.app}-{self.next_index}"
        self.scaling.append({"t": now, "action": action.action, "reason": action.reason,
                             "task_id": task_id, "lat": action.lat, "lon": action.lon})
        if action.action == "up":
            self.add(action.lat, action.lon)
        else:
            self.remove(task_id)

    def query(self, user: str, lat: float, lon: float) -> dict[str, Any]:
        """``POST /query``: remember the user, answer its candidates."""
        self.users[user] = (lat, lon, self.sim.clock.now)
        if self._view is None:
            self._view = RunningView(v for v in self.snapshot if v["status"] == "running")
        return {"app": self.sim.app, "candidates": self._view.answer(
            lat, lon, precision=self.params.precision,
            overload=self.params.overload, topn=self.params.topn)}

    def listing(self) -> list[dict[str, Any]]:
        """``GET /apps/{app}``'s replicas (a baseline's round)."""
        return [{**v, "lat": v["node_lat"] if v["node_lat"] is not None else v["lat"],
                 "lon": v["node_lon"] if v["node_lon"] is not None else v["lon"]}
                for v in self.snapshot]

    def settled_since(self) -> float:
        """The last instant the replica set changed or scaled (for settling)."""
        changes = [r.ready_at or 0.0 for r in self.replicas.values()]
        changes += [e["t"] for e in self.scaling]
        return max(changes, default=0.0)

    def quiet(self) -> bool:
        """Every active replica runs."""
        active = [r for r in self.replicas.values() if r.status in ACTIVE]
        return bool(active) and all(r.status == "running" for r in active)


class User:
    """One streaming user: its selection object and its rounds (module docstring)."""

    def __init__(self, sim: FleetSim, name: str, lat: float, lon: float, policy: str,
                 seed: int, params: Mapping[str, Any]) -> None:
        self.sim = sim
        self.name = name
        common: dict[str, Any] = {
            "probe_payload": b"", "user": name, "reprobe_s": REPROBE_S,
            "request_timeout_s": REQUEST_TIMEOUT_S, "seed": seed, "clock": sim.clock.time,
            "near_equal": float(params.get("near_equal", 0.0))}
        where = ("sim://beacon", APP, lat, lon)
        self.sdk = policy in SDK_POLICIES
        self.sel: Selection = (Selection(*where, **common) if self.sdk else
                               BaselineSelection(*where, policy=policy,
                                                 cloud_nodes=sim.cloud_nodes, **common))
        self.probe_kind = "probe_small" if probe_kind(policy) == "small" else "frame"
        self.draws = np.random.default_rng([seed, 7])  # service-time quantiles
        self.rounding = False
        self.waiting: list[Callable[[], None]] = []
        self.rounds = 0
        self.served_by: str | None = None  # node of the latest answered frame
        self.first_pick: Candidate | None = None

    def start(self, at: float) -> None:
        """The first round at ``at``, then one after every jittered delay."""
        self.sim.clock.at(at, self.round, self._next_round)

    def _next_round(self) -> None:
        if self.first_pick is None and self.sel.current is not None:
            self.first_pick = self.sel.current
        if not self.sim.streaming_over():
            self.sim.clock.after(self.sel.next_delay(), self.round, self._next_round)

    def round(self, then: Callable[[], None] | None = None) -> None:
        """One round (query and probes, or query and listing); ``then`` when it ends. A
        round asked for while one runs is answered by that one."""
        if then is not None:
            self.waiting.append(then)
        if self.rounding:
            return
        self.rounding = True
        self.rounds += 1
        self._to_control(lambda: self.sim.manager.query(self.name, *self._where()),
                         self._queried)

    def _to_control(self, ask: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """One request to the control node: ``ask()`` there, ``then(answer)`` back here."""
        sim = self.sim
        back = sim.net.one_way(CONTROL, self.name)
        sim.clock.after(sim.net.one_way(self.name, CONTROL),
                        lambda: sim.clock.after(back, then, ask()))

    def _where(self) -> tuple[float, float]:
        body = self.sel.query_body
        return body["lat"], body["lon"]

    def _queried(self, answer: Mapping[str, Any]) -> None:
        self.sel.adopt(answer)
        if not self.sdk:  # a baseline then lists the running replicas: one more trip
            self._to_control(self.sim.manager.listing, self._listed)
            return
        candidates = list(self.sel.candidates)
        results: list[tuple[Candidate, float | None, str | None] | None] = [None] * len(
            candidates)
        if not candidates:
            self._probed([])
            return

        def collect(k: int, entry: tuple[Candidate, float | None, str | None]) -> None:
            results[k] = entry
            if all(r is not None for r in results):
                self._probed([r for r in results if r is not None])

        for k, candidate in enumerate(candidates):
            sent = self.sim.clock.now
            self.sim.send(self, candidate.url, self.probe_kind, float(self.draws.random()),
                          lambda _req, k=k, c=candidate, s=sent: collect(
                              k, (c, self.sim.clock.now - s, None)),
                          lambda why, k=k, c=candidate: collect(k, (c, None, why)))

    def _probed(self, results: list[tuple[Candidate, float | None, str | None]]) -> None:
        self.sel.probed(results)
        self._end_round()

    def _listed(self, listing: list[dict[str, Any]]) -> None:
        assert isinstance(self.sel, BaselineSelection)
        self.sel.listed([r for r in listing if r.get("status") == "running"])
        self._end_round()

    def _end_round(self) -> None:
        self.rounding = False
        waiting, self.waiting = self.waiting, []
        for then in waiting:
            then()


class FrameSend:
    """One frame through the user's selection: attempts, failover, the row."""

    def __init__(self, sim: FleetSim, user: User, task: Mapping[str, Any], index: int) -> None:
        self.sim, self.user, self.task, self.index = sim, user, task, index
        self.dispatch = sim.clock.now
        self.tried: list[tuple[str, str]] = []
        self.attempts = user.sel.attempts()
        self.done = False
        self.current: Request | None = None
        sim.clock.after(sim.frame_timeout_s, self._timed_out)
        self._next()

    def _next(self) -> None:
        if self.done:
            return
        try:
            candidate, _ = next(self.attempts)
        except ArmadaUnavailable as exc:
            self._row("error", f"SendError: {exc}")
            return
        if candidate is None:
            self.user.round(self._next)
            return
        node = candidate.node_id or candidate.task_id
        self.tried.append((node, self.sim.tiers.get(node, "edge")))
        self.current = self.sim.send(
            self.user, candidate.url, "frame", float(self.user.draws.random()),
            lambda req: self._answered(req, candidate),
            lambda why: self._failed(candidate, why))

    def _failed(self, candidate: Candidate, why: str) -> None:
        if self.done:
            return
        self.user.sel.failed(candidate, why)
        self._next()

    def _answered(self, request: Request, candidate: Candidate) -> None:
        if self.done:
            return
        self.user.served_by = self.tried[-1][0]
        self._row("ok", None, request, candidate)

    def _timed_out(self) -> None:
        if self.done:
            return
        if self.current is not None:
            self.current.settled = True  # the client stops waiting; a queued copy leaves
        timeout = self.sim.frame_timeout_s
        self._row("timeout", f"no answer within {timeout:g} s wall (timeout_s={timeout:g})")

    def _row(self, outcome: str, error: str | None, request: Request | None = None,
             candidate: Candidate | None = None) -> None:
        self.done = True
        sim, task, now = self.sim, self.task, self.sim.clock.now
        target, tier = self.tried[-1] if self.tried else ("unknown", "unknown")
        if outcome != "ok" and len(self.tried) > 1 and error is not None:
            error += f" (tried {', '.join(t for t, _ in self.tried)})"
        row: dict[str, Any] = {
            "run": sim.run_id, "policy": sim.policy, "repetition": sim.repetition,
            "kind": "frame", "task_id": task["task_id"], "client": self.user.name,
            "target": target, "tier": tier, "size": task["size"], "cls": task["cls"],
            "arrival_model": task["arrival"], "dispatch_model": self.dispatch - sim.start_at,
            "arrival_wall": self.dispatch, "dispatch_wall": self.dispatch,
            "estimate_s": candidate.latency_s if candidate is not None else None,
            "state_age_s": 0.0, "decision_us": 0.0, "outcome": outcome, "error": error,
            "frame_stream": f"cam-{self.user.name}", "frame_index": self.index,
            "frame_deadline_s": None}
        if request is not None:
            row.update(completed_columns(row["dispatch_model"], self.dispatch, now,
                                         request.arrived, request.start, request.end, 1.0),
                       queue_at_arrival=request.queue_at_arrival)
        else:
            row["response_wall"] = now
        sim.rows.append(row)


class FleetSim:
    """One replay of one policy on one fleet (module docstring): build it, then
    :meth:`run`."""

    def __init__(self, *, calibration: Calibration, nodes: Sequence[Node],
                 links: Sequence[Link], users: Sequence[tuple[str, float, float]],
                 frames: Mapping[str, Sequence[Mapping[str, Any]]], policy: str,
                 seeds: Sequence[int], policy_name: str = "",
                 policy_params: Mapping[str, Any] | None = None, app_params: AppManagerParams,
                 spinner_params: SpinnerParams, min_replicas: int,
                 locations: Sequence[tuple[float, float]], task_cpu: float,
                 task_memory_mb: int, duration_s: float, actions: Sequence[Mapping[str, Any]],
                 run: str = "", repetition: int = 0, machine_cpus: int = 2,
                 startup_seed: int = 0, settle_limit_s: float = 3600.0) -> None:
        self.calibration = calibration
        self.clock = Clock()
        self.net = Network(links)
        self.app = APP
        self.policy, self.run_id, self.repetition = policy, run, repetition
        self.request_timeout_s = REQUEST_TIMEOUT_S
        self.frame_timeout_s = FRAME_TIMEOUT_S
        self.settle_limit_s = settle_limit_s
        self.task_cpu, self.task_memory_mb = task_cpu, task_memory_mb
        self.machine_cpus = machine_cpus
        self.nodes = {n.name: n for n in nodes}
        self.tiers = {n.name: n.tier for n in nodes}
        self.cloud_nodes = frozenset(n.name for n in nodes if n.tier == "cloud")
        self.rng_startup = np.random.default_rng([startup_seed, 11])
        self.spinner = Spinner(self, nodes, spinner_params)
        self.manager = Manager(self, app_params, min_replicas, locations)
        self.users = [User(self, name, lat, lon, policy_name or policy, seed,
                           dict(policy_params or {}))
                      for (name, lat, lon), seed in zip(users, seeds, strict=True)]
        self.frames = frames
        self.frame_bytes = calibration.frame_bytes
        self.duration_s = duration_s
        self.actions = list(actions)
        self.rows: list[dict[str, Any]] = []
        self.applied: list[dict[str, Any]] = []
        self.start_at = math.inf
        self.end_at = math.inf
        self.settled_at = 0.0
        self.settling = False

    # --- requests ----------------------------------------------------------------------
    def send(self, user: User, url: str, kind: str, u: float, ok: Callable[[Request], None],
             fail: Callable[[str], None]) -> Request:
        """One request from ``user`` to the replica at ``url`` (module docstring)."""
        nbytes = self.frame_bytes if kind == "frame" else self.calibration.probe_small_bytes
        request = Request(user, url, kind, nbytes, u, ok, fail, sent=self.clock.now)
        self.clock.after(self.request_timeout_s, request.finish,
                         lambda: fail("TimeoutError"))
        node = self.nodes.get(url.split("/")[2]) if url.startswith("sim://") else None
        if node is None or not node.linked:
            return request  # nothing answers: the timeout fails it
        if not node.up:  # the host answers, no program listens: refused after a round trip
            rtt = self.net.one_way(user.name, node.name) + self.net.one_way(node.name, user.name)
            self.clock.after(rtt, request.finish, lambda: fail(
                "ClientConnectorError: connection refused"))
            return request
        self.clock.after(self.net.one_way(user.name, node.name, nbytes), self._arrive,
                         request, node)
        return request

    def _arrive(self, request: Request, node: Node) -> None:
        if request.settled or not node.linked:
            return
        replica = next((r for r in node.replicas if r.url == request.url), None)
        if replica is None or not replica.process_up or replica.status != "running":
            back = self.net.one_way(node.name, request.user.name)
            self.clock.after(back, request.finish, lambda: request.fail(
                "ClientConnectorError: connection refused"))
            return
        replica.arrive(request)

    # --- the replay --------------------------------------------------------------------
    def streaming_over(self) -> bool:
        """Whether the stream has ended (users stop re-probing)."""
        return self.clock.now >= self.end_at

    def _settle(self) -> None:
        """Deploy, wait for the minimum to run, then register every user until the
        replica set has been quiet for ``SETTLE_QUIET_S`` (as the emulation's settle)."""
        self.spinner.start()
        self.manager.deploy()

        def running() -> bool:
            return sum(r.status == "running" for r in self.manager.replicas.values()) \
                >= self.manager.min_replicas

        self._wait(running, 0.0, "the first replicas to run")
        began = self.clock.now
        self.settling = True

        def register() -> None:
            if not self.settling:
                return
            for user in self.users:
                self.manager.query(user.name, *user._where())
            self.clock.after(REGISTER_EVERY_S, register)

        register()

        def quiet() -> bool:
            now = self.clock.now
            return (now - began >= SETTLE_QUIET_S and self.manager.quiet()
                    and now - self.manager.settled_since() >= SETTLE_QUIET_S)

        self._wait(quiet, began, "the replica set to settle")
        self.settling = False
        self.settled_at = self.clock.now

    def _wait(self, condition: Callable[[], bool], since: float, what: str) -> None:
        """Run the model until ``condition`` holds, checked every half model second (as
        the emulation polls), at most ``settle_limit_s`` after ``since``."""
        while not condition():
            if self.clock.now - since > self.settle_limit_s:
                raise TestbedError(f"simulated fleet: {what} took more than "
                                   f"{self.settle_limit_s:g} model s")
            self.clock.run_until(self.clock.now + 0.5)

    def run(self) -> dict[str, Any]:
        """Settle, stream, and return the rows and what a report keeps of the stream."""
        self._settle()
        before = [r.view() for r in self.manager.replicas.values()]
        n = len(self.users)
        probe_at = self.clock.now + 2.0
        stagger = min(0.3, 3.0 / n)
        self.start_at = probe_at + stagger * n + 2.0
        self.end_at = self.start_at + self.duration_s
        for i, user in enumerate(self.users):
            user.start(probe_at + stagger * i)
            for index, task in enumerate(self.frames.get(user.name, ())):
                self.clock.at(self.start_at + float(task["arrival"]), self._frame, user, task,
                              index)
        for action in self.actions:
            self.clock.at(self.start_at + float(action["at"]), self._apply, action)
        scaling_from = len(self.manager.scaling)
        self.clock.run_until(self.end_at + self.frame_timeout_s + 1.0)
        return {"rows": sorted(self.rows, key=lambda r: (r["client"], r["frame_index"])),
                "details": {
                    "settled_at": self.settled_at, "start_at": self.start_at,
                    "applied": self.applied,
                    "picks": {u.name: u.first_pick.node_id if u.first_pick else None
                              for u in self.users},
                    "switches": {u.name: len(u.sel.switches) for u in self.users},
                    "switch_events": sorted(
                        ({"t": e.t, "user": u.name, **e.detail} for u in self.users
                         for e in u.sel.switches if e.t >= self.start_at),
                        key=lambda e: (e["t"], e["user"])),
                    "rounds": {u.name: u.rounds for u in self.users},
                    "replicas_before": before,
                    "replicas_after": [r.view() for r in self.manager.replicas.values()],
                    "scaling_during": self.manager.scaling[scaling_from:],
                    "scaling_after": list(self.manager.scaling)}}

    def _frame(self, user: User, task: Mapping[str, Any], index: int) -> None:
        FrameSend(self, user, task, index)

    # --- actions -----------------------------------------------------------------------
    def _apply(self, action: Mapping[str, Any]) -> None:
        asked = str(action["target"])
        target: str | None = asked
        if asked.startswith("serving:"):
            user = next((u for u in self.users if u.name == asked.split(":", 1)[1]), None)
            target = user.served_by if user is not None else None
        elif asked.startswith("last:"):
            target = next((a["target"] for a in reversed(self.applied)
                           if a["action"] == asked.split(":", 1)[1]), None)
        error = None
        node = self.nodes.get(target) if target is not None else None
        if node is None:
            error = f"{asked} names no node at {action['at']:g} s"
        else:
            self._change(node, str(action["action"]), action.get("params") or {})
        self.applied.append({"offset_s": action["at"], "action": action["action"],
                             "target": target, "asked": asked,
                             "params": dict(action.get("params") or {}),
                             "at": self.clock.now, "error": error,
                             "replicas": [r.view() for r in self.manager.replicas.values()]})

    def _change(self, node: Node, action: str, params: Mapping[str, Any]) -> None:
        if action == "crash":
            node.up = False
            node.load_cores, node.burners = 0.0, 0
            for replica in node.replicas:
                replica.stop("ServerDisconnectedError: the node crashed")
        elif action == "leave":
            node.up, node.linked = False, False
            for replica in node.replicas:
                replica.stop(None)  # its links are down: nothing comes back
            self.spinner.lost(node, "left")
        elif action == "join":
            node.up, node.linked = True, True
            self.spinner.register(node)
            for replica in list(node.replicas):  # the restarted Captain has no task
                if not replica.process_up:
                    self.spinner.place(replica)
        elif action == "load":
            demand = float(params["cpu"]) * self.machine_cpus
            node.load_cores = demand
            node.burners = math.ceil(demand - 1e-9) if demand > 0 else 0
        else:
            raise TestbedError(f"event action {action!r} is not simulated for Armada "
                               "(crash, leave, join and load are)")
