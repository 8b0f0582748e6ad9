"""The Application Manager: applications, their replicas, discovery and auto-scaling.

A deployment names the program (module or image), the resources of one replica, the
locations where users are expected and whether the application needs storage; the
manager asks the Spinner for at least ``min_replicas`` (3) tasks near those locations.
Every ``poll_s`` it collects each task's status, load and utilisation from the Spinner,
removes and replaces failed replicas, tops up to the minimum, and applies
:func:`plan_scaling` (more replicas where users concentrate or load rises, fewer down to
the minimum when demand falls). A service query gets the candidate list of
:func:`nodes.armada.selection.select_candidates` (the paper's Algorithm 1) and records the
user's location as soft state for auto-scaling, forgotten after ``user_ttl_s``.

Run it as ``python -m nodes.armada.app_manager --host H --port P --spinner URL
[--cargo-manager URL] [...]``; the contract and every threshold is in ``docs/armada.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from nodes.armada import openapi as doc
from nodes.armada.configs import MIN_REPLICAS, AppManagerParams
from nodes.armada.fields import (
    MODULE_RE,
    NAME_RE,
    RUNTIMES,
    args_field,
    bool_field,
    enum_field,
    lat_field,
    locations_field,
    lon_field,
    pattern_field,
    runtime_needs,
    tags_field,
    task_args_refusal,
)
from nodes.armada.scaling import ReplicaState, ScalingPolicy, plan_scaling
from nodes.armada.selection import (
    DEFAULT_OVERLOAD,
    TOPN,
    answer_candidates,
    replica_location,
)
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
    str_field,
)
from nodes.http import PeerError, call_json, error_of
from nodes.openapi import add_api
from nodes.secret import peer_session

_log = logging.getLogger("nodes.armada.app_manager")

DEPLOY_FIELDS = {
    "name": pattern_field(NAME_RE, "name of 1-40 characters a-z, 0-9, '-'"),
    "runtime": enum_field(RUNTIMES, required=False),
    "module": pattern_field(MODULE_RE, "dotted Python module name", required=False),
    "image": str_field(required=False),
    "args": args_field(),
    "cpu": positive_number_field(),
    "memory_mb": int_field(1),
    "locations": locations_field(),
    "need_storage": bool_field(),
    "tags": tags_field(),
    "min_replicas": int_field(MIN_REPLICAS, 100, required=False),
}
QUERY_FIELDS = {
    "app": str_field(),
    "lat": lat_field(),
    "lon": lon_field(),
    "tags": tags_field(),
    "user": str_field(required=False),
}
ACTIVE = ("pending", "placing", "starting", "running")  # replica states that count
ENDED = ("failed", "exited")


# --------------------------------------------------------------------- the service


@dataclass
class Application:
    """One deployed application and what the manager knows of its replicas."""

    spec: dict[str, Any]
    storage: Any = None
    created_at: float = field(default_factory=time.time)
    replicas: dict[str, dict[str, Any]] = field(default_factory=dict)  # Spinner task views
    order: dict[str, int] = field(default_factory=dict)
    next_index: int = 1
    failures: int = 0
    users: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # lat, lon, t
    scaling: list[dict[str, Any]] = field(default_factory=list)
    last_scaled: float = -math.inf  # monotonic
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one change at a time

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def min_replicas(self) -> int:
        return self.spec["min_replicas"]

    def active(self) -> list[dict[str, Any]]:
        return [r for r in self.replicas.values() if r["status"] in ACTIVE]

    def running(self) -> list[dict[str, Any]]:
        return [r for r in self.replicas.values() if r["status"] == "running"]

    @property
    def state(self) -> str:
        if self.failures > 2 * self.min_replicas:
            return "failed"
        return "ready" if len(self.running()) >= self.min_replicas else "degraded"

    def first_running_at(self) -> float | None:
        ready = [r["ready_at"] for r in self.replicas.values() if r.get("ready_at")]
        return min(ready) if ready else None


class AppManager:
    """State, Spinner calls, polling, scaling and HTTP handlers."""

    def __init__(
        self,
        spinner: str,
        cargo_manager: str | None = None,
        poll_s: float = 1.0,
        policy: ScalingPolicy | None = None,
        overload: float = DEFAULT_OVERLOAD,
        topn: int = TOPN,
        cooldown_s: float = 5.0,
        user_ttl_s: float = 20.0,
    ) -> None:
        self.spinner = spinner.rstrip("/")
        self.cargo_manager = cargo_manager.rstrip("/") if cargo_manager else None
        self.poll_s = poll_s
        self.policy = policy or ScalingPolicy()
        self.overload = overload
        self.topn = topn
        self.cooldown_s = cooldown_s
        self.user_ttl_s = user_ttl_s
        self.apps: dict[str, Application] = {}
        self._session: aiohttp.ClientSession | None = None
        self._poller: asyncio.Task[None] | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """Client session for the Spinner and the Cargo manager (while the app runs)."""
        assert self._session is not None, "the Application Manager app is not running"
        return self._session

    # ------------------------------------------------------------ Spinner calls

    async def add_replica(self, app: Application, lat: float, lon: float) -> str | None:
        """Ask the Spinner for one more replica near ``(lat, lon)``; the refusal or None."""
        spec = app.spec
        task_id = f"{app.name}-{app.next_index}"
        body = {
            "task_id": task_id, "app": app.name, "runtime": spec["runtime"],
            "args": spec.get("args", {}), "cpu": spec["cpu"], "memory_mb": spec["memory_mb"],
            "lat": lat, "lon": lon, "tags": spec.get("tags", []),
        }
        body.update({k: spec[k] for k in ("module", "image") if k in spec})
        try:
            status, answer = await call_json(self.session, "POST", f"{self.spinner}/tasks", body)
        except PeerError as exc:
            return f"spinner unreachable: {exc}"
        if status != 201:
            return error_of(status, answer)
        app.next_index += 1
        app.order[task_id] = app.next_index
        app.replicas[task_id] = answer
        return None

    async def remove_replica(self, app: Application, task_id: str) -> None:
        """Ask the Spinner to stop a replica; forget it either way."""
        app.replicas.pop(task_id, None)
        with contextlib.suppress(PeerError):
            await call_json(self.session, "DELETE", f"{self.spinner}/tasks/{task_id}")

    async def refresh(self, app: Application) -> None:
        """Copy the Spinner's view of the application's tasks."""
        status, answer = await call_json(
            self.session, "GET", f"{self.spinner}/tasks?app={app.name}"
        )
        if status != 200 or not isinstance(answer, dict):
            return
        known = {t["task_id"]: t for t in answer.get("tasks", [])}
        app.replicas = {tid: known[tid] for tid in app.replicas if tid in known}

    # ----------------------------------------------------------------- polling

    async def maintain(self, app: Application) -> None:
        """One poll of ``app``: refresh, replace failures, top up, scale.

        Runs under the application's lock, so a deployment or removal in progress is
        never half-seen; an application removed meanwhile is left alone.
        """
        if self.apps.get(app.name) is not app:
            return
        await self.refresh(app)
        for task_id, task in list(app.replicas.items()):
            if task["status"] in ENDED:
                app.failures += 1
                _log.info("replica %s %s: %s", task_id, task["status"], task.get("reason"))
                await self.remove_replica(app, task_id)
        if app.state == "failed":
            return
        locations = app.spec["locations"]
        while len(app.active()) < app.min_replicas:
            where = locations[(app.next_index - 1) % len(locations)]
            if await self.add_replica(app, where["lat"], where["lon"]) is not None:
                break
        await self.autoscale(app)

    def active_users(self, app: Application) -> list[tuple[float, float]]:
        """Users seen within ``user_ttl_s`` (older ones are forgotten)."""
        horizon = time.time() - self.user_ttl_s
        app.users = {u: v for u, v in app.users.items() if v[2] >= horizon}
        return [(lat, lon) for lat, lon, _ in app.users.values()]

    async def autoscale(self, app: Application) -> None:
        """Apply :func:`plan_scaling` once per cooldown."""
        now = time.monotonic()
        if now - app.last_scaled < self.cooldown_s:
            return
        replicas = [
            ReplicaState(t["task_id"], *replica_location(t), t["status"] == "running",
                         t.get("utilisation"), app.order.get(t["task_id"], 0))
            for t in app.active()
        ]
        policy = ScalingPolicy(
            self.policy.precision, self.policy.users_per_replica, self.policy.scale_up_util,
            self.policy.scale_down_util, app.min_replicas, self.policy.max_replicas,
        )
        locations = [(loc["lat"], loc["lon"]) for loc in app.spec["locations"]]
        action = plan_scaling(replicas, self.active_users(app), policy, locations)
        if action is None:
            return
        app.last_scaled = now
        task_id = action.task_id or f"{app.name}-{app.next_index}"
        event = {"t": time.time(), "action": action.action, "reason": action.reason,
                 "task_id": task_id, "lat": action.lat, "lon": action.lon}
        if action.action == "up":
            refusal = await self.add_replica(app, action.lat, action.lon)
            if refusal is not None:
                _log.info("scale up of %s refused: %s", app.name, refusal)
                return
            app.scaling.append(event)
        else:
            app.scaling.append(event)  # before the removal, which a status read may overtake
            await self.remove_replica(app, task_id)
        _log.info("scaled %s %s (%s): %s", app.name, action.action, action.reason, task_id)

    async def poll_loop(self) -> None:
        """Maintain every application each ``poll_s``."""
        while True:
            for app in list(self.apps.values()):
                try:
                    async with app.lock:
                        await self.maintain(app)
                except PeerError as exc:
                    _log.info("poll of %s failed: %s", app.name, exc)
            await asyncio.sleep(self.poll_s)

    async def start(self, app: web.Application) -> None:
        """Startup hook: session and poller."""
        self._session = peer_session(app)
        self._poller = asyncio.create_task(self.poll_loop())

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook: stop polling, close the session (replicas keep running)."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._session is not None:
            await self._session.close()

    # ---------------------------------------------------------------- handlers

    def app_json(self, app: Application) -> dict[str, Any]:
        """An application's status, as documented."""
        spec = app.spec
        replicas = []
        for task in app.replicas.values():
            lat, lon = replica_location(task)
            replicas.append({
                "task_id": task["task_id"], "node_id": task.get("node_id"),
                "url": task.get("url"), "lat": lat, "lon": lon,
                "tags": task.get("node_tags", []), "status": task["status"],
                "load": task.get("load"), "utilisation": task.get("utilisation"),
                "ready_at": task.get("ready_at"), "updated_at": task.get("updated_at"),
            })
        return {
            **{k: spec.get(k) for k in DEPLOY_FIELDS},
            "state": app.state, "storage": app.storage, "created_at": app.created_at,
            "first_running_at": app.first_running_at(), "failures": app.failures,
            "replicas": replicas, "users": len(self.active_users(app)),
            "scaling": app.scaling,
        }

    def _app(self, name: str) -> Application:
        app = self.apps.get(name)
        if app is None:
            raise client_error(web.HTTPNotFound, f"no such application: {name}")
        return app

    async def _storage(self, spec: dict[str, Any]) -> Any:
        """The Cargo manager's answer for an application that needs storage."""
        if self.cargo_manager is None:
            raise client_error(
                web.HTTPConflict,
                "need_storage: storage is not available (no Cargo manager configured)",
            )
        body = {"app": spec["name"], "locations": spec["locations"]}
        try:
            status, answer = await call_json(
                self.session, "POST", f"{self.cargo_manager}/storage", body
            )
        except PeerError as exc:
            raise client_error(web.HTTPBadGateway, f"cargo manager unreachable: {exc}") from None
        if not 200 <= status < 300:
            raise client_error(
                web.HTTPBadGateway, f"cargo manager refused: {error_of(status, answer)}"
            )
        return answer

    async def handle_deploy(self, request: web.Request) -> web.Response:
        """``POST /apps``: deploy at least ``min_replicas`` replicas through the Spinner."""
        spec = await read_json_object(request, DEPLOY_FIELDS)
        spec.setdefault("runtime", "process")
        spec.setdefault("args", {})
        spec.setdefault("tags", [])
        spec.setdefault("min_replicas", MIN_REPLICAS)
        need = next((n for n in runtime_needs(spec["runtime"]) if n not in spec), None)
        if need is not None:
            raise client_error(
                web.HTTPBadRequest,
                f"{need}: expected it for runtime {spec['runtime']}, found nothing",
            )
        refusal = task_args_refusal(spec.get("module"), spec["args"])
        if refusal is not None:  # the Captain would refuse it: say so before placing
            raise client_error(web.HTTPBadRequest, refusal)
        if spec["name"] in self.apps:
            raise client_error(web.HTTPConflict, f"name: application {spec['name']} exists")
        storage = await self._storage(spec) if spec["need_storage"] else None
        app = Application(spec, storage)
        self.apps[app.name] = app  # taken now, so a concurrent deploy of the name is refused
        refusal = None
        async with app.lock:
            for index in range(app.min_replicas):
                where = spec["locations"][index % len(spec["locations"])]
                refusal = await self.add_replica(app, where["lat"], where["lon"]) or refusal
        if not app.replicas:
            del self.apps[app.name]
            raise client_error(web.HTTPConflict, f"no replica could be placed: {refusal}")
        return web.json_response(self.app_json(app), status=201)

    async def handle_apps(self, request: web.Request) -> web.Response:
        """``GET /apps``."""
        return web.json_response({"apps": [self.app_json(a) for a in self.apps.values()]})

    async def handle_app(self, request: web.Request) -> web.Response:
        """``GET /apps/{name}``."""
        return web.json_response(self.app_json(self._app(request.match_info["name"])))

    async def handle_delete(self, request: web.Request) -> web.Response:
        """``DELETE /apps/{name}``: remove every replica, forget the application."""
        app = self._app(request.match_info["name"])
        del self.apps[app.name]
        async with app.lock:
            await asyncio.gather(*(self.remove_replica(app, t) for t in list(app.replicas)))
        return web.json_response(self.app_json(app))

    async def handle_query(self, request: web.Request) -> web.Response:
        """``POST /query``: the candidate list for a user; remembers the user briefly."""
        body = await read_json_object(request, QUERY_FIELDS)
        app = self._app(body["app"])
        user = body.get("user") or f"addr:{request.remote}"
        app.users[user] = (body["lat"], body["lon"], time.time())
        candidates = answer_candidates(
            app.running(), body["lat"], body["lon"], body.get("tags", []),
            precision=self.policy.precision, overload=self.overload, topn=self.topn)
        return web.json_response({"app": app.name, "precision": self.policy.precision,
                                  "topn": self.topn, "candidates": candidates})

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"ok": True, "apps": len(self.apps)})


APP_MANAGER_KEY = web.AppKey("app_manager", AppManager)


def make_app(spinner: str, cargo_manager: str | None = None, poll_s: float = 1.0,
             policy: ScalingPolicy | None = None, overload: float = DEFAULT_OVERLOAD,
             topn: int = TOPN, cooldown_s: float = 5.0, user_ttl_s: float = 20.0
             ) -> web.Application:
    """Build the Application Manager (its state is ``app[APP_MANAGER_KEY]``)."""
    manager = AppManager(spinner, cargo_manager, poll_s, policy, overload, topn, cooldown_s,
                         user_ttl_s)
    routes = [
        Route("POST", "/apps", manager.handle_deploy, "deploy an application",
              doc.op(201, doc.DEPLOY, (400, 409, 502))),
        Route("GET", "/apps", manager.handle_apps, "list applications", doc.op()),
        Route("GET", "/apps/{name}", manager.handle_app, "application status",
              doc.op(errors=(404,))),
        Route("DELETE", "/apps/{name}", manager.handle_delete, "remove an application",
              doc.op(errors=(404,))),
        Route("POST", "/query", manager.handle_query, "candidate list for a user",
              doc.op(200, doc.QUERY, (400, 404)), auth=PUBLIC),
        Route("GET", "/health", manager.handle_health, "liveness", doc.op()),
    ]
    app = make_base_app()
    app[APP_MANAGER_KEY] = manager
    add_api(app, "Armada Application Manager",
                "Applications and replicas, service discovery (candidate lists), auto-scaling.",
                routes)
    app.on_startup.append(manager.start)
    app.on_cleanup.append(manager.stop)
    return app


def app_from_params(params: AppManagerParams, address: Address) -> web.Application:
    """The Application Manager of a command line."""
    policy = ScalingPolicy(params.precision, params.users_per_replica, params.scale_up_util,
                           params.scale_down_util, MIN_REPLICAS, params.max_replicas)
    return make_app(params.spinner, params.cargo_manager, params.poll_s, policy,
                    params.overload, params.topn, params.cooldown_s, params.user_ttl_s)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the Application Manager of the command line until SIGTERM/SIGINT."""
    return run_service(AppManagerParams, app_from_params, argv,
                       prog="python -m nodes.armada.app_manager",
                       description=__doc__.splitlines()[0], port=8001, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
