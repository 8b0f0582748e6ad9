"""``armada-storage`` at its small size with every Cargo in a container, its store on a
Docker volume, and the serving Cargo's container killed mid-workload.

The same checks as the process runtime's run where they apply: every frame answered,
nearest allocation on the nearest Cargos, no failed operation and no acknowledged write
lost when the Cargo's container is killed, the replication factor restored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.emulation import require_docker

pytestmark = pytest.mark.emulation

require_docker()

from testbed.systems.armada.builders import CARGO_STORE, WORKLOADS, cargo_node
from testbed.systems.armada.storage_experiment import SIZES, run_storage, write_storage_report

SIZE = SIZES["small"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_storage("small", tmp_path_factory.mktemp("storage-docker") / "run",
                       progress=lambda _line: None, cargo_runtime="docker")


def test_cargos_run_in_containers_with_volumes(stored: Path) -> None:
    meta = json.loads((stored / "metadata.json").read_text())
    assert meta["teardown_errors"] == []
    nodes = {n["name"]: n for n in meta["scenario"]["topology"]["nodes"]}
    for i in range(SIZE.sites):
        node = nodes[cargo_node(i, "docker")]
        assert node["runtime"] == "docker" and node["volumes"] == {"store": CARGO_STORE}
    services = {s["name"]: s for s in meta["scenario"]["services"]}
    assert services["cargo-c01"]["params"]["data_dir"] == CARGO_STORE


def test_every_frame_is_answered_on_containerised_cargos(stored: Path) -> None:
    res = json.loads((stored / "storage.json").read_text())
    assert res["cargo_runtime"] == "docker"
    assert len(res["streams"]) == 3 * len(WORKLOADS)
    for s in res["streams"]:
        assert s["ok"] == s["frames"] == SIZE.frames, s
    near = {r["cargo_id"] for r in res["deployments"]["nearest"]["allocation"]["replicas"]}
    assert near == {cargo_node(i, "docker") for i in range(3)}


def test_killed_cargo_container_loses_no_acknowledged_write(stored: Path) -> None:
    fault = json.loads((stored / "storage.json").read_text())["fault"]
    assert fault["how"] == "container killed"
    assert fault["stream"]["failed"] == 0
    assert fault["stream"]["ok"] == SIZE.frames
    rb = fault["readback"]
    assert fault["stream"]["written"] > 0
    assert rb["replicas"] == 3 and rb["found"] == rb["expected"] > 0, rb
    assert [r["lost"] for r in fault["restores"]] == [fault["victim"]]
    ready = [r["cargo_id"] for r in fault["replicas_after"] if r["state"] == "ready"]
    assert len(ready) == 3 and fault["victim"] not in ready


def test_report_names_the_container_runtime(stored: Path, tmp_path: Path) -> None:
    report = write_storage_report(stored, tmp_path / "storage-docker.md", "testbed ...")
    text = report.read_text()
    assert "Docker volume" in text and "its container killed" in text
    assert (tmp_path / "storage-docker.png").exists()
