"""The benchmark's continuum model written with Ciw, for the simulator-speed comparison.

Ciw (``pip install ciw``) models queueing networks: customers of named classes arrive at
nodes, are served by a node's servers and are routed to the next node. The model:

* **server nodes**, one per tier server: ``workers`` servers, FIFO; a task holds one for
  ``size / speed`` model seconds;
* **client nodes**, one per client, with infinitely many servers and zero service time:
  the client's tasks arrive there at their trace instants (class ``task-<client>``) and
  are placed when they leave it;
* **one network node** with infinitely many servers: every message to or from a remote
  target (task request, task response, poll request, poll answer) spends its one-way
  path delay times ``time_scale`` there;
* **polls**: for each (client, target) route a class ``poll-<route>`` arrives at the
  network node every ``poll_interval * time_scale`` model seconds from 0 until the last
  task arrival; when its request leg ends it reads the server's queue, busy workers and
  windowed arrival rate, and when its answer leg ends the client's view is updated.

Everything that decides lives in one custom routing object (:class:`ContinuumRouting`,
a :class:`ciw.routing.NetworkRouting`): it tags each new customer with its task or
route, decides placements with the same policy objects as the other implementations
(one per client, built and shown :class:`~nodes.offloading.policies.base.View` objects through
their public constructors) and counts each server's arrivals in a sliding window of
``window * time_scale`` model seconds. Service times come from one custom
distribution that returns the time the router set on the customer.

Differences from ``testbed.sim`` (none changes the model): simultaneous events are
ordered by Ciw (at random among nodes), and the polls are a strictly periodic schedule
(the testbed's next poll waits for the previous answer, which here always arrives
within the period). Policies' ``observe`` is called when a response reaches the client.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import ciw

from nodes.offloading.policies import make_policy
from nodes.offloading.policies.base import Outcome, Policy, TargetState, TaskInfo, View
from testbed.systems.offloading.sim import SimModel
from workloads.trace import Task

# Where a customer is in its life: the phase decides where it goes next.
_DISPATCH, _REQUEST, _SERVICE, _RESPONSE, _POLL_REQUEST, _POLL_ANSWER = range(6)


class _Gaps(ciw.dists.Distribution):
    """Inter-arrival times read from a list, then no more arrivals."""

    def __init__(self, gaps: Sequence[float]) -> None:
        self.gaps = iter(gaps)

    def sample(self, t: float | None = None, ind: Any = None) -> float:
        return next(self.gaps, math.inf)


class _Periodic(ciw.dists.Distribution):
    """One arrival at 0, then every ``every`` model seconds up to ``until``."""

    def __init__(self, every: float, until: float) -> None:
        self.every, self.until, self.started = every, until, False

    def sample(self, t: float | None = None, ind: Any = None) -> float:
        if not self.started:
            self.started = True
            return 0.0
        return self.every if (t or 0.0) + self.every <= self.until else math.inf


class _Hold(ciw.dists.Distribution):
    """The time the router decided the customer spends at its next node."""

    def sample(self, t: float | None = None, ind: Any = None) -> float:
        return ind.hold


class ContinuumRouting(ciw.routing.NetworkRouting):
    """Tags customers, places tasks with the policies, runs the polls; records latencies."""

    def __init__(self, model: SimModel, tasks: Sequence[Task], policy_name: str,
                 classes: Sequence[str]) -> None:
        self.model = model
        self.k = model.time_scale
        self.window = model.window_s * model.time_scale
        self.tasks = tasks
        self.classes = {name: j for j, name in enumerate(classes)}
        self.policies = [make_policy(policy_name, 1) for _ in model.clients]
        self.observing = [type(p).observe is not Policy.observe for p in self.policies]
        self.one_way = [sum(model.links[j].delay_ms for j in r.links) / 1000.0
                        for r in model.routes]
        self.cache = [(0, 0, model.servers[r.server].workers, 0.0, 0.0) for r in model.routes]
        self.arrivals: list[deque[float]] = [deque() for _ in model.servers]
        by_client: list[list[int]] = [[] for _ in model.clients]
        index = {name: k for k, name in enumerate(model.clients)}
        for i, task in enumerate(tasks):
            by_client[index[task.client]].append(i)
        self.next_task = [iter(ids) for ids in by_client]
        self.latencies = [math.nan] * len(tasks)

    def initialise(self, simulation: ciw.Simulation) -> None:
        """Keep the simulation; the node numbers follow :func:`run_ciw`'s layout."""
        self.simulation = simulation
        servers = len(self.model.servers)
        self.server_nodes = simulation.transitive_nodes[:servers]
        self.network = simulation.transitive_nodes[-1]
        self.exit = simulation.nodes[-1]

    def initialise_individual(self, ind: Any) -> None:
        """A new task (its trace index) or poll (its route and the time it is sent)."""
        j = self.classes[ind.customer_class]
        clients = len(self.model.clients)
        if j < clients:
            ind.task = next(self.next_task[j])
            ind.hold, ind.phase = 0.0, _DISPATCH
        else:
            ind.route = j - clients
            ind.hold, ind.phase = self.one_way[ind.route] * self.k, _POLL_REQUEST

    def next_node(self, ind: Any, node_id: int) -> Any:
        """Where the customer goes when it leaves node ``node_id``, and for how long."""
        now = self.simulation.current_time
        phase = ind.phase
        if phase == _DISPATCH:
            ind.route = self.place(ind.task, now)
            if self.one_way[ind.route] == 0.0:
                return self.reach_server(ind, now)
            ind.hold, ind.phase = self.one_way[ind.route] * self.k, _REQUEST
            return self.network
        if phase == _REQUEST:
            return self.reach_server(ind, now)
        if phase == _SERVICE:
            one_way = self.one_way[ind.route]
            self.latencies[ind.task] = 2.0 * one_way + now - ind.at_server
            ind.wait = ind.service_start_date - ind.at_server
            ind.service = now - ind.service_start_date
            if one_way > 0.0:
                ind.hold, ind.phase = one_way * self.k, _RESPONSE
                return self.network
            self.observe(ind)
            return self.exit
        if phase == _RESPONSE:
            self.observe(ind)
            return self.exit
        p = ind.route
        if phase == _POLL_REQUEST:
            s = self.model.routes[p].server
            node = self.server_nodes[s]
            answer = (node.number_of_individuals - node.number_in_service,
                      node.number_in_service, self.model.servers[s].workers,
                      self.rate(s, now), now)
            if self.one_way[p] == 0.0:
                self.cache[p] = answer
                return self.exit
            ind.answer, ind.hold, ind.phase = answer, self.one_way[p] * self.k, _POLL_ANSWER
            return self.network
        self.cache[p] = ind.answer  # _POLL_ANSWER
        return self.exit

    def reach_server(self, ind: Any, now: float) -> Any:
        """The task's request reaches its server: count it, queue it for its service."""
        s = self.model.routes[ind.route].server
        self.arrivals[s].append(now)
        ind.at_server, ind.phase = now, _SERVICE
        ind.hold = self.tasks[ind.task].size / self.model.servers[s].speed
        return self.server_nodes[s]

    def rate(self, s: int, now: float) -> float:
        """Server ``s``'s arrival rate over its window (elapsed time before a full one)."""
        arrivals = self.arrivals[s]
        while arrivals and arrivals[0] < now - self.window:
            arrivals.popleft()
        if not arrivals:
            return 0.0
        return len(arrivals) / max(min(self.window, now), 1e-6 * self.k)

    def place(self, i: int, now: float) -> int:
        """Task ``i``'s route, chosen by its client's policy from the polled states."""
        task = self.tasks[i]
        client = self.model.clients.index(task.client)
        states = {}
        for p in self.model.client_routes[client]:
            spec = self.model.servers[self.model.routes[p].server]
            q, b, a, r, at = self.cache[p]
            states[spec.name] = TargetState(
                name=spec.name, tier=spec.tier, queue=q, busy=b, active=a, c=spec.workers,
                service_rate=spec.mu * spec.speed, arrival_rate=r,
                delay_s=2.0 * self.one_way[p], age_s=(now - at) / self.k, speed=spec.speed)
        policy = self.policies[client]
        decision = policy.choose(
            TaskInfo(task.task_id, task.client, task.arrival,
                     task.size if policy.sees_sizes else None),
            View(now, task.client, states))
        return next(p for p in self.model.client_routes[client]
                    if self.model.servers[self.model.routes[p].server].name == decision.target)

    def observe(self, ind: Any) -> None:
        """Report the completed task to its client's policy, if the policy learns."""
        task = self.tasks[ind.task]
        client = self.model.clients.index(task.client)
        if self.observing[client]:
            network = 2.0 * self.one_way[ind.route]
            self.policies[client].observe(Outcome(
                task.task_id, self.model.servers[self.model.routes[ind.route].server].name,
                self.latencies[ind.task], ind.wait, ind.service, network, None))


def run_ciw(model: SimModel, tasks: Sequence[Task], policy_name: str,
            seed: int = 1) -> list[float]:
    """Replay ``tasks`` on ``model`` in Ciw with ``policy_name``; per-task latency (NaN if
    unfinished). ``seed`` orders Ciw's simultaneous events.

    Nodes: the tier servers in model order, then one client node per client, then the
    network node. Classes: ``task-<client>`` per client, then ``poll-<route>`` per route.
    """
    servers, clients, routes = len(model.servers), len(model.clients), len(model.routes)
    nodes = servers + clients + 1
    classes = [f"task-{c}" for c in model.clients] + [f"poll-{p}" for p in range(routes)]
    last = tasks[-1].arrival
    arrival: dict[str, list[Any]] = {}
    for k, client in enumerate(model.clients):
        times = [t.arrival for t in tasks if t.client == client]
        gaps = [b - a for a, b in zip([0.0] + times, times, strict=False)]
        arrival[classes[k]] = [None] * nodes
        arrival[classes[k]][servers + k] = _Gaps(gaps)
    for p in range(routes):
        arrival[classes[clients + p]] = [None] * (nodes - 1) + [
            _Periodic(model.poll_interval_s * model.time_scale, last)]
    hold = _Hold()
    router = ContinuumRouting(model, tasks, policy_name, classes)
    network = ciw.create_network(
        arrival_distributions=arrival,
        service_distributions={name: [hold] * nodes for name in classes},
        number_of_servers=[s.workers for s in model.servers] + [math.inf] * (clients + 1),
        routing={name: router for name in classes})
    ciw.seed(seed)
    simulation = ciw.Simulation(network)
    simulation.simulate_until_max_time(last + 10_000.0)
    return router.latencies
