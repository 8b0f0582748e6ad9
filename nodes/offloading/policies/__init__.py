"""Placement policies, looked up by name.

:data:`POLICIES` maps a policy name (as written in scenarios and on the command line) to
its class; :func:`make_policy` builds a fresh, seeded instance, optionally with keyword
parameters (e.g. ``penalty`` of the queue-aware policies) for sensitivity studies, and
:func:`policy_variants` builds one instance per value of such a parameter. The interface
every policy implements lives in :mod:`nodes.offloading.policies.base`; ``docs/policies.md``
defines each policy exactly.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from nodes.offloading.policies.base import Policy
from nodes.offloading.policies.edge_first import EdgeFirstPolicy
from nodes.offloading.policies.jsq import JSQPolicy, JSQScaledPolicy
from nodes.offloading.policies.oracle import OraclePolicy
from nodes.offloading.policies.queue_aware import (
    HybridFixedBetaPolicy,
    HybridGlobalRatePolicy,
    HybridPolicy,
    ModelOnlyPolicy,
    QueueOnlyPolicy,
)
from nodes.offloading.policies.random_policy import RandomPolicy
from testbed.errors import TestbedError

#: How a policy reports a bad parameter (``policy 'p': field: expected ..., found ...``).
_PARAM_ERROR = re.compile(r"policy '[^']*': (?P<field>\w+): (?P<rest>expected .*)", re.DOTALL)

POLICIES: dict[str, type[Policy]] = {
    "edge-first": EdgeFirstPolicy,
    "random": RandomPolicy,
    "jsq": JSQPolicy,
    "jsq-s": JSQScaledPolicy,
    "model-only": ModelOnlyPolicy,
    "queue-only": QueueOnlyPolicy,
    "hybrid": HybridPolicy,
    "hybrid-global-rate": HybridGlobalRatePolicy,
    "hybrid-fixed-beta": HybridFixedBetaPolicy,
    "oracle": OraclePolicy,
}


def policy_params(name: str) -> tuple[str, ...]:
    """The keyword parameters policy ``name`` accepts (besides ``seed``), sorted."""
    cls = _lookup(name)
    return tuple(sorted(f.name for f in dataclasses.fields(cls) if f.init and f.name != "seed"))


def make_policy(name: str, seed: int, **params: Any) -> Policy:
    """Return a new instance of policy ``name`` seeded with ``seed``.

    ``params`` set the policy's tunables (see :func:`policy_params`). Raises
    :class:`TestbedError` for an unknown name (listing the known ones), an unknown
    parameter (listing the accepted ones) or a value out of range.
    """
    cls = _lookup(name)
    accepted = policy_params(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TestbedError(
            f"policy {name!r}: unknown parameter {', '.join(map(repr, unknown))}; "
            f"accepted: {', '.join(accepted) or 'none'}"
        )
    return cls(seed=seed, **params)


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario loader's check of a policy entry's ``params`` (the offloading
    system's ``policy_params`` hook): returns them as given when policy ``name`` accepts
    them, else raises ``ValueError("params.<field>: expected ..., found ...")``."""
    accepted = policy_params(name)
    for key in params:
        if key not in accepted:
            raise ValueError(f"params.{key}: expected one of the parameters of {name} "
                             f"({', '.join(accepted) or 'none'}), found unknown key")
    try:
        make_policy(name, 0, **params)
    except TestbedError as exc:
        match = _PARAM_ERROR.fullmatch(str(exc))
        if match is None:
            raise ValueError(f"params: expected parameters accepted by {name}, "
                             f"found {exc}") from exc
        raise ValueError(f"params.{match['field']}: {match['rest']}") from exc
    return dict(params)


def policy_variants(
    name: str, seed: int, param: str, values: Iterable[Any], **params: Any
) -> dict[Any, Policy]:
    """One instance of ``name`` per value of ``param`` (the other ``params`` fixed).

    The sensitivity helper of the reports, e.g. ``policy_variants("hybrid", 1,
    "penalty", PENALTY_SWEEP)``; every variant has the same ``seed``, so the sweep
    compares the parameter and nothing else.
    """
    return {value: make_policy(name, seed, **params, **{param: value}) for value in values}


def _lookup(name: str) -> type[Policy]:
    cls = POLICIES.get(name)
    if cls is None:
        raise TestbedError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return cls
