"""The echo system's two placement rules, the same objects for both executors."""

from __future__ import annotations


def choose(policy: str, k: int, servers: int) -> int:
    """The server index for a client's ``k``-th ping: ``first`` or ``round-robin``."""
    return 0 if policy == "first" else k % servers
