"""The Beacon's user tokens: credentials of deployers and resource contributors.

Tokens come from a file (``--tokens FILE``, one per line; never from the command line,
where ``ps`` would show them). The Beacon accepts them, and the run secret
(:mod:`nodes.secret`), on its state-changing requests; comparisons are constant-time and
on bytes (:func:`nodes.secret.check_credential`).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path


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
