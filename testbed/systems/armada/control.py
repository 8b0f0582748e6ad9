"""Driving Armada on a brought-up emulated topology: what every Armada driver shares.

The harness brings the scenario up (:mod:`testbed.emulation.executor`); these helpers
then talk to Armada's control plane from the control node's namespace (wait until the
Captains registered, deploy an application through the Beacon with the scenario's
token, read its status), start the in-host users (``python -m nodes.armada.user``)
through the run's launcher, wait for them, and check that replicas run inside their
node (network namespace and CPU cgroup).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed.errors import EmulationError
from testbed.poll import wait_until
from testbed.scenario import Scenario
from testbed.systems.armada.model import APP, REPLICA_MEMORY_MB

Progress = Callable[[str], None]

BEACON = "armada.beacon"
CAPTAIN = "armada.captain"
USER_MODULE = "nodes.armada.user"
DETECT_MODULE = "nodes.armada.detect_task"
REPLICA_CPU = 0.04  # cores asked per replica: fits the smallest node (0.04 cores)
REGISTER_TIMEOUT_S = 60.0
DEPLOY_TIMEOUT_S = 240.0  # a replica on a 0.04-core node starts in about a minute
REMOVE_TIMEOUT_S = 60.0
POLL_S = 0.2  # between two checks of a waited-for condition


def replica_program(runtime: str = "process") -> dict[str, str]:
    """The detector replica's ``runtime`` and program in a deployment: ``module`` for the
    process runtime, and the image the Captain builds for the docker runtime."""
    from nodes.armada.task_image import TASK_IMAGE

    if runtime == "docker":
        return {"runtime": "docker", "image": TASK_IMAGE, "module": DETECT_MODULE}
    return {"runtime": "process", "module": DETECT_MODULE}


def beacon_service(scenario: Scenario) -> Any:
    """The Beacon service (the harness deploys through it with the run secret,
    ``topo.secret``, which the Beacon accepts as a token)."""
    return next(s for s in scenario.services if s.program == BEACON)


def wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """:func:`testbed.poll.wait_until` at the pace of a control plane (every
    ``POLL_S``): each check is an HTTP request to a service on a CPU-limited node."""
    return wait_until(check, timeout, what, interval=POLL_S)


def check_containment(topo: Any, replicas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Whether each replica's process shares its node's network namespace and cgroup."""
    from testbed.emulation.probe import http_json, in_netns

    ctl = topo.net.hosts[beacon_service(topo.scenario).node]
    found: dict[str, dict[str, Any]] = {}
    for replica in replicas:
        node = replica["node_id"]
        captain = next(s for s in topo.scenario.services_on(node)
                       if s.program == CAPTAIN)
        url = topo.url(captain, "", f"/tasks/{replica['task_id']}")
        _, task = in_netns(ctl.pid, lambda url=url: http_json(url))
        pid = task["pid"]
        netns = Path(f"/proc/{pid}/ns/net").resolve().name == \
            Path(f"/proc/{topo.net.hosts[node].pid}/ns/net").resolve().name
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        cgroup = topo.net.cgroups.get(node)
        wanted = [str(p).split("/edge-testbed/", 1)[1] for p in cgroup.paths] if cgroup else []
        in_cgroup = bool(wanted) and all(
            any(line.endswith("/edge-testbed/" + w) for line in lines) for w in wanted)
        found[node] = {"pid": pid, "same_netns": netns, "in_node_cgroup": in_cgroup,
                       "cgroup": lines}
    return found


def start_user(topo: Any, user: str, config: dict[str, Any], tag: str) -> int:
    """Start one user's client in its host; returns the launcher pid."""
    path = topo.workdir / f"user-{tag}-{user}.json"
    path.write_text(json.dumps(config, indent=1))
    pid = topo.infra.launcher.spawn(topo.net.hosts[user].pid, USER_MODULE,
                                    [str(path)], topo.workdir / f"user-{tag}-{user}.log",
                                    env=topo.service_env())
    topo.infra.ledger.record_process(pid, what=f"armada user {user} ({tag})")
    return pid


def wait_users(topo: Any, pids: Mapping[str, int], tag: str, budget: float) -> None:
    """Wait until every user's client ended; raise with its log when one failed."""
    deadline = time.monotonic() + budget
    for user, pid in pids.items():
        code = topo.infra.launcher.wait(pid, timeout=max(0.0, deadline - time.monotonic()))
        if code != 0:
            log = topo.workdir / f"user-{tag}-{user}.log"
            why = "did not finish in time" if code is None else f"exited with {code}"
            raise EmulationError(f"user {user} ({tag}) {why}: {log.read_text()[-1500:]}")


def measure_matrix(topo: Any, run: str, replicas: list[dict[str, Any]], samples: int,
                   frames_dir: Path, timeout_s: float = 5.0,
                   budget_s: float = 120.0) -> dict[str, dict[str, list[dict[str, float]]]]:
    """The user x node latency matrix: each client of the scenario in turn (so no user
    queues behind another) sends ``samples`` frames straight to every replica of
    ``replicas`` (``task_id``, ``node_id``, ``url``) after one warm-up frame each; per
    user and node the raw samples (``latency_ms``, ``processing_ms``, ``queue_ms``)."""
    beacon = beacon_service(topo.scenario)
    tiers = {n.name: n.tier for n in topo.scenario.topology.nodes if n.role == "server"}
    common = {"run": run, "app": APP, "beacon": f"http://{topo.net.ip(beacon.node)}:"
                                                f"{beacon.port}",
              "frames_dir": str(frames_dir), "timeout_s": timeout_s, "tiers": tiers,
              "mode": "matrix", "replicas": replicas, "samples": samples}
    found = {}
    for user in (n.name for n in topo.scenario.clients()):
        result = topo.workdir / f"matrix-{user}.json"
        pid = start_user(topo, user, {**common, "user": user, "out": str(result)}, "matrix")
        wait_users(topo, {user: pid}, "matrix", budget_s)
        found[user] = json.loads(result.read_text())["samples"]
    return found


def wait_for_captains(topo: Any, beacon: Any, servers: list[str]) -> None:
    """Wait until the Spinner lists every node of ``servers`` as alive."""
    from testbed.emulation.probe import http_json, in_netns

    local_beacon = f"http://127.0.0.1:{beacon.port}"

    def registered() -> bool:
        _, body = http_json(f"{local_beacon}/nodes")
        alive = {n["node_id"] for n in body.get("nodes", []) if n["state"] == "alive"}
        return alive >= set(servers)

    in_netns(topo.net.hosts[beacon.node].pid,
             lambda: wait(registered, REGISTER_TIMEOUT_S, "every Captain to register"))


def deploy_everywhere(topo: Any, beacon: Any, token: str, servers: list[str],
                      runtime: str = "process", cpu: float = REPLICA_CPU
                      ) -> tuple[dict[str, Any], float]:
    """Wait for every Captain, deploy the detector with one replica per node through the
    Beacon (with the token), each asking ``cpu`` cores and run by the Captains'
    ``runtime``, and wait until all serve; returns the app status and the wall time of
    the deployment request."""
    from nodes.armada.sdk.client import app_status, deploy
    from testbed.emulation.probe import in_netns

    ctl = topo.net.hosts[beacon.node]
    local_beacon = f"http://127.0.0.1:{beacon.port}"
    wait_for_captains(topo, beacon, servers)
    nodes = {n.name: n for n in topo.scenario.topology.nodes}
    spec = {"name": APP, **replica_program(runtime), "args": {"workers": 1},
            "cpu": cpu, "memory_mb": REPLICA_MEMORY_MB, "need_storage": False,
            "min_replicas": len(servers),
            "locations": [{"lat": nodes[s].lat, "lon": nodes[s].lon} for s in servers]}
    asked = time.time()
    in_netns(ctl.pid, lambda: deploy(local_beacon, token, spec))

    def serving() -> dict[str, Any] | None:
        status = app_status(local_beacon, APP)
        running = [r for r in status["replicas"] if r["status"] == "running"]
        return status if len({r["node_id"] for r in running}) == len(servers) else None

    status = in_netns(ctl.pid, lambda: wait(serving, DEPLOY_TIMEOUT_S,
                                             "a replica running on every node"))
    return status, asked


def write_frames(params: Mapping[str, Any], folder: Path) -> Path:
    """The JPEG frames a ``frame-stream`` workload's ``frames`` spec describes, written to
    ``folder`` as ``0000.jpg``, ``0001.jpg``, ... (the users read them there)."""
    from workloads.armada_frames import FrameSpec, load_frames

    folder.mkdir(parents=True)
    for k, frame in enumerate(load_frames(FrameSpec.from_mapping(params["frames"]))):
        (folder / f"{k:04d}.jpg").write_bytes(frame)
    return folder


def call(url: str, method: str = "GET", body: Any = None, token: str | None = None,
          timeout: float = 10.0) -> tuple[int, Any]:
    """One JSON request, with the bearer ``token`` if given, in whatever namespace the
    calling thread is in; a failed connection is status 0."""
    import requests

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        resp = requests.request(method, url, json=body, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        return 0, {"error": f"{type(exc).__name__}: {exc}"}
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, {"error": resp.text[:300]}


def remove_app(topo: Any, app: str) -> None:
    """Delete ``app``'s deployment through the Beacon (its replicas; storage stays
    allocated) and wait until the Application Manager no longer knows it."""
    from testbed.emulation.probe import in_netns

    beacon = beacon_service(topo.scenario)

    token = topo.secret.value
    url = f"http://127.0.0.1:{beacon.port}/apps/{app}"

    def remove() -> None:
        code, body = call(url, "DELETE", token=token, timeout=REMOVE_TIMEOUT_S)
        if code not in (200, 202, 204):
            raise EmulationError(f"removing {app} refused ({code}): {body}")
        wait(lambda: call(url)[0] == 404, REMOVE_TIMEOUT_S, f"{app} to be removed")

    in_netns(topo.net.hosts[beacon.node].pid, remove)


