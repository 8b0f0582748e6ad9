"""The person-search edge data server: stored items, their ground truth, timed analyses.

One process per edge server ``S``. It stores ``slots`` data items, item ``S * slots +
(j - 1)`` being its cameras' data of slot ``T_j`` (global item ids, as
:meth:`workloads.person_search.Items.for_layout` numbers them). ``PUT /world`` loads
which targets each of them contains (the ground truth, which only this server holds);
``POST /analyse`` "analyses" one item for one target: it answers whether the target is
in it after the time the paper's response model gives.

The response model is :class:`nodes.person_search.model.AnalysisServer` with ``Tc`` =
``tc / time_scale`` wall seconds (``time_scale`` is the scenario's: model seconds per
wall second, >= 1), driven by the event loop's clock (``loop.time()``):

* an analysis is admitted when its request arrives (``admit(now, job, factor)``, after
  every analysis due by ``now`` has been completed: departures before arrivals, as in
  the simulator);
* one background task, the completer, sleeps until the model's next completion instant
  (:func:`nodes.common.sleep_until`, tens of microseconds late at most), completes that
  analysis *at its model instant* (so the model's clock never runs ahead of its own
  events, and processor sharing stays exact) and answers its request. Every admission
  wakes the completer, because an admission may bring the next completion forward (a
  job with a smaller compensation factor) or move every instant (processor sharing).

Under ``--sharing paper`` an analysis admitted while ``k`` others run takes ``Tc *
factor * (k + 1)``, fixed at admission; under ``processor-sharing`` the running
analyses share the server equally and their ends move as others start and end.

Concurrency is real (every request is its own HTTP request), so the analyses of one
instant of the simulator arrive here a few hundred microseconds apart, in whatever
order the network delivers them. A client that disconnects does not change the model:
its analysis keeps running to its end and the answer is dropped (the work was started;
a real server would not get it back either).

Run it as ``python -m nodes.person_search.edge_server --host H --port P
--server-index S [--tc 10] [--time-scale 500] [--sharing paper|processor-sharing]``.
The HTTP contract is ``docs/person_search.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from nodes.common import (
    Address,
    Field,
    Route,
    client_error,
    describe,
    int_field,
    make_base_app,
    read_json_object,
    run_service,
    sleep_until,
    str_field,
)
from nodes.person_search import openapi as doc
from nodes.person_search.configs import EdgeServerParams
from nodes.person_search.model import AnalysisServer
from nodes.person_search.serving import read_large_json_object, serve
from testbed.checks import is_int, is_number
from workloads.person_search import MAX_SLOTS

_log = logging.getLogger("nodes.person_search.edge_server")

#: Largest ``PUT /world`` body: a server's share of up to a million targets' truth.
WORLD_BODY_BYTES = 16 * 1024 * 1024
#: Largest Eq. 7 factor accepted (``2 |T_i - T_L| - 1`` stays below ``2 * MAX_SLOTS``).
MAX_FACTOR = 1e6


WORLD_FIELDS = {
    "slots": int_field(1, MAX_SLOTS),
    "present": Field('object {"1": [target ids], ..., "<slots>": [...]}',
                     lambda v: isinstance(v, dict)),
    "epoch": str_field(),
}
ANALYSE_FIELDS = {
    "search": int_field(0),
    "item": int_field(0),
    "factor": Field(f"finite number > 0 and <= {MAX_FACTOR:g}",
                    lambda v: is_number(v, finite=True) and 0 < v <= MAX_FACTOR,
                    required=False),
}


def parse_present(present: dict[str, Any], slots: int) -> list[frozenset[int]]:
    """The targets of every slot ``1 .. slots`` (index ``j - 1``), from ``PUT /world``.

    Keys must be exactly ``"1" .. "<slots>"``; values arrays of integers >= 0
    (duplicates are harmless). Raises :class:`ValueError` naming the offending key.
    """
    wanted = [str(j) for j in range(1, slots + 1)]
    keys = f'keys "1" .. "{slots}"' if slots > 1 else 'the key "1"'
    for key in present:
        if key not in wanted:
            raise ValueError(f"present: expected {keys}, "
                             f"found the unknown key {json.dumps(key)}")
    for key in wanted:
        if key not in present:
            raise ValueError(f'present: expected {keys}, found no key "{key}"')
    out = []
    for key in wanted:
        ids = present[key]
        if not (isinstance(ids, list)
                and all(is_int(t) and t >= 0 for t in ids)):
            raise ValueError(f'present["{key}"]: expected array of integers >= 0, '
                             f"found {describe(ids)}")
        out.append(frozenset(ids))
    return out


@dataclass
class World:
    """What this server stores: per slot, the targets its item of that slot contains."""

    slots: int
    present: list[frozenset[int]]
    epoch: str


@dataclass
class Job:
    """One admitted analysis and the request waiting for it."""

    search: int
    item: int
    slot: int
    present: bool
    running_at_admission: int
    admitted_loop: float
    admitted_wall: float
    answer: asyncio.Future[tuple[float, float]]  # (ended loop time, ended epoch)


class EdgeServer:
    """State and HTTP handlers of one edge data server."""

    def __init__(self, server_index: int, tc: float = 10.0, time_scale: float = 500.0,
                 sharing: str = "paper") -> None:
        """Server ``server_index`` whose analyses take ``tc / time_scale`` wall s alone."""
        if server_index < 0:
            raise ValueError(f"server_index: expected an integer >= 0, found {server_index!r}")
        if not (math.isfinite(tc) and tc > 0):
            raise ValueError(f"tc: expected a finite number > 0, found {tc!r}")
        if not (math.isfinite(time_scale) and time_scale >= 1):
            raise ValueError(f"time_scale: expected a finite number >= 1 (model seconds per "
                             f"wall second), found {time_scale!r}")
        self.server_index = server_index
        self.tc = float(tc)
        self.time_scale = float(time_scale)
        self.sharing = sharing
        self.model = AnalysisServer(self.tc / self.time_scale, sharing)
        self.world: World | None = None
        self.jobs: dict[int, Job] = {}
        self.analyses = 0
        self._ids = itertools.count()
        self._completer: asyncio.Task[None] | None = None
        self._sleeper: asyncio.Future[Any] | None = None

    # ------------------------------------------------------------------ the model

    def complete_due(self, now: float) -> None:
        """Complete every analysis whose model end is at or before ``now``, in order.

        Each is completed at its own model instant; its request is answered with the
        actual loop time and epoch (the completer's wake-up lateness included).
        """
        while (nxt := self.model.next_completion()) is not None and nxt[0] <= now:
            end, job_id = nxt
            self.model.complete(end)
            job = self.jobs.pop(job_id)
            if not job.answer.done():  # not if the request was cancelled meanwhile
                job.answer.set_result((asyncio.get_running_loop().time(), time.time()))

    def _wake(self) -> None:
        """Make the completer recompute its deadline (an admission changed the model)."""
        if self._sleeper is not None and not self._sleeper.done():
            self._sleeper.cancel()

    async def completer(self) -> None:
        """Sleep until the next completion, complete what is due, repeat; forever.

        The sleep is a separate future (a :func:`sleep_until` task, or a bare future
        while idle) that :meth:`_wake` cancels; the completer itself is only cancelled
        at shutdown.
        """
        loop = asyncio.get_running_loop()
        while True:
            self.complete_due(loop.time())
            nxt = self.model.next_completion()
            sleeper = asyncio.ensure_future(sleep_until(nxt[0])) if nxt is not None \
                else loop.create_future()
            self._sleeper = sleeper
            try:
                await asyncio.wait({sleeper})
            finally:
                sleeper.cancel()

    async def start(self, app: web.Application) -> None:
        """Startup hook: start the completer."""
        self._completer = asyncio.create_task(self.completer())

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook: stop the completer; requests still waiting are cancelled."""
        if self._completer is not None:
            self._completer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._completer
        for job in self.jobs.values():
            job.answer.cancel()

    # ------------------------------------------------------------------ handlers

    def _health(self) -> dict[str, Any]:
        world = self.world
        return {"ok": True, "server": self.server_index, "running": self.model.running,
                "loaded": world is not None, "slots": world.slots if world else 0,
                "epoch": world.epoch if world else None, "tc": self.tc,
                "time_scale": self.time_scale, "sharing": self.sharing,
                "analyses": self.analyses}

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response(self._health())

    async def handle_world(self, request: web.Request) -> web.Response:
        """``PUT /world``: replace the stored truth; 409 while an analysis runs."""
        body = await read_large_json_object(request, WORLD_FIELDS, WORLD_BODY_BYTES)
        try:
            present = parse_present(body["present"], body["slots"])
        except ValueError as exc:
            raise client_error(web.HTTPBadRequest, str(exc)) from None
        running = self.model.running
        if running:
            raise client_error(web.HTTPConflict, f"world: cannot be replaced while {running} "
                               "analyses run; retry when the server is idle")
        self.world = World(body["slots"], present, body["epoch"])
        _log.info("world %s loaded: %d slots, %d entries", body["epoch"], body["slots"],
                  sum(map(len, present)))
        return web.json_response({**self._health(),
                                  "entries": [len(p) for p in present]})

    async def handle_analyse(self, request: web.Request) -> web.Response:
        """``POST /analyse``: admit one analysis and answer when it ends."""
        body = await read_json_object(request, ANALYSE_FIELDS)
        world = self.world
        if world is None:
            raise client_error(web.HTTPConflict, "world: no world loaded; PUT /world first")
        item, search = body["item"], body["search"]
        first = self.server_index * world.slots
        if not first <= item < first + world.slots:
            raise client_error(web.HTTPNotFound, f"item: {item} is not on server "
                               f"{self.server_index} (its items are {first} .. "
                               f"{first + world.slots - 1})")
        slot = item - first + 1
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.complete_due(now)  # departures before arrivals
        job_id = next(self._ids)
        job = Job(search=search, item=item, slot=slot,
                  present=search in world.present[slot - 1],
                  running_at_admission=self.model.running, admitted_loop=now,
                  admitted_wall=time.time(), answer=loop.create_future())
        self.jobs[job_id] = job
        self.model.admit(now, job_id, float(body.get("factor", 1.0)))
        self.analyses += 1
        self._wake()
        # shield: a cancelled handler (client gone) leaves the job to run to its end
        ended_loop, ended_wall = await asyncio.shield(job.answer)
        return web.json_response({
            "search": search, "item": item, "slot": slot, "present": job.present,
            "running_at_admission": job.running_at_admission,
            "admitted_wall": job.admitted_wall, "ended_wall": ended_wall,
            "duration_s": ended_loop - job.admitted_loop,
        })


EDGE_SERVER_KEY = web.AppKey("edge_server", EdgeServer)


def make_app(server_index: int, tc: float = 10.0, time_scale: float = 500.0,
             sharing: str = "paper") -> web.Application:
    """Build the edge server application (its state is ``app[EDGE_SERVER_KEY]``)."""
    server = EdgeServer(server_index, tc, time_scale, sharing)
    routes = [
        Route("PUT", "/world", server.handle_world, "load the stored items' truth",
              doc.op(200, doc.WORLD, (400, 409))),
        Route("POST", "/analyse", server.handle_analyse, "analyse one item for one target",
              doc.op(200, doc.ANALYSE, (400, 404, 409))),
        Route("GET", "/health", server.handle_health, "liveness, state and configuration",
              doc.op()),
    ]
    app = make_base_app()
    app[EDGE_SERVER_KEY] = server
    doc.add_api(app, "Person-search edge data server", "Stores one edge server's items and "
                "their ground truth; answers analysis requests after the paper's "
                "response-model duration.", routes, components=None)
    app.on_startup.append(server.start)
    app.on_cleanup.append(server.stop)
    return app


def app_from_params(params: EdgeServerParams, address: Address) -> web.Application:
    """The edge server of a command line."""
    return make_app(params.server_index, params.tc, params.time_scale, params.sharing)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the edge server of the command line until SIGTERM/SIGINT."""
    return run_service(EdgeServerParams, app_from_params, argv,
                       prog="python -m nodes.person_search.edge_server",
                       description=__doc__.splitlines()[0], port=8100, logger=_log,
                       server=serve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
