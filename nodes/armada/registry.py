"""What the Spinner and the Cargo Manager share: registered nodes under health checks.

Both managers keep the nodes that register with them (Captains, Cargos; through the
Beacon), health-check every alive one with ``GET /status`` every ``health_interval_s``,
declare one dead after ``max_missed`` consecutive failed checks, accept graceful
leaves, and make every call through one client session. :class:`HealthCheckedRegistry`
does that bookkeeping; a manager says what a valid status answer is
(:meth:`~HealthCheckedRegistry.healthy`), what it learns from one
(:meth:`~HealthCheckedRegistry.reported`), what follows from losing a node, dead or
left (:meth:`~HealthCheckedRegistry.node_lost`), and what it does after every round of
checks and after a leave (:meth:`~HealthCheckedRegistry.after_round`).

Who registered a node decides what it is trusted with. A node registered with the run
secret (the harness's Captains and Cargos, directly or through the Beacon) is one of
the run's own: it is given work, and the state-changing calls to it carry the run
secret. A node the Beacon registered for a user token (a contributor's,
:func:`nodes.armada.auth.registered_by_user`) is recorded with ``trusted: false``: it is
listed and health-checked and may leave, but it is never given work, so no request
carrying the run secret ever goes to its URL (its URL is the contributor's choice). A
user token cannot register again, nor make leave, a node the run secret registered
(403). Health checks are reads and carry no credential (:func:`nodes.secret.peer_session`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
from aiohttp import web

from nodes.armada.auth import registered_by_user
from nodes.common import client_error
from nodes.http import PeerError, call_json
from nodes.secret import peer_session


class RegisteredNode(Protocol):
    """What the registry needs of a registered node's record."""

    url: str
    state: str  # alive | dead | left
    trusted: bool  # registered with the run secret, not a user token
    last_seen: float
    missed: int


NodeT = TypeVar("NodeT", bound=RegisteredNode)


class HealthCheckedRegistry(Generic[NodeT]):
    """Registration, health checks, leaves and the client session of a manager.

    A subclass sets the class attributes below and implements the hooks; its nodes are
    ``self.nodes`` (id -> record).
    """

    #: What the manager calls its nodes in messages and log lines (``"node"``).
    kind: str
    #: The id field of a registration body, also the path parameter (``"node_id"``).
    id_field: str
    #: Builds a node's record from its registration body.
    node_class: Callable[..., NodeT]
    #: The manager's name, for the message of a call made while its app is not running.
    title: str
    #: The manager's logger.
    log: logging.Logger
    #: The states whose nodes are health-checked every round.
    checked_states: tuple[str, ...] = ("alive",)

    def __init__(self, health_interval_s: float, health_timeout_s: float,
                 max_missed: int) -> None:
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.max_missed = max_missed
        self.nodes: dict[str, NodeT] = {}
        self._session: aiohttp.ClientSession | None = None
        self._checker: asyncio.Task[None] | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The client session for calls to the nodes (exists while the app runs)."""
        assert self._session is not None, f"the {self.title} app is not running"
        return self._session

    # ------------------------------------------------------------------ hooks

    def healthy(self, answer: dict[str, Any]) -> bool:
        """Whether a node's ``GET /status`` object is a valid health-check answer."""
        raise NotImplementedError

    def reported(self, node: NodeT, answer: dict[str, Any], asked: float) -> None:
        """Take in a valid status ``answer`` of ``node``, asked for at wall time ``asked``."""
        raise NotImplementedError

    def node_lost(self, node: NodeT, reason: str) -> None:
        """``node`` was declared dead or left (``reason`` says which): let go of it."""
        raise NotImplementedError

    async def after_round(self) -> None:
        """Run after every round of health checks and after a leave."""

    def background(self) -> list[asyncio.Task[Any]]:
        """Work of the manager's own to cancel at cleanup, besides the health checks."""
        return []

    # ------------------------------------------------------------ registration

    def enrol(self, body: dict[str, Any], trusted: bool = True) -> NodeT:
        """Register a node from its registration ``body``, or refresh one that registers
        again (its fields updated, alive, no missed checks). ``trusted``: registered with
        the run secret (module docstring); the latest registration decides."""
        node_id = body[self.id_field]
        node = self.nodes.get(node_id)
        if node is None:
            node = self.node_class(**body, trusted=trusted)
            self.nodes[node_id] = node
            self.log.info("%s %s registered at %s%s", self.kind, node_id, node.url,
                          "" if trusted else " (user token: not trusted)")
        else:
            for name, value in body.items():
                setattr(node, name, value)
            node.trusted = trusted
            node.state, node.missed, node.last_seen = "alive", 0, time.time()
        return node

    def registrant_trusted(self, request: web.Request, node_id: str) -> bool:
        """Whether a registration of ``node_id`` by ``request`` is trusted (made with the
        run secret). A user token may not take over a node the run secret registered:
        a JSON 403 (it would move that node's URL, and its work, wherever it likes)."""
        if not registered_by_user(request):
            return True
        self.refuse_user_over_trusted(self.nodes.get(node_id), "register it again")
        return False

    def refuse_user_over_trusted(self, node: NodeT | None, action: str) -> None:
        """A JSON 403 when ``node`` was registered with the run secret (a user token may
        not do ``action`` to it)."""
        if node is not None and node.trusted:
            raise client_error(web.HTTPForbidden,
                               f"{self.id_field}: {self.kind} {getattr(node, self.id_field)} "
                               f"was registered with the run secret; a user token cannot "
                               f"{action}")

    def lookup(self, request: web.Request) -> NodeT:
        """The node named by the request's path, or a JSON 404."""
        node_id = request.match_info[self.id_field]
        node = self.nodes.get(node_id)
        if node is None:
            raise client_error(web.HTTPNotFound, f"no such {self.kind}: {node_id}")
        return node

    async def leave(self, request: web.Request) -> NodeT:
        """A graceful leave of the node the request's path names (a JSON 404 if none):
        it is ``left``, and what it held is handled at once. A user token makes only a
        node a user token registered leave (403 otherwise)."""
        node = self.lookup(request)
        if registered_by_user(request):
            self.refuse_user_over_trusted(node, "make it leave")
        node.state = "left"
        self.node_lost(node, f"{self.kind} {request.match_info[self.id_field]} left")
        await self.after_round()
        return node

    # ------------------------------------------------------------- health checks

    async def check(self, node_id: str, node: NodeT) -> None:
        """One health check of ``node``; declares it dead after ``max_missed`` misses. A
        node checked in another state than ``alive`` becomes alive at its first good
        check (:meth:`confirmed`)."""
        state, asked = node.state, time.time()
        try:
            status, answer = await call_json(self.session, "GET", f"{node.url}/status",
                                             timeout_s=self.health_timeout_s)
            ok = status == 200 and isinstance(answer, dict) and self.healthy(answer)
        except PeerError:
            ok, answer = False, None
        if node.state != state:  # registered again, or left, during the check
            return
        if not ok:
            node.missed += 1
            if node.missed >= self.max_missed:
                node.state = "dead"
                self.log.info("%s %s is dead after %d missed checks", self.kind, node_id,
                              node.missed)
                self.node_lost(node, f"{self.kind} {node_id} dead")
            return
        node.state, node.missed, node.last_seen = "alive", 0, time.time()
        if state != "alive":
            self.confirmed(node)
        self.reported(node, answer, asked)

    def confirmed(self, node: NodeT) -> None:
        """``node`` answered its first good check in another state than alive."""

    async def health_loop(self) -> None:
        """Check every node in :attr:`checked_states` each interval, then
        :meth:`after_round`."""
        while True:
            due = [(k, n) for k, n in self.nodes.items() if n.state in self.checked_states]
            await asyncio.gather(*(self.check(k, n) for k, n in due))
            await self.after_round()
            await asyncio.sleep(self.health_interval_s)

    async def start(self, app: web.Application) -> None:
        """Startup hook: open the client session (the run secret on its state-changing
        calls only, which go to trusted nodes only), start health checks."""
        self._session = peer_session(app)
        self._checker = asyncio.create_task(self.health_loop())

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook: stop health checks and :meth:`background` work, close the
        session."""
        tasks = [self._checker] if self._checker is not None else []
        tasks += self.background()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
