"""Study files: grids, zip groups, replication seeds, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.errors import ScenarioError
from testbed.study.spec import check_path, load_study, set_path, study_from_dict


def base(**extra: Any) -> dict[str, Any]:
    """A small study of the built-in continuum scenario on the simulator."""
    doc: dict[str, Any] = {"study": "s1", "scenario": "continuum", "executors": ["sim"],
                           "policies": ["random", "jsq"], "baseline": "random",
                           "replications": 2, "seed": 5}
    doc.update(extra)
    return doc


def test_grid_is_the_cartesian_product_and_zip_varies_together() -> None:
    study = study_from_dict(base(grid={
        "workload.params.rate": [1.0, 2.0],
        "zip": [{"services.edge.params.workers": [2, 4, 8], "duration": [20, 30, 40]}],
    }))
    points = study.points()
    assert len(points) == 6
    assert study.grid_paths == ["workload.params.rate", "services.edge.params.workers",
                                "duration"]
    pairs = {(p.as_dict()["services.edge.params.workers"], p.as_dict()["duration"])
             for p in points}
    assert pairs == {(2, 20), (4, 30), (8, 40)}
    scenario = study.scenario(points[-1], 1)
    edge = next(s for s in scenario.services if s.name == "edge")
    assert edge.params["workers"] == 8 and scenario.duration == 40
    assert scenario.workload.params["rate"] == 2.0
    assert scenario.policies == ("random", "jsq")


def test_replications_get_independent_seeds_that_do_not_depend_on_grid_position() -> None:
    small = study_from_dict(base(grid={"workload.params.rate": [1.0, 2.0]}))
    large = study_from_dict(base(grid={"workload.params.rate": [0.5, 1.0, 2.0]}))
    point = small.points()[1]
    seeds = {small.scenario(point, r).seed for r in range(small.replications)}
    assert len(seeds) == 2  # replications differ
    same = next(p for p in large.points() if p.as_dict() == point.as_dict())
    assert {large.scenario(same, r).seed for r in range(2)} == seeds  # stable under growth
    assert small.scenario(point, 0).workload.seed == small.scenario(point, 0).seed
    other = study_from_dict(base(seed=6, grid={"workload.params.rate": [1.0, 2.0]}))
    assert other.scenario(other.points()[1], 0).seed not in seeds


def test_a_study_without_grid_has_one_point() -> None:
    study = study_from_dict(base())
    assert [p.label() for p in study.points()] == ["base"]


def test_set_fixes_settings_for_every_point_and_keeps_the_seeds() -> None:
    plain = study_from_dict(base(grid={"workload.params.rate": [1.0, 2.0]}))
    fixed = study_from_dict(base(grid={"workload.params.rate": [1.0, 2.0]},
                                 set={"duration": 7.0, "services.edge.params.workers": 2},
                                 analysis={"sweep": "load"}))
    for point in fixed.points():
        scenario = fixed.scenario(point, 1)
        assert scenario.duration == 7.0
        assert next(s for s in scenario.services if s.name == "edge").params["workers"] == 2
        assert scenario.seed == plain.scenario(point, 1).seed
    assert dict(fixed.analysis) == {"sweep": "load"}
    overridden = study_from_dict(base(set={"duration": 7.0}, grid={"duration": [3.0]}))
    assert overridden.scenario(overridden.points()[0], 0).duration == 3.0  # the grid wins


def test_rotate_counterbalances_the_policy_order_and_keeps_the_seeds() -> None:
    doc = base(policies=["random", "jsq", "jsq-s"], grid={"workload.params.rate": [1.0, 2.0]})
    fixed = study_from_dict(doc)
    rotated = study_from_dict({**doc, "order": "rotate"})
    orders = {(p.index, r): rotated.scenario(p, r).policies
              for p in rotated.points() for r in range(2)}
    assert orders[(0, 0)] == ("random", "jsq", "jsq-s")
    assert orders[(0, 1)] == orders[(1, 0)] == ("jsq", "jsq-s", "random")
    assert orders[(1, 1)] == ("jsq-s", "random", "jsq")
    assert all(fixed.scenario(p, r).policies == ("random", "jsq", "jsq-s")
               for p in fixed.points() for r in range(2))
    assert all(rotated.scenario(p, r).seed == fixed.scenario(p, r).seed
               for p in fixed.points() for r in range(2))


def test_sequence_seeds_are_the_study_seed_plus_the_replication_at_every_point() -> None:
    study = study_from_dict(base(seeds={"rule": "sequence"},
                                 grid={"workload.params.rate": [1.0, 2.0]}))
    assert [[study.scenario(p, r).seed for r in range(2)] for p in study.points()] == \
        [[5, 6], [5, 6]]
    assert study.scenario(study.points()[1], 1).workload.seed == 6
    hashed = study_from_dict(base(grid={"workload.params.rate": [1.0, 2.0]}))
    assert hashed.scenario(hashed.points()[0], 0).seed not in (5, 6)


def test_seeds_also_sets_the_replication_seed_at_more_paths() -> None:
    study = study_from_dict({"study": "fleet", "scenario": "armada-scalability",
                             "replications": 2, "seed": 1000,
                             "seeds": {"rule": "sequence", "also": ["build.params.seed"]}})
    point = study.points()[0]
    assert study.scenario(point, 1).seed == 1001
    fleets = {study.scenario(point, r).raw["build"]["params"]["seed"] for r in (0, 1)}
    assert fleets == {1000, 1001}


def test_seeds_over_hash_named_settings_so_other_axes_share_traces() -> None:
    import hashlib
    import json

    grid = {"workload.params.rate": [1.0, 2.0], "services.edge.params.workers": [2, 4]}
    study = study_from_dict(base(grid=grid, seeds={"over": {"rate": "workload.params.rate",
                                                            "time": "duration"}}))
    seeds = {(p.as_dict()["workload.params.rate"], p.as_dict()["services.edge.params.workers"]):
             study.scenario(p, 1).seed for p in study.points()}
    assert seeds[(1.0, 2)] == seeds[(1.0, 4)] != seeds[(2.0, 2)] == seeds[(2.0, 4)]
    duration = study.scenario_doc["duration"]  # as the file writes it: 120 is not 120.0
    blob = json.dumps([5, {"rate": 1.0, "time": duration}, 1], sort_keys=True)
    assert seeds[(1.0, 2)] == int.from_bytes(hashlib.sha256(blob.encode()).digest()[:4],
                                              "big") & (2**31 - 1)
    plain = study_from_dict(base(grid=grid))
    assert len({plain.scenario(p, 1).seed for p in plain.points()}) == 4


def test_paths_address_named_list_entries() -> None:
    doc = {"services": [{"name": "edge", "params": {"workers": 1}}], "duration": 5}
    assert check_path(doc, "services.edge.params.workers") is None
    assert check_path(doc, "task_timeout") is None  # a new top-level setting
    set_path(doc, "services.edge.params.workers", 3)
    assert doc["services"][0]["params"]["workers"] == 3
    assert "edge" in (check_path(doc, "services.cloud.params") or "")


@pytest.mark.parametrize(("change", "path", "expected"), [
    ({"colour": 1}, "colour", "one of the keys"),
    ({"study": "bad name"}, "study", "study name"),
    ({"scenario": "nowhere"}, "scenario", "built-in scenario"),
    ({"executors": ["gpu"]}, "executors[0]", "executor"),
    ({"policies": ["random", "nope"]}, "policies[1]", "offloading policies"),
    ({"policies": [{"name": "random", "params": {"weights": "x"}}]},
     "policies[0].params.weights", "uniform, capacity"),
    ({"baseline": "jsq-s"}, "baseline", "one of the study's policies"),
    ({"replications": 0}, "replications", "integer"),
    ({"grid": {"workload.params.rate": []}}, "grid.workload.params.rate", "non-empty list"),
    ({"grid": {"services.fog.params.workers": [1]}}, "grid.services.fog.params.workers",
     "c1-local, c2-local, edge, cloud"),
    ({"grid": {"seed": [1, 2]}}, "grid.seed", "does not set itself"),
    ({"grid": {"zip": [{"duration": [1, 2], "time_scale": [1]}]}}, "grid.zip[0]",
     "one length"),
    ({"grid": {"workload.params.rate": [1.0, -3]}},
     "grid (point workload.params.rate=-3): workload.params.rate", ""),
    ({"set": {"services.fog.params.workers": 1}}, "set.services.fog.params.workers",
     "c1-local, c2-local, edge, cloud"),
    ({"set": {"workload.seed": 3}}, "set.workload.seed", "does not set itself"),
    ({"set": [1]}, "set", "a mapping"),
    ({"analysis": [1]}, "analysis", "a mapping of parameters"),
    ({"order": "shuffled"}, "order", "one of fixed, rotate"),
    ({"seeds": {"rule": "random"}}, "seeds.rule", "one of hash, sequence"),
    ({"seeds": {"also": ["seed"]}}, "seeds.also[0]", "set by nothing else"),
    ({"seeds": {"also": ["services.fog.seed"]}}, "seeds.also[0]", "c1-local"),
    ({"seeds": {"every": 1}}, "seeds", "a mapping with rule"),
    ({"seeds": {"over": {"w": "services.edge.params.nothing"}}}, "seeds.over.w",
     "a path whose value"),
    ({"seeds": {"over": {"s": "seed"}}}, "seeds.over.s", "a path whose value"),
    ({"seeds": {"over": ["duration"]}}, "seeds.over", "a mapping of names"),
    ({"seeds": {"rule": "sequence", "over": {"d": "duration"}}}, "seeds.over",
     "no over under rule sequence"),
    ({"seeds": {"rule": "sequence"}, "seed": 2**31 - 1}, "seed", "at most"),
])
def test_bad_studies_name_the_file_and_field(change: dict[str, Any], path: str,
                                             expected: str, tmp_path: Path) -> None:
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump(base(**change)))
    with pytest.raises(ScenarioError) as err:
        load_study(file)
    assert err.value.file == str(file)
    assert err.value.path == path, str(err.value)
    assert expected in err.value.expected, str(err.value)


def test_a_relative_scenario_path_is_read_beside_the_study(tmp_path: Path) -> None:
    from testbed.scenario.loader import builtin_scenarios

    (tmp_path / "mine.yaml").write_text(builtin_scenarios()["continuum"].read_text())
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump(base(scenario="mine.yaml")))
    assert load_study(file).scenario_source == str(tmp_path / "mine.yaml")
