"""``armada-startup`` at its small size, as a researcher runs it (``testbed experiment``):
one fleet of docker nodes, the SDK replayed from a deployment of its own three ways
(process replicas, container replicas after every node's task image was removed,
container replicas with the image cached).

Checked: every deployment served on every node and its stream was answered; the
first-image deployment built each node's image and the others built none; the driver
left no task container behind between deployments; the report gives every variant and
the paired differences. Timing itself is not asserted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.emulation import experiment_run, require_docker

pytestmark = pytest.mark.emulation

require_docker()

from testbed.systems.armada.startup_experiment import VARIANTS


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the results folder, the report folder) of the small experiment."""
    report = tmp_path_factory.mktemp("startup-report")
    with experiment_run("armada-startup", report) as out:
        yield out, report


def test_every_deployment_served_and_only_first_images_were_built(
        measured: tuple[Path, Path]) -> None:
    runs = json.loads((measured[0] / "metrics.json").read_text())["runs"]
    assert sorted(r["variant"] for r in runs) == sorted(VARIANTS)
    for run in runs:
        assert run["replicas"] == 3 and 0 < run["first_s"] <= run["all_s"], run
        assert run["ok"] == run["frames"] > 0, run
        if run["variant"] == "process":
            assert run["images"] == ["-"] and run["built"] == 0
        elif run["variant"] == "docker-first":
            assert run["built"] == 3 and run["build_s"] > 0
        else:
            assert run["built"] == 0
            assert all(i.startswith("armada-task/") for i in run["images"])


def test_each_variant_had_a_deployment_of_its_own(measured: tuple[Path, Path]) -> None:
    (meta_path,) = (measured[0] / "startup" / "cells").glob("*/run/metadata.json")
    driver = json.loads(meta_path.read_text())["driver"]
    used = [s["deployment"] for s in driver["streams"]]
    assert len(set(used)) == 3 and 0 not in used  # the first deployment built the images
    settings = [driver["deployments"][k]["settings"] for k in used]
    assert {s["task_runtime"] for s in settings} == {"process", "docker"}


def test_the_report_gives_every_variant_and_the_differences(
        measured: tuple[Path, Path]) -> None:
    text = (measured[1] / "startup.md").read_text()
    for variant in VARIANTS:
        assert f"| {variant} | 1 |" in text
    assert "docker-first − docker-cached" in text and "one replication: no interval" in text
