"""``armada-executors``' analysis on made-up runs: pairing, sides, agreement, verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.analysis.stats import Interval, side
from testbed.reports.claims_index import FAILS, HOLDS
from testbed.systems.armada.executors_experiment import (
    agreement,
    claims,
    sdk_conclusion,
    sim_minus_emulation,
    tables,
)

POINT = {"nodes": 3, "users": 3, "cores": 0.25}


def _doc(means: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Runs of one point: ``means[executor][policy]`` is one mean per replication."""
    runs = []
    for executor, by_policy in means.items():
        reps = len(next(iter(by_policy.values())))
        for r in range(reps):
            runs.append({"point": POINT, "replication": r, "executor": executor,
                         "policies": {p: {"mean_ms": v[r]} for p, v in by_policy.items()}})
    return {"runs": runs}


def test_sides_follow_the_interval_against_zero() -> None:
    assert side(Interval(-2.0, -3.0, -1.0, 3, "replications")) == "lower"
    assert side(Interval(2.0, 1.0, 3.0, 3, "replications")) == "higher"
    assert side(Interval(0.5, -1.0, 2.0, 3, "replications")) == "tied"
    assert side(None) == "tied" and side(Interval(1.0, None, None, 1, "replications")) == "tied"


def test_the_simulator_is_compared_with_the_emulation_within_replications() -> None:
    doc = _doc({"emulation": {"armada": [20.0, 30.0, 40.0], "geo-nearest": [25, 35, 45],
                              "random": [40, 50, 60]},
                "sim": {"armada": [18.0, 28.0, 38.0], "geo-nearest": [24, 34, 44],
                        "random": [30, 35, 40]}})
    diff = sim_minus_emulation(doc["runs"], "armada", "mean_ms")
    assert diff is not None and diff.estimate == pytest.approx(-2.0) and diff.n == 3
    assert diff.high == pytest.approx(-2.0)  # every pair differs by exactly 2 ms
    found = agreement(doc, ["armada", "geo-nearest", "random"])
    assert found["same_best"] == 1 and found["same_order"] == 1
    verdicts = {v[1]: v[2:] for v in found["verdicts"]}
    assert verdicts["armada"] == ("lower", "lower")  # 5 ms below, on both, every time
    assert found["same_verdict"] == sum(a == b for a, b in verdicts.values())


def test_the_claim_is_judged_per_executor() -> None:
    doc = _doc({"emulation": {"armada": [20.0, 30.0, 40.0], "geo-nearest": [25, 35, 45],
                              "random": [40, 50, 60]},
                "sim": {"armada": [26.0, 36.0, 46.0], "geo-nearest": [25, 35, 45],
                        "random": [40, 50, 60]}})
    assert sdk_conclusion(doc, "emulation", "armada").verdict == HOLDS
    assert sdk_conclusion(doc, "sim", "armada").verdict == FAILS


def test_the_claim_is_one_per_sdk_variant_and_executor_with_its_replications() -> None:
    doc = _doc({"emulation": {"armada": [20.0, 30.0, 40.0], "geo-nearest": [25, 35, 45],
                              "random": [40, 50, 60]},
                "sim": {"armada": [26.0, 36.0, 46.0], "geo-nearest": [25, 35, 45],
                        "random": [40, 50, 60]}})
    doc["policies"] = ["armada", "geo-nearest", "random"]
    judged = claims(doc)
    assert [(c.key, c.verdict, c.replications) for c in judged] == [
        ("realistic-emu-armada", HOLDS, 3), ("realistic-sim-armada", FAILS, 3)]
    assert judged[0].conditions[0].executor == "emulation"
    assert claims({**doc, "policies": ["armada", "geo-nearest"]}) == []


def test_the_fleets_fit_the_host_the_issue_allows() -> None:
    from testbed.experiments.engine import load_studies
    from testbed.registry import experiments

    exp = experiments()["armada-executors"][1]
    for size in ("small", "medium", "full"):
        for _path, study in load_studies(exp, size):
            assert study.executors == ("emulation", "sim")
            for point in study.points():
                fleet = study.scenario(point, 0).raw["build"]["params"]
                (cores,) = fleet["node_cores"]
                assert 0.25 <= cores <= 0.5 and 3 <= fleet["nodes"] <= 6
                assert fleet["nodes"] * cores <= 1.5 and fleet["replica_cpu"] == cores


def test_the_report_sets_the_executors_side_by_side() -> None:
    doc = {**_doc({"emulation": {"armada": [100.0, 110.0], "geo-nearest": [150.0, 160.0]},
                   "sim": {"armada": [90.0, 95.0], "geo-nearest": [140.0, 170.0]}}),
           "policies": ["armada", "geo-nearest"], "duration_s": 6.0}
    fleet, apart = tables(doc)
    assert fleet["title"] == "3 nodes of 0.25 cores, 3 users"
    assert fleet["columns"] == ["policy", "metric", "emulation", "simulator",
                                "sim − emulation"]
    assert fleet["note"].startswith("2 replication(s). Policies by mean latency, "
                                    "emulation: armada, geo-nearest; simulator: armada")
    (mean_row,) = [row for row in fleet["rows"] if row[:2] == ["`armada`", "mean latency (ms)"]]
    assert mean_row[4].startswith("-12.5")  # paired: (90 - 100 + 95 - 110) / 2
    assert apart["title"] == "How far apart the executors are"
    assert "6 s at 1 fps" in apart["note"]
    one_side = {**doc, "runs": [r for r in doc["runs"] if r["executor"] == "sim"]}
    assert [t["title"] for t in tables(one_side)] == [fleet["title"]]
    assert tables({**doc, "runs": []}) == []
