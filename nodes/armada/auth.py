"""Bearer-token checks for the Beacon's state-changing endpoints.

Tokens come from the command line (``--token``) or a file (one per line). A request
without a proper ``Authorization: Bearer <token>`` header is refused with 401, one with
an unknown token with 403, before its body is read: a refused request changes nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web

from nodes.common import client_error


def load_tokens(path: str | Path) -> set[str]:
    """Tokens of a file: one per line; blank lines and ``#`` comments are ignored."""
    tokens = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        token = line.split("#", 1)[0].strip()
        if token:
            tokens.add(token)
    return tokens


class TokenChecker:
    """Holds the accepted tokens and checks requests against them."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens = [t.encode() for t in tokens if t]
        if not self._tokens:
            raise ValueError("at least one token is required")

    def accepts(self, token: str) -> bool:
        """Whether ``token`` is one of ours (constant-time comparison per token)."""
        given = token.encode()
        return any(hmac.compare_digest(given, mine) for mine in self._tokens)

    def check(self, request: web.Request) -> None:
        """Raise 401 (no or malformed header) or 403 (unknown token) for ``request``."""
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            found = "nothing" if not header else "a malformed header"
            error = client_error(
                web.HTTPUnauthorized,
                f"authorization: expected 'Bearer <token>', found {found}",
            )
            error.headers["WWW-Authenticate"] = "Bearer"
            raise error
        if not self.accepts(token.strip()):
            raise client_error(web.HTTPForbidden, "authorization: token not accepted")
