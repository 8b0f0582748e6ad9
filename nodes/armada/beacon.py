"""The Beacon: Armada's single public entry point.

Deployers deploy and inspect applications, users query for service access points, and
resource contributors register nodes, all here. The Beacon checks a bearer credential
on the requests that change the system (deploy, remove, register, leave) before reading
their bodies: a user token of its ``--tokens`` file or the run secret. It then forwards
the request to its owner (the Application Manager, the Spinner, or for storage nodes the
Cargo Manager) with the run secret, saying when the caller's credential was a user
token (``X-Armada-Credential: user``, :mod:`nodes.armada.auth`: a node registered so is
a contributor's, never sent the run secret), and passes the answer back, so validation
errors come from the service that owns the data. Reads are forwarded without any
credential. Only the routes it exposes are forwarded, matched on the raw path: a path
parameter holding an encoded separator (``%2F``) or a dot segment is refused, so no
request reaches an upstream route the Beacon does not expose. The contract is
``docs/armada.md``.

Run it as ``python -m nodes.armada.beacon --host H --port P --app-manager URL --spinner
URL [--cargo-manager URL] [--tokens FILE] [--timeout-s 10]`` with the run secret in
``$TESTBED_SECRET_FILE`` (or ``--secret-file``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Sequence
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from yarl import URL

from nodes.armada import openapi as doc
from nodes.armada.auth import CREDENTIAL_HEADER, USER_CREDENTIAL, TokenChecker, load_tokens
from nodes.armada.configs import BeaconParams
from nodes.common import (
    OWN,
    PUBLIC,
    Address,
    Handler,
    Route,
    client_error,
    make_base_app,
    read_body_in_time,
    run_service,
)
from nodes.config import CannotStart
from nodes.openapi import add_api
from nodes.secret import SECRET_KEY, accepted_credential, peer_session

_log = logging.getLogger("nodes.armada.beacon")


class Beacon:
    """Credential checks and forwarding."""

    def __init__(self, app_manager: str, spinner: str, tokens: Iterable[str] = (),
                 timeout_s: float = 10.0, cargo_manager: str | None = None) -> None:
        self.upstreams = {"application manager": app_manager.rstrip("/"),
                          "spinner": spinner.rstrip("/")}
        if cargo_manager:
            self.upstreams["cargo manager"] = cargo_manager.rstrip("/")
        self.tokens = TokenChecker(tokens)
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def route(self, upstream: str, secured: bool) -> Handler:
        """A handler forwarding to ``upstream``, after a credential check when
        ``secured``: a user token or the run secret."""

        async def handler(request: web.Request) -> web.Response:
            by_user = secured and self.credential(request) == USER_CREDENTIAL
            return await self.forward(request, upstream, by_user)

        return handler

    def credential(self, request: web.Request) -> str:
        """Which credential ``request`` presents: ``"secret"`` (the run secret) or
        :data:`~nodes.armada.auth.USER_CREDENTIAL` (a user token); 401/403 for none."""
        secret = request.app.get(SECRET_KEY)
        checks = {"secret": secret.accepts} if secret is not None else {}
        return accepted_credential(request, {**checks, USER_CREDENTIAL: self.tokens.accepts})

    async def forward(self, request: web.Request, upstream: str,
                      by_user: bool = False) -> web.Response:
        """Send ``request`` (method, raw path, query, body) to ``upstream``; relay the
        answer. The body is read within the body timeout (408 for a slower one), as by
        every service. A request accepted for a user token (``by_user``) says so
        upstream (:data:`~nodes.armada.auth.CREDENTIAL_HEADER`)."""
        assert self._session is not None, "the Beacon app is not running"
        path = confined_path(request)
        url = URL(self.upstreams[upstream] + path + (
            "?" + request.rel_url.raw_query_string if request.rel_url.raw_query_string
            else ""), encoded=True)
        body = await read_body_in_time(request)
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        if by_user:
            headers[CREDENTIAL_HEADER] = USER_CREDENTIAL
        try:
            async with self._session.request(
                request.method, url, data=body or None, headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as resp:
                payload = await resp.read()
                return web.Response(body=payload, status=resp.status,
                                    content_type=resp.content_type)
        except TimeoutError:
            raise client_error(web.HTTPGatewayTimeout,
                               f"{upstream} did not answer within {self.timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise client_error(web.HTTPBadGateway,
                               f"{upstream} unreachable: {type(exc).__name__}: {exc}") from None

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"ok": True})

    async def start(self, app: web.Application) -> None:
        """Startup hook: open the client session (it presents the run secret on
        state-changing requests)."""
        self._session = peer_session(app)

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook: close the client session."""
        if self._session is not None:
            await self._session.close()


def confined_path(request: web.Request) -> str:
    """The raw path of ``request`` as the Beacon forwards it; 400 when a segment holds an
    encoded separator or is a dot segment once decoded (``/cargos/..%2Fstorage``
    would otherwise reach a route the Beacon does not expose)."""
    raw = request.raw_path.split("?", 1)[0]
    for segment in raw.split("/")[1:]:
        decoded = unquote(segment, errors="replace")
        if "/" in decoded or "\\" in decoded or decoded in (".", "..") or "%" in decoded \
                or "\x00" in decoded:
            raise client_error(web.HTTPBadRequest,
                               f"path: expected plain segments, found {segment[:60]!r} "
                               "(encoded separators and dot segments are refused)")
    return raw


def make_app(app_manager: str, spinner: str, tokens: Iterable[str] = (),
             timeout_s: float = 10.0, cargo_manager: str | None = None) -> web.Application:
    """Build the Beacon application. ``tokens`` are the user tokens it accepts besides
    the run secret (``app[SECRET_KEY]``).

    With ``cargo_manager`` it also forwards Cargo registration (``/cargos``) there.
    """
    beacon = Beacon(app_manager, spinner, tokens, timeout_s, cargo_manager)
    am, sp, cm = "application manager", "spinner", "cargo manager"
    fwd = (502, 504)
    app_name = doc.segment("name", doc.NAME)
    routes = [
        Route("POST", "/apps", beacon.route(am, secured=True), "deploy an application",
              doc.op(201, doc.DEPLOY, (400, 409, *fwd)), auth=OWN),
        Route("GET", "/apps", beacon.route(am, secured=False), "list applications",
              doc.op(errors=fwd)),
        Route("GET", "/apps/{name}", beacon.route(am, secured=False), "application status",
              {**doc.op(errors=(400, 404, *fwd)), "parameters": [app_name]}),
        Route("DELETE", "/apps/{name}", beacon.route(am, secured=True),
              "remove an application",
              {**doc.op(errors=(400, 404, *fwd)), "parameters": [app_name]}, auth=OWN),
        Route("POST", "/query", beacon.route(am, secured=False), "candidate list for a user",
              doc.op(200, doc.QUERY, (400, 404, *fwd)), auth=PUBLIC),
        *doc.forwarded_registry_routes(
            "nodes", "node_id", "node", doc.REGISTER, "a compute node",
            beacon.route(sp, secured=True), beacon.route(sp, secured=False),
            beacon.route(sp, secured=True)),
    ]
    if cargo_manager:
        routes += doc.forwarded_registry_routes(
            "cargos", "cargo_id", "Cargo", doc.CARGO_REGISTER, "a storage node (Cargo)",
            beacon.route(cm, secured=True), beacon.route(cm, secured=False),
            beacon.route(cm, secured=True))
    routes.append(Route("GET", "/health", beacon.handle_health, "liveness", doc.op()))
    app = make_base_app()
    add_api(app, "Armada Beacon", "Single public entry point; checks credentials and "
                "forwards to the Application Manager and the Spinner.", routes)
    app.on_startup.append(beacon.start)
    app.on_cleanup.append(beacon.stop)
    return app


def app_from_params(params: BeaconParams, address: Address) -> web.Application:
    """The Beacon of a command line, with the user tokens of ``--tokens``.

    :class:`~nodes.config.CannotStart` when the token file cannot be read or holds none.
    """
    tokens: list[str] = []
    if params.tokens:
        try:
            tokens = sorted(load_tokens(params.tokens))
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise CannotStart(f"--tokens: cannot read {params.tokens}: {why}") from None
        if not tokens:
            raise CannotStart(f"--tokens: no token in {params.tokens}")
    return make_app(params.app_manager, params.spinner, tokens, params.timeout_s,
                    params.cargo_manager)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the Beacon of the command line until SIGTERM/SIGINT."""
    return run_service(BeaconParams, app_from_params, argv, prog="python -m nodes.armada.beacon",
                       description=__doc__.splitlines()[0], port=8000, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
