"""``armada-startup`` at its small size: deployments of process and container replicas
on one fleet of docker nodes, the first task image against the cached one.

Checked: every deployment of every replication served on every node; the first docker
deployment built each node's image and the cached one built none; no task container is
left; the report states its numbers and conclusions. Timing itself is not asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.emulation import require_docker

pytestmark = pytest.mark.emulation

require_docker()

from testbed.systems.armada.startup_experiment import (
    STARTUP_SIZES,
    VARIANTS,
    run_startup,
    write_startup_report,
)

PLAN = STARTUP_SIZES["small"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_startup("small", tmp_path_factory.mktemp("startup") / "run",
                       progress=lambda _line: None)


def test_every_deployment_served_and_only_first_images_were_built(measured: Path) -> None:
    result = json.loads((measured / "startup.json").read_text())
    deployments = result["deployments"]
    assert len(deployments) == PLAN.replications * len(VARIANTS)
    for d in deployments:
        assert sorted(r["node"] for r in d["replicas"]) == result["nodes"]
        assert 0 < d["first_s"] <= d["all_s"]
        builds = [r["image_build_s"] for r in d["replicas"]]
        if d["variant"] == "process":
            assert all(r["image"] is None for r in d["replicas"])
        elif d["variant"] == "docker-first":
            assert all(b is not None and b > 0 for b in builds)
        else:
            assert builds == [None] * len(builds)
            assert all(r["image"].startswith("armada-task/") for r in d["replicas"])


def test_the_report_gives_every_variant_and_the_conclusions(measured: Path,
                                                            tmp_path: Path) -> None:
    report = write_startup_report(measured, tmp_path / "startup.md", "testbed experiment x")
    text = report.read_text()
    for variant in VARIANTS:
        assert f"| {variant} | {PLAN.replications} |" in text
    assert "A node's first task image against its cached one" in text
    assert "`testbed experiment x`" in text
