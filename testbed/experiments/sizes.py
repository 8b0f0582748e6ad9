"""An experiment's sizes: named plans (``small``, ``medium``, ``full``) chosen by ``--size``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from testbed.errors import TestbedError

Plan = TypeVar("Plan")


def size_plan(size: str, sizes: Mapping[str, Plan]) -> Plan:
    """The plan of ``size``, or the CLI's error naming the sizes the experiment has."""
    if size not in sizes:
        raise TestbedError(f"--size: expected one of {', '.join(sizes)}, found {size!r}")
    return sizes[size]
