"""Seeded workload generators and their registry.

A generator turns ``(params, clients, duration, seed)`` into a list of
:class:`~workloads.trace.Task`. The same inputs always give the same tasks, so a trace
can be regenerated from its ``trace.json`` and every policy replays identical work.
Each system registers its generators by name (``System.generators``; the registry is
:func:`testbed.registry.generators`, which also looks one up by name with
:func:`testbed.registry.generate`); :func:`generate_with` is the one entry point that runs
a generator. This package holds the generic parts (the protocol, the trace format) and
each system's generators in ``workloads/<system>*.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from testbed.checks import is_int, is_number, is_text
from testbed.errors import TestbedError
from workloads.trace import Task, read_trace, write_trace

__all__ = ["Generator", "Task", "generate_with", "read_trace", "write_trace"]


class Generator(Protocol):
    """What every workload generator provides.

    ``validate`` raises :class:`ValueError` with a message of the form
    ``"params.<field>: expected ..., found ..."`` so the scenario loader can prefix the
    file and path. ``min_service_time`` is the smallest model-time size the generator can
    produce, which lets scenarios check timeouts and time scales before running.
    An optional ``expected_tasks(params, clients, duration) -> float`` says how many tasks
    :meth:`generate` will make (the mean, for a random count), computed from the params
    alone: the run limits (:mod:`testbed.limits`) size a run with it before generating.
    """

    name: str

    def validate(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ValueError` if ``params`` is not acceptable."""
        ...

    def min_service_time(self, params: Mapping[str, Any]) -> float:
        """Return the smallest task size (model seconds) these params can produce."""
        ...

    def generate(
        self, params: Mapping[str, Any], clients: Sequence[str], duration: float, seed: int
    ) -> list[Task]:
        """Return every client's tasks with arrivals in ``[0, duration)``.

        Tasks come sorted by arrival with task ids ``0..n-1`` in that order.
        """
        ...


def generate_with(
    generator: Generator, params: Mapping[str, Any], clients: list[str], duration: float,
    seed: int
) -> list[Task]:
    """Generate ``generator``'s trace: tasks sorted by arrival, ids 0..n-1.

    Raises :class:`TestbedError` for invalid params (carrying the generator's
    ``params.<field>`` message), an empty or duplicated client list, a non-positive
    duration or a negative seed.
    """
    name = generator.name
    if (
        not clients
        or len(set(clients)) != len(clients)
        or not all(is_text(c, nonempty=True) for c in clients)
    ):
        raise TestbedError(f"workload clients must be distinct non-empty names, found {clients!r}")
    if not is_number(duration, finite=True) or not duration > 0:
        raise TestbedError(f"workload duration must be a finite number > 0, found {duration!r}")
    if not is_int(seed) or seed < 0:
        raise TestbedError(f"workload seed must be an integer >= 0, found {seed!r}")
    try:
        generator.validate(params)
    except ValueError as exc:
        raise TestbedError(f"workload {name!r}: {exc}") from exc
    return generator.generate(params, list(clients), float(duration), seed)
