"""The loop over a scenario's repetitions and policies that both executors share.

One failing policy must not lose the others: :func:`replay_each` calls a replay per
(repetition, policy), keeps the rows of every replay that finished, and records each
one that raised with its error. ``after`` (the emulation's restore of the network and
services) runs after every replay, failed or not; if it fails itself the topology can
no longer be trusted, so the replays not yet run are recorded as not run and the loop
ends. The runner writes what finished and names what failed (:class:`RunIncomplete`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from testbed.errors import Incomplete

Replay = Callable[[str, int], list[dict[str, Any]]]


class RunIncomplete(Incomplete):
    """Some replays of a run failed; the results folder holds the others."""

    def __init__(self, folder: str, failed: Sequence[dict[str, Any]]) -> None:
        self.folder = folder
        self.failed = list(failed)
        names = ", ".join(f"{f['policy']} (repetition {f['repetition']})" for f in failed)
        super().__init__(f"{len(failed)} replay(s) failed: {names}; what finished is in "
                         f"{folder} (metadata.json lists the errors under 'failed')")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def replay_each(repetitions: int, policies: Sequence[str], replay: Replay,
                progress: Callable[[str], None],
                after: Callable[[], None] | None = None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run ``replay(policy, repetition)`` for every repetition and policy; returns the
    rows of the replays that finished and one record per replay that did not
    (``policy``, ``repetition``, ``error``)."""
    rows: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    order = [(rep, policy) for rep in range(repetitions) for policy in policies]
    for k, (rep, policy) in enumerate(order):
        try:
            rows += replay(policy, rep)
        except Exception as exc:  # noqa: BLE001 - recorded; the other policies go on
            failed.append({"policy": policy, "repetition": rep, "error": _describe(exc)})
            progress(f"  {policy} (repetition {rep}) FAILED: {_describe(exc)}")
        if after is None:
            continue
        try:
            after()
        except Exception as exc:  # noqa: BLE001 - nothing after this can be trusted
            why = f"not run: restoring after {policy} (repetition {rep}) failed: {_describe(exc)}"
            failed += [{"policy": p, "repetition": r, "error": why} for r, p in order[k + 1:]]
            progress(f"  {why}")
            break
    return rows, failed


def replay_groups(repetitions: int, policies: Sequence[str],
                  replay: Callable[[tuple[str, ...], int], list[dict[str, Any]]],
                  progress: Callable[[str], None],
                  after: Callable[[], None] | None = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`replay_each` for a driver that replays all ``policies`` of a repetition
    together: a failure fails every policy of that repetition."""
    group = tuple(policies)
    rows, failed_groups = replay_each(repetitions, ["+".join(group)],
                                      lambda _name, rep: replay(group, rep), progress, after)
    failed = [{**f, "policy": p} for f in failed_groups for p in group]
    return rows, failed
