"""Discrete-event executor of context-based person search (pure Python + numpy, no network).

:func:`simulate` runs every search of a ``person-search`` world concurrently against its
``N`` edge servers in model time and returns a :class:`SearchRun`; :func:`run_sim` is
``testbed run --executor sim`` for a person-search scenario (the materialised trace and
its ground truth in, trace rows out, every policy and repetition). :func:`run_stats`
breaks a run's analyses down (before ``T_R`` or at it, with or without the target) and
:func:`isolated_analyses` runs each search alone on idle servers. The pieces it drives
(:class:`~nodes.person_search.model.Search`, the response model
:class:`~nodes.person_search.model.AnalysisServer`, the policies of
:mod:`nodes.person_search.policies`) are the person-search system's pure
layer; the world and its ground truth come from :mod:`workloads.person_search`. The
paper's experiments on top of it (Fig. 3, Fig. 4, the grid) are study files run through
:func:`run_sim` (:mod:`testbed.systems.person_search.simulation_experiment`).

The model, and the choices the paper leaves open:

1. **Requests.** One search per target, all arriving at model time 0 (the workload's
   trace). Each search has exactly one item in flight: when its analysis ends, the answer
   ("does the item contain my target", read from the ground truth and nothing else) is
   fed to its :class:`Search`; if that did not finish it, the search picks its next item
   at the same instant. Choices take no model time, so a search is always being served
   and its response time is the sum of its analyses' durations.
2. **Response model.** One :class:`AnalysisServer` per edge server with the same ``Tc``.
   ``sharing="paper"`` (default): an analysis takes ``Tc x n``, ``n`` the analyses
   running on that server at its start, itself included, fixed from then on.
   ``sharing="processor-sharing"``: every analysis needs ``Tc`` of work and the running
   ones share the server equally (completion instants move as others start and end).
3. **Eq. 7-8 in the accounting** (``accounting``). ``"plain"`` (default): durations as
   in 2. ``"compensated"``: the paper's literal reading of its 1-D simulator, where an
   analysis of item i costs the compensated ``Tc'_i = Tc l_i`` with ``l_i =
   max(1, 2 |T_i - T_L| - 1)``
   (:func:`~nodes.person_search.model.compensation_factor`, ``T_L`` the
   search's last discovery time when it chose i), times ``n`` as above. It
   applies to every policy alike (it is the simulated world, not a policy). The other
   reading, ``l_i`` inside Eq. 1, is the priority policy's own option
   ``compensation="response-time"``; the two may be combined.
4. **Choices at one instant.** All searches that need an item at the same instant (all
   of them at time 0, and every instant where several analyses end together, which the
   paper rule makes common: durations are multiples of ``Tc``) choose in one batch with
   :meth:`SearchPolicy.choose_many` in search-id order, ``sequential=True`` by default:
   each choice counts as running on its server for the later ones, as the paper's
   simulator "sequentially selected data for 1000 search requests". The choices are
   then admitted to their servers in the same order, so under the paper rule the j-th
   analysis admitted to a server at one instant sees ``k = j - 1`` in its priority and
   takes exactly ``Tc (k + 1)``: the priority's load factor is the duration the search
   will get. ``sequential=False`` lets every search of a batch see the load as it was
   before the batch (admission still goes in search-id order).
5. **Events.** An event heap of ``(instant, server, version)``: each server's next
   completion, re-pushed with a new version whenever that server admits or completes an
   analysis (stale entries are skipped, which lets processor sharing move its
   instants). Ties are deterministic: at an instant every completion is taken first
   (lower server index first; on one server in its own order: end, then admission),
   freeing its server; then the answers are fed in completion order; then the searches
   that need a new item choose and are admitted in search-id order (departures before
   arrivals at the same instant).
6. **Seeds.** ``seed`` builds the world when :func:`simulate` gets params (as the
   trace's ``(params, seed)`` does). The policies' per-search random streams use
   ``policy_seed`` (default :func:`policy_seed_for` ``(seed)``, a different entropy: the
   policies' ``SeedSequence(policy_seed, spawn_key=(k,))`` would otherwise coincide with
   the world's own ``spawn_key=(0,)`` and ``(1,)`` streams for searches 0 and 1).
   Repetition ``r > 0`` of a scenario run adds ``r`` to that entropy, so repetition 0
   is the experiments' single run and the emulated coordinator gets the same seed.
7. **Results.** Per request: number of analyses, response time (arrival 0 to the end
   of the analysis that found its ``T_R`` item) and the item found; the run's total
   response time is their sum (the paper's "total response time", module note 9 of
   :mod:`nodes.person_search.model`). Per analysis: search, step, item, server, start, end,
   the analyses already running there at admission and the decision time. Both turn
   into trace rows of kind ``search`` (:func:`request_rows`, :func:`analysis_rows`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nodes.person_search.model import (
    ACCOUNTINGS,
    SHARING_MODES,
    AnalysisServer,
    PriorityParams,
    Search,
    compensation_factor,
    reading,
    split_run_options,
)
from nodes.person_search.policies import make_search_policy
from testbed.errors import TestbedError
from testbed.replays import replay_each
from testbed.systems.person_search.deployment import deployment
from workloads.person_search import (
    DEFAULTS,
    PersonSearch,
    SearchWorld,
    build_world,
    read_ground_truth,
)

if TYPE_CHECKING:
    from testbed.scenario.model import Scenario

SERVER_PREFIX = "edge-"
DEFAULT_CLIENT = "coordinator"
_POLICY_DOMAIN = 0x5EA4C4  # mixed into the policy seed's entropy (see policy_seed_for)


def policy_seed_for(seed: int, repetition: int = 0) -> int:
    """The policies' seed derived from a run's ``seed`` and ``repetition`` (module note 6).

    ``SeedSequence((seed, domain[, repetition]))`` has another entropy than the world's
    ``SeedSequence(seed, spawn_key=...)``; its first 63-bit word is the policy seed.
    Repetition 0 leaves the repetition out, so it is the seed of a single run.
    """
    entropy = (int(seed), _POLICY_DOMAIN, *((int(repetition),) if repetition else ()))
    state = np.random.SeedSequence(entropy).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


def scenario_policy_seed(scenario: Scenario, repetition: int) -> int:
    """The policies' seed in ``repetition`` of a person-search scenario (both executors):
    :func:`policy_seed_for` of the workload's seed."""
    return policy_seed_for(scenario.workload.seed, repetition)


def server_name(server: int) -> str:
    """The trace's default ``target`` for edge server ``server`` (``edge-<index>``)."""
    return f"{SERVER_PREFIX}{server}"


#: Names the trace rows give edge server ``s`` (``names[s]``); None: :func:`server_name`
ServerNames = Sequence[str] | None


@dataclass(frozen=True, eq=False)
class SearchRun:
    """One simulated run: every search of a world under one policy.

    Per request (index = search id = target): ``analyses`` (int), ``response`` (model
    seconds from arrival 0 to the end of the analysis that found the ``T_R`` item),
    ``found`` (that item's id) and ``decision_us`` (wall time its choices took, a batch's
    time split evenly over its choices). Per analysis, in admission order: ``a_search``,
    ``a_step`` (0-based within its search), ``a_item``, ``a_server``, ``a_start``,
    ``a_end``, ``a_queue`` (analyses already running on the server at admission) and
    ``a_factor`` (the Eq. 7 factor applied, 1 under ``accounting="plain"``).
    ``events`` counts completions, ``batches`` choice batches, ``makespan`` is the last
    completion and ``wall_s`` the run's wall time.
    """

    policy: str
    seed: int
    policy_seed: int
    servers: int
    slots: int
    tc: float
    sharing: str
    accounting: str
    sequential: bool
    policy_params: dict[str, Any]
    analyses: np.ndarray
    response: np.ndarray
    found: np.ndarray
    decision_us: np.ndarray
    a_search: np.ndarray
    a_step: np.ndarray
    a_item: np.ndarray
    a_server: np.ndarray
    a_start: np.ndarray
    a_end: np.ndarray
    a_queue: np.ndarray
    a_factor: np.ndarray
    events: int
    batches: int
    makespan: float
    wall_s: float

    @property
    def requests(self) -> int:
        """Number of searches."""
        return int(self.response.size)

    @property
    def total_response(self) -> float:
        """Sum over requests of the response time (model seconds)."""
        return float(self.response.sum())

    @property
    def mean_response(self) -> float:
        """Mean response time per request (model seconds)."""
        return float(self.response.mean())

    @property
    def total_analyses(self) -> int:
        """Analyses run by all searches together."""
        return int(self.analyses.sum())

    @property
    def mean_analyses(self) -> float:
        """Mean analyses per request."""
        return float(self.analyses.mean())

    def summary(self) -> dict[str, Any]:
        """The run's scalar results, JSON-ready."""
        return {"policy": self.policy, "servers": self.servers, "requests": self.requests,
                "total_response_s": self.total_response, "mean_response_s": self.mean_response,
                "mean_analyses": self.mean_analyses, "total_analyses": self.total_analyses,
                "makespan_s": self.makespan, "events": self.events, "batches": self.batches,
                "wall_s": self.wall_s}


# --- the executor --------------------------------------------------------------------------


def _world_of(world_or_params: SearchWorld | Mapping[str, Any], seed: int
              ) -> tuple[SearchWorld, float]:
    """The world and its default ``Tc``: a world as given, or params built with ``seed``."""
    if isinstance(world_or_params, SearchWorld):
        return world_or_params, float(DEFAULTS["tc_s"])
    if not isinstance(world_or_params, Mapping):
        raise TypeError(f"expected a SearchWorld or a params mapping, "
                        f"found {type(world_or_params).__name__}")
    PersonSearch().validate(world_or_params)
    return (build_world(world_or_params, seed),
            float(world_or_params.get("tc_s", DEFAULTS["tc_s"])))


def simulate(world_or_params: SearchWorld | Mapping[str, Any], policy_name: str, seed: int = 0,
             *, tc: float | None = None, sharing: str = "paper", accounting: str = "plain",
             sequential: bool = True, policy_seed: int | None = None, start: str = "server",
             **policy_params: Any) -> SearchRun:
    """Run every search of the world concurrently under ``policy_name``; see the module notes.

    ``world_or_params`` is a :class:`SearchWorld` or ``person-search`` params (built with
    ``seed``). ``tc`` is the default response time Tc (default: the params' ``tc_s``, 10
    for a world), used by the servers and, for ``priority``, by Eq. 1. ``sharing`` is the
    :class:`AnalysisServer` mode, ``accounting`` ``"plain"`` or ``"compensated"`` (Eq. 7
    in the durations), ``sequential`` how a batch of simultaneous choices sees the load,
    ``start`` where each search's first ``mu_L`` is (:data:`~testbed.systems.
    person_search.model.STARTS`: the ``T_0`` server, or the continuous ``mu_0``).
    ``policy_params`` go to the policy (``priority``: :class:`PriorityParams` fields such
    as ``w``, ``alpha``, ``compensation``; ``params=`` a whole :class:`PriorityParams`).
    """
    world, default_tc = _world_of(world_or_params, seed)
    tc = default_tc if tc is None else float(tc)
    if not (math.isfinite(tc) and tc > 0):
        raise ValueError(f"tc: expected a finite number > 0, found {tc!r}")
    if sharing not in SHARING_MODES:
        raise ValueError(f"sharing: expected one of {', '.join(SHARING_MODES)}, "
                         f"found {sharing!r}")
    if accounting not in ACCOUNTINGS:
        raise ValueError(f"accounting: expected one of {', '.join(ACCOUNTINGS)}, "
                         f"found {accounting!r}")
    options = dict(policy_params)
    if policy_name == "priority":
        given = options.get("params")
        if given is None:
            options["tc"] = tc  # one Tc for the servers and Eq. 1
        elif not isinstance(given, PriorityParams) or given.tc != tc:
            raise ValueError(f"params: expected PriorityParams with tc = {tc!r}, found {given!r}")
    pseed = policy_seed_for(seed) if policy_seed is None else int(policy_seed)
    items = world.items
    policy = make_search_policy(policy_name, items, pseed, **options)
    n_servers = items.n_servers
    item_server = items.server
    item_time = items.time
    holder = world.holder  # the truth: only the answers come from it
    item_slot = item_time.astype(np.int64)
    searches = [Search.for_target(world, k, start) for k in range(world.targets)]
    servers = [AnalysisServer(tc, sharing) for _ in range(n_servers)]
    load = np.zeros(n_servers, dtype=np.int64)
    version = [0] * n_servers
    heap: list[tuple[float, int, int]] = []
    compensated = accounting == "compensated"

    n = len(searches)
    analyses = np.zeros(n, dtype=np.int64)
    response = np.full(n, math.nan)
    found = np.full(n, -1, dtype=np.int64)
    decision_us = np.zeros(n)
    a_search: list[int] = []
    a_step: list[int] = []
    a_item: list[int] = []
    a_server: list[int] = []
    a_start: list[float] = []
    a_queue: list[int] = []
    a_factor: list[float] = []
    a_index: dict[int, int] = {}  # search id -> row of its analysis in flight
    a_end: list[float] = []
    batches = events = 0
    began = time.perf_counter()

    def schedule(s: int) -> None:
        """Push server ``s``'s next completion under a fresh version (older ones go stale)."""
        version[s] += 1
        nxt = servers[s].next_completion()
        if nxt is not None:
            heapq.heappush(heap, (nxt[0], s, version[s]))

    def dispatch(now: float, ready: list[Search]) -> None:
        """One batch: choose for ``ready`` (search-id order), admit in the same order."""
        nonlocal batches
        batches += 1
        t0 = time.perf_counter()
        picks = policy.choose_many(ready, load, sequential=sequential)
        share = (time.perf_counter() - t0) * 1e6 / len(ready)
        touched = set()
        for search, item in zip(ready, picks, strict=True):
            sid = search.search_id
            factor = compensation_factor(float(item_time[item]), search.t_l) \
                if compensated else 1.0
            search.dispatch(item)
            s = int(item_server[item])
            a_index[sid] = len(a_search)
            a_search.append(sid)
            a_step.append(int(analyses[sid]))
            a_item.append(int(item))
            a_server.append(s)
            a_start.append(now)
            a_queue.append(int(load[s]))
            a_factor.append(factor)
            a_end.append(math.nan)
            analyses[sid] += 1
            decision_us[sid] += share
            servers[s].admit(now, sid, factor)
            load[s] += 1
            touched.add(s)
        for s in sorted(touched):
            schedule(s)

    if searches:
        dispatch(0.0, searches)
    makespan = 0.0
    while heap:
        now = heap[0][0]
        ended: list[int] = []
        while heap and heap[0][0] <= now:
            _, s, ver = heapq.heappop(heap)
            if ver != version[s]:
                continue  # stale: the server changed since this entry was pushed
            sid = int(servers[s].complete(now))
            load[s] -= 1
            events += 1
            ended.append(sid)
            schedule(s)
        if not ended:
            continue
        makespan = now
        ready = []
        for sid in ended:
            row = a_index.pop(sid)
            a_end[row] = now
            search = searches[sid]
            item = a_item[row]
            present = bool(holder[sid, item_slot[item]] == item_server[item])
            if search.answer(item, present):
                response[sid] = now  # arrival is 0
                found[sid] = item
            elif not search.candidates.any():
                raise RuntimeError(f"search {sid}: no candidates left, target not found")
            else:
                ready.append(search)
        if ready:
            ready.sort(key=lambda s: s.search_id)
            dispatch(now, ready)
    if np.isnan(response).any():
        raise RuntimeError("the event loop ended with unfinished searches")
    return SearchRun(
        policy=policy_name, seed=seed, policy_seed=pseed, servers=n_servers,
        slots=world.slots, tc=tc, sharing=sharing, accounting=accounting,
        sequential=sequential, policy_params=dict(policy_params), analyses=analyses,
        response=response, found=found, decision_us=decision_us,
        a_search=np.asarray(a_search, dtype=np.int64), a_step=np.asarray(a_step, dtype=np.int64),
        a_item=np.asarray(a_item, dtype=np.int64), a_server=np.asarray(a_server, dtype=np.int64),
        a_start=np.asarray(a_start, dtype=float), a_end=np.asarray(a_end, dtype=float),
        a_queue=np.asarray(a_queue, dtype=np.int64), a_factor=np.asarray(a_factor, dtype=float),
        events=events, batches=batches, makespan=makespan,
        wall_s=time.perf_counter() - began)


# --- testbed run --executor sim ---------------------------------------------------------------


def run_sim(scenario: Scenario, run: str, trace_dir: Path, workdir: Path,
            progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Replay every policy entry and repetition of a person-search ``scenario`` in model time.

    An entry is a registered policy with its label and parameters (the priority policy's
    :class:`PriorityParams` fields, e.g. the candidate-set rule ``candidates``, checked
    by the loader through :func:`~nodes.person_search.policies.
    check_policy_params`) and the run options
    :data:`~nodes.person_search.model.RUN_OPTIONS` (``start``, ``sequential``, and
    ``isolated``, which adds ``alone_mean_analyses``: each search run alone on idle
    servers, :func:`isolated_analyses`); the trace rows and summaries name it by its
    label, and each summary records its reading of the paper (:func:`replay_reading`),
    the run's :func:`run_stats` and :func:`end_groups`.

    The world is the materialised trace's ground truth (``trace_dir``, written by the
    generator's side files and checked against the trace); the servers' ``Tc`` and
    sharing and the coordinator's accounting are the scenario's
    (:func:`~testbed.systems.person_search.deployment.deployment`). Repetition ``r``
    seeds the policies with ``policy_seed_for(workload seed, r)``, as the emulation
    driver does. Returns the trace rows (one per search, :func:`request_rows`, named
    after the scenario's nodes) and, under ``driver`` (where the emulation's driver
    details go in ``metadata.json``), one summary per replay. ``workdir`` is unused
    (nothing runs outside this process).
    """
    del workdir
    dep = deployment(scenario)
    world = read_ground_truth(trace_dir)
    if world.items.n_servers != len(dep.edges):
        raise TestbedError(f"{scenario.name}: the workload has {world.items.n_servers} "
                           f"servers, the scenario {len(dep.edges)} edge servers")
    seed = scenario.workload.seed
    replays: list[dict[str, Any]] = []

    def replay(label: str, repetition: int) -> list[dict[str, Any]]:
        entry = scenario.policy_entry(label)
        own, options = split_run_options(entry.params)
        isolated = bool(options.pop("isolated", False))
        pseed = scenario_policy_seed(scenario, repetition)
        result = simulate(world, entry.name, seed, tc=dep.tc, sharing=dep.sharing,
                          accounting=dep.accounting, policy_seed=pseed, **options, **own)
        summary = {"repetition": repetition, "policy_seed": pseed, **result.summary(),
                   **run_stats(result, world), **end_groups(result, world),
                   **replay_reading(label, entry.name, entry.params, dep.accounting)}
        if isolated:
            tc = {"tc": dep.tc} if entry.name == "priority" else {}
            alone = isolated_analyses(world, entry.name, seed, policy_seed=pseed, **tc, **own)
            summary["alone_mean_analyses"] = float(alone.mean())
        replays.append(summary)
        progress(f"  {label} #{repetition}: total {result.total_response:.0f} model s, "
                 f"{result.mean_analyses:.1f} analyses per search "
                 f"({result.wall_s:.2f} s wall)")
        return request_rows(result, run, repetition, dep.client, scenario.time_scale,
                            dep.names, label=label)

    rows, failed = replay_each(scenario.repetitions, scenario.policies, replay, progress)
    return {"rows": rows, "failed": failed,
            "driver": {"replays": replays, "tc": dep.tc, "sharing": dep.sharing,
                       "accounting": dep.accounting}}


def replay_reading(label: str, name: str, params: Mapping[str, Any],
                   accounting: str) -> dict[str, Any]:
    """What a replay summary records of the policy entry it ran (both executors): its
    ``label`` (as ``policy``), the registered ``policy_name``, the entry's
    ``policy_params`` and the ``reading`` of the paper they make
    (:func:`~nodes.person_search.model.reading`), so every number taken from
    the summary can say which reading of Eq. 1/7 and which candidate-set rule it is."""
    return {"policy": label, "policy_name": name, "policy_params": dict(params),
            "accounting": accounting, "reading": reading(name, accounting, params)}


# --- trace rows ----------------------------------------------------------------------------


def _base_row(run_id: str, policy: str, repetition: int, task_id: int, client: str,
              server: int, names: ServerNames, tc: float, decision: float) -> dict[str, Any]:
    target = server_name(server) if names is None else names[server]
    return {"run": run_id, "policy": policy, "repetition": repetition, "kind": "search",
            "task_id": task_id, "client": client, "target": target,
            "tier": "edge", "size": tc, "cls": "search", "arrival_model": 0.0,
            "arrival_wall": 0.0, "estimate_s": None, "state_age_s": 0.0,
            "decision_us": decision, "network_s": 0.0, "wait_s": 0.0, "outcome": "ok",
            "error": None}


def request_rows(run: SearchRun, run_id: str = "sim", repetition: int = 0,
                 client: str = DEFAULT_CLIENT, time_scale: float = 1.0,
                 names: ServerNames = None, label: str | None = None
                 ) -> list[dict[str, Any]]:
    """One trace row per request (``docs/traces.md``, kind ``search``).

    The whole search is one task served by the edge servers: ``latency_s`` =
    ``service_s`` = its response time (one item always in flight, choices take no model
    time), ``wait_s`` = ``network_s`` = 0; ``dispatch`` and ``start`` are its first
    analysis (time 0), ``end``/``response`` the end of the one that found the ``T_R``
    item. ``target``, ``item`` (the item id) and ``step`` (``analyses - 1``) name that
    final analysis; ``queue_at_arrival`` is what the first analysis found running on its
    server. Wall columns are ``model / time_scale`` from a virtual start at 0 (as the
    sim executor fills them); ``state_age_s`` is 0 (the loads are exact);
    ``decision_us`` sums the request's choices. ``names[s]`` is edge server ``s``'s
    ``target`` (default :func:`server_name`). ``label`` names the policy entry in the
    ``policy`` column (default: the policy's name).
    """
    inv_k = 1.0 / time_scale
    first_of = np.empty(run.requests, dtype=np.int64)
    last_of = np.empty(run.requests, dtype=np.int64)
    first = np.flatnonzero(run.a_step == 0)
    last = np.flatnonzero(run.a_step == run.analyses[run.a_search] - 1)
    first_of[run.a_search[first]] = first
    last_of[run.a_search[last]] = last
    rows = []
    for k in range(run.requests):
        item = int(run.found[k])
        row = _base_row(run_id, label or run.policy, repetition, k, client,
                        int(run.a_server[last_of[k]]), names, run.tc,
                        float(run.decision_us[k]))
        latency = float(run.response[k])
        row.update(dispatch_model=0.0, dispatch_wall=0.0, response_model=latency,
                   server_arrival_wall=0.0, start_wall=0.0, end_wall=latency * inv_k,
                   response_wall=latency * inv_k, latency_s=latency, service_s=latency,
                   latency_wall_s=latency * inv_k,
                   queue_at_arrival=int(run.a_queue[first_of[k]]),
                   step=int(run.analyses[k]) - 1, item=str(item))
        rows.append(row)
    return rows


def analysis_rows(run: SearchRun, run_id: str = "sim", repetition: int = 0,
                  client: str = DEFAULT_CLIENT, time_scale: float = 1.0,
                  names: ServerNames = None) -> list[dict[str, Any]]:
    """One trace row per analysis (kind ``search``, ``step`` from 0 within its search).

    ``task_id`` is the search, ``arrival_model`` its arrival (0); ``dispatch_model`` the
    analysis's start, ``latency_s`` = ``service_s`` its duration; ``queue_at_arrival``
    the analyses already running on the server; ``decision_us`` the request's choices
    spread evenly over its analyses. Several rows share a ``task_id`` here.
    """
    inv_k = 1.0 / time_scale
    rows = []
    for j in range(run.a_search.size):
        k = int(run.a_search[j])
        start, end = float(run.a_start[j]), float(run.a_end[j])
        row = _base_row(run_id, run.policy, repetition, k, client, int(run.a_server[j]),
                        names, run.tc, float(run.decision_us[k] / run.analyses[k]))
        row.update(dispatch_model=start, dispatch_wall=start * inv_k, response_model=end,
                   server_arrival_wall=start * inv_k, start_wall=start * inv_k,
                   end_wall=end * inv_k, response_wall=end * inv_k, latency_s=end - start,
                   service_s=end - start, latency_wall_s=(end - start) * inv_k,
                   queue_at_arrival=int(run.a_queue[j]), step=int(run.a_step[j]),
                   item=str(int(run.a_item[j])))
        rows.append(row)
    return rows


# --- what a run did ---------------------------------------------------------------------------


def run_stats(run: SearchRun, world: SearchWorld) -> dict[str, Any]:
    """What ``run``'s analyses were, per search on average (JSON-ready).

    ``mean_past``: analyses of items before the required time ``T_R``;
    ``mean_past_misses``: those of them whose item did not contain the target;
    ``mean_tr_misses``: analyses at ``T_R`` without the target (each search ends with
    exactly one analysis at ``T_R`` with it). Per analysis: ``mean_factor``, the Eq. 7
    factor applied (1 under ``accounting="plain"``), ``factor_one_share``, the share of
    analyses whose factor was 1 (under ``"compensated"``: items at most one slot from
    ``T_L``; all of them under ``"plain"``), and ``mean_concurrency``, the
    analyses running on its server once it was admitted, itself included (its duration
    in units of ``Tc x factor`` under the paper rule). Per run: ``total_analyses`` and
    ``makespan_s`` (the last completion). ``world`` must be the run's world.
    """
    items = world.items
    slot = items.time[run.a_item].astype(np.int64)
    hit = world.holder[run.a_search, slot] == items.server[run.a_item]
    past = slot < world.slots
    n = max(run.requests, 1)
    return {"mean_past": float(past.sum()) / n,
            "mean_past_misses": float((past & ~hit).sum()) / n,
            "mean_tr_misses": float((~past & ~hit).sum()) / n,
            "mean_factor": float(run.a_factor.mean()) if run.a_factor.size else 1.0,
            "factor_one_share": float((run.a_factor == 1.0).mean()) if run.a_factor.size
            else 1.0,
            "mean_concurrency": float((run.a_queue + 1).mean()) if run.a_queue.size else 0.0,
            "total_analyses": run.total_analyses, "makespan_s": run.makespan}


def end_groups(run: SearchRun, world: SearchWorld) -> dict[str, Any]:
    """The searches split by where their target is at ``T_R``: on the last server along x
    (where a straight mover that reaches the end of the region stops) or elsewhere.

    ``end_share`` is the share of the first group; ``mean_analyses_end`` and
    ``mean_analyses_rest`` each group's mean analyses per search (None when empty).
    """
    side = world.layout.side
    last = world.holder[:, world.slots] % side == side - 1
    rest = ~last
    return {"end_share": float(last.mean()),
            "mean_analyses_end": float(run.analyses[last].mean()) if last.any() else None,
            "mean_analyses_rest": float(run.analyses[rest].mean()) if rest.any() else None}


def isolated_analyses(world: SearchWorld, policy_name: str, seed: int = 0, *,
                      policy_seed: int | None = None, **policy_params: Any) -> np.ndarray:
    """Analyses each search of ``world`` needs when it runs alone on idle servers.

    Every search is Algorithm 1 with ``k = 0`` on every server at every choice, answered
    from the ground truth (:meth:`Search.run`); the policy is seeded as in
    :func:`simulate` (``policy_seed_for(seed)`` unless ``policy_seed`` is given).
    Compared with a :func:`simulate` run it shows what contention changed in the
    choices. Returns an int array, one entry per search.
    """
    pseed = policy_seed_for(seed) if policy_seed is None else int(policy_seed)
    policy = make_search_policy(policy_name, world.items, pseed, **policy_params)
    out = np.zeros(world.targets, dtype=np.int64)
    for k in range(world.targets):
        search = Search.for_target(world, k)
        out[k] = len(search.run(policy, lambda item, k=k: world.contains(k, item)))
    return out
