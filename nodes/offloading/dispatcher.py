"""The dispatcher: replays one client's share of a trace against the tier servers.

It runs inside each emulated client host as ``python -m nodes.offloading.dispatcher CONFIG.json``
(or in-process as :func:`run_dispatch`). For every task of the trace whose ``client`` is
this client it waits until the task's arrival instant, shows the placement policy what
this client knows about every target (a :class:`~nodes.offloading.policies.base.View`), sends the
task to the chosen tier server and records one trace row (``testbed/analysis/traces.py`` holds
the schema, ``docs/traces.md`` its reference).

What the client knows comes from a background poller per target: every
``poll_interval_s`` it GETs ``/state``, keeps the latest answer with the instant it
describes, and turns the poll round trip into an EWMA estimate of the communication
delay (``delay_s``). Views are built from that cache, never from a fresh request, so a
decision costs no network time and uses information exactly as stale as a real client's.
The one exception is a policy with ``needs_true_state`` (the oracle): right before each
of its decisions every target is asked, concurrently, for ``/state?detail=1``, and the
view carries those fresh states with their exact backlog (``state_age_s`` is then the
age of that answer). A target whose fresh state cannot be fetched is shown from the
cache, without backlog. The wall time that fetch waited is the row's ``state_fetch_s``
(null for every other policy): it delays the send, so it lies between ``arrival_wall``
and ``dispatch_wall`` and outside ``latency_s``; reported beside the latency, it lets a
reader compare the oracle with policies that pay no such wait (the simulator's true
state is free).

Timing. All clients share ``start_at`` (wall epoch seconds); task ``i`` is sent at
``start_at + arrival_i / time_scale`` on the event loop's monotonic clock, each task in
its own asyncio task so a slow one never delays the next send. Latency is split with the
server's timestamps: ``network = (response - dispatch) - (end - server_arrival)`` stays
physical while wait and service are scaled back to model time, so
``latency_s = network + (wait + service) * time_scale``. These parts cover dispatch to
response; the (small) lag between the scheduled arrival and the dispatch is visible as
``dispatch_wall - arrival_wall`` (which includes ``state_fetch_s`` when there is one).

Failures are data: a refused connection, an HTTP error or a timeout gives a row with
``outcome`` ``"error"`` or ``"timeout"`` and the reason in ``error`` (the latency
columns stay null; ``response_wall`` is when the failure was seen). A timed-out request
is abandoned by closing its connection, which makes the tier server drop the task. A
failing *policy* is a bug, not data: it stops the run with :class:`TestbedError`.

Config keys (JSON object): ``run`` (str), ``client`` (str), ``policy`` (str),
``policy_seed`` (int), ``repetition`` (int), ``trace`` (folder of ``trace.csv`` and
``trace.json``), ``targets`` (``[{"name", "tier", "url"}]``), ``poll_interval_s`` (> 0,
wall), ``time_scale`` (>= 1), ``start_at`` (wall epoch or null for "now"; a past
instant means "now" and is logged), ``out`` (JSON-lines path, one row per task, written
as tasks complete), ``timeout_s`` (> 0, model time), optional ``max_inflight`` (default
10000; when reached, sends wait), ``ready_timeout_s`` (default 30, wall), and
``policy_name`` / ``policy_params`` (the registered policy and the parameters a scenario's
entry gives it; ``policy`` is then its label, written in the rows; default: ``policy``
itself without parameters).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

from nodes.common import configure_logging, sleep_until
from nodes.http import error_text
from nodes.offloading.policies import make_policy
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
from testbed.checks import is_int, is_number, is_text
from testbed.errors import EmulationError, TestbedError
from testbed.latency import completed_columns
from workloads.trace import Task, read_trace

DEFAULT_MAX_INFLIGHT = 10_000
DEFAULT_READY_TIMEOUT_S = 30.0
#: Pause between readiness attempts on a target that is not answering yet.
READY_RETRY_S = 0.05

_log = logging.getLogger("nodes.offloading.dispatcher")

_STATE_FIELDS = ("queue", "busy", "active", "c", "arrival_rate", "service_rate", "time")
_TASK_RESPONSE_FIELDS = ("task_id", "server_arrival", "start", "end", "queue_at_arrival")
_DETAIL_FIELDS = ("in_service_remaining", "queued")

#: A state answer and the wall instant it describes.
Snapshot = tuple[dict[str, Any], float]


# -------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Target:
    """A tier server this client may send tasks to."""

    name: str
    tier: str
    url: str  # base URL without a trailing slash, e.g. http://10.0.0.5:8000


@dataclass(frozen=True)
class DispatchConfig:
    """A validated dispatcher configuration (see the module docstring for the keys)."""

    run: str
    client: str
    policy: str
    policy_seed: int
    repetition: int
    trace: Path
    targets: tuple[Target, ...]
    poll_interval_s: float
    time_scale: float
    start_at: float | None
    out: Path
    timeout_s: float
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    #: the registered policy ``policy`` (the label in the rows) stands for, if it differs
    policy_name: str | None = None
    policy_params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, raw: Any, source: str = "dispatch config") -> DispatchConfig:
        """Validate ``raw`` (decoded JSON); raise :class:`TestbedError` naming the bad key."""

        def fail(path: str, expected: str, found: Any) -> TestbedError:
            return TestbedError(f"{source}: {path}: expected {expected}, found {found!r}")

        if not isinstance(raw, Mapping):
            raise fail("<top level>", "a JSON object", raw)
        checks: dict[str, tuple[str, Callable[[Any], bool], bool]] = {
            "run": ("a non-empty string", _is_text, True),
            "client": ("a non-empty string", _is_text, True),
            "policy": ("a non-empty string", _is_text, True),
            "policy_seed": ("an integer", is_int, True),
            "repetition": ("an integer >= 0", lambda v: is_int(v) and v >= 0, True),
            "trace": ("a folder path", _is_text, True),
            "targets": ("a non-empty list", lambda v: isinstance(v, list) and v != [], True),
            "poll_interval_s": ("a number > 0", _is_positive, True),
            "time_scale": ("a number >= 1", lambda v: _is_number(v) and v >= 1, True),
            "start_at": ("a wall epoch number or null", lambda v: v is None or _is_number(v), True),
            "out": ("a file path", _is_text, True),
            "timeout_s": ("a number > 0", _is_positive, True),
            "max_inflight": ("an integer >= 1", lambda v: is_int(v) and v >= 1, False),
            "ready_timeout_s": ("a number > 0", _is_positive, False),
            "policy_name": ("a non-empty string", _is_text, False),
            "policy_params": ("a JSON object", lambda v: isinstance(v, Mapping), False),
        }
        for key in raw:
            if key not in checks:
                raise fail(key, f"one of the keys {', '.join(checks)}", "an unknown key")
        for key, (expected, accepts, required) in checks.items():
            if key not in raw:
                if required:
                    raise fail(key, expected, "<missing>")
            elif not accepts(raw[key]):
                raise fail(key, expected, raw[key])
        targets = []
        for index, item in enumerate(raw["targets"]):
            path = f"targets[{index}]"
            if not isinstance(item, Mapping) or set(item) != {"name", "tier", "url"}:
                raise fail(path, 'an object with exactly "name", "tier" and "url"', item)
            for key in ("name", "tier", "url"):
                if not _is_text(item[key]):
                    raise fail(f"{path}.{key}", "a non-empty string", item[key])
            if not item["url"].startswith(("http://", "https://")):
                raise fail(f"{path}.url", "an http:// URL", item["url"])
            if any(t.name == item["name"] for t in targets):
                raise fail(f"{path}.name", "a name no other target has", item["name"])
            targets.append(Target(item["name"], item["tier"], item["url"].rstrip("/")))
        optional = {k: raw[k] for k in ("max_inflight", "ready_timeout_s", "policy_name",
                                        "policy_params") if k in raw}
        return cls(
            run=raw["run"],
            client=raw["client"],
            policy=raw["policy"],
            policy_seed=raw["policy_seed"],
            repetition=raw["repetition"],
            trace=Path(raw["trace"]),
            targets=tuple(targets),
            poll_interval_s=float(raw["poll_interval_s"]),
            time_scale=float(raw["time_scale"]),
            start_at=None if raw["start_at"] is None else float(raw["start_at"]),
            out=Path(raw["out"]),
            timeout_s=float(raw["timeout_s"]),
            **optional,
        )


def _is_text(value: Any) -> bool:
    return is_text(value, nonempty=True)


def _is_number(value: Any) -> bool:
    return is_number(value, finite=True)


def _is_positive(value: Any) -> bool:
    return is_number(value, finite=True) and value > 0


# ------------------------------------------------------------------ target monitor


class _BadAnswer(Exception):
    """A target answered, but not with what the protocol promises."""


def _check_fields(body: Any, fields: Sequence[str], what: str) -> dict[str, Any]:
    """Return ``body`` if it is an object with numeric ``fields``, else raise _BadAnswer."""
    if not isinstance(body, dict):
        raise _BadAnswer(f"{what}: expected a JSON object, found {body!r:.80}")
    for name in fields:
        if not _is_number(body.get(name)):
            raise _BadAnswer(f"{what}: expected a number in {name!r}, found {body.get(name)!r}")
    return body


class TargetMonitor:
    """One target's connection pool and what this client last observed about it."""

    def __init__(self, target: Target, session: aiohttp.ClientSession) -> None:
        self.target = target
        self.session = session
        self.state: dict[str, Any] = {}
        self.state_wall = 0.0  # wall instant the cached state describes
        self.delay_s = 0.0  # EWMA of the /state round trip, physical seconds
        self._polled = False
        self._failing = False

    async def check_health(self, timeout: float) -> None:
        """GET /health once; raise if the target is not up."""
        limit = aiohttp.ClientTimeout(total=timeout)
        async with self.session.get(f"{self.target.url}/health", timeout=limit) as resp:
            body = await resp.json(content_type=None)
        if resp.status != 200 or not isinstance(body, dict) or body.get("ok") is not True:
            raise _BadAnswer(f"/health answered HTTP {resp.status}: {body!r:.80}")

    async def _get_state(self, timeout: float, detail: bool) -> tuple[Snapshot, float]:
        """GET /state (with ``?detail=1`` if ``detail``); return the snapshot and the RTT.

        The state's instant is the server's ``time`` clamped into the request's
        send/receive interval: exact when hosts share a clock (as emulated hosts do),
        bounded by the round trip otherwise.
        """
        loop = asyncio.get_running_loop()
        limit = aiohttp.ClientTimeout(total=timeout)
        path = "/state?detail=1" if detail else "/state"
        sent_wall, sent = time.time(), loop.time()
        async with self.session.get(f"{self.target.url}{path}", timeout=limit) as resp:
            body = await resp.json(content_type=None)
        rtt = loop.time() - sent
        if resp.status != 200:
            raise _BadAnswer(f"{path} answered HTTP {resp.status}: {body!r:.80}")
        _check_fields(body, _STATE_FIELDS, path)
        if detail:
            for name in _DETAIL_FIELDS:
                values = body.get(name)
                if not isinstance(values, list) or not all(
                    _is_number(v) and v >= 0 for v in values
                ):
                    raise _BadAnswer(f"{path}: expected a list of numbers >= 0 in {name!r}")
        state_wall = min(max(float(body["time"]), sent_wall), sent_wall + rtt)
        return (body, state_wall), rtt

    async def true_state(self, timeout: float = POLL_TIMEOUT_S) -> Snapshot:
        """GET /state?detail=1 once, for a ``needs_true_state`` decision (cache untouched)."""
        snapshot, _rtt = await self._get_state(timeout, detail=True)
        return snapshot

    async def poll(self, timeout: float = POLL_TIMEOUT_S) -> None:
        """GET /state once and update the cached state and the delay estimate."""
        (self.state, self.state_wall), rtt = await self._get_state(timeout, detail=False)
        if self._polled:
            self.delay_s = DELAY_EWMA_ALPHA * rtt + (1 - DELAY_EWMA_ALPHA) * self.delay_s
        else:
            self.delay_s, self._polled = rtt, True

    async def poll_forever(self, interval: float) -> None:
        """Poll every ``interval`` seconds (on a fixed schedule) until cancelled.

        A failed poll keeps the previous state, whose age then grows in every view;
        the first failure of a streak and the recovery are logged. Plain
        :func:`asyncio.sleep` suffices here: a poll a millisecond late only ages the
        state by that much (visible in ``age_s``), and spinning would cost CPU.
        """
        loop = asyncio.get_running_loop()
        next_poll = loop.time()
        while True:
            next_poll = max(next_poll + interval, loop.time())
            await asyncio.sleep(next_poll - loop.time())
            try:
                await self.poll()
            except (aiohttp.ClientError, TimeoutError, ValueError, _BadAnswer) as exc:
                if not self._failing:
                    _log.warning("polling %s failed: %s", self.target.name, _describe(exc))
                self._failing = True
            else:
                if self._failing:
                    _log.info("polling %s works again", self.target.name)
                self._failing = False

    def view_state(self, now_wall: float, fresh: Snapshot | None = None) -> TargetState:
        """The target as a policy sees it at wall instant ``now_wall``.

        ``fresh`` (a ``/state?detail=1`` snapshot) replaces the cached state and adds
        the backlog; ``speed`` is filled when the server reports it.
        """
        s, state_wall = fresh if fresh is not None else (self.state, self.state_wall)
        backlog = None
        if fresh is not None:
            backlog = Backlog(
                tuple(float(v) for v in s["in_service_remaining"]),
                tuple(float(v) for v in s["queued"]),
            )
        speed = s.get("speed")
        return TargetState(
            name=self.target.name,
            tier=self.target.tier,
            queue=int(s["queue"]),
            busy=int(s["busy"]),
            active=int(s["active"]),
            c=int(s["c"]),
            service_rate=float(s["service_rate"]),
            arrival_rate=float(s["arrival_rate"]),
            delay_s=self.delay_s,
            age_s=max(0.0, now_wall - state_wall),
            speed=float(speed) if _is_positive(speed) else None,
            backlog=backlog,
        )


def _describe(exc: BaseException) -> str:
    """``Type: message`` for a row's ``error`` column or a log line."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def wait_until_ready(monitors: Sequence[TargetMonitor], timeout: float) -> None:
    """Wait until every target answered ``/health`` and one ``/state``.

    Raises :class:`EmulationError` naming every target still unreachable after
    ``timeout`` seconds, with the last error each gave.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    async def ready(monitor: TargetMonitor) -> str | None:
        while True:
            try:
                await monitor.check_health(max(deadline - loop.time(), 0.001))
                await monitor.poll(max(deadline - loop.time(), 0.001))
            except (aiohttp.ClientError, TimeoutError, ValueError, _BadAnswer) as exc:
                if loop.time() + READY_RETRY_S >= deadline:
                    t = monitor.target
                    return f"{t.name} ({t.url}): {_describe(exc)}"
                await asyncio.sleep(READY_RETRY_S)
            else:
                return None

    failures = [f for f in await asyncio.gather(*(ready(m) for m in monitors)) if f]
    if failures:
        raise EmulationError(f"targets not ready within {timeout:g} s: " + "; ".join(failures))


# ----------------------------------------------------------------------- dispatcher


class Dispatcher:
    """One client's replay: scheduling, placement, requests and row recording."""

    def __init__(
        self,
        config: DispatchConfig,
        policy: Policy,
        monitors: Mapping[str, TargetMonitor],
        out: IO[str],
    ) -> None:
        self.config = config
        self.policy = policy
        self.monitors = monitors
        self.out = out
        self.rows: list[dict[str, Any]] = []
        self.start_wall = 0.0
        self._inflight = asyncio.Semaphore(config.max_inflight)
        self._warned_inflight = False
        self._wall_to_loop = 0.0  # loop.time() - time.time(), fixed at the start

    def _model(self, wall: float) -> float:
        """Model time (seconds since the start of the trace) of a wall instant."""
        return (wall - self.start_wall) * self.config.time_scale

    async def replay(self, tasks: Sequence[Task]) -> None:
        """Send every task at its arrival instant; return when all have finished."""
        loop = asyncio.get_running_loop()
        now_wall = time.time()
        self._wall_to_loop = loop.time() - now_wall
        wanted = self.config.start_at
        if wanted is not None and wanted < now_wall:
            _log.warning(
                "start_at %.6f is %.3f s in the past; starting now at %.6f",
                wanted,
                now_wall - wanted,
                now_wall,
            )
        self.start_wall = now_wall if wanted is None or wanted < now_wall else wanted
        try:
            async with asyncio.TaskGroup() as group:
                for task in tasks:
                    arrival_wall = self.start_wall + task.arrival / self.config.time_scale
                    await sleep_until(arrival_wall + self._wall_to_loop)
                    if self._inflight.locked() and not self._warned_inflight:
                        _log.warning(
                            "max_inflight %d reached; sends now wait", self.config.max_inflight
                        )
                        self._warned_inflight = True
                    await self._inflight.acquire()
                    group.create_task(self._place(task, arrival_wall))
        except ExceptionGroup as group_error:
            for exc in group_error.exceptions:
                if isinstance(exc, TestbedError):
                    raise exc from None
            raise

    async def _place(self, task: Task, arrival_wall: float) -> None:
        """Decide, send and record one task (holding one ``max_inflight`` slot)."""
        try:
            row = await self._send(task, arrival_wall)
            self._record(row)
        finally:
            self._inflight.release()

    async def _true_states(self) -> dict[str, Snapshot]:
        """Fresh ``/state?detail=1`` of every target, fetched concurrently.

        A target that fails is left out (and logged): its view comes from the cache.
        """
        names = list(self.monitors)
        answers = await asyncio.gather(
            *(self.monitors[name].true_state() for name in names), return_exceptions=True
        )
        fresh: dict[str, Snapshot] = {}
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, (aiohttp.ClientError, TimeoutError, ValueError, _BadAnswer)):
                _log.warning("true state of %s unavailable: %s", name, _describe(answer))
            elif isinstance(answer, BaseException):
                raise answer
            else:
                fresh[name] = answer
        return fresh

    def _decide(
        self, task: Task, fresh: Mapping[str, Snapshot]
    ) -> tuple[TargetMonitor, dict[str, Any]]:
        """Ask the policy; return the chosen target and the decision's row columns.

        ``fresh`` holds the snapshots fetched for this decision (empty unless the policy
        needs the true state).
        """
        cfg = self.config
        now_wall = time.time()
        states = {
            name: m.view_state(now_wall, fresh.get(name)) for name, m in self.monitors.items()
        }
        view = View(now=self._model(now_wall), client=cfg.client, targets=states)
        size = task.size if self.policy.sees_sizes else None
        info = TaskInfo(task.task_id, task.client, task.arrival, size)
        began = time.perf_counter_ns()
        try:
            decision = self.policy.choose(info, view)
        except Exception as exc:
            raise TestbedError(
                f"policy {cfg.policy!r} failed on task {task.task_id}: {_describe(exc)}"
            ) from exc
        decision_us = (time.perf_counter_ns() - began) / 1000.0
        if decision.target not in self.monitors:
            raise TestbedError(
                f"policy {cfg.policy!r} chose unknown target {decision.target!r} for task "
                f"{task.task_id}; targets: {', '.join(self.monitors)}"
            )
        return self.monitors[decision.target], {
            "estimate_s": decision.estimate_s,
            "state_age_s": states[decision.target].age_s,
            "decision_us": decision_us,
        }

    async def _send(self, task: Task, arrival_wall: float) -> dict[str, Any]:
        """Place ``task``, POST it and return its complete trace row."""
        cfg = self.config
        fresh: dict[str, Snapshot] = {}
        state_fetch_s = None
        if self.policy.needs_true_state:
            fetch_began = time.perf_counter()
            fresh = await self._true_states()
            state_fetch_s = time.perf_counter() - fetch_began
        monitor, decision_columns = self._decide(task, fresh)
        dispatch_wall = time.time()
        row: dict[str, Any] = {
            "run": cfg.run,
            "policy": cfg.policy,
            "repetition": cfg.repetition,
            "kind": "task",
            "task_id": task.task_id,
            "client": cfg.client,
            "target": monitor.target.name,
            "tier": monitor.target.tier,
            "size": task.size,
            "cls": task.cls,
            "arrival_model": task.arrival,
            "dispatch_model": self._model(dispatch_wall),
            "arrival_wall": arrival_wall,
            "dispatch_wall": dispatch_wall,
            **decision_columns,
            "state_fetch_s": state_fetch_s,
            "outcome": "ok",
            "error": None,
        }
        timeout_wall = cfg.timeout_s / cfg.time_scale
        payload = {"task_id": task.task_id, "size": task.size, "client": cfg.client}
        try:
            async with asyncio.timeout(timeout_wall):
                async with monitor.session.post(f"{monitor.target.url}/task", json=payload) as resp:
                    status, text = resp.status, await resp.text()
            response_wall = time.time()
            if status != 200:
                return self._failed(
                    row, "error", f"HTTP {status}: {error_text(text)}", response_wall
                )
            body = _check_fields(json.loads(text), _TASK_RESPONSE_FIELDS, "/task")
        except TimeoutError:
            return self._failed(
                row,
                "timeout",
                (f"no response within {timeout_wall:g} s wall (timeout_s={cfg.timeout_s:g} model)"),
            )
        except (aiohttp.ClientError, OSError, ValueError, _BadAnswer) as exc:
            return self._failed(row, "error", _describe(exc))
        if body["task_id"] != task.task_id:
            return self._failed(
                row, "error", f"/task answered for task {body['task_id']}", response_wall
            )
        row.update(
            completed_columns(row["dispatch_model"], dispatch_wall, response_wall,
                              body["server_arrival"], body["start"], body["end"],
                              cfg.time_scale),
            queue_at_arrival=int(body["queue_at_arrival"]),
        )
        self._observe(row, ok=True)
        return row

    def _failed(
        self, row: dict[str, Any], outcome: str, error: str, seen_wall: float | None = None
    ) -> dict[str, Any]:
        """Complete ``row`` as a failure (``response_wall`` = when it was seen)."""
        row.update(outcome=outcome, error=error, response_wall=seen_wall or time.time())
        self._observe(row, ok=False)
        return row

    def _observe(self, row: dict[str, Any], ok: bool) -> None:
        """Report the task's outcome to the policy (NaN parts when it failed)."""
        nan = math.nan
        outcome = Outcome(
            task_id=row["task_id"],
            target=row["target"],
            latency_s=row["latency_s"] if ok else nan,
            wait_s=row["wait_s"] if ok else nan,
            service_s=row["service_s"] if ok else nan,
            network_s=row["network_s"] if ok else nan,
            estimate_s=row["estimate_s"],
            ok=ok,
        )
        try:
            self.policy.observe(outcome)
        except Exception as exc:
            raise TestbedError(
                f"policy {self.config.policy!r} failed observing task {row['task_id']}: "
                f"{_describe(exc)}"
            ) from exc

    def _record(self, row: dict[str, Any]) -> None:
        """Keep ``row`` and append it to the output file at once."""
        self.rows.append(row)
        self.out.write(json.dumps(row, allow_nan=False) + "\n")
        self.out.flush()


async def run_dispatch(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Replay this client's tasks as ``config`` says; return the rows in trace order.

    Raises :class:`TestbedError` for a bad config, trace or policy, and
    :class:`EmulationError` when a target is not ready within ``ready_timeout_s``.
    Rows are also written to ``config["out"]`` as they complete.
    """
    cfg = DispatchConfig.from_mapping(config)
    tasks = [t for t in read_trace(cfg.trace)[0] if t.client == cfg.client]
    policy = make_policy(cfg.policy_name or cfg.policy, cfg.policy_seed, **cfg.policy_params)
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    sessions = {
        t.name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) for t in cfg.targets
    }
    pollers: list[asyncio.Task[None]] = []
    try:
        monitors = {t.name: TargetMonitor(t, sessions[t.name]) for t in cfg.targets}
        await wait_until_ready(list(monitors.values()), cfg.ready_timeout_s)
        pollers = [
            asyncio.create_task(m.poll_forever(cfg.poll_interval_s)) for m in monitors.values()
        ]
        with cfg.out.open("w", encoding="utf-8") as out:
            dispatcher = Dispatcher(cfg, policy, monitors, out)
            await dispatcher.replay(tasks)
    finally:
        for poller in pollers:
            poller.cancel()
        await asyncio.gather(*pollers, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in sessions.values()))
    order = {t.task_id: i for i, t in enumerate(tasks)}
    return sorted(dispatcher.rows, key=lambda r: order[r["task_id"]])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nodes.offloading.dispatcher CONFIG.json``: run, log a one-line summary, exit 0.

    Exits 1 (with the reason on stderr) when the run could not be carried out; failed
    tasks are data and do not change the exit status.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    configure_logging()
    if len(args) != 1:
        _log.error("usage: python -m nodes.offloading.dispatcher CONFIG.json")
        return 2
    try:
        try:
            config = json.loads(Path(args[0]).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TestbedError(f"{args[0]}: cannot read the dispatch config: {exc}") from exc
        rows = asyncio.run(run_dispatch(config))
    except TestbedError as exc:
        _log.error("%s", exc)
        return 1
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("ok", "error", "timeout")}
    _log.info(
        "client %s: %d tasks, %d ok, %d errors, %d timeouts",
        config["client"],
        len(rows),
        counts["ok"],
        counts["error"],
        counts["timeout"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
