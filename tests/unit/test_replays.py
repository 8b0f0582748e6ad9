"""Tests of the shared replay loop: failures are recorded, the rest goes on."""

from __future__ import annotations

import pytest

from testbed.replays import RunIncomplete, replay_each, replay_groups


def _replay(policy: str, rep: int) -> list[dict]:
    if policy == "bad" and rep == 1:
        raise ValueError("task 478 has no target")
    return [{"policy": policy, "repetition": rep}]


def test_a_failed_replay_is_recorded_and_the_others_run() -> None:
    lines: list[str] = []
    restored: list[int] = []
    rows, failed = replay_each(2, ["a", "bad", "c"], _replay, lines.append,
                               after=lambda: restored.append(1))
    assert [(r["policy"], r["repetition"]) for r in rows] == [
        ("a", 0), ("bad", 0), ("c", 0), ("a", 1), ("c", 1)]
    assert failed == [{"policy": "bad", "repetition": 1,
                       "error": "ValueError: task 478 has no target"}]
    assert len(restored) == 6  # after every replay, the failed one too
    assert any("bad (repetition 1) FAILED" in line for line in lines)


def test_a_failed_restore_stops_the_loop_and_names_what_did_not_run() -> None:
    calls = []

    def after() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("link s1-e1 is gone")

    rows, failed = replay_each(1, ["a", "b", "c", "d"], _replay, lambda _l: None, after)
    assert [r["policy"] for r in rows] == ["a", "b"]
    assert [f["policy"] for f in failed] == ["c", "d"]
    assert failed[0]["error"] == ("not run: restoring after b (repetition 0) failed: "
                                  "OSError: link s1-e1 is gone")


def test_grouped_replays_fail_together() -> None:
    def together(group: tuple[str, ...], rep: int) -> list[dict]:
        if rep == 0:
            raise RuntimeError("crash came too early")
        return [{"policy": p, "repetition": rep} for p in group]

    rows, failed = replay_groups(2, ["x", "y"], together, lambda _l: None)
    assert [(r["policy"], r["repetition"]) for r in rows] == [("x", 1), ("y", 1)]
    assert [(f["policy"], f["repetition"]) for f in failed] == [("x", 0), ("y", 0)]


def test_interrupts_are_not_swallowed() -> None:
    def interrupted(policy: str, rep: int) -> list[dict]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replay_each(1, ["a"], interrupted, lambda _l: None)


def test_run_incomplete_names_the_failures() -> None:
    err = RunIncomplete("/r", [{"policy": "oracle", "repetition": 0, "error": "x"}])
    assert str(err) == ("1 replay(s) failed: oracle (repetition 0); what finished is in /r "
                        "(metadata.json lists the errors under 'failed')")
