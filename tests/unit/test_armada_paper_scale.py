"""``armada-paper-scale``: the simulator's sweeps at their small size, herding, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.experiments.engine import run_experiment, write_experiment_report
from testbed.registry import Experiment, experiments
from testbed.reports.claims_index import claims_path, read_claims
from testbed.systems.armada.fleet_measure import herd_share
from testbed.systems.armada.paper_scale_experiment import LABELS, fleet_params


def get_experiment(name: str) -> Experiment:
    """The registered experiment called ``name``."""
    return experiments()[name][1]


def test_a_herd_is_several_users_moving_onto_one_replica_together() -> None:
    events = [{"t": 1.0, "target": "a"}, {"t": 1.2, "target": "a"}, {"t": 1.5, "target": "a"},
              {"t": 5.0, "target": "a"}, {"t": 1.1, "target": "b"}]
    assert herd_share(events) == pytest.approx(3 / 5)
    assert herd_share([]) is None


def test_paper_scale_fleets_are_for_the_simulator_and_keep_their_density() -> None:
    from testbed.experiments.engine import load_studies

    small, big = fleet_params(10, 30, 1, 20.0), fleet_params(40, 30, 1, 20.0)
    assert small["host_cores"] is None and big["span_km"] == pytest.approx(2 * small["span_km"])
    fleets = []
    for _path, study in load_studies(get_experiment("armada-paper-scale"), "full"):
        assert study.seed_paths == ("build.params.seed",)
        for point in study.points():
            params = study.scenario(point, 0).raw["build"]["params"]
            fleets += [(params["nodes"], params["users"], study.replication_seed(point, r))
                       for r in range(study.replications)]
            assert params["span_km"] == fleet_params(params["nodes"], 0, 0, 0)["span_km"]
            assert params["host_cores"] is None and params["seed"] == 1000
    assert len({(n, u) for n, u, _ in fleets}) == 10 and max(n for n, _, _ in fleets) == 200
    assert {seed for _, _, seed in fleets} == {1000, 1001, 1002, 1003, 1004}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("paper-scale")
    run_experiment(get_experiment("armada-paper-scale"), "small", ("sim",), out, serial=True,
                   progress=lambda _line: None)
    return out


def test_every_point_and_replication_runs_every_policy(measured: Path) -> None:
    doc = json.loads((measured / "metrics.json").read_text())
    assert len(doc["points"]) == 4 * 2  # two sweeps of two points, two replications
    for point in doc["points"]:
        assert set(point["policies"]) == set(LABELS)
        assert point["fleet_seed"] == 1000 + point["replication"]
        for found in point["policies"].values():
            assert found["mean_ms"] is not None and 0 <= found["lost_share"] < 1


def test_a_rerun_keeps_finished_cells_and_judges_each_sdk_variant(
        measured: Path, tmp_path: Path) -> None:
    first = sorted(measured.glob("*/cells/*/run/metadata.json"))
    stamps = [p.stat().st_mtime_ns for p in first]
    exp = get_experiment("armada-paper-scale")
    run = run_experiment(exp, "small", ("sim",), measured, serial=True,
                         progress=lambda _line: None)
    assert len(first) == 8 and [p.stat().st_mtime_ns for p in first] == stamps
    report = write_experiment_report(exp, run, "small", ("sim",), "test",
                                     tmp_path / "paper-scale.md")[0]
    text = report.read_text()
    assert "Latency as users grow" in text and "Latency as edge nodes grow" in text
    doc = read_claims(claims_path(report))
    assert [c["key"] for c in doc["claims"]] == ["scale-sim-armada", "scale-sim-armada-light",
                                                 "scale-sim-armada-spread"]
    assert all(c["verdict"] for c in doc["claims"])


def _doc(armada_ms: dict[tuple[int, int], list[float]]) -> dict:
    """A paper-scale document: per (nodes, users), armada's mean per replication; the
    baselines are 50 ms (geo-nearest) and 60 ms (random) everywhere."""
    found = []
    for (nodes, users), means in armada_ms.items():
        for r, mean in enumerate(means):
            found.append({"sweep": "users", "nodes": nodes, "users": users, "replication": r,
                          "policies": {"armada": {"mean_ms": mean},
                                       "geo-nearest": {"mean_ms": 50.0 + r},
                                       "random": {"mean_ms": 60.0 + r}}})
    return {"points": found}


def test_the_verdict_follows_the_paired_differences() -> None:
    from testbed.reports.claims_index import FAILS, HOLDS, HOLDS_ONLY_FOR
    from testbed.systems.armada.paper_scale_experiment import conclusion

    below = [40.0, 41.5, 40.5]
    assert conclusion(_doc({(10, 10): below, (10, 30): below}), "armada").verdict == HOLDS
    split = conclusion(_doc({(10, 10): below, (10, 30): [55.0, 56.0, 55.5]}), "armada")
    assert split.verdict.startswith(HOLDS_ONLY_FOR) and "10 users" in split.verdict
    # below geo-nearest on average but with an interval reaching above zero: not judged
    # a win
    noisy = conclusion(_doc({(10, 10): [30.0, 70.0, 35.0]}), "armada")
    assert noisy.verdict == FAILS
