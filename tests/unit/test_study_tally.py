"""The study progress line's counts and its estimate of the time left."""

from __future__ import annotations

import pytest

from testbed.study.engine import Tally


def test_the_estimate_weighs_each_executor_by_its_own_cells() -> None:
    specs = [{"executor": "sim"}] * 4 + [{"executor": "emulation"}] * 2
    tally = Tally(specs, slots=2)
    assert tally.seconds_left() is None
    assert tally.line() == "cells 0/6 done (0 failed), 2 running"
    tally.add({"executor": "sim", "status": "ok", "wall_s": 1.0})
    # 3 sim cells of 1 s on 2 slots, 2 emulation cells borrowing the 1 s mean, one at a time
    assert tally.seconds_left() == pytest.approx(3 * 1.0 / 2 + 2 * 1.0)
    for _ in range(3):
        tally.add({"executor": "sim", "status": "ok", "wall_s": 1.0})
    tally.emulating = True
    tally.add({"executor": "emulation", "status": "error", "wall_s": 30.0})
    assert tally.seconds_left() == pytest.approx(30.0)
    assert tally.line() == "cells 5/6 done (1 failed), 1 running, about 30 s left"
    tally.add({"executor": "emulation", "status": "ok", "wall_s": 30.0})
    assert tally.line() == "cells 6/6 done (1 failed), 0 running"
