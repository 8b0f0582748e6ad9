"""The run secret: the one credential every service checks on its state-changing requests.

The harness makes a fresh random secret for each run and hands it to every service it
starts as a *file path* (``--secret-file PATH`` or the environment variable
``TESTBED_SECRET_FILE``): the value never appears on a command line, in a scenario or in
a results folder. A file another user may read is refused, as ``ssh`` refuses a private
key left open.

A service keeps its secret on its application (``app[SECRET_KEY]``). Routes that change
state are wrapped by :func:`require_secret`: a request without ``Authorization: Bearer
<secret>`` is refused with 401, one with a wrong credential with 403, before its body
is read, so a refused request changes nothing. Comparisons are constant-time
(:func:`hmac.compare_digest`) and work on bytes, so a header that is not UTF-8 is just a
wrong credential, never an encoding error. Services present the same secret to each
other through :func:`peer_session`, and only where it is needed: on state-changing
requests (POST, PUT, PATCH, DELETE), never on a read (GET, HEAD: every read is public),
and never after a redirect, so a health check or a status read carries no credential to
whatever URL it goes to.

This module imports only aiohttp and the standard library (``nodes.common`` builds on it).
"""

from __future__ import annotations

import functools
import hmac
import json
import os
import stat
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

#: The environment variable naming the secret file (the value itself is never passed).
SECRET_ENV = "TESTBED_SECRET_FILE"
#: The shortest secret accepted: anything shorter is guessable.
MIN_SECRET_CHARS = 16
#: What a redacted secret becomes in logs and metadata.
REDACTED = "<redacted>"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class SecretError(Exception):
    """The secret cannot be had: no file named, the file unreadable, open to others,
    empty or too short. The message is one line naming the file."""


class RunSecret:
    """A run's secret. Its ``repr`` never shows the value, so it cannot leak into a log
    or a traceback by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        value = value.strip()
        if len(value) < MIN_SECRET_CHARS or not value.isascii() or not value.isprintable() \
                or any(c.isspace() for c in value):
            raise SecretError(f"a secret of at least {MIN_SECRET_CHARS} printable ASCII "
                              "characters without spaces is needed")
        self._value = value

    @property
    def value(self) -> str:
        """The secret itself (for a header or a file; never for a log)."""
        return self._value

    def header(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <secret>"}``: how a service presents it."""
        return {"Authorization": f"Bearer {self._value}"}

    def accepts(self, presented: bytes) -> bool:
        """Whether ``presented`` is this secret (constant-time)."""
        return hmac.compare_digest(presented, self._value.encode("ascii"))

    def __repr__(self) -> str:
        return f"RunSecret({REDACTED})"


def make_secret() -> RunSecret:
    """A fresh random secret (256 bits, URL-safe text)."""
    import secrets

    return RunSecret(secrets.token_urlsafe(32))


def write_secret_file(path: str | Path, secret: RunSecret) -> Path:
    """Write ``secret`` to ``path``, readable and writable by its owner only (created so:
    the value is never on disk with wider permissions, not even for a moment)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (secret.value + "\n").encode("ascii"))
    finally:
        os.close(fd)
    return path


def read_secret_file(path: str | Path) -> RunSecret:
    """The secret held in ``path``; :class:`SecretError` naming the file when it cannot be
    read, is not a regular file, may be read by group or others, or holds no secret."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SecretError(f"secret file {path}: cannot open it: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"secret file {path}: expected a regular file")
        if info.st_mode & 0o077:
            raise SecretError(f"secret file {path}: expected permissions 0600 or stricter, "
                              f"found {stat.S_IMODE(info.st_mode):04o}")
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        return RunSecret(raw.decode("ascii"))
    except (UnicodeDecodeError, SecretError) as exc:
        reason = exc if isinstance(exc, SecretError) else "it is not ASCII text"
        raise SecretError(f"secret file {path}: {reason}") from None


def secret_from(path: str | None, environ: Mapping[str, str] | None = None) -> RunSecret:
    """The secret of ``--secret-file PATH``, else of ``$TESTBED_SECRET_FILE``;
    :class:`SecretError` when neither names a file."""
    environ = os.environ if environ is None else environ
    chosen = path or environ.get(SECRET_ENV)
    if not chosen:
        raise SecretError(f"no run secret: give --secret-file PATH or set {SECRET_ENV}")
    return read_secret_file(chosen)


# ----------------------------------------------------------------- checking requests

#: Where a service keeps its secret.
SECRET_KEY = web.AppKey("run_secret", RunSecret)


def _refusal(kind: type[web.HTTPException], reason: str) -> web.HTTPException:
    error = kind(text=json.dumps({"error": reason}), content_type="application/json")
    if kind is web.HTTPUnauthorized:
        error.headers["WWW-Authenticate"] = "Bearer"
    return error


def presented_token(request: web.BaseRequest) -> bytes:
    """The bearer credential of ``request`` as bytes; a 401 when the header is missing
    or is not ``Bearer <credential>``. Header text that is not UTF-8 reaches aiohttp as
    surrogate escapes; it is turned back into its bytes, never into an encoding error."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        found = "nothing" if not header else "a malformed header"
        raise _refusal(web.HTTPUnauthorized,
                       f"authorization: expected 'Bearer <credential>', found {found}")
    return token.encode("utf-8", "surrogateescape")


def accepted_credential(request: web.BaseRequest,
                        accepted: Mapping[str, Callable[[bytes], bool]]) -> str:
    """The name of the first of the ``accepted`` checks that takes the request's bearer
    credential (the Beacon tells a run secret from a user token so); 401 (no or
    malformed header) or 403 (taken by none) otherwise."""
    token = presented_token(request)
    for name, accepts in accepted.items():
        if accepts(token):
            return name
    raise _refusal(web.HTTPForbidden, "authorization: credential not accepted")


def check_credential(request: web.BaseRequest,
                     accepted: Iterable[Callable[[bytes], bool]]) -> None:
    """Raise 401 (no or malformed header) or 403 (not accepted) unless one of the
    ``accepted`` checks takes the request's bearer credential."""
    accepted_credential(request, {str(i): check for i, check in enumerate(accepted)})


def check_secret(request: web.BaseRequest) -> None:
    """Raise 401/403 unless ``request`` carries its application's run secret. A service
    that holds no secret refuses every change (it never falls back to open)."""
    secret = request.app.get(SECRET_KEY)
    if secret is None:
        presented_token(request)
        raise _refusal(web.HTTPForbidden, "authorization: this service holds no run "
                                          "secret, so it accepts no change")
    check_credential(request, [secret.accepts])


def require_secret(handler: Handler) -> Handler:
    """``handler`` behind :func:`check_secret`."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        check_secret(request)
        return await handler(request)

    return guarded


#: The methods that change state: the only ones a credential is sent on.
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def changes_state(method: str) -> bool:
    """Whether a request of ``method`` changes state, so needs the run secret. Reads
    (GET, HEAD) never do: every read of every service is public, and a credential sent
    on one would only reach whoever the URL names."""
    return method.upper() in STATE_CHANGING


def environment_headers(method: str, environ: Mapping[str, str] | None = None
                        ) -> dict[str, str]:
    """The run secret's header for a ``method`` request of an in-host client started by
    the harness or a Captain (its ``$TESTBED_SECRET_FILE``); none for a read
    (:func:`changes_state`) or when no file is named. A named file that cannot be read
    is a :class:`SecretError`."""
    environ = os.environ if environ is None else environ
    path = environ.get(SECRET_ENV)
    if not path or not changes_state(method):
        return {}
    if path not in _READ:
        _READ[path] = read_secret_file(path)
    return _READ[path].header()


_READ: dict[str, RunSecret] = {}  # secrets already read, by file (a client asks per request)


def peer_headers(app: web.Application) -> dict[str, str]:
    """The header a service presents to its peers: its run secret, if it has one. For a
    state-changing request only (:func:`changes_state`), to one of the run's own
    services."""
    secret = app.get(SECRET_KEY)
    return secret.header() if secret is not None else {}


_REDIRECTS = frozenset({301, 302, 303, 307, 308})  # the answers aiohttp follows


class RedirectRefused(aiohttp.ClientError):
    """A peer answered a state-changing request with a redirect: not followed, as the
    run secret would follow it to wherever it points."""


def secret_middleware(secret: RunSecret | None) -> aiohttp.ClientMiddlewareType:
    """A client middleware presenting ``secret`` on state-changing requests that carry
    no ``Authorization`` of their own, and refusing (:class:`RedirectRefused`) to
    follow a redirect of such a request: the services never redirect, and a followed
    redirect would take the secret to the URL it names."""

    async def present(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
                      ) -> aiohttp.ClientResponse:
        if secret is None or not changes_state(request.method) \
                or "Authorization" in request.headers:
            return await handler(request)
        request.headers["Authorization"] = secret.header()["Authorization"]
        response = await handler(request)
        if response.status in _REDIRECTS:
            response.release()
            raise RedirectRefused(f"{request.method} {request.url} answered "
                                  f"{response.status} (a redirect): not followed")
        return response

    return present


def peer_session(app: web.Application, **kwargs: Any) -> aiohttp.ClientSession:
    """A client session for calls to the run's own services: its state-changing
    requests carry the run secret (:func:`secret_middleware`), its reads carry none.
    Never use it for a state-changing request to a URL a client chose (the secret would
    go there); a read may go anywhere."""
    return aiohttp.ClientSession(middlewares=(secret_middleware(app.get(SECRET_KEY)),),
                                 **kwargs)
