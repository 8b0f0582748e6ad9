"""The Spinner: Armada's compute resource manager.

It registers Captains (location, node type, capacity, tags), health-checks them every
``health_interval_s`` and declares a node dead after ``max_missed`` consecutive failed
checks, tracks free resources (capacity minus the tasks placed on a node), and places
tasks with :mod:`nodes.armada.scheduler`. A task of a dead or departed node keeps its id
and is placed elsewhere at once; a task no node can take waits as ``pending`` and is
retried at every health round. Only nodes registered with the run secret take tasks: a
node registered through the Beacon with a user token is listed and health-checked but
never placed on, as starting a task there would hand its URL the run secret
(:mod:`nodes.armada.registry`). The Application Manager sees all of this through the
task API; the HTTP contract is ``docs/armada.md``.

Run it as ``python -m nodes.armada.spinner --host H --port P [--health-interval-s 1]
[--health-timeout-s 0.5] [--max-missed 3] [--precision 5]``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from nodes.armada import openapi as doc
from nodes.armada.configs import NODE_TYPES, SpinnerParams
from nodes.armada.fields import (
    enum_field,
    lat_field,
    lon_field,
    runtime_needs,
    tags_field,
    task_fields,
    url_field,
)
from nodes.armada.registry import HealthCheckedRegistry
from nodes.armada.scheduler import NodeView, TaskRequest, rank_nodes
from nodes.armada.selection import DEFAULT_PRECISION
from nodes.common import (
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

_log = logging.getLogger("nodes.armada.spinner")

REGISTER_FIELDS = {
    "node_id": str_field(),
    "url": url_field(),
    "lat": lat_field(),
    "lon": lon_field(),
    "node_type": enum_field(NODE_TYPES),
    "cpu": positive_number_field(),
    "memory_mb": int_field(1),
    "tags": tags_field(),
}
PLACE_FIELDS = {**task_fields(), "lat": lat_field(), "lon": lon_field(), "tags": tags_field()}
DEPLOY_TIMEOUT_S = 5.0
#: Task states that hold resources on their node.
HOLDING = ("placing", "starting", "running")


@dataclass
class Node:
    """A registered Captain."""

    node_id: str
    url: str
    lat: float
    lon: float
    node_type: str
    cpu: float
    memory_mb: int
    tags: list[str]
    state: str = "alive"  # alive | dead | left
    trusted: bool = True  # registered with the run secret (else a user token: no tasks)
    registered_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)
    missed: int = 0


@dataclass
class Task:
    """A task and where it runs; ``node_id`` is None while it is pending."""

    task_id: str
    app: str
    runtime: str
    cpu: float
    memory_mb: int
    lat: float
    lon: float
    module: str | None = None
    image: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    node_id: str | None = None
    url: str | None = None
    status: str = "pending"
    reason: str | None = None
    load: dict[str, Any] | None = None
    utilisation: float | None = None
    placed_at: float | None = None
    ready_at: float | None = None
    updated_at: float = field(default_factory=time.time)

    def spec(self) -> dict[str, Any]:
        """The body of the Captain's ``POST /tasks``."""
        spec = {
            "task_id": self.task_id,
            "app": self.app,
            "runtime": self.runtime,
            "args": self.args,
            "cpu": self.cpu,
            "memory_mb": self.memory_mb,
        }
        spec.update({k: v for k, v in (("module", self.module), ("image", self.image)) if v})
        return spec


class Spinner(HealthCheckedRegistry[Node]):
    """State, placement, health checks and HTTP handlers of the Spinner.

    Registration, health checks and leaves of Captains are
    :class:`~nodes.armada.registry.HealthCheckedRegistry`'s; the nodes are ``nodes``.
    """

    kind = "node"
    id_field = "node_id"
    node_class = Node
    title = "Spinner"
    log = _log

    def __init__(
        self,
        health_interval_s: float = 1.0,
        health_timeout_s: float = 0.5,
        max_missed: int = 3,
        precision: int = DEFAULT_PRECISION,
    ) -> None:
        super().__init__(health_interval_s, health_timeout_s, max_missed)
        self.precision = precision
        self.tasks: dict[str, Task] = {}

    # ------------------------------------------------------------------ resources

    def reserved(self, node_id: str) -> tuple[float, int]:
        """CPU and memory held by the tasks placed on ``node_id``."""
        held = [t for t in self.tasks.values() if t.node_id == node_id and t.status in HOLDING]
        return sum(t.cpu for t in held), sum(t.memory_mb for t in held)

    def node_json(self, node: Node) -> dict[str, Any]:
        """A node as the API shows it."""
        cpu, memory = self.reserved(node.node_id)
        return {
            **asdict(node),
            "free_cpu": max(0.0, node.cpu - cpu),
            "free_memory_mb": node.memory_mb - memory,
            "tasks": sorted(t.task_id for t in self.tasks.values() if t.node_id == node.node_id),
        }

    def task_json(self, task: Task) -> dict[str, Any]:
        """A task as the API shows it, with its node's location and tags."""
        node = self.nodes.get(task.node_id) if task.node_id else None
        return {
            **asdict(task),
            "node_lat": node.lat if node else None,
            "node_lon": node.lon if node else None,
            "node_tags": node.tags if node else [],
        }

    def _view(self, node: Node) -> NodeView:
        cpu, memory = self.reserved(node.node_id)
        apps = {t.app for t in self.tasks.values() if t.node_id == node.node_id}
        return NodeView(
            node.node_id, node.lat, node.lon, node.cpu, node.memory_mb,
            node.cpu - cpu, node.memory_mb - memory, frozenset(node.tags),
            node.state == "alive", frozenset(apps), node.trusted,
        )

    # ------------------------------------------------------------------ placement

    async def place(self, task: Task) -> str | None:
        """Start ``task`` on the best node that accepts it; the refusal reason otherwise.

        The task reserves each node while that node's Captain is asked (status
        ``placing``), so concurrent placements never overbook a node.
        """
        request = TaskRequest(
            task.app, task.cpu, task.memory_mb, task.lat, task.lon, frozenset(task.tags)
        )
        ranking = rank_nodes(map(self._view, self.nodes.values()), request, self.precision)
        if not ranking.nodes:
            return ranking.reason
        refusals = []
        for view in ranking.nodes:
            node = self.nodes[view.node_id]
            if node.state != "alive" or not node.trusted:  # changed while others were asked
                continue
            task.node_id, task.status = node.node_id, "placing"
            try:
                status, answer = await call_json(
                    self.session, "POST", f"{node.url}/tasks", task.spec(),
                    timeout_s=DEPLOY_TIMEOUT_S,
                )
            except PeerError as exc:
                status, answer = 0, {"error": str(exc)}
            if status == 202 and isinstance(answer, dict):
                self._update(task, answer)
                task.placed_at = time.time()
                return None
            task.node_id, task.status = None, "pending"
            refusals.append(f"{node.node_id}: {error_of(status, answer)}")
        return "every candidate node refused: " + "; ".join(refusals)

    @staticmethod
    def _update(task: Task, answer: dict[str, Any]) -> None:
        """Copy what a Captain reports about ``task``."""
        for name in ("status", "reason", "load", "utilisation", "url", "ready_at"):
            if name in answer:
                setattr(task, name, answer[name])
        task.updated_at = time.time()

    async def place_pending(self) -> None:
        """Try once to place every pending task."""
        for task in [t for t in self.tasks.values() if t.status == "pending"]:
            if task.task_id in self.tasks:  # not removed meanwhile
                task.reason = await self.place(task)

    def node_lost(self, node: Node, reason: str) -> None:
        """Make every task of ``node`` pending again (it died or left)."""
        for task in self.tasks.values():
            if task.node_id == node.node_id:
                task.node_id, task.url, task.status = None, None, "pending"
                task.load, task.utilisation, task.ready_at = None, None, None
                task.reason = reason
                task.updated_at = time.time()

    # ------------------------------------------------------------- health checks

    def healthy(self, answer: dict[str, Any]) -> bool:
        """A Captain's status lists its tasks."""
        return "tasks" in answer

    def reported(self, node: Node, answer: dict[str, Any], asked: float) -> None:
        """Copy what the Captain says of its tasks; a task placed there before ``asked``
        that it no longer lists is pending again."""
        reported = {t.get("task_id"): t for t in answer["tasks"] if isinstance(t, dict)}
        for task in self.tasks.values():
            if task.node_id != node.node_id or task.status == "placing":
                continue
            if task.task_id in reported:
                self._update(task, reported[task.task_id])
            elif task.placed_at is not None and task.placed_at < asked:
                task.node_id, task.url, task.status = None, None, "pending"
                task.reason = f"node {node.node_id} no longer runs it"

    async def after_round(self) -> None:
        """Retry the pending tasks."""
        await self.place_pending()

    # ------------------------------------------------------------------ handlers

    def _task(self, request: web.Request) -> Task:
        task = self.tasks.get(request.match_info["task_id"])
        if task is None:
            raise client_error(web.HTTPNotFound, f"no such task: {request.match_info['task_id']}")
        return task

    async def handle_register(self, request: web.Request) -> web.Response:
        """``POST /nodes``: register a Captain, or refresh one that registers again."""
        body = await read_json_object(request, REGISTER_FIELDS)
        body.setdefault("tags", [])
        trusted = self.registrant_trusted(request, body["node_id"])
        return web.json_response(self.node_json(self.enrol(body, trusted)))

    async def handle_nodes(self, request: web.Request) -> web.Response:
        """``GET /nodes``."""
        return web.json_response({"nodes": [self.node_json(n) for n in self.nodes.values()]})

    async def handle_node(self, request: web.Request) -> web.Response:
        """``GET /nodes/{node_id}``."""
        return web.json_response(self.node_json(self.lookup(request)))

    async def handle_leave(self, request: web.Request) -> web.Response:
        """``DELETE /nodes/{node_id}``: a graceful leave; its tasks are re-placed now."""
        return web.json_response(self.node_json(await self.leave(request)))

    async def handle_place(self, request: web.Request) -> web.Response:
        """``POST /tasks``: place and start a task; 409 when no node takes it."""
        body = await read_json_object(request, PLACE_FIELDS)
        if body["task_id"] in self.tasks:
            raise client_error(web.HTTPConflict, f"task_id: {body['task_id']} exists")
        need = next((n for n in runtime_needs(body["runtime"]) if n not in body), None)
        if need is not None:
            raise client_error(
                web.HTTPBadRequest, f"{need}: expected it for runtime {body['runtime']}, "
                "found nothing",
            )
        task = Task(**body)
        self.tasks[task.task_id] = task
        reason = await self.place(task)
        if reason is not None:
            del self.tasks[task.task_id]
            raise client_error(web.HTTPConflict, reason)
        return web.json_response(self.task_json(task), status=201)

    async def handle_tasks(self, request: web.Request) -> web.Response:
        """``GET /tasks[?app=A]``."""
        app = request.query.get("app")
        tasks = [self.task_json(t) for t in self.tasks.values() if app in (None, t.app)]
        return web.json_response({"tasks": tasks})

    async def handle_task(self, request: web.Request) -> web.Response:
        """``GET /tasks/{task_id}``."""
        return web.json_response(self.task_json(self._task(request)))

    async def handle_remove(self, request: web.Request) -> web.Response:
        """``DELETE /tasks/{task_id}``: stop it on its Captain and forget it."""
        task = self._task(request)
        del self.tasks[task.task_id]
        node = self.nodes.get(task.node_id) if task.node_id else None
        if node is not None and node.state == "alive" and node.trusted:
            with contextlib.suppress(PeerError):
                await call_json(
                    self.session, "DELETE", f"{node.url}/tasks/{task.task_id}",
                    timeout_s=DEPLOY_TIMEOUT_S,
                )
        task.status = "removed"
        return web.json_response(self.task_json(task))

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        alive = sum(n.state == "alive" for n in self.nodes.values())
        return web.json_response({"ok": True, "nodes": alive, "tasks": len(self.tasks)})


SPINNER_KEY = web.AppKey("spinner", Spinner)


def make_app(
    health_interval_s: float = 1.0,
    health_timeout_s: float = 0.5,
    max_missed: int = 3,
    precision: int = DEFAULT_PRECISION,
) -> web.Application:
    """Build the Spinner application (its state is ``app[SPINNER_KEY]``)."""
    spinner = Spinner(health_interval_s, health_timeout_s, max_missed, precision)
    routes = [
        *doc.registry_routes("nodes", "node_id", "node", doc.REGISTER, "its tasks are re-placed",
                             spinner.handle_register, spinner.handle_nodes, spinner.handle_node,
                             spinner.handle_leave),
        Route("POST", "/tasks", spinner.handle_place, "place and start a task",
              doc.op(201, doc.PLACE, (400, 409))),
        Route("GET", "/tasks", spinner.handle_tasks, "list tasks (?app=name)", doc.op()),
        Route("GET", "/tasks/{task_id}", spinner.handle_task, "one task", doc.op(errors=(404,))),
        Route("DELETE", "/tasks/{task_id}", spinner.handle_remove, "stop and forget a task",
              doc.op(errors=(404,))),
        Route("GET", "/health", spinner.handle_health, "liveness", doc.op()),
    ]
    app = make_base_app()
    app[SPINNER_KEY] = spinner
    add_api(app, "Armada Spinner", "Compute nodes (registration, health checks, free "
                "resources) and task placement.", routes)
    app.on_startup.append(spinner.start)
    app.on_cleanup.append(spinner.stop)
    return app


def app_from_params(params: SpinnerParams, address: Address) -> web.Application:
    """The Spinner of a command line."""
    return make_app(params.health_interval_s, params.health_timeout_s, params.max_missed,
                    params.precision)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the Spinner of the command line until SIGTERM/SIGINT."""
    return run_service(SpinnerParams, app_from_params, argv, prog="python -m nodes.armada.spinner",
                       description=__doc__.splitlines()[0], port=8002, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
