"""The benchmark summary's goals: judged from the measured keys, never assumed."""

from __future__ import annotations

import math

import pytest

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


def test_tcp_ratio_is_the_median_of_paired_rounds() -> None:
    from tests.bench.bench_shaper import paired_ratio

    # Medians of each side would give 15/20 = 0.75; the paired rounds say 0.7.
    assert paired_ratio([14.0, 15.0, 18.0], [20.0, 20.0, 30.0]) == 0.7
    assert math.isnan(paired_ratio([], []))
    with pytest.raises(ValueError, match="1 rounds against 2"):
        paired_ratio([1.0], [1.0, 2.0])


def test_the_accurate_rate_needs_low_lateness_nothing_lost_and_a_fed_receiver() -> None:
    from tests.bench.bench_shaper import accurate, accurate_step

    def step(relayed: float, p99: float | None, lost: int = 0,
             received: float | None = None) -> dict:
        return {"relayed_fps": relayed, "late_p99_us": p99, "lost_in_shaper": lost,
                "received_fps": relayed if received is None else received}

    steps = [step(100.0, 50.0), step(200.0, 150.0, lost=3), step(300.0, 250.0),
             step(150.0, 190.0), step(400.0, None), step(180.0, 60.0, received=170.0),
             step(170.0, 60.0, received=169.0)]
    assert accurate(steps, 200.0) == 170.0  # 180 fed its receiver only 94 %
    assert accurate(steps, 700.0) == 300.0
    assert accurate([], 200.0) == 0.0
    assert accurate_step(steps, 200.0) is steps[6]  # the qualifying step itself
    assert accurate_step([], 200.0) is None


def test_the_unbroken_reading_stops_at_the_first_missed_step() -> None:
    from tests.bench.bench_shaper import accurate, accurate_unbroken

    def step(relayed: float, p99: float, received: float | None = None) -> dict:
        return {"relayed_fps": relayed, "late_p99_us": p99, "lost_in_shaper": 0,
                "received_fps": relayed if received is None else received}

    ladder = [step(100.0, 50.0), step(150.0, 60.0), step(140.0, 70.0),
              step(190.0, 250.0), step(260.0, 90.0), step(300.0, 80.0, received=200.0)]
    assert accurate(ladder, 200.0) == 260.0  # a qualifying step above a miss
    assert accurate_unbroken(ladder, 200.0) == 150.0  # the best before the first miss
    assert accurate_unbroken(ladder[3:], 200.0) == 0.0
    assert accurate_unbroken([], 200.0) == 0.0


def test_every_compiled_configuration_is_judged_with_its_lateness_while_cpus_are_busy() -> None:
    rows = {row[0]: row for row in goal_rows({
        "shaper.frames_per_s_veth": 250_000.0,
        "shaper.late_p99_us_cpus_busy": 35.0,
        "shaper.frames_per_s_accurate_threaded_other": 240_000.0,
        "shaper.late_p99_us_cpus_busy_threaded_other": 3_900.0})}
    assert rows["shaper.late_p99_us_cpus_busy"][-1] == "met"
    assert rows["shaper.frames_per_s_accurate_threaded_other"][-1] == "met"  # >= 200k
    assert rows["shaper.late_p99_us_cpus_busy_threaded_other"][-1] == "MISSED"
    assert rows["shaper.tcp_ratio_vs_veth_threaded_other"][-1] == "not measured"
    assert rows["shaper.late_p99_us_cpus_busy_partitioned"][-1] == "not measured"


def test_the_shaper_keys_name_each_configuration_by_its_suffix() -> None:
    from tests.bench.bench_shaper import keys

    result = {"veth": {"sent_fps": 250_000.0},
              "shaper-c": {"accurate_fps": 180_000.0, "tcp_1hop_ratio": 0.7,
                           "tcp_3hop_ratio": 0.6, "busy_late_p99_us": 30.0},
              "shaper-c-threaded-other": {"accurate_fps": 240_000.0,
                                          "busy_late_p99_us": 3_900.0}}
    got = keys(result)
    assert got["shaper.frames_per_s_veth"] == 250_000.0
    assert got["shaper.frames_per_s_accurate"] == 180_000.0
    assert got["shaper.late_p99_us_cpus_busy"] == 30.0
    assert got["shaper.frames_per_s_accurate_threaded_other"] == 240_000.0
    assert got["shaper.late_p99_us_cpus_busy_threaded_other"] == 3_900.0
    assert math.isnan(got["shaper.tcp_ratio_vs_veth_threaded_other"])
    assert math.isnan(got["shaper.frames_per_s_accurate_partitioned"])
