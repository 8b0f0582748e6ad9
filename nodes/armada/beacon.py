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

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence

import aiohttp
from aiohttp import web

from nodes.armada.auth import TokenChecker, load_tokens
from nodes.armada.openapi import add_openapi, beacon_spec, beacon_storage_paths
from nodes.common import client_error, configure_logging, make_base_app, serve

_log = logging.getLogger("nodes.armada.beacon")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
    app = make_base_app()
    am, sp = "application manager", "spinner"
    app.router.add_post("/apps", beacon.route(am, secured=True))
    app.router.add_get("/apps", beacon.route(am, secured=False))
    app.router.add_get("/apps/{name}", beacon.route(am, secured=False))
    app.router.add_delete("/apps/{name}", beacon.route(am, secured=True))
    app.router.add_post("/query", beacon.route(am, secured=False))
    app.router.add_post("/nodes", beacon.route(sp, secured=True))
    app.router.add_get("/nodes", beacon.route(sp, secured=False))
    app.router.add_delete("/nodes/{node_id}", beacon.route(sp, secured=True))
    spec = beacon_spec()
    if cargo_manager:
        cm = "cargo manager"
        app.router.add_post("/cargos", beacon.route(cm, secured=True))
        app.router.add_get("/cargos", beacon.route(cm, secured=False))
        app.router.add_delete("/cargos/{cargo_id}", beacon.route(cm, secured=True))
        spec["paths"].update(beacon_storage_paths())
    app.router.add_get("/health", beacon.handle_health)
    add_openapi(app, spec)
    app.on_startup.append(beacon.start)
    app.on_cleanup.append(beacon.stop)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m nodes.armada.beacon", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--app-manager", required=True, help="http://host:port")
    parser.add_argument("--spinner", required=True, help="http://host:port")
    parser.add_argument("--cargo-manager", help="http://host:port (storage layer)")
    parser.add_argument("--token", action="append", default=[], help="repeatable")
    parser.add_argument("--tokens", help="file with one token per line")
    parser.add_argument("--timeout-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    tokens = list(args.token)
    if args.tokens:
        try:
            tokens += load_tokens(args.tokens)
        except OSError as exc:
            parser.error(f"--tokens: cannot read {args.tokens}: {exc.strerror}")
    if not tokens:
        parser.error("at least one token is required (--token or --tokens)")
    configure_logging()
    app = make_app(args.app_manager, args.spinner, tokens, args.timeout_s, args.cargo_manager)
    serve(app, args.host, args.port, logger=_log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
