"""A Captain on a docker node runs a detector replica as a container in its node's pod.

The scenario has a control node (Beacon, Application Manager, Spinner), a docker node
whose Captain gets the node's engine, and a process node whose Captain has none. The
docker Captain starts the real detector in a container built on the node (no registry):
it serves a frame to a user on another host through the emulated network, runs under
the task's CPU quota and memory limit in the node's network namespace, and is gone from
the engine once the task is stopped. The process node's Captain refuses a docker task
with 422 naming why. A crash of the docker node kills the containers its Captain
started; the ledger removes everything at teardown.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.emulation import require_docker

pytestmark = pytest.mark.emulation

require_docker()

from nodes.armada.task_image import TASK_IMAGE
from nodes.pod import LABEL_PARENT
from testbed.emulation.executor import EmulatedTopology
from testbed.emulation.probe import in_netns
from testbed.poll import wait_until
from testbed.scenario import Event, scenario_from_dict
from testbed.systems.armada.control import write_frames
from tests.emulation.built_topology import built_topology

PORT = 7000


def _captain(node: str, lat: float) -> dict[str, Any]:
    return {"name": f"cap-{node}", "program": "armada.captain", "node": node, "port": PORT,
            "params": {"beacon": "http://{ip:ctl}:8000", "node_id": node,
                       "advertise_host": f"{{ip:{node}}}", "lat": lat, "lon": 7.6,
                       "cpu": 0.5, "memory_mb": 512, "node_type": "dedicated",
                       "workdir": "captains"}}


def _scenario() -> Any:
    doc = {
        "name": "armada-docker-tasks", "seed": 5,
        "topology": {
            "nodes": [
                {"name": "u1", "role": "client"},
                {"name": "sw", "role": "switch"},
                {"name": "ctl", "role": "server"},
                {"name": "ed", "role": "server", "runtime": "docker", "cpu": 0.25},
                {"name": "ep", "role": "server", "cpu": 0.25}],
            "links": [{"a": n, "b": "sw", "delay_ms": 1.0, "bw_mbit": 100}
                      for n in ("u1", "ctl", "ed", "ep")]},
        "services": [
            {"name": "beacon", "program": "armada.beacon", "node": "ctl", "port": 8000,
             "params": {"app_manager": "http://127.0.0.1:8001",
                        "spinner": "http://127.0.0.1:8002"}},
            {"name": "appmgr", "program": "armada.app_manager", "node": "ctl", "port": 8001,
             "params": {"spinner": "http://127.0.0.1:8002"}},
            {"name": "spinner", "program": "armada.spinner", "node": "ctl", "port": 8002},
            _captain("ed", 45.0), _captain("ep", 45.1)],
        "workload": {"generator": "frame-stream", "seed": 5,
                     "params": {"fps": 1, "frames": {"width": 240, "height": 180,
                                                     "count": 2}}},
        "policies": ["armada"], "duration": 5}
    return scenario_from_dict(doc, source="<armada-docker-tasks test>")


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedTopology]:
    yield from built_topology(_scenario(), "armada-docker-tasks", tmp_path_factory)


def _task(task_id: str, runtime: str = "docker") -> dict[str, Any]:
    return {"task_id": task_id, "app": "det", "runtime": runtime, "image": TASK_IMAGE,
            "module": "nodes.armada.detect_task", "args": {"workers": 1},
            "cpu": 0.25, "memory_mb": 300}


def _children(topo: EmulatedTopology, node: str) -> list[Any]:
    pod = topo.net.hosts[node].container_name
    return topo.infra.engine.client.containers.list(
        all=True, filters={"label": f"{LABEL_PARENT}={pod}"})


def test_a_captain_runs_a_detector_in_a_container_of_its_pod(
        topo: EmulatedTopology, tmp_path: Any) -> None:
    ctl, user = topo.net.hosts["ctl"], topo.net.hosts["u1"]
    ed, ep = (f"http://{topo.net.ip(n)}:{PORT}" for n in ("ed", "ep"))
    headers = topo.secret.header()

    def post(url: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(f"{url}/tasks", json=body, headers=headers, timeout=30)

    refused = in_netns(ctl.pid, lambda: post(ep, _task("t0")))
    assert refused.status_code == 422
    assert "runtime: docker needs a container engine" in refused.json()["error"]
    wrong = in_netns(ctl.pid, lambda: post(ed, {**_task("t0"), "image": "nginx"}))
    assert wrong.status_code == 422 and wrong.json()["error"].startswith("image: expected")

    started = in_netns(ctl.pid, lambda: post(ed, _task("t1")))
    assert started.status_code == 202, started.text

    def running() -> dict[str, Any] | None:
        task = requests.get(f"{ed}/tasks/t1", timeout=5).json()
        assert task["status"] in ("starting", "running"), task
        return task if task["status"] == "running" else None

    task = in_netns(ctl.pid, lambda: wait_until(running, 120, "the container replica"))
    assert task["image"].startswith("armada-task/ed:") and task["container"]

    [container] = _children(topo, "ed")
    attrs = container.attrs
    assert container.name == task["container"] and container.status == "running"
    assert attrs["HostConfig"]["CpuQuota"] == 25_000 and attrs["HostConfig"]["CpuPeriod"] == 100_000
    assert attrs["HostConfig"]["Memory"] == 300 * 2**20
    assert attrs["HostConfig"]["NetworkMode"] == f"container:{topo.net.hosts['ed'].sandbox.id}"
    assert attrs["Config"]["Labels"]["armada.task"] == "t1"

    frame = min(write_frames(topo.scenario.workload.params, tmp_path / "f").glob("*.jpg"))
    answer = in_netns(user.pid, lambda: requests.post(
        f"{task['url']}/infer", data=frame.read_bytes(),
        headers={"Content-Type": "image/jpeg"}, timeout=60))
    assert answer.status_code == 200 and "processing_ms" in answer.json()

    stopped = in_netns(ctl.pid, lambda: requests.delete(f"{ed}/tasks/t1", headers=headers,
                                                        timeout=30))
    assert stopped.status_code == 200 and stopped.json()["status"] == "exited"
    assert _children(topo, "ed") == []

    # a node crash takes the Captain's containers with it
    assert in_netns(ctl.pid, lambda: post(ed, _task("t2"))).status_code == 202
    wait_until(lambda: _children(topo, "ed"), 60, "the second container")
    topo.apply_event(Event(at=0, action="crash", target="ed"))
    assert _children(topo, "ed") == []
