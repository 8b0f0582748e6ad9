"""Armada's storage layer in emulation (``armada-storage``): Cargo selection, a Cargo
failure, and the consistency policies, under the face-recognition workloads.

The scenario (:func:`storage_scenario`, generated and validated like a file): a control
node with the Beacon, Application Manager (TopN = 1, as in the paper's storage runs),
Spinner and Cargo Manager; ``sites`` edge sites at growing distances, site ``i`` behind
its own ISP path of :data:`SITE_DELAYS_MS` ``[i]`` one way to the WAN core, each with a
Captain and a Cargo (2 GB declared, a SQLite store on the node's disk); one user on
site 0's LAN.

The driver (:func:`run_storage`) brings it up once and then:

1. **Selection strategy**: allocates application ``nearest`` (Cargo strategy nearest,
   strong consistency) and ``random`` (strategy random), each with the 1000 labelled
   descriptors of the initial data set pulled by its Cargos from a file, deploys the
   face-recognition task for each through the Beacon (``need_storage``), and streams the
   three workloads (read-only, write-only, read-then-write) through the task nearest to
   the user, one frame at a time. The task times its reads and writes, each including
   the connection to the Cargo. An application's tasks are removed (its storage stays)
   before the next is deployed, so every application's tasks find the nodes' CPU free.
2. **Consistency**: application ``eventual`` (nearest, eventual consistency), the same
   three workloads; the Cargos' measured replication lag is the staleness bound.
3. **Fault tolerance**: application ``faults`` (nearest, strong): the read-then-write
   workload, during which the Cargo serving the task (its nearest replica) is killed
   (SIGKILL) a third of the way through. Afterwards every record the task acknowledged
   as written is read back from every live replica, and the Cargo Manager's record of
   the restoration gives the time to have three replicas again.

Rows are trace rows of kind ``storage`` (one per frame): ``policy`` the application,
``repetition`` the workload's index, ``op`` what the task did (``read``, ``write``,
``read+write`` or ``none``), ``key`` the identity, ``bytes`` the record bytes written,
``latency_s`` the frame's end-to-end time, ``service_s`` the task's time, ``wait_s``
its queue.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import EmulationError
from testbed.experiments.emulated import Progress, run_emulated_experiment
from testbed.experiments.sizes import size_plan
from testbed.scenario import Scenario
from testbed.scenario.loader import scenario_from_dict
from testbed.systems.armada.builders import (
    CARGO_PORT,
    CM_PORT,
    DATASETS,
    NODE_CORES,
    SITE_DELAYS_MS,
    WORKLOADS,
    anchor_paths,
    armada_storage,
    cargo_node,
    site_location,
    site_name,
)
from testbed.systems.armada.control import (
    call,
    remove_app,
    wait,
    wait_for_captains,
)

SCENARIO = "armada-storage"
TASK_CPU = 0.15
RECORD_BYTES = 8 + 128 * 8
DEPLOY_TIMEOUT_S = 180.0
FRAME_TIMEOUT_S = 30.0
#: apps of the experiment: (name, strategy, consistency)
APPS = (("nearest", "nearest", "strong"), ("random", "random", "strong"),
        ("eventual", "nearest", "eventual"))
FAULT_APP = ("faults", "nearest", "strong")


@dataclasses.dataclass(frozen=True)
class StorageSize:
    """What one ``--size`` of ``armada-storage`` runs."""

    sites: int
    frames: int  # per workload
    seed: int = 0


SIZES = {"small": StorageSize(sites=4, frames=24), "full": StorageSize(sites=6, frames=1000)}


def storage_scenario(size: StorageSize, workdir: Path, cargo_runtime: str = "process"
                     ) -> Scenario:
    """The ``armada-storage`` deployment of ``size`` (the builder's document, validated
    by the scenario loader), its services' folders under ``workdir``."""
    doc = armada_storage({"sites": size.sites, "frames": size.frames, "seed": size.seed,
                          "mode": "read", "cargo_runtime": cargo_runtime})
    doc = {"name": SCENARIO, "policies": [app for app, _, _ in APPS],
           **anchor_paths(doc, str(workdir))}
    return scenario_from_dict(doc, source=f"<{SCENARIO}>")


# ------------------------------------------------------------------ the control plane


def wait_for_cargos(sites: int) -> list[dict[str, Any]]:
    """In the control node: wait until the Cargo Manager lists ``sites`` live Cargos."""
    def alive() -> list[dict[str, Any]] | None:
        code, body = call(f"http://127.0.0.1:{CM_PORT}/cargos")
        found = [c for c in body.get("cargos", []) if c.get("state") == "alive"] \
            if code == 200 else []
        return found if len(found) >= sites else None

    return wait(alive, 60.0, "every Cargo to register")


def allocate_and_deploy(app: str, strategy: str, consistency: str, source: Path,
                        cm_for_tasks: str, seed: int, secret: str) -> dict[str, Any]:
    """In the control node: allocate ``app``'s storage (three Cargos, the initial data set
    from ``source``), then deploy its face task through the Beacon (``need_storage``) and
    wait for three running replicas, both with the run ``secret``. Returns the
    allocation and the deployment times."""
    lat, lon = site_location(0)
    asked = time.time()
    code, alloc = call(f"http://127.0.0.1:{CM_PORT}/storage", "POST",
                       {"app": app, "locations": [{"lat": lat, "lon": lon}], "replication": 3,
                        "consistency": consistency, "strategy": strategy,
                        "source": {"kind": "file", "path": str(source)}}, token=secret,
                       timeout=60.0)
    if code not in (200, 201):
        raise EmulationError(f"storage for {app} refused ({code}): {alloc}")

    def ready() -> dict[str, Any] | None:
        _, body = call(f"http://127.0.0.1:{CM_PORT}/storage/{app}")
        states = [r["state"] for r in body.get("replicas", [])]
        return body if states.count("ready") >= 3 else None

    alloc = wait(ready, 120.0, f"the storage of {app} to be ready")
    stored = time.time()
    spec = {"name": app, "runtime": "process", "module": "nodes.armada.face_task",
            "args": {"storage_manager": cm_for_tasks, "op": "read-write", "model_seed": seed},
            "cpu": TASK_CPU, "memory_mb": 256, "need_storage": True,
            "locations": [{"lat": lat, "lon": lon}]}
    code, body = call("http://127.0.0.1:8000/apps", "POST", spec, token=secret, timeout=60.0)
    if code not in (200, 201):
        raise EmulationError(f"deployment of {app} refused ({code}): {body}")

    def running() -> dict[str, Any] | None:
        _, status = call(f"http://127.0.0.1:8000/apps/{app}")
        up = [r for r in status.get("replicas", []) if r.get("status") == "running"]
        return status if len(up) >= 3 else None

    status = wait(running, DEPLOY_TIMEOUT_S, f"the face task of {app} to start")
    return {"allocation": alloc, "storage_ready_s": stored - asked,
            "task_running_s": time.time() - stored,
            "replicas": [{"node_id": r.get("node_id"), "status": r.get("status")}
                         for r in status.get("replicas", [])]}


def nearest_task(beacon: str, app: str) -> dict[str, Any]:
    """In the user's node: the one candidate (TopN = 1) the Beacon gives the user."""
    lat, lon = site_location(0)

    def candidate() -> dict[str, Any] | None:
        code, body = call(f"{beacon}/query", "POST",
                          {"app": app, "lat": lat, "lon": lon, "user": "u01"})
        listed = body.get("candidates", []) if code == 200 else []
        return listed[0] if listed else None

    return wait(candidate, 30.0, f"a candidate for {app}")


# ------------------------------------------------------------------ the user


@dataclasses.dataclass
class Stream:
    """One workload streamed through one task: what the driver records."""

    app: str
    mode: str
    repetition: int
    node: str
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    read_ms: list[float] = dataclasses.field(default_factory=list)
    write_ms: list[float] = dataclasses.field(default_factory=list)
    written: dict[int, int] = dataclasses.field(default_factory=dict)  # identity -> task id
    recognised: int = 0
    done: int = 0


def stream_faces(task_url: str, frames: Sequence[bytes], plan: Any, stream: Stream,
                 run: str) -> Stream:
    """Send every frame of ``plan`` to the task, one at a time (closed loop), as the
    workload's op; one trace row per frame into ``stream``."""
    import requests

    session = requests.Session()
    began = time.time()
    for k in range(plan.frames):
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
        stream.rows.append(_row(run, stream, k, identity, sent, received, began, answer, error))
        if answer is not None:
            if "read" in answer["performed"]:
                stream.read_ms.append(answer["read_ms"])
                stream.recognised += bool(answer["recognised"])
            if "write" in answer["performed"]:
                stream.write_ms.append(answer["write_ms"])
                stream.written[identity] = k
        stream.done = k + 1
    session.close()
    return stream


def _row(run: str, stream: Stream, k: int, identity: int, sent: float, received: float,
         began: float, answer: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    latency = received - sent
    row: dict[str, Any] = {
        "run": run, "policy": stream.app, "repetition": stream.repetition, "kind": "storage",
        "task_id": k, "client": "u01", "target": stream.node, "tier": "edge", "size": 0.03,
        "cls": stream.mode, "arrival_model": sent - began, "dispatch_model": sent - began,
        "arrival_wall": sent, "dispatch_wall": sent, "estimate_s": None, "state_age_s": 0.0,
        "decision_us": 0.0, "key": str(identity), "replica": None}
    if answer is None:
        return {**row, "outcome": "error", "error": error, "op": None, "bytes": None}
    service = answer["end"] - answer["start"]
    wait = answer["queue_ms"] / 1e3
    return {**row, "outcome": "ok", "error": None,
            "response_model": received - began, "server_arrival_wall": answer["server_arrival"],
            "start_wall": answer["start"], "end_wall": answer["end"], "response_wall": received,
            "latency_s": latency, "network_s": max(0.0, latency - service - wait),
            "wait_s": wait, "service_s": service, "latency_wall_s": latency,
            "queue_at_arrival": 0, "op": "+".join(answer["performed"]) or "none",
            "bytes": RECORD_BYTES if answer["inserted"] else 0}


def stats_ms(values: Sequence[float]) -> dict[str, Any]:
    """Count, mean, p50, p95 and max of millisecond values."""
    if not values:
        return {"n": 0, "mean_ms": None, "p50_ms": None, "p95_ms": None, "max_ms": None}
    v = np.asarray(values, dtype=float)
    return {"n": int(v.size), "mean_ms": float(v.mean()),
            "p50_ms": float(np.percentile(v, 50)), "p95_ms": float(np.percentile(v, 95)),
            "max_ms": float(v.max())}


def summary(stream: Stream) -> dict[str, Any]:
    """What the report needs of one stream."""
    ok = [r for r in stream.rows if r["outcome"] == "ok"]
    return {"app": stream.app, "mode": stream.mode, "node": stream.node,
            "frames": len(stream.rows), "ok": len(ok),
            "failed": len(stream.rows) - len(ok),
            "errors": sorted({r["error"] for r in stream.rows if r["error"]})[:5],
            "read": stats_ms(stream.read_ms), "write": stats_ms(stream.write_ms),
            "recognised": stream.recognised, "written": len(stream.written),
            "latency": stats_ms([r["latency_s"] * 1e3 for r in ok])}


# ------------------------------------------------------------------ the experiment


def run_storage(size: str, out: Path, progress: Progress = print,
                ledger_root: Path | None = None, cargo_runtime: str = "process") -> Path:
    """Run ``armada-storage`` at ``size`` (module docstring) with the Cargos in
    ``cargo_runtime`` (``process`` or ``docker``); results folder ``out``."""
    from testbed.runner import materialise
    from workloads.armada_face_descriptors import encode_records, initial_records
    from workloads.armada_face_frames import load_face_frames
    from workloads.armada_faces import read_plan

    plan_size = size_plan(size, SIZES)
    if out.exists() and any(out.iterdir()):
        raise EmulationError(f"--out {out}: the folder exists and is not empty")
    scenario = storage_scenario(plan_size, (out / "work").resolve(), cargo_runtime)

    def prepare(run: str, workdir: Path) -> dict[str, Any]:
        plans = {scenario.workload.params["mode"]: read_plan(out / "trace")}
        for mode in WORKLOADS:
            if mode in plans:
                continue  # the run's own trace
            variant = dataclasses.replace(scenario, workload=dataclasses.replace(
                scenario.workload, params={**scenario.workload.params, "mode": mode}))
            plans[mode] = read_plan(materialise(variant, out / f"trace-{mode}"))
        source = workdir / DATASETS / "initial.bin"  # below the Cargos' --data-root
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(encode_records(initial_records(plan_size.seed)))
        frames = load_face_frames(plans["read"].images)
        progress(f"run {run}: {plan_size.frames} frames per workload, "
                 f"{len(frames)} face images, initial data set {source.stat().st_size} bytes")
        return {"plans": plans, "source": source, "frames": list(frames)}

    def measure(topo: Any, run: str, scen: Scenario, prep: Mapping[str, Any]) -> dict[str, Any]:
        from testbed.emulation.probe import in_netns
        from testbed.host_monitor import HostMonitor

        ctl, user = topo.net.hosts["ctl"].pid, topo.net.hosts["u01"].pid
        beacon = next(s for s in scen.services if s.program == "armada.beacon")
        servers = [site_name(i) for i in range(plan_size.sites)]
        stores = [cargo_node(i, cargo_runtime) for i in range(plan_size.sites)]
        wait_for_captains(topo, beacon, servers)
        in_netns(ctl, lambda: wait_for_cargos(plan_size.sites))
        cm_for_tasks = f"http://{topo.net.ip('ctl')}:{CM_PORT}"
        beacon_url = f"http://{topo.net.ip('ctl')}:8000"
        rows: list[dict[str, Any]] = []
        streams: list[dict[str, Any]] = []
        deployments: dict[str, Any] = {}
        with HostMonitor(interval_s=0.5) as monitor:
            for app, strategy, consistency in APPS:
                deployments[app] = in_netns(ctl, lambda a=app, s=strategy, c=consistency:
                                            allocate_and_deploy(a, s, c, prep["source"],
                                                                cm_for_tasks, plan_size.seed,
                                                                topo.secret.value))
                task = in_netns(user, lambda a=app: nearest_task(beacon_url, a))
                progress(f"{app}: Cargos {_cargos(deployments[app])} ready after "
                         f"{deployments[app]['storage_ready_s']:.1f} s, tasks after "
                         f"{deployments[app]['task_running_s']:.1f} s more; the user's task on "
                         f"{task.get('node_id')}")
                for mode in WORKLOADS:
                    stream = Stream(app, mode, len(streams), task.get("node_id") or "?")
                    in_netns(user, lambda s=stream, t=task, m=mode: stream_faces(
                        t["url"], prep["frames"], prep["plans"][m], s, run))
                    rows += stream.rows
                    streams.append(summary(stream))
                    progress(f"  {app}/{mode}: {_line(streams[-1])}")
                remove_app(topo, app)  # its tasks: the next app finds the CPU free
            lags = in_netns(ctl, lambda: replication_lag(topo, stores, "eventual"))
            fault = run_fault(topo, run, prep, plan_size, cm_for_tasks, beacon_url, progress,
                              cargo_runtime)
            rows += fault.pop("rows")
        host = monitor.summary().to_dict()
        progress(f"host CPU idle {host['idle_share']:.0%}"
                 + (" - SATURATED" if host["saturated"] else ""))
        result = {"size": dataclasses.asdict(plan_size), "apps": APPS, "streams": streams,
                  "deployments": deployments, "eventual_lag": lags, "fault": fault,
                  "host": host, "site_delays_ms": SITE_DELAYS_MS[:plan_size.sites],
                  "cargo_runtime": cargo_runtime}
        return {"rows": rows, "storage": result}

    return run_emulated_experiment(scenario, plan_size, size, out, prepare, measure,
                                   "storage", progress, ledger_root)


def _cargos(deployment: Mapping[str, Any]) -> str:
    return ", ".join(r["cargo_id"] for r in deployment["allocation"]["replicas"])


def _line(s: Mapping[str, Any]) -> str:
    def ms(x: Mapping[str, Any]) -> str:
        return "-" if x["mean_ms"] is None else f"{x['mean_ms']:.1f} ms"

    return (f"{s['ok']}/{s['frames']} ok, read {ms(s['read'])} (n={s['read']['n']}), "
            f"write {ms(s['write'])} (n={s['write']['n']})")


def replication_lag(topo: Any, servers: Sequence[str], app: str) -> dict[str, Any]:
    """In the control node: every Cargo's measured replication lag of ``app`` (the
    staleness bound of eventual reads: after this long every replica had the write)."""
    out = {}
    for node in servers:
        code, body = call(f"http://{topo.net.ip(node)}:{CARGO_PORT}/stats?samples=1")
        if code == 200 and app in body.get("apps", {}):
            stats = body["apps"][app]
            out[node] = {"lag": stats["lag"], "writes": stats["writes"],
                         "samples": [lag for _, lag in stats.get("lag_samples", [])]}
    return out


def run_fault(topo: Any, run: str, prep: Mapping[str, Any], size: StorageSize,
              cm_for_tasks: str, beacon_url: str, progress: Progress,
              cargo_runtime: str = "process") -> dict[str, Any]:
    """Experiment 3 (module docstring): kill the serving Cargo during read-then-write
    (its process with SIGKILL; a containerised Cargo's node crashed: the container
    killed)."""
    from testbed.emulation.probe import in_netns
    from testbed.scenario import Event

    ctl, user = topo.net.hosts["ctl"].pid, topo.net.hosts["u01"].pid
    app, strategy, consistency = FAULT_APP
    deployed = in_netns(ctl, lambda: allocate_and_deploy(app, strategy, consistency,
                                                         prep["source"], cm_for_tasks,
                                                         size.seed, topo.secret.value))
    task = in_netns(user, lambda: nearest_task(beacon_url, app))
    node = task.get("node_id") or site_name(0)
    lat, lon = next(site_location(i) for i in range(size.sites) if site_name(i) == node)
    code, near = in_netns(ctl, lambda: call(f"http://127.0.0.1:{CM_PORT}/query", "POST",
                                            {"app": app, "lat": lat, "lon": lon, "topn": 1}))
    if code != 200 or not near.get("candidates"):
        raise EmulationError(f"no Cargo of {app} for its task: {near}")
    victim = near["candidates"][0]["cargo_id"]
    plan = prep["plans"]["read-write"]
    stream = Stream(app, "read-write", 100, node)
    kill_after = max(1, plan.frames // 3)
    progress(f"{app}: Cargos {_cargos(deployed)}, task on {node}; killing {victim} "
             f"after frame {kill_after}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        streaming = pool.submit(in_netns, user,
                                lambda: stream_faces(task["url"], prep["frames"], plan, stream,
                                                     run))
        wait(lambda: stream.done >= kill_after or streaming.done(), 600.0,
             "the stream to reach the failure point")
        killed_at = time.time()
        if cargo_runtime == "docker":
            topo.apply_event(Event(at=0.0, action="crash", target=victim))
        else:
            topo.stop_service(f"cargo-{victim}", signal.SIGKILL)
        streaming.result()

    def restored() -> dict[str, Any] | None:
        _, body = call(f"http://127.0.0.1:{CM_PORT}/storage/{app}")
        ready = [r for r in body.get("replicas", []) if r["state"] == "ready"]
        return body if len(ready) >= 3 and body.get("restores") else None

    alloc = in_netns(ctl, lambda: wait(restored, 180.0,
                                        f"{app} to be restored to three replicas"))
    readback = in_netns(ctl, lambda: read_back(alloc, app, plan, stream.written))
    result = {"app": app, "victim": victim, "killed_at": killed_at,
              "how": "container killed" if cargo_runtime == "docker" else "SIGKILL",
              "kill_after_frames": kill_after, "stream": summary(stream),
              "restores": alloc.get("restores", []), "readback": readback,
              "replicas_after": [{"cargo_id": r["cargo_id"], "state": r["state"]}
                                 for r in alloc["replicas"]],
              "rows": stream.rows}
    progress(f"  {app}: {_line(result['stream'])}; restored "
             + ", ".join(f"on {r['cargo_id']} {r['since_lost_s']:.1f} s after the loss"
                         for r in result["restores"])
             + f"; read back {readback['found']}/{readback['expected']} acknowledged writes")
    return result


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
                missing.append((r["cargo_id"], identity))
            elif not np.allclose(body.get("vector", []), want, rtol=0, atol=1e-12):
                wrong.append((r["cargo_id"], identity))
            else:
                found += 1
    return {"expected": len(written) * len(replicas), "found": found,
            "missing": missing[:20], "wrong": wrong[:20], "replicas": len(replicas)}


# ------------------------------------------------------------------ report


def _ms(x: Mapping[str, Any], key: str = "mean_ms") -> str:
    return "-" if x.get(key) is None else f"{x[key]:.1f}"


def _plot(streams: Sequence[Mapping[str, Any]], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from testbed.experiments.emulated import save_figure

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    apps = list(dict.fromkeys(s["app"] for s in streams))
    for ax, op in zip(axes, ("read", "write"), strict=True):
        for i, app in enumerate(apps):
            xs, ys = [], []
            for j, mode in enumerate(WORKLOADS):
                s = next((s for s in streams if s["app"] == app and s["mode"] == mode), None)
                if s is not None and s[op]["mean_ms"] is not None:
                    xs.append(j + (i - (len(apps) - 1) / 2) * 0.25)
                    ys.append(s[op]["mean_ms"])
            ax.bar(xs, ys, 0.25, label=app)
        ax.set_xticks(range(len(WORKLOADS)), WORKLOADS)
        ax.set_ylabel(f"mean {op} latency (ms, incl. connecting)")
        ax.legend(fontsize=8)
    return save_figure(fig, png)


def write_storage_report(out: Path, report: Path, command: str) -> Path:
    """The Markdown report of a :func:`run_storage` folder, with its plot."""
    from testbed.experiments.emulated import host_line, report_header

    res = json.loads((out / "storage.json").read_text())
    streams, fault, size = res["streams"], res["fault"], res["size"]
    delays = res["site_delays_ms"]
    png = _plot(streams, report.with_suffix(".png"))
    runtime = res.get("cargo_runtime", "process")
    where = {cargo_node(i, runtime): d for i, d in enumerate(delays)}
    lines = report_header(
        "Armada storage layer (`armada-storage`)", command, out,
        f"{size['frames']} frames per workload, {size['sites']} edge sites.")
    lines += [
        ("Set-up (generated by the `armada-storage` scenario builder): a control node with "
         "the Beacon, Application Manager (TopN = 1, as in the paper's storage runs), Spinner "
         "and Cargo Manager; edge sites 40 km apart in a row, site i behind its own ISP path "
         "of " + ", ".join(f"{d:g}" for d in delays) + " ms one way to the WAN core, each "
         f"with a Captain ({NODE_CORES:g} cores) and a Cargo (2 GB declared, SQLite in WAL "
         "mode, a write acknowledged after its commit; "
         + ("a process on the site's node, its store on the node's disk" if runtime == "process"
            else f"a container on a node of its own ({NODE_CORES:g} cores) on the site's "
                 "LAN, its store on the node's Docker volume")
         + "); the user on site e01's LAN. Each "
         "application's three Cargos pull the initial data set (1000 labelled descriptors "
         "of the seeded identity model, `<ID 8 bytes, vector 128 x 8 bytes>`) from a file at "
         "allocation. The face task (real Haar-cascade detection; descriptors from the "
         "identity model, `docs/face_recognition.md`) runs on three nodes; the user sends "
         "one frame at a time to the one the Beacon gives it. Read and write latencies are "
         "the task's, each including a fresh connection to the Cargo (no pooling)."), "",
        f"![read and write latency per application and workload]({png.name})", "",
        "## 1. Cargo selection: nearest against random", "",
        ("| application | Cargos (one-way ISP delay, ms) | workload | frames ok | read mean / p95 "
        "(ms) | write mean / p95 (ms) | recognised | written |"),
        "|---|---|---|---|---|---|---|---|"]
    cargos = {app: [r["cargo_id"] for r in d["allocation"]["replicas"]]
              for app, d in res["deployments"].items()}
    for s in streams:
        cells = ", ".join(f"{c} ({where.get(c, '?')})" for c in cargos.get(s["app"], []))
        lines.append(f"| {s['app']} | {cells} | {s['mode']} | {s['ok']}/{s['frames']} | "
                     f"{_ms(s['read'])} / {_ms(s['read'], 'p95_ms')} | "
                     f"{_ms(s['write'])} / {_ms(s['write'], 'p95_ms')} | {s['recognised']} | "
                     f"{s['written']} |")
    near = {s["mode"]: s for s in streams if s["app"] == "nearest"}
    rand = {s["mode"]: s for s in streams if s["app"] == "random"}
    evt = {s["mode"]: s for s in streams if s["app"] == "eventual"}
    def ratios(op: str) -> list[float]:
        return [rand[m][op]["mean_ms"] / near[m][op]["mean_ms"] for m in WORKLOADS
                if m in near and m in rand and near[m][op]["mean_ms"]
                and rand[m][op]["mean_ms"]]

    def closest(app: str) -> str | None:
        return min(cargos.get(app, []), key=lambda c: where.get(c, 1e9), default=None)

    def farthest(app: str) -> str | None:
        return max(cargos.get(app, []), key=lambda c: where.get(c, -1), default=None)

    reads, writes = ratios("read"), ratios("write")
    if reads and writes:
        lines += ["", (
            f"Random's mean latency against nearest's: reads {min(reads):.2f}-{max(reads):.2f}"
            f" times, strong writes {min(writes):.2f}-{max(writes):.2f} times, over the "
            "workloads. A task reads from its nearest replica and a strong write waits for "
            "all three, so reads depend on the closest Cargo of the three and writes on the "
            f"farthest: the closest was {closest('nearest')} for nearest and "
            f"{closest('random')} for random, the farthest {farthest('nearest')} "
            f"({where.get(farthest('nearest'), '?')} ms) and {farthest('random')} "
            f"({where.get(farthest('random'), '?')} ms).")]
    lines += ["", "## 2. Consistency: strong against eventual (both nearest)", "",
              ("| workload | write mean / p95, strong (ms) | write mean / p95, eventual (ms) | "
              "read mean, strong (ms) | read mean, eventual (ms) |"), "|---|---|---|---|---|"]
    for m in WORKLOADS:
        if m in near and m in evt:
            lines.append(f"| {m} | {_ms(near[m]['write'])} / {_ms(near[m]['write'], 'p95_ms')} | "
                         f"{_ms(evt[m]['write'])} / {_ms(evt[m]['write'], 'p95_ms')} | "
                         f"{_ms(near[m]['read'])} | {_ms(evt[m]['read'])} |")
    samples = [x * 1e3 for lag in res["eventual_lag"].values() for x in lag["samples"]]
    if samples:
        p50, p95 = np.percentile(samples, [50, 95])
        lines += ["", (f"Staleness of eventual reads, measured by the Cargos: from a write's "
                       f"acknowledgement to the last replica confirming it took {p50:.1f} ms "
                       f"at the median, {p95:.1f} ms at p95 and {max(samples):.1f} ms at most "
                       f"({len(samples)} writes). A read from another replica within that "
                       "window may miss the write; strong writes are acknowledged only "
                       "once every live replica holds them (the policy waits for all, not a "
                       "majority, so the nearest replica alone answers reads).")]
    fs = fault["stream"]
    rb = fault["readback"]
    restores = fault["restores"]
    lines += ["", "## 3. Fault tolerance: the serving Cargo killed mid-workload", "",
              (f"Application `{fault['app']}` (nearest, strong), read-then-write workload; "
               f"Cargo {fault['victim']} (the task's nearest replica) was killed ("
               + ("its container killed: SIGKILL to every process in it"
                  if fault.get("how") == "container killed" else "SIGKILL")
               + f") after frame {fault['kill_after_frames']}."), "",
              "| measure | value |", "|---|---|",
              f"| frames answered / sent | {fs['ok']} / {fs['frames']} |",
              f"| operations failed as seen by the application | {fs['failed']} |",
              f"| acknowledged writes | {fs['written']} |",
              (f"| read back from every ready replica | {rb['found']} / {rb['expected']} "
              f"({rb['replicas']} replicas; missing {len(rb['missing'])}, different "
              f"{len(rb['wrong'])}) |")]
    for r in restores:
        lines.append(f"| restored on {r['cargo_id']} (lost {r['lost']}) | "
                     f"{r['since_last_seen_s']:.1f} s after its last good health check, "
                     f"{r['since_lost_s']:.1f} s after it was declared dead; copy "
                     f"{r['copy_s']:.2f} s, {r['records']} records |")
    lines += ["", (f"Write latency around the failure: mean {_ms(fs['write'])} ms, max "
                   f"{_ms(fs['write'], 'max_ms')} ms: a strong write in flight when the Cargo "
                   "died waits until the Cargo Manager declares it dead and takes it out of "
                   "the replicas' peer lists, and a request to the dead Cargo fails over to "
                   "the next replica in the storage SDK."),
              "", "## The paper beside ours", "",
              ("The seed describes the storage experiments' set-up (TopN = 1, 2 GB Cargos, "
               "1000 labelled descriptors per replica, the three workloads of 1000 frames) "
               "but its text ends before their results, so there are no numbers or claims "
               "to compare with; the set-up above follows it, with the differences named in "
               "`docs/face_recognition.md` (synthetic descriptors) and `docs/armada.md` "
               "(strong = all live replicas)."), "",
              "## Host fidelity", "", host_line({"storage": res["host"]}), ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    return report
