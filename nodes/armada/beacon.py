"""The Beacon: Armada's single public entry point.

Deployers deploy and inspect applications, users query for service access points, and
resource contributors register nodes, all here. The Beacon checks bearer tokens on the
requests that change the system (deploy, remove, register, leave) before reading their
bodies, then forwards the request unchanged to its owner (the Application Manager, the
Spinner, or for storage nodes the Cargo Manager) and passes the answer back, so
validation errors come from the service that owns the data. The contract is
``docs/armada.md``.

Run it as ``python -m nodes.armada.beacon --host H --port P --app-manager URL --spinner
URL [--cargo-manager URL] (--token T ... | --tokens FILE) [--timeout-s 10]``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Sequence

import aiohttp
from aiohttp import web

from nodes.armada import openapi as doc
from nodes.armada.auth import TokenChecker, load_tokens
from nodes.armada.configs import BeaconParams
from nodes.common import Address, Handler, Route, client_error, make_base_app, run_service
from nodes.config import CannotStart

_log = logging.getLogger("nodes.armada.beacon")


class Beacon:
    """Token checks and forwarding."""

    def __init__(self, app_manager: str, spinner: str, tokens: Iterable[str],
                 timeout_s: float = 10.0, cargo_manager: str | None = None) -> None:
        self.upstreams = {"application manager": app_manager.rstrip("/"),
                          "spinner": spinner.rstrip("/")}
        if cargo_manager:
            self.upstreams["cargo manager"] = cargo_manager.rstrip("/")
        self.tokens = TokenChecker(tokens)
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def route(self, upstream: str, secured: bool) -> Handler:
        """A handler forwarding to ``upstream``, after a token check when ``secured``."""

        async def handler(request: web.Request) -> web.Response:
            if secured:
                self.tokens.check(request)
            return await self.forward(request, upstream)

        return handler

    async def forward(self, request: web.Request, upstream: str) -> web.Response:
        """Send ``request`` (method, path, query, body) to ``upstream``; relay the answer."""
        assert self._session is not None, "the Beacon app is not running"
        url = self.upstreams[upstream] + request.rel_url.path_qs
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
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
        """Startup hook: open the client session."""
        self._session = aiohttp.ClientSession()

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook: close the client session."""
        if self._session is not None:
            await self._session.close()


def make_app(app_manager: str, spinner: str, tokens: Iterable[str],
             timeout_s: float = 10.0, cargo_manager: str | None = None) -> web.Application:
    """Build the Beacon application; raises ValueError without any token.

    With ``cargo_manager`` it also forwards Cargo registration (``/cargos``) there.
    """
    beacon = Beacon(app_manager, spinner, tokens, timeout_s, cargo_manager)
    am, sp, cm = "application manager", "spinner", "cargo manager"
    fwd = (502, 504)
    routes = [
        Route("POST", "/apps", beacon.route(am, secured=True), "deploy an application",
              doc.op(201, doc.DEPLOY, (400, 409, *fwd), secured=True)),
        Route("GET", "/apps", beacon.route(am, secured=False), "list applications",
              doc.op(errors=fwd)),
        Route("GET", "/apps/{name}", beacon.route(am, secured=False), "application status",
              doc.op(errors=(404, *fwd))),
        Route("DELETE", "/apps/{name}", beacon.route(am, secured=True),
              "remove an application", doc.op(errors=(404, *fwd), secured=True)),
        Route("POST", "/query", beacon.route(am, secured=False), "candidate list for a user",
              doc.op(200, doc.QUERY, (400, 404, *fwd))),
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
    doc.add_api(app, "Armada Beacon", "Single public entry point; checks tokens and forwards "
                "to the Application Manager and the Spinner.", routes)
    app.on_startup.append(beacon.start)
    app.on_cleanup.append(beacon.stop)
    return app


def app_from_params(params: BeaconParams, address: Address) -> web.Application:
    """The Beacon of a command line: its ``--token`` values and those of ``--tokens``.

    :class:`~nodes.config.CannotStart` when the token file cannot be read or holds none
    (and no ``--token`` was given).
    """
    tokens = [t for t in params.token if t]
    if params.tokens:
        try:
            tokens += sorted(load_tokens(params.tokens))
        except OSError as exc:
            raise CannotStart(f"--tokens: cannot read {params.tokens}: {exc.strerror}") from None
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
