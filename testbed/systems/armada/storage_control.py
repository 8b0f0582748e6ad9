"""What the ``armada-storage`` driver asks of the running storage layer, and the user.

The control plane (each function runs inside the control node's network namespace):
wait until the Cargos registered (:func:`wait_for_cargos`), allocate an application's
storage and deploy its face task on it (:func:`allocate_and_deploy`), wait until a lost
replica was restored (:func:`wait_restored`), read every acknowledged write back from
every replica (:func:`read_back`) and collect the Cargos' replication lag
(:func:`replication_lag`). The user (inside its own namespace): the one task the Beacon
gives it (:func:`nearest_task`) and the trace's frames sent to it at their arrival
instants, one at a time (:func:`stream_faces`), one trace row of kind ``storage`` each.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import EmulationError
from testbed.systems.armada.builders import CARGO_PORT, site_location
from testbed.systems.armada.control import call, wait

TASK_CPU = 0.15
RECORD_BYTES = 8 + 128 * 8
DEPLOY_TIMEOUT_S = 180.0
RESTORE_TIMEOUT_S = 180.0
FRAME_TIMEOUT_S = 30.0


def wait_for_cargos(cm: str, cargos: int) -> list[dict[str, Any]]:
    """Wait until the Cargo Manager at ``cm`` lists ``cargos`` live Cargos."""
    def alive() -> list[dict[str, Any]] | None:
        code, body = call(f"{cm}/cargos")
        found = [c for c in body.get("cargos", []) if c.get("state") == "alive"] \
            if code == 200 else []
        return found if len(found) >= cargos else None

    return wait(alive, 60.0, "every Cargo to register")


def allocate_and_deploy(app: str, strategy: str, consistency: str, source: Path,
                        cm: str, beacon: str, cm_for_tasks: str, seed: int,
                        secret: str) -> dict[str, Any]:
    """Allocate ``app``'s storage (three Cargos, the initial data set from ``source``),
    then deploy its face task through the Beacon (``need_storage``) and wait for three
    running replicas, both with the run ``secret``. Returns the allocation and the
    deployment times."""
    lat, lon = site_location(0)
    asked = time.time()
    code, alloc = call(f"{cm}/storage", "POST",
                       {"app": app, "locations": [{"lat": lat, "lon": lon}], "replication": 3,
                        "consistency": consistency, "strategy": strategy,
                        "source": {"kind": "file", "path": str(source)}}, token=secret,
                       timeout=60.0)
    if code not in (200, 201):
        raise EmulationError(f"storage for {app} refused ({code}): {alloc}")

    def ready() -> dict[str, Any] | None:
        _, body = call(f"{cm}/storage/{app}")
        states = [r["state"] for r in body.get("replicas", [])]
        return body if states.count("ready") >= 3 else None

    alloc = wait(ready, 120.0, f"the storage of {app} to be ready")
    stored = time.time()
    spec = {"name": app, "runtime": "process", "module": "nodes.armada.face_task",
            "args": {"storage_manager": cm_for_tasks, "op": "read-write", "model_seed": seed},
            "cpu": TASK_CPU, "memory_mb": 256, "need_storage": True,
            "locations": [{"lat": lat, "lon": lon}]}
    code, body = call(f"{beacon}/apps", "POST", spec, token=secret, timeout=60.0)
    if code not in (200, 201):
        raise EmulationError(f"deployment of {app} refused ({code}): {body}")

    def running() -> dict[str, Any] | None:
        _, status = call(f"{beacon}/apps/{app}")
        up = [r for r in status.get("replicas", []) if r.get("status") == "running"]
        return status if len(up) >= 3 else None

    status = wait(running, DEPLOY_TIMEOUT_S, f"the face task of {app} to start")
    return {"allocation": alloc, "storage_ready_s": stored - asked,
            "task_running_s": time.time() - stored,
            "replicas": [{"node_id": r.get("node_id"), "status": r.get("status")}
                         for r in status.get("replicas", [])]}


def serving_cargo(cm: str, app: str, node_location: tuple[float, float]) -> str | None:
    """The Cargo of ``app`` the Cargo Manager names nearest to a task at
    ``node_location``: the replica the task reads from."""
    lat, lon = node_location
    code, near = call(f"{cm}/query", "POST", {"app": app, "lat": lat, "lon": lon, "topn": 1})
    listed = near.get("candidates", []) if code == 200 else []
    return listed[0]["cargo_id"] if listed else None


def nearest_task(beacon: str, app: str) -> dict[str, Any]:
    """The one candidate (TopN = 1) the Beacon gives the user at site 0."""
    lat, lon = site_location(0)

    def candidate() -> dict[str, Any] | None:
        code, body = call(f"{beacon}/query", "POST",
                          {"app": app, "lat": lat, "lon": lon, "user": "u01"})
        listed = body.get("candidates", []) if code == 200 else []
        return listed[0] if listed else None

    return wait(candidate, 30.0, f"a candidate for {app}")


def wait_restored(cm: str, app: str) -> dict[str, Any]:
    """After a Cargo of ``app`` was lost: wait until the Cargo Manager restored three
    ready replicas and recorded the restoration; its view of ``app``'s storage."""
    def restored() -> dict[str, Any] | None:
        _, body = call(f"{cm}/storage/{app}")
        ready = [r for r in body.get("replicas", []) if r["state"] == "ready"]
        return body if len(ready) >= 3 and body.get("restores") else None

    return wait(restored, RESTORE_TIMEOUT_S, f"{app} to be restored to three replicas")


def storage_view(cm: str, app: str) -> dict[str, Any]:
    """The Cargo Manager's view of ``app``'s storage (replicas and their states)."""
    code, body = call(f"{cm}/storage/{app}")
    if code != 200:
        raise EmulationError(f"the storage of {app} is not listed ({code}): {body}")
    return body


# ------------------------------------------------------------------ the user


@dataclasses.dataclass
class Stream:
    """One workload streamed through one task: its rows, and which identity each
    acknowledged write stored (by the task id of its latest write)."""

    app: str
    mode: str
    repetition: int
    node: str
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    written: dict[int, int] = dataclasses.field(default_factory=dict)  # identity -> task id


def stream_faces(task_url: str, frames: Sequence[bytes], plan: Any,
                 arrivals: Sequence[float], stream: Stream, run: str,
                 began: float) -> Stream:
    """Send frame ``k`` of ``plan`` to the task at ``began + arrivals[k]`` (its arrival
    in the trace), or once the previous frame was answered if that is later (one frame
    at a time), as the workload's op; one trace row per frame into ``stream``."""
    import requests

    session = requests.Session()
    for k in range(plan.frames):
        time.sleep(max(0.0, began + arrivals[k] - time.time()))  # the trace's instant
        identity, observation = int(plan.identity[k]), int(plan.observation[k])
        headers = {"Content-Type": "image/jpeg", "X-Face-Identity": str(identity),
                   "X-Face-Observation": str(observation), "X-Face-Op": stream.mode}
        sent = time.time()
        error, answer = None, None
        try:
            resp = session.post(f"{task_url}/recognise", data=frames[int(plan.image[k])],
                                headers=headers, timeout=FRAME_TIMEOUT_S)
            answer = resp.json() if resp.status_code == 200 else None
            if answer is None:
                error = f"{resp.status_code}: {resp.text[:200]}"
        except (requests.RequestException, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        received = time.time()
        stream.rows.append(frame_row(run, stream, k, identity, arrivals[k], sent, received,
                                     began, answer, error))
        if answer is not None and "write" in answer["performed"]:
            stream.written[identity] = k
    session.close()
    return stream


def frame_row(run: str, stream: Stream, k: int, identity: int, arrival: float, sent: float,
              received: float, began: float, answer: Mapping[str, Any] | None,
              error: str | None) -> dict[str, Any]:
    """The trace row of frame ``k``: what the task did (``op``), its read and write
    times (``read_ms``, ``write_ms``, each including the connection to the Cargo), and
    whether a read recognised the face (``recognised``)."""
    latency = received - sent
    row: dict[str, Any] = {
        "run": run, "policy": stream.app, "repetition": stream.repetition, "kind": "storage",
        "task_id": k, "client": "u01", "target": stream.node, "tier": "edge", "size": 0.03,
        "cls": stream.mode, "arrival_model": arrival, "dispatch_model": sent - began,
        "arrival_wall": began + arrival, "dispatch_wall": sent, "estimate_s": None,
        "state_age_s": 0.0, "decision_us": 0.0, "key": str(identity), "replica": None}
    if answer is None:
        return {**row, "outcome": "error", "error": error, "op": None, "bytes": None,
                "read_ms": None, "write_ms": None, "recognised": None}
    service = answer["end"] - answer["start"]
    queued = answer["queue_ms"] / 1e3
    performed = answer["performed"]
    return {**row, "outcome": "ok", "error": None,
            "response_model": received - began, "server_arrival_wall": answer["server_arrival"],
            "start_wall": answer["start"], "end_wall": answer["end"], "response_wall": received,
            "latency_s": latency, "network_s": max(0.0, latency - service - queued),
            "wait_s": queued, "service_s": service, "latency_wall_s": latency,
            "queue_at_arrival": 0, "op": "+".join(performed) or "none",
            "bytes": RECORD_BYTES if answer["inserted"] else 0,
            "read_ms": answer["read_ms"] if "read" in performed else None,
            "write_ms": answer["write_ms"] if "write" in performed else None,
            "recognised": int(bool(answer["recognised"])) if "read" in performed else None}


# ------------------------------------------------------------------ after a stream


def replication_lag(cargos: Mapping[str, str], app: str) -> dict[str, Any]:
    """Every Cargo's measured replication lag of ``app`` (``cargos``: id -> address):
    after this long every replica had a write, the staleness bound of eventual reads."""
    out = {}
    for node, ip in cargos.items():
        code, body = call(f"http://{ip}:{CARGO_PORT}/stats?samples=1")
        if code == 200 and app in body.get("apps", {}):
            stats = body["apps"][app]
            out[node] = {"lag": stats["lag"], "writes": stats["writes"],
                         "samples": [lag for _, lag in stats.get("lag_samples", [])]}
    return out


def read_back(alloc: Mapping[str, Any], app: str, plan: Any,
              written: Mapping[int, int]) -> dict[str, Any]:
    """Every record the task acknowledged as written, read from every ready replica and
    compared with the descriptor of its last acknowledged write."""
    replicas = [r for r in alloc["replicas"] if r["state"] == "ready"]
    missing, wrong, found = [], [], 0
    for identity, k in sorted(written.items()):
        want = plan.descriptor(k)
        for r in replicas:
            code, body = call(f"{r['url']}/apps/{app}/records/{identity}")
            if code != 200:
                missing.append([r["cargo_id"], identity])
            elif not np.allclose(body.get("vector", []), want, rtol=0, atol=1e-12):
                wrong.append([r["cargo_id"], identity])
            else:
                found += 1
    return {"expected": len(written) * len(replicas), "found": found,
            "missing": missing[:20], "wrong": wrong[:20], "replicas": len(replicas)}
