"""The echo system's placement rules, the same objects for both executors: ``first``,
``round-robin`` and ``broken``, which fails on a client's third ping (a policy that
breaks mid-run, for the tests of failure isolation)."""

from __future__ import annotations


def choose(policy: str, k: int, servers: int) -> int:
    """The server index for a client's ``k``-th ping."""
    if policy == "broken" and k == 2:
        raise RuntimeError("broken: fails on a client's third ping")
    return 0 if policy == "first" else k % servers
