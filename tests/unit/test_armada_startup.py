"""``armada-startup`` without emulation: its study files' policies, and its metric
functions on hand-made deployment records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.study.spec import load_study
from testbed.systems.armada.model import deployment_of
from testbed.systems.armada.startup_experiment import (
    VARIANTS,
    deployment_numbers,
    pair_table,
    paired,
    reading,
    variant_table,
)

STUDIES = Path(__file__).resolve().parents[2] / "testbed/systems/armada/studies/startup"


@pytest.mark.parametrize("size, replications", [("small", 1), ("full", 10)])
def test_the_three_variants_differ_only_in_their_deployment(size: str,
                                                            replications: int) -> None:
    study = load_study(STUDIES / size / "startup.yaml")
    assert study.replications == replications
    (point,) = study.points()
    scen = study.scenario(point, 0)
    entries = {label: scen.policy_entry(label) for label in VARIANTS}
    assert {e.name for e in entries.values()} == {"armada"}
    assert deployment_of(entries["process"].params) == {"task_runtime": "process"}
    assert deployment_of(entries["docker-first"].params)["task_images"] == "fresh"
    assert all(n.runtime == "docker" for n in scen.topology.nodes
               if n.name.startswith("e"))
    orders = [[p["label"] if isinstance(p, dict) else p
               for p in study.cell_policies(point, r)] for r in range(3)]
    assert len({tuple(o) for o in orders}) == 3  # each replication rotates the order


def _deployment(first: float, last: float, builds: list[float | None],
                settings: dict[str, str]) -> dict[str, Any]:
    return {"asked": 100.0, "first_running_at": 100.0 + first, "settings": settings,
            "tasks": [{"node": f"e0{i + 1}", "task_id": f"t{i}",
                       "ready_at": 100.0 + (last if i == 0 else first),
                       "image": None if settings["task_runtime"] == "process"
                       else "armada-task/e01:abc", "image_build_s": b}
                      for i, b in enumerate(builds)]}


def test_a_deployment_is_measured_from_its_request() -> None:
    got = deployment_numbers(_deployment(2.0, 3.5, [5.0, 4.0, None],
                                         {"task_runtime": "docker"}))
    assert got["first_s"] == pytest.approx(2.0) and got["all_s"] == pytest.approx(3.5)
    assert got["build_s"] == pytest.approx(3.0) and got["built"] == 2
    assert got["replicas"] == 3 and got["images"] == ["armada-task/e01:abc"]


def _runs(first: dict[str, list[float]]) -> list[dict[str, Any]]:
    runs = []
    for variant, values in first.items():
        for r, value in enumerate(values):
            built = 3 if variant == "docker-first" else 0
            runs.append({"replication": r, "variant": variant, "first_s": value,
                         "all_s": value + 0.2, "build_s": 5.0 if built else 0.0,
                         "built": built, "replicas": 3})
    return runs


def test_differences_are_paired_within_a_replication() -> None:
    runs = _runs({"process": [1.0, 2.0, 3.0], "docker-first": [7.0, 8.0, 9.0],
                  "docker-cached": [1.5, 2.5, 3.5]})
    diff = paired(runs, "docker-cached", "process", "first_s")
    assert diff.estimate == pytest.approx(0.5) and diff.n == 3
    assert diff.low == pytest.approx(0.5)  # every pair differs by exactly 0.5 s
    assert reading(diff).startswith("longer")
    assert reading(paired(runs[:1] + runs[3:4], "docker-first", "process", "all_s")) == \
        "one replication: no interval"
    assert paired(runs, "docker-first", "nothing", "first_s") is None
    table = variant_table(runs)
    assert [row[0] for row in table["rows"]] == list(VARIANTS)
    assert table["rows"][1][-1] == "9 of 9"
    assert len(pair_table(runs)["rows"]) == 4
