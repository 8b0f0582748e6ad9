"""The person-search coordinator (the paper's cloud server): runs searches on edge servers.

``POST /runs`` describes one run: the edge servers (base URLs, server ``s`` at index
``s``), their layout and number of slots, every target's ``T_0`` server, the policy and
the timing. The coordinator knows the item metadata only
(:meth:`~workloads.person_search.Items.for_layout`); the ground truth stays on the edge
servers, which answer "does item i contain target k" (``nodes.person_search.edge_server``).

It mirrors :func:`testbed.systems.person_search.sim.simulate` as closely as real concurrency
allows:

1. **Searches.** One :class:`~nodes.person_search.model.Search` per target ``k``, starting
   from the position of server ``starts[k]`` at ``T_L = 0`` and asking for ``T_R =
   slots`` (as :meth:`Search.for_target` does). All start at once (the run's start is
   time 0) and each has exactly one analysis in flight (Algorithm 1).
2. **Loads.** ``k_i``, the analyses running on a server, is the coordinator's own count
   of outstanding analysis requests to that server: incremented when it chooses an item
   there, decremented when the answer arrives. The coordinator is the edge servers'
   only client, so this is what runs there, give or take the network transit of a
   request or an answer; the run checks at its start that every server is idle.
3. **Batches.** A search that needs an item (all of them at the start; later, one whose
   answer did not end it) joins a queue. One dispatcher drains the whole queue at once:
   it sorts it by search id and calls :meth:`SearchPolicy.choose_many` with
   ``sequential=True``, so each choice counts as running on its server for the later
   choices of the batch (as the simulator's batches). Then every choice is sent
   concurrently. At the start this is one batch of every search, exactly as in the
   simulator. Later a batch holds whatever answers arrived while the dispatcher was busy
   or asleep: completions that coincide in model time reach the coordinator some
   microseconds apart and usually form batches of one; no artificial window is added.
4. **Compensated accounting.** With ``accounting: "compensated"`` each request carries
   ``factor = compensation_factor(T_i, T_L)`` (``T_L`` of the search when it chose the
   item), which the edge server multiplies into the analysis's duration (Eq. 7-8 as
   the simulator reads them); ``"plain"`` sends 1.
5. **Seeds, Tc and the priority parameters.** The policy is ``make_search_policy(policy,
   items, policy_seed, **policy_params)`` with the run's ``tc`` as Eq. 1's Tc (priority),
   as in the simulator; random streams are per search, so the choices of a search do not
   depend on how the searches' answers interleave. ``policy_params`` carry a scenario's
   policy entry (the emulation driver sends them): among them the candidate-set rule
   ``candidates`` (``unanalysed`` or ``after-discovery``, module note 3 of
   :mod:`nodes.person_search.model`), which the coordinator's searches follow
   exactly as the simulator's.
6. **Failures.** Any failed analysis request (not 200, a malformed answer, a timeout, a
   connection error) or a search that runs out of candidates without finding its
   target fails the whole run: everything in flight is cancelled and ``POST /runs``
   answers 502 naming the server, the item and the search. Nothing is lost silently.
   The edge servers let the cancelled analyses run to their ends, so the next run has
   to wait until they are idle again (``409`` until then).

Time: ``tc`` is in model seconds and ``time_scale`` is the scenario's, model seconds
per wall second (>= 1, as everywhere in the testbed): an idle analysis takes ``tc /
time_scale`` wall seconds and a wall duration ``d`` stands for ``d * time_scale`` model
seconds. Both must equal the edge servers' options (checked at the start of a run).

Confinement: the coordinator contacts only the edge servers of its own configuration
(``--server URL``, repeatable); a run naming any other URL is refused with 400 before
anything is sent, so a request cannot point it at another host.

Run it as ``python -m nodes.person_search.coordinator --host H --port P --server URL
...`` with the run secret in ``$TESTBED_SECRET_FILE``. The HTTP contract is
``docs/person_search.md``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import numpy as np
from aiohttp import web

from nodes.common import (
    Address,
    Field,
    Route,
    client_error,
    describe,
    int_field,
    make_base_app,
    positive_number_field,
    run_service,
)
from nodes.http import PeerError, call_json, error_of
from nodes.person_search import openapi as doc
from nodes.person_search.configs import CoordinatorParams
from nodes.person_search.model import (
    ACCOUNTINGS,
    PriorityParams,
    Search,
    compensation_factor,
)
from nodes.person_search.policies import SEARCH_POLICIES, make_search_policy
from nodes.person_search.serving import read_large_json_object, serve
from nodes.secret import peer_session
from testbed.checks import is_int, is_number
from workloads.person_search import LAYOUTS, MAX_SLOTS, MAX_TARGETS, Items, Layout

_log = logging.getLogger("nodes.person_search.coordinator")

#: Largest ``POST /runs`` body (a million start indices fit).
RUN_BODY_BYTES = 16 * 1024 * 1024
#: How long the health checks at the start of a run may take, at most.
HEALTH_TIMEOUT_S = 10.0
#: The priority parameters a run may set, with the JSON they take (``tc`` is the run's).
PRIORITY_OPTIONS = {
    "alpha": "number", "sigma_d": "number", "w": "number", "t_s": "number or null",
    "compensation": "string", "candidates": "string",
}


def _enum(choices: Sequence[str], required: bool = True) -> Field:
    return Field(f"one of {', '.join(choices)}", lambda v: v in choices, required)


RUN_FIELDS = {
    "servers": Field("non-empty array of edge server base URLs",
                     lambda v: isinstance(v, list) and len(v) > 0),
    "layout": _enum(LAYOUTS),
    "slots": int_field(1, MAX_SLOTS),
    "starts": Field("non-empty array of server indices (one per target)",
                    lambda v: isinstance(v, list) and 0 < len(v) <= MAX_TARGETS),
    "policy": _enum(sorted(SEARCH_POLICIES)),
    "policy_params": Field("object of priority parameters",
                           lambda v: isinstance(v, dict), required=False),
    "policy_seed": int_field(0),
    "tc": positive_number_field(required=False),
    "time_scale": Field("finite number >= 1 (model seconds per wall second)",
                        lambda v: is_number(v, finite=True) and v >= 1),
    "accounting": _enum(ACCOUNTINGS, required=False),
    "request_timeout_s": positive_number_field(required=False),
}


def base_url(value: Any) -> str | None:
    """``value`` as a base URL without a trailing slash, or None if it is not one.

    An ``http``/``https`` URL with a host, an optional port and path, and no query or
    fragment.
    """
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment:
        return None
    return value.rstrip("/")


def _bad(reason: str) -> web.HTTPException:
    return client_error(web.HTTPBadRequest, reason)


@dataclass(frozen=True)
class RunSpec:
    """A validated ``POST /runs`` body, defaults filled in."""

    servers: list[str]
    layout: Layout
    slots: int
    starts: list[int]
    policy: str
    policy_params: dict[str, Any]
    policy_seed: int
    tc: float
    time_scale: float
    accounting: str
    request_timeout_s: float

    @classmethod
    def from_body(cls, body: dict[str, Any], accounting: str = "plain") -> RunSpec:
        """Check what the field table cannot; raise 400 naming the field. ``accounting``
        is the coordinator's own, for a body that names none."""
        servers = []
        for s, value in enumerate(body["servers"]):
            url = base_url(value)
            if url is None:
                raise _bad(f"servers[{s}]: expected an http://host[:port] base URL, "
                           f"found {describe(value)}")
            servers.append(url)
        try:
            layout = Layout(body["layout"], len(servers))
        except ValueError:
            raise _bad(f"servers: expected a perfect square number of URLs on a grid, "
                       f"found {len(servers)}") from None
        n = len(servers)
        for k, start in enumerate(body["starts"]):
            if not (is_int(start) and 0 <= start < n):
                raise _bad(f"starts[{k}]: expected a server index, an integer in 0 .. "
                           f"{n - 1}, found {describe(start)}")
        tc = float(body.get("tc", 10.0))
        options = dict(body.get("policy_params", {}))
        if options and body["policy"] != "priority":
            raise _bad(f"policy_params: expected nothing for policy {body['policy']} "
                       f"(only priority takes parameters), found {describe(options)}")
        for name, value in options.items():
            kind = PRIORITY_OPTIONS.get(name)
            if kind is None:
                raise _bad(f"policy_params.{name}: expected one of the fields "
                           f"{', '.join(sorted(PRIORITY_OPTIONS))}, found an unknown field")
            number = is_number(value)
            ok = (number or (kind == "number or null" and value is None)) \
                if kind.startswith("number") else isinstance(value, str)
            if not ok:
                raise _bad(f"policy_params.{name}: expected {kind}, found {describe(value)}")
        if body["policy"] == "priority":
            try:
                PriorityParams(**options, tc=tc)
            except ValueError as exc:
                raise _bad(f"policy_params: {exc}") from None
        return cls(servers=servers, layout=layout, slots=body["slots"],
                   starts=list(body["starts"]), policy=body["policy"],
                   policy_params=options, policy_seed=body["policy_seed"], tc=tc,
                   time_scale=float(body["time_scale"]),
                   accounting=body.get("accounting", accounting),
                   request_timeout_s=float(body.get("request_timeout_s", 60.0)))


class RunFailed(Exception):
    """A run could not finish; ``status`` is the HTTP status to answer with."""

    def __init__(self, reason: str, status: int = 502) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class Run:
    """One run: every search, the loads, the dispatcher and the analyses in flight."""

    def __init__(self, spec: RunSpec, session: aiohttp.ClientSession) -> None:
        """Build the searches and the policy of ``spec`` (no request is sent yet)."""
        self.spec = spec
        self.session = session
        self.items = Items.for_layout(spec.layout, spec.slots)
        positions = spec.layout.positions()
        self.searches = [Search(k, self.items, (positions[s, 0], positions[s, 1]), 0.0,
                                float(spec.slots))
                         for k, s in enumerate(spec.starts)]
        options = dict(spec.policy_params)
        if spec.policy == "priority":
            options["tc"] = spec.tc  # one Tc for the servers and Eq. 1, as the simulator
        self.policy = make_search_policy(spec.policy, self.items, spec.policy_seed, **options)
        self.load = np.zeros(self.items.n_servers, dtype=np.int64)
        self.queue: list[Search] = []
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.failure: str | None = None
        self.crash: BaseException | None = None
        self.remaining = len(self.searches)
        self.steps = [0] * len(self.searches)
        self.response: list[float | None] = [None] * len(self.searches)
        self.rows: list[dict[str, Any]] = []
        self.batches = 0
        self.t0 = 0.0
        self.t0_wall = 0.0

    # ------------------------------------------------------------------ checks

    async def check_servers(self) -> None:
        """Every server answers ``/health`` as server ``s`` with this run's world, idle.

        Raises :class:`RunFailed`: 502 for an unreachable server or a malformed answer,
        409 for a server in the wrong state (no world, other slots, other timing, still
        running analyses of an earlier run, another index).
        """
        spec = self.spec
        timeout = min(HEALTH_TIMEOUT_S, spec.request_timeout_s)

        async def one(s: int, url: str) -> None:
            try:
                status, body = await call_json(self.session, "GET", f"{url}/health",
                                               timeout_s=timeout)
            except PeerError as exc:
                raise RunFailed(f"server {s} ({url}): {exc}") from None
            if status != 200 or not isinstance(body, dict):
                raise RunFailed(f"server {s} ({url}): GET /health answered {status}: "
                                f"{error_of(status, body)}")
            expected = {"server": s, "loaded": True, "slots": spec.slots, "running": 0}
            for name, value in expected.items():
                if body.get(name) != value:
                    raise RunFailed(f"server {s} ({url}): expected {name} = {value!r}, found "
                                    f"{body.get(name)!r} (wrong URL, no world loaded, or "
                                    f"analyses of an earlier run still running?)", 409)
            for name, value in (("tc", spec.tc), ("time_scale", spec.time_scale)):
                found = body.get(name)
                if not (isinstance(found, (int, float))
                        and math.isclose(found, value, rel_tol=1e-9)):
                    raise RunFailed(f"server {s} ({url}): runs with {name} = {found!r}, "
                                    f"the run says {value!r}", 409)

        results = await asyncio.gather(*(one(s, u) for s, u in enumerate(spec.servers)),
                                       return_exceptions=True)
        for result in results:  # the first problem in server order
            if isinstance(result, BaseException):
                raise result

    # ------------------------------------------------------------------ the run

    async def execute(self) -> dict[str, Any]:
        """Run every search to its end; the result body (raises :class:`RunFailed`)."""
        await self.check_servers()
        loop = asyncio.get_running_loop()
        began = time.perf_counter()
        self.t0, self.t0_wall = loop.time(), time.time()
        self.queue = list(self.searches)
        try:
            while self.remaining and self.failure is None and self.crash is None:
                if self.queue:
                    self.dispatch()
                    continue
                self.wake.clear()
                await self.wake.wait()
        finally:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.crash is not None:
            raise self.crash
        if self.failure is not None:
            raise RunFailed(self.failure)
        return self.result(time.perf_counter() - began)

    def fail(self, reason: str) -> None:
        """Fail the run (the first reason wins) and wake the dispatcher to end it."""
        if self.failure is None:
            self.failure = reason
            _log.warning("run failed: %s", reason)
        self.wake.set()

    def dispatch(self) -> None:
        """Choose for every queued search in one batch and send the choices."""
        ready = sorted(self.queue, key=lambda s: s.search_id)
        self.queue.clear()
        self.batches += 1
        t0 = time.perf_counter()
        try:
            picks = self.policy.choose_many(ready, self.load, sequential=True)
        except ValueError as exc:
            self.fail(f"{exc} (the target was not found: the servers' worlds disagree "
                      f"with the run?)")
            return
        share = (time.perf_counter() - t0) * 1e6 / len(ready)
        compensated = self.spec.accounting == "compensated"
        for search, item in zip(ready, picks, strict=True):
            sid = search.search_id
            factor = compensation_factor(float(self.items.time[item]), search.t_l) \
                if compensated else 1.0
            search.dispatch(item)
            server = int(self.items.server[item])
            row = {"search": sid, "step": self.steps[sid], "item": item, "server": server,
                   "sent_wall": None, "answered_wall": None, "admitted_wall": None,
                   "ended_wall": None, "running_at_admission": None,
                   "coordinator_load": int(self.load[server]), "factor": factor,
                   "present": None, "decision_us": share}
            self.rows.append(row)
            self.steps[sid] += 1
            self.load[server] += 1
            task = asyncio.create_task(self.analyse(search, row))
            self.tasks.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        """Forget a done analysis task; an exception in it is a bug: end the run."""
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.crash = task.exception()
            self.wake.set()

    async def analyse(self, search: Search, row: dict[str, Any]) -> None:
        """Send one analysis, take its answer, queue the search again unless it is done."""
        sid, item, server = search.search_id, row["item"], row["server"]
        url = self.spec.servers[server]
        where = f"server {server} ({url}), item {item} of search {sid}"
        row["sent_wall"] = time.time()
        try:
            status, body = await call_json(
                self.session, "POST", f"{url}/analyse",
                {"search": sid, "item": item, "factor": row["factor"]},
                timeout_s=self.spec.request_timeout_s)
        except PeerError as exc:
            self.fail(f"{where}: {exc}")
            return
        now = asyncio.get_running_loop().time()
        row["answered_wall"] = time.time()
        if status != 200:
            self.fail(f"{where}: answered {status}: {error_of(status, body)}")
            return
        if not (isinstance(body, dict) and body.get("search") == sid
                and body.get("item") == item and isinstance(body.get("present"), bool)):
            self.fail(f"{where}: malformed answer {describe(body)}")
            return
        self.load[server] -= 1
        present = body["present"]
        row.update(present=present, admitted_wall=body.get("admitted_wall"),
                   ended_wall=body.get("ended_wall"),
                   running_at_admission=body.get("running_at_admission"))
        if search.answer(item, present):
            self.response[sid] = now - self.t0
            self.remaining -= 1
            self.wake.set()
        elif not search.candidates.any():
            self.fail(f"search {sid}: every item analysed, target not found at T_R "
                      f"(the servers' worlds disagree with the run?)")
        else:
            self.queue.append(search)
            self.wake.set()

    def result(self, wall_s: float) -> dict[str, Any]:
        """The ``POST /runs`` answer of a finished run."""
        scale = self.spec.time_scale
        requests = []
        for search in self.searches:
            sid = search.search_id
            response = float(self.response[sid] or 0.0)
            requests.append({"search": sid, "analyses": len(search.analysed),
                             "response_wall_s": response, "response_model_s": response * scale,
                             "found_item": search.found})
        makespan = max(r["response_wall_s"] for r in requests)
        return {"policy": self.spec.policy, "targets": len(self.searches), "wall_s": wall_s,
                "makespan_s": makespan, "model_makespan_s": makespan * scale,
                "batches": self.batches, "started_wall": self.t0_wall,
                "requests": requests, "analyses": self.rows}


class Coordinator:
    """The HTTP side: one run at a time, a shared client session, the edge servers it
    may contact."""

    def __init__(self, servers: Iterable[str] = (), accounting: str = "plain") -> None:
        self.allowed = frozenset(filter(None, (base_url(s) for s in servers)))
        self.accounting = accounting
        self.busy = False
        self.runs = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        """Startup hook: a client session without a connection limit (keep-alive).

        Every search may have its analysis in flight at once, each on its own
        connection; a limit would queue requests inside the client and distort loads.
        """
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        self._session = peer_session(app, connector=connector)

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook: close the session."""
        if self._session is not None:
            await self._session.close()

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"ok": True, "running": self.busy, "runs": self.runs})

    async def handle_run(self, request: web.Request) -> web.Response:
        """``POST /runs``: run every search to its end and answer with the timings."""
        body = await read_large_json_object(request, RUN_FIELDS, RUN_BODY_BYTES)
        spec = RunSpec.from_body(body, self.accounting)
        for s, url in enumerate(spec.servers):
            if url not in self.allowed:
                known = ", ".join(sorted(self.allowed)) or "none (no --server given)"
                raise client_error(web.HTTPBadRequest,
                                   f"servers[{s}]: expected one of this coordinator's edge "
                                   f"servers ({known}), found {url!r}")
        if self.busy:
            raise client_error(web.HTTPConflict, "run: another run is in progress")
        assert self._session is not None, "the coordinator app is not running"
        self.busy = True
        try:
            run = Run(spec, self._session)
            _log.info("run: %d searches, %d servers, policy %s", len(run.searches),
                      len(spec.servers), spec.policy)
            result = await run.execute()
        except RunFailed as exc:
            kind = web.HTTPConflict if exc.status == 409 else web.HTTPBadGateway
            raise client_error(kind, exc.reason) from None
        finally:
            self.busy = False
        self.runs += 1
        _log.info("run done: makespan %.3f s wall (%.1f model s), %d analyses",
                  result["makespan_s"], result["model_makespan_s"], len(result["analyses"]))
        return web.json_response(result)


COORDINATOR_KEY = web.AppKey("coordinator", Coordinator)


def make_app(servers: Iterable[str] = (), accounting: str = "plain") -> web.Application:
    """Build the coordinator application (its state is ``app[COORDINATOR_KEY]``); it
    runs searches on ``servers`` (base URLs) only, under ``accounting`` unless a run
    names another."""
    coordinator = Coordinator(servers, accounting)
    routes = [
        Route("POST", "/runs", coordinator.handle_run, "run every search to its end",
              doc.op(200, doc.RUN, (400, 409, 502))),
        Route("GET", "/health", coordinator.handle_health, "liveness, state and configuration",
              doc.op()),
    ]
    app = make_base_app()
    app[COORDINATOR_KEY] = coordinator
    doc.add_api(app, "Person-search coordinator", "Runs every search of a request "
                "concurrently against the edge servers (Algorithm 1 with one of the policies).",
                routes, components=None)
    app.on_startup.append(coordinator.start)
    app.on_cleanup.append(coordinator.stop)
    return app


def app_from_params(params: CoordinatorParams, address: Address) -> web.Application:
    """The coordinator of a command line: its edge servers and default accounting."""
    return make_app(params.server, params.accounting)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the coordinator until SIGTERM/SIGINT."""
    return run_service(CoordinatorParams, app_from_params, argv,
                       prog="python -m nodes.person_search.coordinator",
                       description=__doc__.splitlines()[0], port=8200, logger=_log,
                       server=serve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
