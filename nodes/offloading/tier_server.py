"""The tier server: ``C`` workers behind one FIFO queue, standing for one compute tier.

A task (``POST /task``) holds one worker for ``size / speed / time_scale`` wall seconds;
whoever finds every worker busy waits in arrival order. Waiting is therefore never
computed: it emerges from contention, exactly as in a real M/G/c station, and the
response reports the timestamps (``server_arrival``, ``start``, ``end``) from which the
dispatcher splits latency into network, wait and service.

``GET /state`` exposes what a client may observe (queue, busy and active workers, the
arrival rate over a sliding window, the per-worker service rate, the speed), in model
time. ``GET /state?detail=1`` adds what only an oracle may see: the remaining service
time of every task in service and the service time of every queued task (FIFO order).
``POST /admin/workers`` lets the harness disable workers for fault events and
``POST /reset`` clears the counters between repetitions. The HTTP reference is
``docs/services.md``.

Two service models exist. ``hold`` (the default) sleeps on the event loop until a
loop-clock deadline, precise to tens of microseconds (:func:`nodes.common.sleep_until`)
and costing no CPU. ``compute`` burns one CPU core in a worker thread until the same
deadline, for workloads whose point is real CPU contention between co-located services;
the hold duration is still the service time (the thread spins on the clock, it does not
run a fixed amount of work), so results stay comparable with ``hold``.

A task that would hold a worker longer than ``max_hold_s`` wall seconds, or whose
service time ``size / speed`` exceeds the run's ``task_timeout`` (model seconds; the
emulation passes the scenario's), is refused with 400 naming ``size``: its client would
give up before it ends, so it would only hold a worker for nothing.

Run it as ``python -m nodes.offloading.tier_server --host H --port P --workers C --speed S
--time-scale K --mu MU [--window-s W | --window-model-s WM] [--max-hold-s H]
[--task-timeout T] [--model hold|compute]``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import sys
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from nodes.common import (
    PUBLIC,
    Address,
    Route,
    client_error,
    int_field,
    make_base_app,
    positive_number_field,
    read_json_object,
    run_service,
    sleep_until,
    str_field,
)
from nodes.offloading.tier_server_config import MAX_HOLD_S, MODELS, TierServerParams
from nodes.openapi import POSITIVE, Schema, add_api, body, op

_log = logging.getLogger("nodes.offloading.tier_server")

TASK_FIELDS = {
    "task_id": int_field(),
    "size": positive_number_field(),
    "client": str_field(),
}

#: The request bodies and the query parameter of the tier server's OpenAPI document
#: (the task and workers bodies state the bounds of one server: :func:`task_body`,
#: :func:`workers_body`).
RESET_BODY = body({"since": POSITIVE}, [])
DETAIL_PARAMETER = {"name": "detail", "in": "query", "required": False,
                    "schema": {"type": "string", "enum": ["0", "1"]}}

MAX_SINCE_SKEW_S = 3600.0  # a reset may date its rate window at most this far away


def task_body(max_size: float) -> Schema:
    """The ``POST /task`` body of a server whose largest task is ``max_size`` model
    seconds (its ``max_hold_s`` wall seconds)."""
    return body({"task_id": {"type": "integer"}, "size": {**POSITIVE, "maximum": max_size},
                 "client": {"type": "string", "minLength": 1}}, ["task_id", "size", "client"])


def workers_body(workers: int) -> Schema:
    """The ``POST /admin/workers`` body of a server of ``workers`` workers."""
    return body({"active": {"type": "integer", "minimum": 0, "maximum": workers}}, ["active"])

class WorkerPool:
    """``c`` numbered workers handed out in strict FIFO order.

    Unlike :class:`asyncio.Semaphore`, it says *which* worker a task got, lets the
    number of usable workers (``active``) change at run time, and keeps ``queue`` exact
    when a waiting task is cancelled (its place is removed, or the worker it was handed
    at the same instant is given back).
    """

    def __init__(self, c: int) -> None:
        self.c = c
        self.active = c
        self.busy = 0
        self._free = list(range(c))  # a heap: the lowest free worker id is used first
        self._waiters: deque[asyncio.Future[int]] = deque()

    @property
    def queue(self) -> int:
        """Tasks waiting for a worker (not in service)."""
        return len(self._waiters)

    async def acquire(self) -> int:
        """Wait (FIFO) for a free active worker and return its id."""
        if not self._waiters and self.busy < self.active:
            return self._take()
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            else:  # handed a worker in the same loop iteration as the cancellation
                self.release(waiter.result())
            raise

    def release(self, worker: int) -> None:
        """Give ``worker`` back and start the next waiting tasks, if any."""
        heapq.heappush(self._free, worker)
        self.busy -= 1
        self._wake()

    def set_active(self, active: int) -> None:
        """Allow ``active`` workers to serve; tasks in service on others finish normally."""
        self.active = active
        self._wake()

    def _take(self) -> int:
        self.busy += 1
        return heapq.heappop(self._free)

    def _wake(self) -> None:
        while self._waiters and self.busy < self.active:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled waiter is dropped here or in acquire()
                waiter.set_result(self._take())


def _burn_until(deadline: float) -> None:
    """Keep one CPU busy until ``time.monotonic()`` reaches ``deadline``.

    ``deadline`` comes from ``loop.time()``, which is ``time.monotonic()`` in asyncio.
    """
    while time.monotonic() < deadline:
        pass


class TierServer:
    """State and HTTP handlers of one tier server (see the module docstring)."""

    def __init__(
        self, workers: int, speed: float, time_scale: float, mu: float, window_s: float, model: str,
        max_hold_s: float = MAX_HOLD_S, task_timeout: float | None = None,
    ) -> None:
        self.speed = speed
        self.time_scale = time_scale
        self.task_timeout = task_timeout
        #: The longest wall time one task may hold a worker: ``max_hold_s``, or the
        #: task timeout on the wall clock when that is shorter (a longer hold could only
        #: end after its client gave up).
        self.max_hold_s = max_hold_s if task_timeout is None \
            else min(max_hold_s, task_timeout / time_scale)
        #: The largest task size (model seconds) accepted, as the document states it.
        self.max_size = max_hold_s * speed * time_scale if task_timeout is None \
            else min(max_hold_s * speed * time_scale, task_timeout * speed)
        self.mu = mu
        self.window_s = window_s
        self.pool = WorkerPool(workers)
        self.completed = 0
        self._arrivals: deque[float] = deque()  # time.monotonic() instants in the window
        # For ?detail=1: service time (model s, size / speed) of every task between its
        # arrival and resuming with a worker, in arrival order; and the loop-clock end of
        # the hold of every task in service, by worker.
        self._waiting: dict[int, float] = {}
        self._tickets = itertools.count()
        self._deadlines: dict[int, float] = {}
        self._since = time.monotonic()  # start or last reset
        self._executor = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tier-worker")
            if model == "compute"
            else None
        )

    def hold_s(self, size: float) -> float:
        """Wall seconds a task of ``size`` model seconds holds a worker."""
        return size / self.speed / self.time_scale

    def arrival_rate(self, now: float) -> float:
        """Arrivals per model second over the last ``window_s`` wall seconds.

        Before a full window has passed since start or reset, the elapsed time is the
        denominator, so early estimates are not biased low.
        """
        horizon = now - self.window_s
        while self._arrivals and self._arrivals[0] < horizon:
            self._arrivals.popleft()
        if not self._arrivals:
            return 0.0
        span = min(self.window_s, now - self._since)
        return len(self._arrivals) / max(span, 1e-6) / self.time_scale

    def state(self) -> dict[str, float | int]:
        """What ``GET /state`` reports."""
        return {
            "queue": self.pool.queue,
            "busy": self.pool.busy,
            "active": self.pool.active,
            "c": self.pool.c,
            "arrival_rate": self.arrival_rate(time.monotonic()),
            "service_rate": self.mu * self.speed,
            "speed": self.speed,
            "window_s": self.window_s,
            "completed": self.completed,
            "time": time.time(),
        }

    def backlog(self, now: float) -> dict[str, list[float]]:
        """What ``?detail=1`` adds, in model seconds at this tier's speed, at loop time ``now``.

        ``in_service_remaining`` has one entry per busy worker and ``queued`` one per
        waiting task (FIFO order), consistent with ``busy`` and ``queue``: a task handed a
        worker that has not resumed yet counts as in service with its whole service time.
        """
        waiting = list(self._waiting.values())
        handed = len(waiting) - self.pool.queue  # the oldest entries already hold a worker
        remaining = [max(0.0, end - now) * self.time_scale for end in self._deadlines.values()]
        return {"in_service_remaining": remaining + waiting[:handed], "queued": waiting[handed:]}

    async def _hold(self, deadline: float) -> None:
        """Occupy the worker until loop-clock ``deadline`` according to the service model."""
        if self._executor is None:
            await sleep_until(deadline)
        else:
            await asyncio.get_running_loop().run_in_executor(self._executor, _burn_until, deadline)

    async def handle_task(self, request: web.Request) -> web.Response:
        """``POST /task``: queue FIFO for a worker, hold it, report the timestamps.

        When the client disconnects, aiohttp cancels this handler (``serve`` enables
        handler cancellation): a queued task leaves the queue and a task in service frees
        its worker at once, so abandoned work costs no capacity and the counts stay exact.
        """
        body = await read_json_object(request, TASK_FIELDS)
        if body["size"] > self.max_size:
            timeout = "" if self.task_timeout is None else \
                f", a service time within the task timeout of {self.task_timeout:g} model s"
            raise client_error(
                web.HTTPBadRequest,
                f"size: expected at most {self.max_size:g} "
                f"model seconds (a hold of at most {self.max_hold_s:g} s wall{timeout}), "
                f"found {body['size']:g}")
        loop = asyncio.get_running_loop()
        server_arrival = time.time()
        self._arrivals.append(time.monotonic())
        queue_at_arrival = self.pool.queue
        ticket = next(self._tickets)
        self._waiting[ticket] = body["size"] / self.speed
        try:
            worker = await self.pool.acquire()
        finally:
            del self._waiting[ticket]
        try:
            start = time.time()
            deadline = loop.time() + self.hold_s(body["size"])
            self._deadlines[worker] = deadline
            await self._hold(deadline)
            end = time.time()
        finally:
            self._deadlines.pop(worker, None)
            self.pool.release(worker)
        self.completed += 1
        return web.json_response(
            {
                "task_id": body["task_id"],
                "server_arrival": server_arrival,
                "start": start,
                "end": end,
                "queue_at_arrival": queue_at_arrival,
                "service_wall_s": end - start,
                "worker": worker,
            }
        )

    async def handle_state(self, request: web.Request) -> web.Response:
        """``GET /state``; with ``?detail=1`` also the :meth:`backlog` (for an oracle)."""
        detail = request.query.get("detail", "0")
        if detail not in ("0", "1"):
            raise client_error(web.HTTPBadRequest, f"detail: expected 0 or 1, found {detail!r}")
        body: dict[str, object] = dict(self.state())
        if detail == "1":
            body.update(self.backlog(asyncio.get_running_loop().time()))
        return web.json_response(body)

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``: the server is up and how many workers it has."""
        return web.json_response({"ok": True, "c": self.pool.c})

    async def handle_reset(self, request: web.Request) -> web.Response:
        """``POST /reset``: clear counters and the rate window; 409 while tasks are in flight.

        An optional ``{"since": epoch seconds}`` body dates the start of the new rate
        window: the instant the next run's trace starts (model time 0). Without it the
        window starts now. Dating it to the trace start keeps the early arrival-rate
        estimates from counting the idle lead-in before the first task as observed time,
        which is what the simulator does too.
        """
        since = time.monotonic()
        if request.body_exists:
            body = await read_json_object(request, {"since": positive_number_field(False)})
            if "since" in body:
                ahead = body["since"] - time.time()
                if abs(ahead) > MAX_SINCE_SKEW_S:
                    raise client_error(
                        web.HTTPBadRequest,
                        f"since: expected an epoch within {MAX_SINCE_SKEW_S:g} s of now, "
                        f"found {body['since']!r}")
                since += ahead
        if self.pool.queue or self.pool.busy:
            reason = (
                f"cannot reset while tasks are in flight: "
                f"queue={self.pool.queue}, busy={self.pool.busy}"
            )
            raise client_error(web.HTTPConflict, reason)
        self.completed = 0
        self._arrivals.clear()
        self._since = since
        return web.json_response({"ok": True})

    async def handle_workers(self, request: web.Request) -> web.Response:
        """``POST /admin/workers {"active": n}``: let only ``n`` workers (0..c) serve."""
        fields = {"active": int_field(0, self.pool.c)}
        body = await read_json_object(request, fields)
        self.pool.set_active(body["active"])
        return web.json_response({"active": self.pool.active, "c": self.pool.c})

    async def close(self, app: web.Application) -> None:
        """Stop the compute threads when the app shuts down (cleanup hook)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def make_app(
    workers: int,
    speed: float,
    time_scale: float,
    mu: float,
    window_s: float = 10.0,
    model: str = "hold",
    max_hold_s: float = MAX_HOLD_S,
    task_timeout: float | None = None,
) -> web.Application:
    """Build the tier server application.

    ``workers`` (C) >= 1; ``speed`` (S) > 0 scales service demands; ``time_scale`` (K)
    >= 1 compresses model time; ``mu`` (MU) > 0 is the nominal per-worker service rate
    reported in ``/state``; ``window_s`` > 0 is the arrival-rate window (wall seconds);
    ``model`` is ``hold`` or ``compute``; a task whose hold would exceed ``max_hold_s``
    wall seconds, or whose service time ``size / speed`` would exceed ``task_timeout``
    model seconds (the run's, when given), is refused (400 naming ``size``). Raises
    :class:`ValueError` on a bad value.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, found {workers}")
    for name, value in (("speed", speed), ("mu", mu), ("window_s", window_s),
                        ("max_hold_s", max_hold_s)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, found {value}")
    if task_timeout is not None and not task_timeout > 0:
        raise ValueError(f"task_timeout must be > 0, found {task_timeout}")
    if not time_scale >= 1:
        raise ValueError(f"time_scale must be >= 1, found {time_scale}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, found {model!r}")
    tier = TierServer(workers, speed, time_scale, mu, window_s, model, max_hold_s, task_timeout)
    app = make_base_app()
    add_api(app, "Tier server", "One compute tier: C workers behind one FIFO queue "
            "(docs/services.md).", [
        Route("POST", "/task", tier.handle_task, "serve one task",
              op(request=task_body(tier.max_size), errors=(400, 413)), auth=PUBLIC),
        Route("GET", "/state", tier.handle_state,
              "what a client may observe (?detail=1 adds the backlog, for an oracle)",
              {**op(errors=(400,)), "parameters": [DETAIL_PARAMETER]}),
        Route("GET", "/health", tier.handle_health, "liveness and the number of workers", op()),
        Route("POST", "/reset", tier.handle_reset, "clear the counters between repetitions",
              {**op(request=RESET_BODY, errors=(400, 409, 413)),
               "requestBody": {"required": False,
                               "content": {"application/json": {"schema": RESET_BODY}}}}),
        Route("POST", "/admin/workers", tier.handle_workers,
              "let only n workers serve (fault events)",
              op(request=workers_body(workers), errors=(400, 413))),
    ])
    app.on_cleanup.append(tier.close)
    return app


def app_from_params(params: TierServerParams, address: Address) -> web.Application:
    """The tier server of a command line (a window in model seconds replaces the wall
    window)."""
    window = params.window_s if params.window_model_s is None \
        else params.window_model_s / params.time_scale
    return make_app(params.workers, params.speed, params.time_scale, params.mu,
                    window, params.model, params.max_hold_s, params.task_timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the tier server of the command line until SIGTERM/SIGINT."""
    return run_service(TierServerParams, app_from_params, argv, prog="python -m nodes.offloading.tier_server",
                       description=__doc__.splitlines()[0], port=8000, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
