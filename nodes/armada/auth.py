"""The Beacon's user tokens: credentials of deployers and resource contributors.

Tokens come from a file (``--tokens FILE``, one per line; never from the command line,
where ``ps`` would show them). The Beacon accepts them, and the run secret
(:mod:`nodes.secret`), on its state-changing requests; comparisons are constant-time and
on bytes (:func:`nodes.secret.accepted_credential`).

The Beacon forwards with the run secret whatever the caller presented, so it tells the
service behind it which credential that was: a request accepted for a user token
carries :data:`CREDENTIAL_HEADER` ``: user``. Only a holder of the run secret reaches
those services, so the header cannot be forged by a caller; the Spinner and the Cargo
Manager use it to tell a contributor's node from one of the run's own
(:func:`registered_by_user`).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from aiohttp import web

#: The header the Beacon adds to a request it forwards for a user token.
CREDENTIAL_HEADER = "X-Armada-Credential"
#: Its value: the caller presented a user token, not the run secret.
USER_CREDENTIAL = "user"


def load_tokens(path: str | Path) -> set[str]:
    """Tokens of a file: one per line; blank lines and ``#`` comments are ignored."""
    tokens = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        token = line.split("#", 1)[0].strip()
        if token:
            tokens.add(token)
    return tokens


class TokenChecker:
    """Holds the accepted user tokens (possibly none)."""

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self._tokens = [t.encode("utf-8") for t in tokens if t]

    def accepts(self, presented: bytes) -> bool:
        """Whether ``presented`` is one of the tokens (constant-time per token)."""
        return any(hmac.compare_digest(presented, mine) for mine in self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)


def registered_by_user(request: web.BaseRequest) -> bool:
    """Whether the Beacon forwarded ``request`` for a user token (a contributor), not
    for the run secret. A request made with the run secret directly, without the
    Beacon's header, is the run's own."""
    return request.headers.get(CREDENTIAL_HEADER, "").strip().lower() == USER_CREDENTIAL
