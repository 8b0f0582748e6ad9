"""Placement policies, looked up by name.

:data:`POLICIES` maps a policy name (as written in scenarios and on the command line) to
its class; :func:`make_policy` builds a fresh, seeded instance. The interface every
policy implements lives in :mod:`testbed.policies.base`.
"""

from __future__ import annotations

from testbed.errors import TestbedError
from testbed.policies.base import Policy
from testbed.policies.jsq import JSQPolicy
from testbed.policies.random_policy import RandomPolicy

POLICIES: dict[str, type[Policy]] = {"jsq": JSQPolicy, "random": RandomPolicy}


def make_policy(name: str, seed: int) -> Policy:
    """Return a new instance of policy ``name`` seeded with ``seed``.

    Raises :class:`TestbedError` listing the known names if ``name`` is unknown.
    """
    cls = POLICIES.get(name)
    if cls is None:
        raise TestbedError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return cls(seed=seed)
