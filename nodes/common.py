"""What every aiohttp service of the testbed shares.

* Errors are JSON: every 4xx/5xx response carries ``{"error": reason}``, including the
  404/405/413 that aiohttp raises itself (:func:`json_errors` middleware), so a client
  (the dispatcher, a test, a human with curl) always learns what was wrong.
* Request bodies are validated against a small field table (:func:`read_json_object`);
  the reason names the field, what was expected and what was found, and unknown fields
  are refused so a typo never passes silently.
* :func:`sleep_until` waits for a loop-clock deadline to within tens of microseconds,
  which plain :func:`asyncio.sleep` (millisecond-granular ``epoll``) does not.
* Routes are declared once, as a table of :class:`Route` (method, path, handler and
  the endpoint's OpenAPI operation): :func:`add_routes` builds the router from it and
  serves the OpenAPI document generated from the same table at ``GET /openapi.json``.
* :func:`serve` runs an app until SIGTERM/SIGINT and then shuts it down gracefully,
  logging exactly one ``listening on host:port`` line (with the real port when 0 was
  asked for, so a parent process can read it); :func:`free_port` finds a port to bind.
* :func:`run_service` is every service's ``main``: ``--host``/``--port``, the options of
  the service's parameter dataclass (:mod:`nodes.config`), logging, the app, serving.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from nodes.config import CannotStart, add_options, fields_of, params_from_args
from nodes.secret import SECRET_ENV, SECRET_KEY, SecretError, require_secret, secret_from
from testbed.checks import is_int, is_number, is_text, unclean_text_at

#: Largest request body any service accepts; larger ones get 413.
MAX_BODY_BYTES = 64 * 1024
#: Default of how long a connection may take to send a complete request head (request
#: line and headers), counted from the connection's start or the previous response; a
#: slower or idle connection is closed (:func:`serve_async`).
HEADER_TIMEOUT_S = 30.0
#: Default of how long a request's body may take to arrive once its head has; a slower
#: one is answered 408 and its connection closed (:func:`read_body_in_time`).
BODY_TIMEOUT_S = 30.0
#: Where :func:`serve_async` keeps its body timeout on the application.
BODY_TIMEOUT_KEY = web.AppKey("body_timeout_s", float)

#: How long before a deadline :func:`sleep_until` stops sleeping on the selector and
#: yields in a tight cooperative loop instead. ``epoll`` rounds timeouts up to whole
#: milliseconds and the kernel adds a few hundred microseconds of jitter, so 2 ms
#: covers both; the price is at most 2 ms of spinning per wait.
SPIN_MARGIN_S = 0.002

_log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- errors


def json_error(status: int, reason: str, headers: Mapping[str, str] | None = None) -> web.Response:
    """A JSON error response ``{"error": reason}`` with the given HTTP status."""
    return web.json_response({"error": reason}, status=status, headers=headers)


def client_error(kind: type[web.HTTPException], reason: str) -> web.HTTPException:
    """An exception of HTTP class ``kind`` (e.g. ``web.HTTPConflict``) with a JSON body.

    Raising (rather than returning) lets validation helpers stop a handler from deep
    inside; the :func:`json_errors` middleware leaves JSON bodies untouched.
    """
    return kind(text=json.dumps({"error": reason}), content_type="application/json")


def _reason_for(request: web.Request, exc: web.HTTPException) -> str:
    """A readable reason for an HTTP error aiohttp raised itself (plain-text body)."""
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return f"method {exc.method} not allowed on {request.path}; allowed: {allowed}"
    if isinstance(exc, web.HTTPNotFound):
        return f"no such endpoint: {request.path}"
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return f"body: expected at most {request.client_max_size} bytes, found more"
    return exc.text or exc.reason


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Turn every HTTP error into a JSON ``{"error": ...}`` response.

    A non-HTTP exception is a bug in the service, not the client's fault: it is logged
    with its traceback and answered with 500 so the connection never hangs.
    """
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return json_error(exc.status, _reason_for(request, exc), headers)
    except Exception as exc:  # noqa: BLE001 - the last line of defence, logged below
        _log.exception("internal error handling %s %s", request.method, request.path)
        return json_error(500, f"internal error: {type(exc).__name__}")


async def read_body_in_time(request: web.Request) -> bytes:
    """``request``'s body, read within its application's body timeout
    (:data:`BODY_TIMEOUT_KEY`, set by :func:`serve_async`, else :data:`BODY_TIMEOUT_S`).

    A client that sends its body too slowly gets 408 and its connection closed right
    after the answer, instead of holding a handler (and whatever the handler holds) for
    as long as it likes; a body over the size limit gets aiohttp's 413 as with
    ``request.read()``. Every service reads its bodies here (JSON ones through
    :func:`read_json_object`, the tasks' frames, the Beacon's forwarding).
    """
    timeout = request.app.get(BODY_TIMEOUT_KEY, BODY_TIMEOUT_S)
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        reason = f"body: expected the whole body within {timeout:g} s, found it still arriving"
        exc = client_error(web.HTTPRequestTimeout, reason)
        exc.force_close()  # no keep-alive: the rest of a slow body is not waited for ...
        # ... nor read after the answer: aiohttp "lingers" on an unread body for up to
        # 10 s before it closes, and ends that at once when the body raises a timeout.
        request.content.set_exception(TimeoutError(reason))
        raise exc from None


def make_base_app() -> web.Application:
    """An application with JSON errors and the body-size limit every service uses."""
    return web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)


# ------------------------------------------------------------------------ routes

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One endpoint of a service: ``method`` on ``path`` is served by ``handler``; what
    it does is ``summary``, and ``operation`` holds the rest of its OpenAPI operation
    object (request body, responses, security). A service lists its routes once;
    :func:`add_routes` makes the router, and the OpenAPI document when it has one,
    from that list."""

    method: str
    path: str
    handler: Handler
    summary: str
    operation: Mapping[str, Any] = field(default_factory=dict)
    #: Who may call it: :data:`SECRET` (the run's services and harness, with the run
    #: secret), :data:`PUBLIC` (anyone), :data:`OWN` (the handler checks a credential of
    #: its own, as the Beacon's user tokens). ``None``: :data:`SECRET` for a method that
    #: changes state (POST, PUT, PATCH, DELETE), :data:`PUBLIC` for GET.
    auth: str | None = None

    def access(self) -> str:
        """Who may call the route (``auth``, its default resolved)."""
        if self.auth is not None:
            return self.auth
        return PUBLIC if self.method in ("GET", "HEAD") else SECRET


#: Route access: the run secret is needed.
SECRET = "secret"
#: Route access: anyone may call it (reads, queries, the workload requests a service
#: exists to serve); such a route must change nothing others rely on.
PUBLIC = "public"
#: Route access: the handler checks a credential of its own.
OWN = "own"
_ACCESS = (SECRET, PUBLIC, OWN)


#: The route table of an application, as :func:`add_routes` registered it (tests check
#: every route's access against it).
ROUTES_KEY = web.AppKey("routes", list)
#: The path of a service's OpenAPI document.
OPENAPI_PATH = "/openapi.json"
#: The document a service serves, kept on its application (tests compare it with the
#: router).
OPENAPI_KEY = web.AppKey("openapi", dict)
#: The operation of a route that declares none: a JSON success, or a JSON error.
_DEFAULT_OPERATION: Mapping[str, Any] = {
    "responses": {
        "200": {"description": "success",
                "content": {"application/json": {"schema": {"type": "object"}}}},
        "default": {"description": "an error ({\"error\": reason})",
                    "content": {"application/json": {"schema": {
                        "type": "object", "required": ["error"],
                        "properties": {"error": {"type": "string"}}}}}},
    },
}
_OPENAPI_OPERATION = {
    "responses": {"200": {"description": "success",
                          "content": {"application/json": {"schema": {"type": "object"}}}}},
}


def openapi_document(info: Mapping[str, Any], routes: Iterable[Route],
                     components: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.0 document of ``routes``: one path item per path, one operation
    per method, in the order of the table."""
    paths: dict[str, dict[str, Any]] = {}
    secured = False
    for route in routes:
        operation = {"summary": route.summary, **(route.operation or _DEFAULT_OPERATION)}
        if route.access() != PUBLIC:
            secured = True
            operation["security"] = [{"bearer": []}]
            responses = dict(operation.get("responses", {}))
            for code, reason in (("401", "no or malformed Authorization header"),
                                 ("403", "credential not accepted")):
                responses.setdefault(code, {"description": reason, "content": {
                    "application/json": {"schema": _ERROR_SCHEMA}}})
            operation["responses"] = responses
        item = paths.setdefault(route.path, {})
        item[route.method.lower()] = operation
        for name in re.findall(r"{(\w+)}", route.path):  # every path parameter declared
            declared = item.setdefault("parameters", [])
            if all(p.get("name") != name for p in declared):
                declared.append({"name": name, "in": "path", "required": True,
                                 "schema": {"type": "string", "minLength": 1}})
    document: dict[str, Any] = {"openapi": "3.0.3", "info": dict(info), "paths": paths}
    if components is not None or secured:
        document["components"] = dict(components or {})
    if secured:
        schemes = dict(document["components"].get("securitySchemes", {}))
        schemes.setdefault("bearer", {"type": "http", "scheme": "bearer"})
        document["components"]["securitySchemes"] = schemes
    return document


_ERROR_SCHEMA = {"type": "object", "required": ["error"],
                 "properties": {"error": {"type": "string"}}}


def add_routes(app: web.Application, routes: Iterable[Route],
               info: Mapping[str, Any] | None = None,
               components: Mapping[str, Any] | None = None) -> None:
    """Register ``routes`` on ``app``. With ``info`` (the document's ``info`` object:
    title, version, description) also serve their OpenAPI document at ``GET
    /openapi.json``, which describes itself too; the document is ``app[OPENAPI_KEY]``."""
    table = list(routes)
    document: dict[str, Any] = {}

    async def handle_openapi(request: web.Request) -> web.Response:
        """``GET /openapi.json``."""
        return web.json_response(document)

    if info is not None:
        table.append(Route("GET", OPENAPI_PATH, handle_openapi, "this description",
                           _OPENAPI_OPERATION))
    for route in table:
        if route.access() not in _ACCESS:
            raise ValueError(f"{route.method} {route.path}: auth must be one of "
                             f"{', '.join(_ACCESS)}, found {route.auth!r}")
        handler = require_secret(route.handler) if route.access() == SECRET else route.handler
        if route.method == "GET":  # with HEAD, as aiohttp's add_get does
            app.router.add_get(route.path, handler)
        else:
            app.router.add_route(route.method, route.path, handler)
    app[ROUTES_KEY] = [*app.get(ROUTES_KEY, []), *table]
    if info is not None:
        document.update(openapi_document(info, table, components))
        app[OPENAPI_KEY] = document


# ---------------------------------------------------------------- body validation


@dataclass(frozen=True)
class Field:
    """One accepted field of a JSON request body.

    ``accepts`` decides whether a decoded JSON value is valid; ``expected`` says in words
    what a valid value looks like (it goes into the error message).
    """

    expected: str
    accepts: Callable[[Any], bool]
    required: bool = True


def int_field(lo: int | None = None, hi: int | None = None, required: bool = True) -> Field:
    """An integer field, optionally bounded (inclusive); booleans are refused."""
    bounds = [f">= {lo}"] if lo is not None else []
    bounds += [f"<= {hi}"] if hi is not None else []
    expected = "integer" + (" " + " and ".join(bounds) if bounds else "")
    return Field(
        expected,
        lambda v: is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi),
        required,
    )


def positive_number_field(required: bool = True) -> Field:
    """A finite number > 0 (integers accepted), as durations and sizes are."""
    return Field(
        "finite number > 0",
        lambda v: is_number(v, finite=True) and v > 0,
        required,
    )


def str_field(required: bool = True) -> Field:
    """A non-empty string."""
    return Field("non-empty string", lambda v: is_text(v, nonempty=True), required)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def describe(value: Any) -> str:
    """Show a decoded JSON value for an error message: short JSON text and its type."""
    shown = json.dumps(value, allow_nan=True)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{shown} ({_json_type(value)})"


async def read_json_object(request: web.Request, fields: Mapping[str, Field]) -> dict[str, Any]:
    """Read the request body as a JSON object whose fields all satisfy ``fields``.

    Raises a 400 :func:`client_error` naming the first offending field (or ``body`` when
    the body is not a JSON object at all), and lets aiohttp's 413 through when the body
    exceeds :data:`MAX_BODY_BYTES`. Missing optional fields are simply absent from the
    result.
    """
    raw = await read_body_in_time(request)
    try:
        body = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, huge ints, deep nesting
        found = "an empty body" if not raw.strip() else f"invalid JSON ({exc})"
        reason = f"body: expected a JSON object, found {found}"
        raise client_error(web.HTTPBadRequest, reason) from None
    if not isinstance(body, dict):
        reason = f"body: expected a JSON object, found {describe(body)}"
        raise client_error(web.HTTPBadRequest, reason)
    unclean = unclean_text_at(body)
    if unclean is not None:
        reason = f"{unclean}: expected text without NUL or lone surrogates, found one"
        raise client_error(web.HTTPBadRequest, reason)
    for name in body:
        if name not in fields:
            allowed = ", ".join(sorted(fields))
            reason = f"{name}: expected one of the fields {allowed}, found an unknown field"
            raise client_error(web.HTTPBadRequest, reason)
    for name, spec in fields.items():
        if name not in body:
            if spec.required:
                reason = f"{name}: expected {spec.expected}, found nothing"
                raise client_error(web.HTTPBadRequest, reason)
            continue
        if not spec.accepts(body[name]):
            reason = f"{name}: expected {spec.expected}, found {describe(body[name])}"
            raise client_error(web.HTTPBadRequest, reason)
    return body


# ------------------------------------------------------------------------- timing


async def sleep_until(deadline: float) -> None:
    """Return as soon as the running loop's clock reaches ``deadline`` (``loop.time()``).

    Sleeps on the selector until :data:`SPIN_MARGIN_S` before the deadline, then yields
    with ``asyncio.sleep(0)`` until it is reached, so other tasks keep running while the
    wake-up lands within tens of microseconds instead of up to ~1.5 ms late.
    """
    loop = asyncio.get_running_loop()
    coarse = deadline - SPIN_MARGIN_S - loop.time()
    if coarse > 0:
        await asyncio.sleep(coarse)
    while loop.time() < deadline:
        await asyncio.sleep(0)


# ------------------------------------------------------------------------ serving


def free_port() -> int:
    """A TCP port nobody listens on right now (for a server bound a moment later)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class MalformedRequestLine(logging.Filter):
    """Turns aiohttp's report of a request it could not parse (``Error handling request
    from PEER`` with a ``BadHttpMessage`` traceback, logged by ``aiohttp.server``) into
    one line: ``malformed request from PEER: REASON``. A malformed request is the
    client's mistake, answered 400; a traceback of aiohttp's parser helps nobody and
    lets any client fill the log with a few bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else None
            lines = str(exc.message or exc).strip().splitlines() or [type(exc).__name__]
            reason = lines[0].strip().rstrip(":").encode("ascii", "backslashreplace").decode()
            record.msg = "malformed request from %s: %s"
            record.args = (peer or "an unknown peer", reason)
            record.exc_info = None
            record.exc_text = None
        return True


_MALFORMED_REQUEST_LINE = MalformedRequestLine()


def configure_logging() -> None:
    """Log INFO and above to stderr as ``logger: message``; services print nothing else."""
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)


async def serve_async(
    app: web.Application,
    host: str,
    port: int,
    *,
    logger: logging.Logger = _log,
    shutdown_timeout: float = 10.0,
    backlog: int = 128,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> None:
    """Serve ``app`` on ``host:port`` until SIGTERM or SIGINT, then shut down gracefully.

    Graceful means: stop accepting connections, give in-flight requests up to
    ``shutdown_timeout`` seconds to finish, then run the app's cleanup hooks. A handler
    whose client disconnects is cancelled (as under aiohttp's test server, so tests see
    the production behaviour). The access log is off (one line per request would drown
    the emulation host's logs). ``backlog`` is the listen backlog (a service that takes
    a thousand connections at once needs more than the default 128).

    Slow clients are closed: a connection that has not sent a complete request head
    ``header_timeout_s`` after it opened, or after its previous response, is closed
    (aiohttp's keep-alive timer, which runs from the connection's start), and a body
    still arriving ``body_timeout_s`` after its head gets 408 (:func:`read_body_in_time`, used by
    :func:`read_json_object`). A
    request aiohttp cannot parse is logged as one line (:class:`MalformedRequestLine`).
    """
    logging.getLogger("aiohttp.server").addFilter(_MALFORMED_REQUEST_LINE)
    app[BODY_TIMEOUT_KEY] = body_timeout_s
    runner = web.AppRunner(
        app, access_log=None, shutdown_timeout=shutdown_timeout, handler_cancellation=True,
        keepalive_timeout=header_timeout_s,
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.TCPSite(runner, host, port, backlog=backlog).start()
        bound_port = runner.addresses[0][1] if runner.addresses else port
        logger.info("listening on %s:%s", host, bound_port)
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()


def serve(app: web.Application, host: str, port: int, *, logger: logging.Logger = _log,
          backlog: int = 128) -> None:
    """Blocking form of :func:`serve_async`, for a service's ``main``."""
    asyncio.run(serve_async(app, host, port, logger=logger, backlog=backlog))


# ------------------------------------------------------------------------ running


class Address(NamedTuple):
    """Where a service listens (``--host``, ``--port``)."""

    host: str
    port: int

    def reachable_host(self, advertised: str | None = None) -> str:
        """The host others use to reach the service: ``advertised`` when given, else
        the listening host (127.0.0.1 for the wildcard 0.0.0.0)."""
        if advertised:
            return advertised
        return "127.0.0.1" if self.host == "0.0.0.0" else self.host

    def url(self, advertised: str | None = None) -> str:
        """``http://<reachable host>:<port>``."""
        return f"http://{self.reachable_host(advertised)}:{self.port}"


P = TypeVar("P")


def _port(text: str) -> int:
    """An argparse ``type``: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 65535], found {text!r}")
    return value


def run_service(
    config_cls: type[P],
    make_app_from_config: Callable[[P, Address], web.Application],
    argv: Sequence[str] | None = None,
    *,
    prog: str,
    description: str,
    port: int,
    logger: logging.Logger,
    server: Callable[..., None] = serve,
    pick_free_port: bool = False,
) -> int:
    """Every service's ``main``: parse ``--host`` (default 127.0.0.1: a service started
    by hand is not on the machine's real interfaces; the emulation passes 0.0.0.0,
    which its host's network namespace confines), ``--port`` (default ``port``),
    ``--secret-file`` and the options of ``config_cls``; read the run secret
    (:func:`nodes.secret.secret_from`: the file given, else ``$TESTBED_SECRET_FILE``);
    configure logging; build the app with ``make_app_from_config(params, address)``,
    which keeps the secret as ``app[SECRET_KEY]``; serve it with ``server``
    (:func:`serve`, or a variant such as person search's larger backlog) until
    SIGTERM/SIGINT. Without a readable secret the service refuses to start.

    A bad option exits with status 2 naming it. A service that must know its own port
    before it listens (it advertises its URL) sets ``pick_free_port``: ``--port 0`` then
    means a free port chosen before the app is built. When the factory raises
    :class:`~nodes.config.CannotStart`, the runner logs ``refusing to start: <reason>``
    and returns 1; otherwise it returns 0 after a graceful stop.
    """
    clash = {f.name for f in fields_of(config_cls)} & {"host", "port", "secret_file"}
    if clash:
        raise TypeError(f"{config_cls.__name__}: {min(clash)} is the runner's option")
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=port,
                        help=f"port to listen on, 0 for any free one (default: {port})")
    parser.add_argument("--secret-file", metavar="PATH",
                        help="file holding the run secret (mode 0600; default: "
                             "$TESTBED_SECRET_FILE)")
    add_options(parser, config_cls)
    args = parser.parse_args(argv)
    params = params_from_args(config_cls, args, parser)
    address = Address(args.host, (args.port or free_port()) if pick_free_port else args.port)
    configure_logging()
    try:
        secret = secret_from(args.secret_file)
        app = make_app_from_config(params, address)
    except (CannotStart, SecretError) as exc:
        logger.error("refusing to start: %s", exc)
        return 1
    app[SECRET_KEY] = secret
    if args.secret_file:  # the programs a service starts (a Captain's tasks) find it too
        os.environ[SECRET_ENV] = str(Path(args.secret_file).resolve())
    server(app, address.host, address.port, logger=logger)
    return 0
