"""What a Captain and a Cargo share: registering with their manager through the Beacon.

A Captain registers with the Spinner and a Cargo with the Cargo Manager, both through
the Beacon with the run secret. The manager health-checks a registered node with ``GET
/status``; when those checks stop for ``recheck_s`` (the manager forgot the node, or
declared it dead during a partition) the node registers again. On shutdown it
deregisters, best effort. :class:`BeaconAgent` does this for both; a node says what it
registers (:meth:`~BeaconAgent.registration`) and what it does with the manager's
answer (:meth:`~BeaconAgent.registered`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web

from nodes.http import PeerError, call_json, error_of


class BeaconAgent:
    """Registration through the Beacon, renewed whenever health checks stop.

    A subclass sets :attr:`collection` and :attr:`log`, implements the hooks, and has
    ``config`` (with ``beacon`` and ``recheck_s``), ``session``, ``auth_headers`` (the
    run secret's, :func:`nodes.secret.peer_headers`, set when the app starts),
    ``registrations`` (a count) and ``_checked`` (an :class:`asyncio.Event`); its
    ``GET /status`` handler is :meth:`handle_status`.
    """

    #: The Beacon's collection the node registers in (``"nodes"``, ``"cargos"``).
    collection: str
    #: The node's logger.
    log: logging.Logger

    config: Any
    session: aiohttp.ClientSession
    auth_headers: dict[str, str]
    registrations: int
    _checked: asyncio.Event

    # ------------------------------------------------------------------ hooks

    @property
    def agent_id(self) -> str:
        """The node's id, as registered."""
        raise NotImplementedError

    def registration(self) -> dict[str, Any]:
        """The registration body."""
        raise NotImplementedError

    async def registered(self, answer: dict[str, Any], sent: float) -> None:
        """Act on the manager's answer to a registration sent at wall time ``sent``."""
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        """The health-check answer."""
        raise NotImplementedError

    # ------------------------------------------------------------ registration

    def _auth(self) -> dict[str, str]:
        return self.auth_headers

    async def register(self) -> bool:
        """Register through the Beacon once, then :meth:`registered`; whether it worked."""
        body = self.registration()
        sent = time.time()
        try:
            status, answer = await call_json(
                self.session, "POST", f"{self.config.beacon}/{self.collection}", body,
                headers=self._auth(),
            )
        except PeerError as exc:
            self.log.info("registration failed: %s", exc)
            return False
        if status != 200 or not isinstance(answer, dict):
            self.log.info("registration refused: %s", error_of(status, answer))
            return False
        self.registrations += 1
        await self.registered(answer, sent)
        return True

    async def agent_loop(self) -> None:
        """Register, then register again whenever health checks stop for ``recheck_s``."""
        while True:
            while not await self.register():
                await asyncio.sleep(min(1.0, self.config.recheck_s))
            while True:
                self._checked.clear()
                try:
                    await asyncio.wait_for(self._checked.wait(), self.config.recheck_s)
                except TimeoutError:
                    self.log.info("no health check for %g s: registering again",
                                  self.config.recheck_s)
                    break

    async def deregister(self) -> None:
        """Tell the manager (through the Beacon) that this node leaves; best effort."""
        url = f"{self.config.beacon}/{self.collection}/{self.agent_id}"
        with contextlib.suppress(PeerError):
            await call_json(self.session, "DELETE", url, headers=self._auth(), timeout_s=1.0)

    async def handle_status(self, request: web.Request) -> web.Response:
        """``GET /status``: the manager's health check (it keeps the registration)."""
        self._checked.set()
        return web.json_response(self.status())
