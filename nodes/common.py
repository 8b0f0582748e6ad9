"""What every aiohttp service of the testbed shares.

* Errors are JSON: every 4xx/5xx response carries ``{"error": reason}``, including the
  404/405/413 that aiohttp raises itself (:func:`json_errors` middleware), so a client
  (the dispatcher, a test, a human with curl) always learns what was wrong.
* Request bodies are validated against a small field table (:func:`read_json_object`);
  the reason names the field, what was expected and what was found, and unknown fields
  are refused so a typo never passes silently.
* :func:`sleep_until` waits for a loop-clock deadline to within tens of microseconds,
  which plain :func:`asyncio.sleep` (millisecond-granular ``epoll``) does not.
* :func:`serve` runs an app until SIGTERM/SIGINT and then shuts it down gracefully,
  logging exactly one ``listening on host:port`` line (with the real port when 0 was
  asked for, so a parent process can read it); :func:`free_port` finds a port to bind.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

#: Largest request body any service accepts; larger ones get 413.
MAX_BODY_BYTES = 64 * 1024

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
        return f"body: expected at most {MAX_BODY_BYTES} bytes, found more"
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


def make_base_app() -> web.Application:
    """An application with JSON errors and the body-size limit every service uses."""
    return web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)


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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def int_field(lo: int | None = None, hi: int | None = None, required: bool = True) -> Field:
    """An integer field, optionally bounded (inclusive); booleans are refused."""
    bounds = [f">= {lo}"] if lo is not None else []
    bounds += [f"<= {hi}"] if hi is not None else []
    expected = "integer" + (" " + " and ".join(bounds) if bounds else "")
    return Field(
        expected,
        lambda v: _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi),
        required,
    )


def positive_number_field(required: bool = True) -> Field:
    """A finite number > 0 (integers accepted), as durations and sizes are."""
    return Field(
        "finite number > 0",
        lambda v: _is_number(v) and math.isfinite(v) and v > 0,
        required,
    )


def str_field(required: bool = True) -> Field:
    """A non-empty string."""
    return Field("non-empty string", lambda v: isinstance(v, str) and v != "", required)


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
    raw = await request.read()
    try:
        body = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, huge ints, deep nesting
        found = "an empty body" if not raw.strip() else f"invalid JSON ({exc})"
        reason = f"body: expected a JSON object, found {found}"
        raise client_error(web.HTTPBadRequest, reason) from None
    if not isinstance(body, dict):
        reason = f"body: expected a JSON object, found {describe(body)}"
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
) -> None:
    """Serve ``app`` on ``host:port`` until SIGTERM or SIGINT, then shut down gracefully.

    Graceful means: stop accepting connections, give in-flight requests up to
    ``shutdown_timeout`` seconds to finish, then run the app's cleanup hooks. A handler
    whose client disconnects is cancelled (as under aiohttp's test server, so tests see
    the production behaviour). The access log is off (one line per request would drown
    the emulation host's logs). ``backlog`` is the listen backlog (a service that takes
    a thousand connections at once needs more than the default 128).
    """
    runner = web.AppRunner(
        app, access_log=None, shutdown_timeout=shutdown_timeout, handler_cancellation=True
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
