"""The Captain's docker runtime against a fake engine, and the options that choose it.

The fake stands in for the node's Docker engine only (``CaptainConfig.engine``): it
records what the Captain asks (image, limits, environment, labels) and runs the
container's command as a local process, so the task really serves and the Captain's
readiness, stop and teardown paths run unchanged. Real containers are tested in
``tests/emulation/test_armada_docker_tasks.py``.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from nodes.armada import captain
from nodes.armada.captain import CaptainConfig, free_port
from nodes.armada.task_image import TASK_IMAGE, image_files, repository, source_digest
from nodes.pod import Exit
from testbed.poll import await_until
from testbed.systems.armada.builders import Fleet, armada_fleet
from tests.secured import AUTH, secured
from tests.unit.test_armada_services import CITY, armada

ECHO = "nodes.armada.echo_task"


class FakeEngine:
    """What the Captain needs of :class:`nodes.pod_engine.PodEngine`, in processes."""

    pod = "tb-x-ed"

    def __init__(self, host_dir: Path) -> None:
        self.host_dir = host_dir
        self.images: set[str] = set()
        self.runs: list[dict[str, Any]] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.removed: list[str] = []
        self.children_removed = 0
        self.lock = threading.Lock()

    def ensure_image(self, repo: str, key: str, files: Any, dockerfile: list[str]
                     ) -> tuple[str, float | None]:
        tag = f"{repo}:{key[:16]}"
        if tag in self.images:
            return tag, None
        self.images.add(tag)
        return tag, 0.5

    def mounts(self, **_: Any) -> list[Any]:
        return []

    def host_path(self, path: Path) -> Path:
        return self.host_dir / path.name

    def run(self, name: str, image: str, argv: list[str], **options: Any) -> str:
        with self.lock:
            self.runs.append({"name": name, "image": image, "argv": argv, **options})
            self.procs[name] = subprocess.Popen(argv)
        return name

    def wait(self, container: str) -> Exit:
        return Exit(self.procs[container].wait(), False)

    def usage(self, container: str) -> tuple[float, int] | None:
        return (0.1, 10 * 2**20) if self.procs[container].poll() is None else None

    def stop(self, container: str, grace_s: float) -> None:
        self.procs[container].terminate()
        self.procs[container].wait(grace_s)
        self.remove(container)

    def kill(self, container: str) -> None:
        self.procs[container].kill()

    def remove(self, container: str) -> None:
        with self.lock:
            self.removed.append(container)

    def remove_children(self) -> int:
        self.children_removed += 1
        return 0

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _spec(task_id: str, **over: Any) -> dict[str, Any]:
    return {"task_id": task_id, "app": "a", "runtime": "docker", "image": TASK_IMAGE,
            "module": ECHO, "cpu": 0.2, "memory_mb": 100, **over}


async def test_a_docker_task_runs_with_its_limits_and_its_container_goes_when_stopped(
        tmp_path: Path) -> None:
    engine = FakeEngine(tmp_path / "host")
    async with armada(tmp_path) as stack:
        port = free_port()
        config = CaptainConfig(beacon=stack.url, node_id="ed", url=f"http://127.0.0.1:{port}",
                               lat=CITY[0], lon=CITY[1], cpu=0.5, memory_mb=512,
                               task_host="127.0.0.1", sample_s=0.1,
                               workdir=tmp_path / "ed", engine=engine)
        server = TestServer(secured(captain.make_app(config)), host="127.0.0.1", port=port)
        await server.start_server()
        agent = server.app[captain.CAPTAIN_KEY]
        try:
            async with stack.http.post(server.make_url("/tasks"),
                                       json=_spec("t1", image="nginx")) as resp:
                assert resp.status == 422
                assert (await resp.json())["error"].startswith(f"image: expected {TASK_IMAGE}")
            async with stack.http.post(server.make_url("/tasks"), json=_spec("t1")) as resp:
                assert resp.status == 202, await resp.text()
            task = agent.tasks["t1"]
            await await_until(lambda: _running(task), what="the docker task to serve")
            [run] = engine.runs
            assert run["cpu"] == 0.2 and run["memory_mb"] == 100
            assert run["image"].startswith(f"{repository('ed')}:")
            assert run["labels"] == {"armada.task": "t1", "armada.app": "a"}
            env = run["environment"]
            assert env["ARMADA_TASK_ID"] == "t1" and env["ARMADA_NODE_ID"] == "ed"
            assert "PATH" not in env  # nothing of the Captain's own environment
            assert run["argv"][-4:] == ["--host", "127.0.0.1", "--port", str(task.port)]
            shown = task.json()
            assert shown["container"] == "tb-x-ed-t1" and shown["image_build_s"] == 0.5
            await await_until(lambda: _sampled(task), what="a utilisation sample")

            async with stack.http.post(server.make_url("/tasks"), json=_spec("t2")) as resp:
                assert resp.status == 202
            await await_until(lambda: _running(agent.tasks["t2"]), what="the second task")
            assert agent.tasks["t2"].image_build_s is None  # the node's image is cached

            async with stack.http.delete(server.make_url("/tasks/t1"), headers=AUTH) as resp:
                assert resp.status == 200
                assert (await resp.json())["status"] == "exited"
            assert "tb-x-ed-t1" in engine.removed and "t1" not in agent.tasks
        finally:
            await server.close()  # the Captain's teardown: t2 stopped and removed
        assert "tb-x-ed-t2" in engine.removed
        assert engine.children_removed == 2  # at start (an earlier Captain's) and at the end


async def _running(task: captain.RunningTask) -> bool:
    assert task.status in ("starting", "running"), task.reason
    return task.status == "running"


async def _sampled(task: captain.RunningTask) -> bool:
    return task.rss_mb > 0


async def test_a_captain_without_an_engine_refuses_docker_tasks_saying_why(tmp_path: Path
                                                                             ) -> None:
    async with armada(tmp_path) as stack:
        cap = await stack.add_captain("n0", CITY)
        async with stack.http.post(cap.make_url("/tasks"), json=_spec("t1")) as resp:
            assert resp.status == 422
            error = (await resp.json())["error"]
        assert error.startswith("runtime: docker needs a container engine on this node")
        assert "--docker-socket" in error


async def test_docker_deployments_name_their_image_and_program(tmp_path: Path) -> None:
    async with armada(tmp_path) as stack:
        body = {"name": "det", "runtime": "docker", "cpu": 0.1, "memory_mb": 100,
                "need_storage": False, "locations": [{"lat": CITY[0], "lon": CITY[1]}]}
        status, answer = await stack.call("POST", "/apps", {**body, "image": TASK_IMAGE})
        assert status == 400 and answer["error"].startswith("module: expected it for runtime docker")
        status, answer = await stack.call("POST", "/apps", {**body, "module": ECHO})
        assert status == 400 and answer["error"].startswith("image: expected it for runtime docker")


def test_the_task_image_holds_the_code_with_its_bytecode() -> None:
    files = image_files()
    assert "app/nodes/armada/detect_task.py" in files
    assert any(name.startswith("app/nodes/armada/__pycache__/detect_task.") for name in files)
    assert source_digest() == source_digest()
    assert repository("E01 x") == "armada-task/e01-x"


def test_a_fleet_of_docker_tasks_is_a_fleet_of_docker_nodes() -> None:
    doc = armada_fleet({"nodes": 3, "users": 2, "task_runtime": "docker"})
    edges = [n for n in doc["topology"]["nodes"] if n.get("tier") == "edge"]
    assert edges and all(n["runtime"] == "docker" for n in edges)
    captains = [s for s in doc["services"] if s["program"] == "armada.captain"]
    assert all(s["params"]["workdir"] == "captains" for s in captains)
    plain = armada_fleet({"nodes": 3, "users": 2})
    assert all("runtime" not in n for n in plain["topology"]["nodes"])
    assert Fleet.from_params({"nodes": 3, "users": 2}).task_runtime == "process"
    with pytest.raises(ValueError, match=r"params.task_runtime: expected one of process, "
                                         r"docker, found 'podman'"):
        armada_fleet({"nodes": 3, "users": 2, "task_runtime": "podman"})


def test_experiments_take_task_runtime_and_refuse_other_values(capsys: Any) -> None:
    from testbed.cli import main

    assert main(["experiment", "armada-load", "--task-runtime", "podman"]) == 2
    assert "--task-runtime: expected one of process, docker, found 'podman'" in \
        capsys.readouterr().err
    assert main(["experiment", "armada-storage", "--task-runtime", "docker"]) == 2
    assert "--task-runtime: armada-storage takes no such option" in capsys.readouterr().err


def test_the_simulator_refuses_a_fleet_of_container_replicas() -> None:
    from testbed.errors import TestbedError
    from testbed.systems.armada.fleet import fleet_scenario
    from testbed.systems.armada.run_checks import check_run

    scenario = fleet_scenario(Fleet(nodes=3, users=2, task_runtime="docker"),
                              policies=["armada"])
    with pytest.raises(TestbedError, match=r"build.params.task_runtime: expected process "
                                           r"for --executor sim"):
        check_run(scenario, "sim")
    check_run(scenario, "emulation")
