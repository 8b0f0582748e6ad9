"""The discrete-event core: tier servers, links, state polling and policy decisions.

One :class:`Simulation` replays one materialised trace with one policy (an instance per
client, as every emulated client runs its own dispatcher) on a :class:`SimModel`, in
model time. It reproduces what the emulation's parts do, so sim-vs-emulation
discrepancies measure the emulation, not a different model:

* **tiers** (``nodes/offloading/tier_server.py``): ``c`` workers behind one FIFO queue, a task holds
  a worker for ``size / speed`` model seconds, and one whose service time exceeds the
  task timeout is refused on arrival; the arrival rate is counted server-side over a
  sliding window (the server's ``window_model_s``, else ``window_s * time_scale`` model
  seconds), with the elapsed time as denominator before a full window has passed;
* **links**: a message from a client to a target takes the one-way path delay (the sum
  of the links' ``delay_ms`` plus a uniform ``+-jitter_ms`` draw per link, as the
  userspace delayer does); a loss on the path is recovered by TCP retransmission after
  :data:`TCP_RTO_MIN_S`, doubling per retry, and :data:`TCP_MAX_RETRIES` lost copies in a
  row lose the message. Delays are physical seconds; with ``shift_network`` they also
  shift instants by ``delay * time_scale`` model seconds, exactly as the emulation's
  wall-clock delays do (a 21 ms hop at ``time_scale`` 20 is 0.42 model s);
* **state** (``nodes/offloading/dispatcher.py``): every client polls every target each
  ``poll_interval_s * time_scale`` model seconds, one poll at a time; the answer
  describes the server when the poll reached it and is seen after the round trip, whose
  EWMA is ``delay_s``; a failed poll keeps the old answer, whose age then grows;
* **timeouts**: a client gives up ``timeout_s`` model seconds after dispatch and the
  server drops the abandoned task (a queued one when it reaches the head of the queue);
* **events**: crash, leave, join, link_down/up/change and background load.

Hot-path data lives in flat lists indexed by task, route or server and the event heap
holds plain ``(time, kind, index)`` tuples; trace arrivals are merged from the sorted
trace instead of being pushed on the heap, and a policy's observations are delivered
lazily, right before that client's next decision (which is all a policy could notice).
The frozen objects a policy is shown (:class:`TargetState`, :class:`View`,
:class:`TaskInfo`) are filled in directly (see :data:`_new`), a target's fields from a
per-route copy updated only when a poll answer arrives. A policy that keeps no views
(``Policy.keeps_views``) is shown one View and TaskInfo per client, updated in place,
and the same targets mapping until a poll answer changes it (``_shared_view``), so
neither the engine nor the policy redo per decision what only a poll changes; per route,
the message shift and the size limit are computed once.
"""

from __future__ import annotations

import math
import random
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush

from nodes.offloading.policies.base import (
    DELAY_EWMA_ALPHA,
    POLL_TIMEOUT_S,
    Backlog,
    Outcome,
    Policy,
    TargetState,
    TaskInfo,
    View,
)
from testbed.errors import TestbedError
from testbed.scenario.model import Event

#: Linux's minimum TCP retransmission timeout: the extra delay of a lost message (s).
TCP_RTO_MIN_S = 0.2
#: Lost copies in a row after which a message counts as lost for good (Linux tcp_retries2).
TCP_MAX_RETRIES = 15
#: Wall seconds the emulation grants a leaving service to finish before killing it.
LEAVE_GRACE_S = 5.0

# Event kinds, in the order they are handled when they fall on the same instant.
_SCENARIO, _LEAVE_END, _COMPLETE, _REQUEST, _POLL = 0, 1, 2, 3, 4

#: Task outcome codes in :attr:`Results.outcome`.
PENDING, OK, ERROR, TIMEOUT = 0, 1, 2, 3
OUTCOME_NAMES = {OK: "ok", ERROR: "error", TIMEOUT: "timeout"}

_INF = math.inf
_NAN = math.nan


@dataclass(frozen=True)
class SimServer:
    """A tier server as the simulator needs it (from a ``tier_server`` service)."""

    name: str
    tier: str
    node: str
    workers: int
    mu: float
    speed: float
    compute: bool = False  # ``model: compute``: background load slows it down
    cpu_share: float = 1.0  # the node's share of the machine (``cpu``, 1 when unlimited)
    #: its arrival-rate window in model seconds (``None``: the model's ``window_s``)
    window_model_s: float | None = None


@dataclass(frozen=True)
class SimLink:
    """A link with its initial shaping (one-way milliseconds, percent)."""

    name: str
    a: str
    b: str
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0


@dataclass(frozen=True)
class SimRoute:
    """A (client, target) pair: the links the client's messages to that target cross."""

    client: int
    server: int
    links: tuple[int, ...]


@dataclass(frozen=True)
class SimModel:
    """Everything fixed about a simulated scenario; built by :mod:`testbed.systems.offloading.sim_replay`.

    ``client_routes[k]`` lists the routes (candidate targets) of client ``k`` in the
    order the scenario declares the services. ``time_scale`` converts the wall-clock
    settings (``poll_interval_s``, ``window_s``) and physical delays to model time;
    ``timeout_s`` is model time.
    """

    clients: tuple[str, ...]
    servers: tuple[SimServer, ...]
    links: tuple[SimLink, ...]
    routes: tuple[SimRoute, ...]
    client_routes: tuple[tuple[int, ...], ...]
    time_scale: float = 1.0
    poll_interval_s: float = 0.1
    window_s: float = 10.0
    timeout_s: float = 60.0
    shift_network: bool = True
    events: tuple[Event, ...] = ()


@dataclass
class Results:
    """Per-task results of one replay, columnar and indexed like the input trace.

    Times are model seconds; ``network`` is physical seconds (request + response).
    ``route`` is -1 for a task never placed. Columns of a failed task that it never
    reached hold NaN; ``seen`` is when the client saw the response or the failure.
    """

    route: array
    server_arrival: array
    start: array
    end: array
    seen: array
    network: array
    queue_at_arrival: array
    estimate: array
    state_age: array
    decision_us: array
    outcome: bytearray
    errors: dict[int, str] = field(default_factory=dict)
    events: int = 0  # heap events handled (trace arrivals not included)


def _floats(n: int, value: float = _NAN) -> array:
    return array("d", [value]) * n


#: Build the frozen objects shown to policies without their generated ``__init__``: it
#: stores every field through ``object.__setattr__`` (0.9 us per TargetState, three per
#: continuum decision), while giving a bare instance a ``__dict__`` holding the same
#: fields in declaration order costs a quarter and makes an equal object that prints the
#: same and is just as immutable (``tests/unit/test_fast_paths.py`` checks it).
_new = object.__new__
_set_attr = object.__setattr__


def _shown_state(fields: dict[str, object], reads_age: bool) -> TargetState:
    """A TargetState holding a copy of ``fields`` (``age_s`` nan unless ``reads_age``)."""
    shown = fields.copy()
    if not reads_age:
        shown["age_s"] = _NAN
    state = _new(TargetState)
    _set_attr(state, "__dict__", shown)
    return state


class _Server:
    """Mutable state of one tier server during a replay."""

    __slots__ = (
        "accepting",
        "active",
        "arrivals",
        "base_speed",
        "busy",
        "in_service",
        "load_factor",
        "queue",
        "since",
        "spec",
        "speed",
        "window",
    )

    def __init__(self, spec: SimServer, window: float) -> None:
        self.spec = spec
        self.window = window
        self.base_speed = spec.speed
        self.load_factor = 1.0
        self.speed = spec.speed
        self.reset(0.0)

    def reset(self, now: float) -> None:
        """A freshly started service: idle, empty rate window starting ``now``."""
        self.accepting = True
        self.active = self.spec.workers
        self.busy = 0
        self.queue: deque[int] = deque()
        self.in_service: set[int] = set()
        self.arrivals: deque[float] = deque()
        self.since = now


class Simulation:
    """One replay of ``tasks`` on ``model`` with one policy instance per client.

    ``tasks`` is the trace as parallel sequences (``task_id``, client index, arrival,
    size), sorted by arrival. ``policies[k]`` places client ``k``'s tasks. ``seed`` seeds
    the network's jitter and loss draws. Call :meth:`run` once.
    """

    def __init__(self, model: SimModel, task_ids: Sequence[int], clients: Sequence[int],
                 arrivals: Sequence[float], sizes: Sequence[float],
                 policies: Sequence[Policy], seed: int | str = 0) -> None:
        self.model = model
        self.k = model.time_scale
        self.inv_k = 1.0 / model.time_scale
        self.client_names = model.clients
        self.dk = model.time_scale if model.shift_network else 0.0
        self.poll_every = model.poll_interval_s * model.time_scale
        self.poll_timeout = max(model.poll_interval_s, POLL_TIMEOUT_S) * model.time_scale
        self.window = model.window_s * model.time_scale
        self.timeout = model.timeout_s
        self.task_ids, self.t_client = task_ids, clients
        self.arrival, self.size = arrivals, sizes
        self.policies = list(policies)
        # Outcomes are only queued for policies that learn from them.
        self.observing = [type(p).observe is not Policy.observe for p in self.policies]
        self.rng = random.Random(seed)
        self.heap: list[tuple[float, int, int]] = []
        self.servers = [_Server(s, self.window if s.window_model_s is None
                                else s.window_model_s) for s in model.servers]
        n = len(arrivals)
        self.res = Results(
            route=array("i", [-1]) * n, server_arrival=_floats(n), start=_floats(n),
            end=_floats(n), seen=_floats(n), network=_floats(n),
            queue_at_arrival=array("i", [-1]) * n, estimate=_floats(n),
            state_age=_floats(n), decision_us=_floats(n), outcome=bytearray(n))
        self.release = _floats(n)  # when the task's worker is freed
        self.obs: list[list[tuple[float, int]]] = [[] for _ in model.clients]
        self.last_arrival = arrivals[-1] if n else 0.0
        self.leaving: set[str] = set()  # nodes within a leave's grace window
        self._init_links()
        self._init_routes()

    # ------------------------------------------------------------------ network
    def _init_links(self) -> None:
        links = self.model.links
        self.l_delay = [lk.delay_ms / 1000.0 for lk in links]
        self.l_jitter = [lk.jitter_ms / 1000.0 for lk in links]
        self.l_loss = [lk.loss_pct / 100.0 for lk in links]
        self.l_up = [True] * len(links)
        self.link_routes: list[list[int]] = [[] for _ in links]
        for p, route in enumerate(self.model.routes):
            for li in route.links:
                self.link_routes[li].append(p)

    def _init_routes(self) -> None:
        routes = self.model.routes
        m = len(routes)
        self.r_server = [r.server for r in routes]
        self.r_srv = [self.servers[r.server] for r in routes]
        self.r_base = [0.0] * m
        self.r_back = [0.0] * m  # r_base * dk: the model-time shift of one message
        self.r_jit: list[tuple[float, ...]] = [()] * m
        self.r_loss = [0.0] * m
        self.r_var = [False] * m
        self.r_up = [True] * m
        for p in range(m):
            self._refresh_route(p)
        specs = [self.model.servers[r.server] for r in routes]
        self.r_name = [spec.name for spec in specs]
        self.r_client = [r.client for r in routes]
        # The largest size a route's server accepts (a service time within the timeout).
        self.r_max_size = [self.timeout * spec.speed for spec in specs]
        self.c_targets = [[(p, specs[p].name, specs[p].tier, specs[p].workers,
                            specs[p].mu * specs[p].speed, specs[p].speed) for p in ps]
                          for ps in self.model.client_routes]
        self.c_names = [[(p, self.r_name[p]) for p in ps] for ps in self.model.client_routes]
        self.route_of = [{self.r_name[p]: p for p in ps} for ps in self.model.client_routes]
        # What each client last saw of each route's target, as the fields of its
        # TargetState (``age_s`` is set per decision) and the instant the answer
        # described; and the poll in flight (seen at, round trip, answer).
        delay = [self._one_way(p) + self._one_way(p) for p in range(m)]  # ready poll
        self.r_state: list[dict[str, object]] = [
            vars(TargetState(name=specs[p].name, tier=specs[p].tier, queue=0, busy=0,
                             active=specs[p].workers, c=specs[p].workers,
                             service_rate=specs[p].mu * specs[p].speed, arrival_rate=0.0,
                             delay_s=delay[p], age_s=0.0, speed=specs[p].speed)).copy()
            for p in range(m)]
        self.r_seen_at = [0.0] * m
        self.pending: list[tuple[float, float, tuple[int, int, int, float, float]] | None] = \
            [None] * m
        self.poll_send = [0.0] * m
        self.poll_req = [0.0] * m
        # Per client, the earliest instant a poll answer in flight reaches it (a lower
        # bound: a decision before it has nothing to promote).
        self.c_next_answer = [_INF] * len(self.model.clients)
        # Per route shown in a client's shared view (_shared_view): the target's name,
        # the view's fields, the (route, TargetState) pairs whose age_s is set per
        # decision and whether the policy reads ages.
        self.r_shared: list[tuple[str, dict[str, object], list[tuple[int, TargetState]],
                                  bool] | None] = [None] * m

    def _refresh_route(self, p: int) -> None:
        """Recompute a route's delay, jitter, loss and reachability from its links."""
        links = self.model.routes[p].links
        self.r_base[p] = sum(self.l_delay[li] for li in links)
        self.r_back[p] = self.r_base[p] * self.dk
        self.r_jit[p] = tuple(self.l_jitter[li] for li in links if self.l_jitter[li] > 0)
        keep = 1.0
        for li in links:
            keep *= 1.0 - self.l_loss[li]
        self.r_loss[p] = 1.0 - keep
        self.r_var[p] = bool(self.r_jit[p]) or self.r_loss[p] > 0
        self.r_up[p] = all(self.l_up[li] for li in links) and keep > 0

    def _one_way(self, p: int) -> float:
        """One message's delay along route ``p`` (physical s; ``inf`` if it is lost)."""
        d = self.r_base[p]
        if not self.r_var[p]:
            return d
        rng = self.rng
        for j in self.r_jit[p]:
            d += rng.uniform(-j, j)
        loss = self.r_loss[p]
        if loss > 0:
            retries = 0
            while rng.random() < loss:
                if retries == TCP_MAX_RETRIES:
                    return _INF
                d += TCP_RTO_MIN_S * (1 << retries)
                retries += 1
        return d

    # --------------------------------------------------------------------- loop
    def run(self) -> Results:
        """Replay every task; return the per-task results.

        The loop merges the sorted trace with the event heap. Placing an arriving task is
        the hottest path and runs inline, on local names bound once per run: deliver the
        client's pending observations, build the :class:`View` (its targets as last
        polled, or the true state for ``needs_true_state`` policies), time the policy's
        ``choose``, record the decision and send the task. The server events run in the
        closures of :meth:`_server_handlers`.
        """
        heap = self.heap
        for index, event in enumerate(self.model.events):
            heappush(heap, (event.at, _SCENARIO, index))
        for p in range(len(self.model.routes)):
            self._schedule_poll(p, 0.0)
        arrive, complete = self._server_handlers()
        poll, one_way, fail = self._poll, self._one_way, self._fail
        promote_seen, true_view = self._promote_seen, self._true_view
        arrival, t_client, task_ids, size = self.arrival, self.t_client, self.task_ids, self.size
        policies, obs, client_names, c_names = self.policies, self.obs, self.client_names, \
            self.c_names
        # Per client, what is fixed for the whole replay: its shared view objects (all
        # None unless the policy keeps no views), the policy's bound choose, its routes
        # by target name and whether it sees sizes and needs the true state.
        plans = [(*(self._shared_view(k) or (None,) * 5), policy.choose, self.route_of[k],
                  policy.sees_sizes, policy.needs_true_state)
                 for k, policy in enumerate(policies)]
        observed = any(self.observing)
        r_state, seen_at, next_answer = self.r_state, self.r_seen_at, self.c_next_answer
        r_up, r_var, r_base = self.r_up, self.r_var, self.r_base
        res = self.res
        col_route, col_decision, col_age, col_estimate, col_network = \
            res.route, res.decision_us, res.state_age, res.estimate, res.network
        inv_k, dk, timeout = self.inv_k, self.dk, self.timeout
        # Float seconds: about 45 ns a decision cheaper than perf_counter_ns (no big
        # integers to build and subtract); its step stays at 2 ns or finer for uptimes
        # under 97 days (2**23 s).
        clock = time.perf_counter
        n = len(arrival)
        i = 0
        now = arrival[0] if n else _INF
        handled = 0
        while True:
            while heap and heap[0][0] <= now:
                t, kind, x = heappop(heap)
                handled += 1
                if kind == _COMPLETE:
                    complete(t, x)
                elif kind == _REQUEST:
                    arrive(x, t)
                elif kind == _POLL:
                    poll(t, x)
                elif kind == _SCENARIO:
                    self._apply(t, x)
                else:
                    self._leave_end(t, x)
            if i == n:
                break
            # Task i arrives at ``now``: place it and send it.
            k = t_client[i]
            if observed:
                queue = obs[k]
                if queue and queue[0][0] <= now:
                    self._deliver(k, now)
            if next_answer[k] <= now:
                promote_seen(k, now)
            (view, info, aged, view_fields, info_fields, choose, routes, sees_sizes,
             true_state) = plans[k]
            if view is not None:  # the client's objects, updated in place
                for p, state in aged:
                    _set_attr(state, "age_s", (now - seen_at[p]) * inv_k)
                view_fields["now"] = now
                info_fields["task_id"] = task_ids[i]
                info_fields["arrival"] = now
                if sees_sizes:
                    info_fields["size"] = size[i]
            else:
                if true_state:
                    states = true_view(k, now)
                else:  # the targets as the client last observed them, seen at ``now``
                    states = {}
                    for p, name in c_names[k]:
                        fields = r_state[p].copy()
                        fields["age_s"] = (now - seen_at[p]) * inv_k
                        state = _new(TargetState)
                        _set_attr(state, "__dict__", fields)
                        states[name] = state
                client = client_names[k]
                view = _new(View)
                _set_attr(view, "__dict__", {"now": now, "client": client, "targets": states})
                info = _new(TaskInfo)
                _set_attr(info, "__dict__", {"task_id": task_ids[i], "client": client,
                                             "arrival": now,
                                             "size": size[i] if sees_sizes else None})
            began = clock()
            decision = choose(info, view)
            took = clock() - began
            target = decision.target
            p = routes.get(target)
            if p is None:
                raise TestbedError(
                    f"policy {policies[k].name!r} chose unknown target {target!r} for task "
                    f"{task_ids[i]}; targets: {', '.join(view.targets)}")
            col_route[i] = p
            col_decision[i] = took * 1e6
            col_age[i] = 0.0 if true_state else (now - seen_at[p]) * inv_k
            estimate = decision.estimate_s
            if estimate is not None:
                col_estimate[i] = estimate
            if not r_up[p]:
                fail(i, TIMEOUT, now + timeout, self._timeout_text("a link is down"))
            else:
                d = one_way(p) if r_var[p] else r_base[p]
                if d == _INF:
                    fail(i, TIMEOUT, now + timeout, self._timeout_text("request lost"))
                else:
                    col_network[i] = d
                    if d == 0.0 or dk == 0.0:
                        arrive(i, now)
                    else:
                        heappush(heap, (now + d * dk, _REQUEST, i))
            i += 1
            now = arrival[i] if i < n else _INF
        for k in range(len(obs)):
            self._deliver(k, _INF)
        res.events = handled
        return res

    # ---------------------------------------------------------------- decisions
    def _promote_seen(self, k: int, now: float) -> None:
        """Cache every poll answer client ``k`` has seen by ``now``; reset its bound."""
        pending, promote = self.pending, self._promote
        earliest = _INF
        for p in self.model.client_routes[k]:
            pend = pending[p]
            if pend is not None:
                if pend[0] <= now:
                    promote(p)
                elif pend[0] < earliest:
                    earliest = pend[0]
        self.c_next_answer[k] = earliest

    def _shared_view(self, k: int) -> tuple[
            View, TaskInfo, list[tuple[int, TargetState]], dict[str, object],
            dict[str, object]] | None:
        """Client ``k``'s one View and TaskInfo, if its policy keeps no views
        (``keeps_views``) and reads the observed state; with the (route, TargetState)
        pairs whose ``age_s`` the policy reads (``reads_age``), and the view's and the
        task's fields, which each decision sets.

        A target's :class:`TargetState` is never changed once shown, but for ``age_s``:
        when a poll answer arrives, :meth:`_promote` shows a new one in a new mapping.
        So a policy shown the same mapping object again sees the same targets.
        """
        policy = self.policies[k]
        if policy.keeps_views or policy.needs_true_state:
            return None
        reads_age = policy.reads_age
        states: dict[str, TargetState] = {}
        aged: list[tuple[int, TargetState]] = []
        client = self.client_names[k]
        view = View(now=0.0, client=client, targets=states)
        view_fields = vars(view)
        for p, name in self.c_names[k]:
            state = states[name] = _shown_state(self.r_state[p], reads_age)
            self.r_shared[p] = (name, view_fields, aged, reads_age)
            if reads_age:
                aged.append((p, state))
        info = TaskInfo(task_id=0, client=client, arrival=0.0, size=None)
        return view, info, aged, view_fields, vars(info)

    def _deliver(self, k: int, now: float) -> None:
        """Hand client ``k``'s policy every outcome whose response it has seen by ``now``."""
        queue = self.obs[k]
        policy = self.policies[k]
        res = self.res
        while queue and queue[0][0] <= now:
            _, i = heappop(queue)
            p = res.route[i]
            est = res.estimate[i]
            estimate = None if math.isnan(est) else est
            if res.outcome[i] == OK:
                wait = res.start[i] - res.server_arrival[i]
                service = res.end[i] - res.start[i]
                net = res.network[i]
                outcome = Outcome(self.task_ids[i], self.r_name[p], net + wait + service,
                                  wait, service, net, estimate, True)
            else:
                outcome = Outcome(self.task_ids[i], self.r_name[p], _NAN, _NAN, _NAN, _NAN,
                                  estimate, False)
            policy.observe(outcome)

    def _true_view(self, k: int, now: float) -> dict[str, TargetState]:
        """The targets' exact state at ``now``, with backlogs (for ``needs_true_state``).

        ``delay_s`` is the current mean round trip of the path, without jitter.
        """
        states = {}
        rel, size = self.release, self.size
        for p, name, tier, c, rate, speed in self.c_targets[k]:
            s = self.servers[self.r_server[p]]
            backlog = Backlog(tuple(sorted(rel[j] - now for j in s.in_service)),
                              tuple(size[j] / s.speed for j in s.queue))
            states[name] = TargetState(
                name=name, tier=tier, queue=len(s.queue), busy=s.busy,
                active=s.active if s.accepting else 0, c=c, service_rate=rate,
                arrival_rate=self._rate(s, now), delay_s=2.0 * self.r_base[p], age_s=0.0,
                speed=speed, backlog=backlog)
        return states

    # ------------------------------------------------------------------ servers
    def _server_handlers(self) -> tuple[Callable[[int, float], None],
                                        Callable[[float, int], None]]:
        """The per-task server events, as closures over the replay's columns and route
        constants (local names instead of attribute look-ups on every task).

        ``arrive(i, now)``: task ``i``'s request reaches its server. ``complete(now,
        i)``: task ``i`` frees its worker, its response leaves for the client and the
        next queued task starts.
        """
        res = self.res
        route, server_arrival, start_at, end_at, seen_at, network, queue_at, outcome = (
            res.route, res.server_arrival, res.start, res.end, res.seen, res.network,
            res.queue_at_arrival, res.outcome)
        r_srv, r_base, r_back, r_up, r_var, r_name, r_max_size = (
            self.r_srv, self.r_base, self.r_back, self.r_up, self.r_var, self.r_name,
            self.r_max_size)
        size, arrival, release, heap = self.size, self.arrival, self.release, self.heap
        observing, obs, t_client = self.observing, self.obs, self.t_client
        timeout, dk = self.timeout, self.dk
        one_way, fail, timeout_text = self._one_way, self._fail, self._timeout_text

        def start(s: _Server, i: int, now: float) -> None:
            """A worker of ``s`` takes task ``i``; schedule when it is freed."""
            end = now + size[i] / s.speed
            start_at[i] = now
            end_at[i] = end
            freed = end
            back = r_back[route[i]]
            deadline = arrival[i] + timeout
            if end + back > deadline:
                # The client gives up first; its disconnect frees the worker on arrival.
                fail(i, TIMEOUT, deadline, timeout_text("service too late"))
                freed = max(now, min(end, deadline + back))
            release[i] = freed
            s.busy += 1
            s.in_service.add(i)
            heappush(heap, (freed, _COMPLETE, i))

        def arrive(i: int, now: float) -> None:
            p = route[i]
            s = r_srv[p]
            if not s.accepting:
                fail(i, ERROR, now + r_back[p],
                     f"connection refused: service {r_name[p]} is not running")
                return
            if size[i] > r_max_size[p]:
                # The tier server refuses (400) a task it could only serve after the
                # client gave up, before it counts as an arrival.
                fail(i, ERROR, now + r_back[p],
                     f"HTTP 400: size: expected at most {r_max_size[p]:g}, a service time "
                     f"within the task timeout of {timeout:g} model s")
                return
            server_arrival[i] = now
            s.arrivals.append(now)
            queue = s.queue
            queue_at[i] = len(queue)
            if s.busy < s.active and not queue:
                start(s, i, now)
            else:
                queue.append(i)

        def complete(now: float, i: int) -> None:
            p = route[i]
            s = r_srv[p]
            in_service = s.in_service
            if i not in in_service:  # the service crashed meanwhile
                return
            in_service.remove(i)
            s.busy -= 1
            if outcome[i] == PENDING:
                deadline = arrival[i] + timeout
                if not r_up[p]:
                    d = _INF
                else:
                    d = one_way(p) if r_var[p] else r_base[p]
                seen = now + d * dk
                if d == _INF or seen > deadline:
                    fail(i, TIMEOUT, deadline, timeout_text("response late or lost"))
                else:
                    network[i] += d
                    outcome[i] = OK
                    seen_at[i] = seen
                    k = t_client[i]
                    if observing[k]:
                        heappush(obs[k], (seen, i))
            queue = s.queue
            while queue and s.busy < s.active:
                j = queue.popleft()
                if arrival[j] + timeout <= now:
                    fail(j, TIMEOUT, arrival[j] + timeout, timeout_text("still queued"))
                else:
                    start(s, j, now)

        return arrive, complete

    def _rate(self, s: _Server, now: float) -> float:
        """The server's arrival rate over its window, per model second."""
        arrivals = s.arrivals
        window = s.window
        horizon = now - window
        while arrivals and arrivals[0] < horizon:
            arrivals.popleft()
        if not arrivals:
            return 0.0
        span = min(window, now - s.since)
        return len(arrivals) / max(span, 1e-6 * self.k)

    def _fail(self, i: int, outcome: int, seen: float, reason: str) -> None:
        """Record task ``i`` as failed, seen by its client at ``seen``."""
        res = self.res
        res.outcome[i] = outcome
        res.seen[i] = seen
        res.errors[i] = reason
        k = self.t_client[i]
        if self.observing[k]:
            heappush(self.obs[k], (seen, i))

    def _timeout_text(self, why: str) -> str:
        return f"no response within timeout_s={self.timeout:g} model s ({why})"

    # ------------------------------------------------------------------ polling
    def _schedule_poll(self, p: int, send: float) -> None:
        """Send route ``p``'s next poll at ``send`` (none after the last arrival)."""
        if send > self.last_arrival:
            return
        d = self._one_way(p) if self.r_up[p] else _INF
        self.poll_send[p] = send
        self.poll_req[p] = d
        heappush(self.heap, (send if d == _INF else send + d * self.dk, _POLL, p))

    def _promote(self, p: int) -> None:
        """The poll answer in flight has reached the client: cache it, update delay_s."""
        _, rtt, (queue, busy, active, arrival_rate, at) = self.pending[p]
        self.pending[p] = None
        fields = self.r_state[p]
        fields["queue"] = queue
        fields["busy"] = busy
        fields["active"] = active
        fields["arrival_rate"] = arrival_rate
        fields["delay_s"] = DELAY_EWMA_ALPHA * rtt + (1.0 - DELAY_EWMA_ALPHA) * fields["delay_s"]
        self.r_seen_at[p] = at
        shared = self.r_shared[p]
        if shared is not None:  # a new TargetState in a new mapping (_shared_view)
            name, view_fields, aged, reads_age = shared
            state = _shown_state(fields, reads_age)
            targets = dict(view_fields["targets"])  # type: ignore[call-overload]
            targets[name] = state
            view_fields["targets"] = targets
            for j, (q, _) in enumerate(aged):
                if q == p:
                    aged[j] = (p, state)

    def _poll(self, now: float, p: int) -> None:
        """Route ``p``'s poll reaches its server (or fails); answer and poll again."""
        if self.pending[p] is not None:
            self._promote(p)
        send = self.poll_send[p]
        s = self.servers[self.r_server[p]]
        d_req = self.poll_req[p]
        d_resp = self._one_way(p) if d_req != _INF and self.r_up[p] else _INF
        if d_resp == _INF:  # unreachable: the poll hangs until its timeout
            self._schedule_poll(p, send + self.poll_timeout)
            return
        if not s.accepting:  # refused at once: the old answer stays
            self._schedule_poll(p, send + self.poll_every)
            return
        seen = now + d_resp * self.dk
        answer = (len(s.queue), s.busy, s.active, self._rate(s, now), now)
        self.pending[p] = (seen, d_req + d_resp, answer)
        k = self.r_client[p]
        if not self.policies[k].needs_true_state:  # its view is never the polled one
            self.c_next_answer[k] = min(self.c_next_answer[k], seen)
        self._schedule_poll(p, max(send + self.poll_every, seen))

    # ------------------------------------------------------------------- events
    def _apply(self, now: float, index: int) -> None:
        """Carry out scenario event ``index`` at ``now``."""
        event = self.model.events[index]
        action = event.action
        if action in ("link_down", "link_up", "link_change"):
            li = next(j for j, lk in enumerate(self.model.links) if lk.name == event.target)
            if action == "link_change":
                params = event.params
                if "delay_ms" in params:
                    self.l_delay[li] = float(params["delay_ms"]) / 1000.0
                if "jitter_ms" in params:
                    self.l_jitter[li] = float(params["jitter_ms"]) / 1000.0
                if "loss_pct" in params:
                    self.l_loss[li] = float(params["loss_pct"]) / 100.0
            else:
                self.l_up[li] = action == "link_up"
            for p in self.link_routes[li]:
                self._refresh_route(p)
            return
        servers = [s for s in self.servers if s.spec.node == event.target]
        if action == "crash":
            for s in servers:
                self._kill(s, now, "service crashed")
        elif action == "leave":
            for s in servers:
                s.accepting = False
            self.leaving.add(event.target)
            heappush(self.heap, (now + LEAVE_GRACE_S * self.k, _LEAVE_END, index))
        elif action == "join":
            self.leaving.discard(event.target)
            self._set_node_links(event.target, True)
            for s in servers:
                if not s.accepting:
                    self._kill(s, now, "service restarted")
                    s.reset(now)
        elif action == "load":
            self._set_load(servers, float(event.params["cpu"]))

    def _leave_end(self, now: float, index: int) -> None:
        """End of leave event ``index``'s grace window: kill what is left, links down."""
        node = self.model.events[index].target
        if node not in self.leaving:  # it joined again within the grace window
            return
        self.leaving.discard(node)
        for s in self.servers:
            if s.spec.node == node and not s.accepting:
                self._kill(s, now, "service stopped (node left)")
        self._set_node_links(node, False)

    def _set_node_links(self, node: str, up: bool) -> None:
        for li, link in enumerate(self.model.links):
            if node in (link.a, link.b):
                self.l_up[li] = up
                for p in self.link_routes[li]:
                    self._refresh_route(p)

    def _kill(self, s: _Server, now: float, why: str) -> None:
        """Stop ``s`` abruptly: every task it holds fails as its client sees the reset."""
        for i in sorted(s.in_service) + list(s.queue):
            if self.res.outcome[i] == PENDING:
                p = self.res.route[i]
                back = self._one_way(p) if self.r_up[p] else _INF
                if back == _INF:
                    self._fail(i, TIMEOUT, self.arrival[i] + self.timeout,
                               self._timeout_text(why))
                else:
                    self._fail(i, ERROR, now + back * self.dk,
                               f"server disconnected: {self.r_name[p]} {why}")
        s.in_service = set()
        s.queue = deque()
        s.busy = 0
        s.accepting = False

    def _set_load(self, servers: list[_Server], cpu: float) -> None:
        """Background load ``cpu`` (share of the machine) on the servers' node.

        Only ``compute`` tiers slow down (``hold`` tiers sleep and need no CPU): to the
        share of the node's CPU the load leaves free, never below a tenth. Tasks already
        in service keep the speed they started with.
        """
        for s in servers:
            taken = min(1.0, cpu / s.spec.cpu_share) if s.spec.compute else 0.0
            s.load_factor = max(0.1, 1.0 - taken)
            s.speed = s.base_speed * s.load_factor
