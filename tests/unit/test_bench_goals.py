"""The benchmark summary's goals: judged from the measured keys, never assumed."""

from __future__ import annotations

import math

from tests.bench.run import SHAPER_FRAMES_FLOOR, SHAPER_FRAMES_GOAL, goal_rows, shaper_goal


def test_the_shaper_goal_follows_what_the_generator_offers_over_veth() -> None:
    assert shaper_goal(900_000.0) == SHAPER_FRAMES_GOAL
    assert shaper_goal(400_000.0) == 320_000.0
    assert shaper_goal(100_000.0) == SHAPER_FRAMES_FLOOR
    assert shaper_goal(math.nan) == SHAPER_FRAMES_GOAL


def test_goal_rows_judge_each_key_and_name_what_was_not_measured() -> None:
    rows = {row[0]: row for row in goal_rows({
        "shaper.frames_per_s_accurate": 330_000.0, "shaper.frames_per_s_veth": 400_000.0,
        "shaper.tcp_ratio_vs_veth": 0.79, "scale.hosts_1000_up_s": 59.0,
        "scale.hosts_1000_teardown_s": math.nan, "sim.mmc_ratio_vs_simpy": 3.0})}
    assert rows["shaper.frames_per_s_accurate"][-1] == "met"
    assert rows["shaper.tcp_ratio_vs_veth"][-1] == "MISSED"
    assert rows["scale.hosts_1000_up_s"][-1] == "met"
    assert rows["scale.hosts_1000_teardown_s"][-1] == "not measured"
    assert rows["sim.mmc_ratio_vs_simpy"][-1] == "met"
    assert rows["sim.continuum_hybrid_ratio_vs_simpy"][-1] == "not measured"
    assert rows["shaper.tcp_3hop_ratio_vs_veth"][-1] == "not measured"
