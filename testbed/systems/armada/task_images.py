"""What a replay that makes its own deployment (a policy entry's ``task_runtime`` and
``task_images``) asks of the brought-up fleet beyond deploying: the nodes' task images
removed before it, what each Captain reports of the replicas it started (the image, how
long building it took), and, after the application was removed, every task stopped and
its container gone, so the next deployment starts from the same state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from testbed.errors import EmulationError
from testbed.systems.armada.control import APP, CAPTAIN, beacon_service, call, wait

CLEAN_TIMEOUT_S = 120.0


def captains(topo: Any) -> dict[str, int]:
    """Every Captain's node and port."""
    return {s.node: s.port for s in topo.scenario.services if s.program == CAPTAIN}


def forget_task_images(topo: Any) -> None:
    """Remove every node's task image from the run's engine, so each Captain builds its
    own again (what a node that never ran the application lacks)."""
    from nodes.armada.task_image import repository

    engine = topo.infra.engine
    if engine is None:
        raise EmulationError("task_images: fresh needs docker nodes (a fleet with "
                             "task_runtime: docker); this run has no engine")
    for node in captains(topo):
        for image in engine.client.images.list(name=repository(node)):
            engine.client.images.remove(image.id, force=False)
        if engine.client.images.list(name=repository(node)):
            raise EmulationError(f"the task image of {node} could not be removed")


def replica_tasks(topo: Any, replicas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each running replica as its Captain shows it: node, task id, ``ready_at``, the
    image it runs (``None`` for a process) and the image build it waited for
    (``image_build_s``, ``None`` when the image was cached or not needed)."""
    from testbed.emulation.probe import in_netns

    ports = captains(topo)
    ctl = topo.net.hosts[beacon_service(topo.scenario).node].pid

    def ask() -> list[dict[str, Any]]:
        found = []
        for r in replicas:
            if r.get("status") != "running":
                continue
            node = r["node_id"]
            code, body = call(f"http://{topo.net.ip(node)}:{ports[node]}/tasks/{r['task_id']}")
            if code != 200:
                raise EmulationError(f"the Captain of {node} answered {code} for task "
                                     f"{r['task_id']}: {body}")
            found.append({"node": node, "task_id": r["task_id"], "ready_at": r["ready_at"],
                          "image": body.get("image"),
                          "image_build_s": body.get("image_build_s")})
        return found

    return in_netns(ctl, ask)


def wait_clean(topo: Any) -> None:
    """Wait until no Captain runs a task and no task container is left in the engine."""
    from testbed.emulation.probe import in_netns

    ports = captains(topo)
    engine = topo.infra.engine
    ctl = topo.net.hosts[beacon_service(topo.scenario).node].pid

    def idle() -> bool:
        for node, port in ports.items():
            code, body = call(f"http://{topo.net.ip(node)}:{port}/tasks")
            if code != 200 or any(t["status"] in ("starting", "running")
                                  for t in body["tasks"]):
                return False
        return engine is None or not engine.client.containers.list(
            all=True, filters={"label": f"armada.app={APP}"})

    in_netns(ctl, lambda: wait(idle, CLEAN_TIMEOUT_S,
                               "every task stopped and its container removed"))
