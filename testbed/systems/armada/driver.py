"""``testbed run`` on an Armada scenario in emulation: the system's driver.

:func:`make_driver` picks one by what the scenario runs:

* :class:`FrameDriver` (frame-stream scenarios: ``armada-fleet`` builds, the selection
  and failover scenarios). ``prepare`` writes the stream's frames, waits until every
  Captain registered and deploys the detector through the Beacon: for a fleet, near
  its seeded sites with auto-scaling, then waits until the replica set settled with
  every user registered; otherwise one replica per Captain, each checked to run inside
  its node's network namespace and CPU cgroup (``containment``), and, when the workload
  asks (``matrix_samples``), the user x node latency matrix measured from each user's
  host before any stream (``matrix``). ``replay(policy)`` streams
  the trace's frames by every user through ``policy``'s client (:func:`~testbed.systems.
  armada.fleet.stream`) while the scenario's ``events`` hit the nodes, and returns the
  frame rows. Every replay starts from the same state: a settled replica set, or, when
  the scenario has events (which move replicas), a fresh deployment. A policy entry
  that sets its deployment (``task_runtime``, ``task_images``: how the Captains run
  the replicas, whether the nodes' task images go first) replays on a deployment of
  its own, made once every task of the previous one stopped; the deployment's record
  then holds what each Captain reports of its replica (image, image build).
* :class:`StorageDriver` (``armada-storage`` builds): ``prepare`` waits for the Captains
  and Cargos and writes the initial data set; ``replay(policy)`` allocates an
  application's storage with the policy's Cargo selection and consistency, deploys the
  face task on it, sends the trace's frames to the task the Beacon gives the user at
  their arrival instants (one at a time) while the scenario's events hit the nodes,
  waits for the restoration when a Cargo of the application was lost, reads every
  acknowledged write back from every replica, and returns the storage rows; the task
  is removed afterwards (the storage stays).

``details()`` (``metadata.json`` under ``system``) holds per replay the replica sets,
scaling decisions, applied events, first picks and switches (frames), or the
allocation, deployment times, losses, restorations, read-back and measured
replication lag (storage), and the host's CPU idle share.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed.emulation.executor import EmulatedTopology
from testbed.errors import EmulationError
from testbed.scenario.model import Scenario
from testbed.systems.armada.control import (
    APP,
    CAPTAIN,
    beacon_service,
    check_containment,
    deploy_everywhere,
    measure_matrix,
    remove_app,
    wait_for_captains,
    write_frames,
)
from testbed.systems.armada.fleet import (
    StreamPlan,
    deploy_fleet,
    fleet_of,
    replica_view,
    settle,
    stream,
    stream_record,
    write_small_probe,
)
from testbed.systems.armada.model import deployment_of

Progress = Callable[[str], None]
CARGO_MANAGER = "armada.cargo_manager"
CARGO = "armada.cargo"
#: Storage policies: the Cargo selection strategy and the consistency of an application.
STORAGE_POLICIES: Mapping[str, tuple[str, str]] = {
    "nearest": ("nearest", "strong"), "random": ("random", "strong"),
    "eventual": ("nearest", "eventual")}


def _host(monitor: Any) -> dict[str, Any]:
    return monitor.summary().to_dict()


class FrameDriver:
    """Replays a frame-stream Armada scenario (module docstring)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.fleet = fleet_of(scenario)
        self.run = ""
        self.trace_dir = Path()
        self.frames_dir = Path()
        self.deployments: list[dict[str, Any]] = []
        self.streams: list[dict[str, Any]] = []
        self.before: list[dict[str, Any]] = []
        self.monitor: Any = None
        self.matrix: dict[str, Any] | None = None

    def prepare(self, topo: EmulatedTopology, run: str, trace_dir: Path,
                progress: Progress) -> None:
        """Frames, Captains, the first deployment (module docstring)."""
        from testbed.host_monitor import HostMonitor

        self.run, self.trace_dir = run, trace_dir
        self.frames_dir = write_frames(self.scenario.workload.params, topo.workdir / "frames")
        write_small_probe(self.frames_dir)
        self.monitor = HostMonitor(interval_s=0.5).start()  # stopped by details()
        self._deploy(topo, progress)
        samples = int(self.scenario.workload.params.get("matrix_samples", 0))
        if samples and self.fleet is None:
            replicas = self.deployments[-1]["serving"]
            self.matrix = measure_matrix(topo, run, replicas, samples, self.frames_dir)
            progress(f"latency matrix measured ({samples} frames per user and node)")

    def _deploy(self, topo: EmulatedTopology, progress: Progress,
                settings: Mapping[str, str] | None = None) -> None:
        """Deploy the detector (a fleet near its seeded sites, else one replica per
        Captain); ``settings`` (a policy entry's :data:`~testbed.systems.armada.model.
        DEPLOY_PARAMS`) choose the Captains' runtime and remove the nodes' task images
        first, and add what each Captain reports of its replica (``tasks``)."""
        from testbed.systems.armada.task_images import forget_task_images, replica_tasks

        settings = dict(settings or {})
        runtime = settings.get("task_runtime")
        if settings.get("task_images") == "fresh":
            forget_task_images(topo)
        if self.fleet is not None:
            deployed = deploy_fleet(topo, self.fleet, runtime)
            self.before = deployed["settled"]
            progress(f"{APP}: first replica serving {deployed['startup_s']:.1f} s after the "
                     f"deployment request; settled at {len(self.before)} replicas")
        else:
            beacon = beacon_service(self.scenario)
            token = topo.secret.value
            servers = [s.node for s in self.scenario.services if s.program == CAPTAIN]
            status, asked = deploy_everywhere(topo, beacon, token, servers,
                                              runtime or "process")
            self.before = replica_view(status)
            serving = [{"task_id": r["task_id"], "node_id": r["node_id"], "url": r["url"]}
                       for r in sorted(status["replicas"],
                                       key=lambda r: servers.index(r["node_id"]))
                       if r["status"] == "running"]
            deployed = {"asked": asked, "created_at": status["created_at"],
                        "first_running_at": status["first_running_at"],
                        "startup_s": status["first_running_at"] - status["created_at"],
                        "all_running_s": time.time() - asked, "replicas": self.before,
                        "serving": serving,
                        "containment": check_containment(topo, serving)}
            progress(f"{APP}: one replica on each of {', '.join(servers)} serving "
                     f"{deployed['all_running_s']:.1f} s after the deployment request")
        if settings:
            deployed.update(settings=settings, tasks=replica_tasks(
                topo, deployed["replicas"] if self.fleet is not None else self.before))
        self.deployments.append(deployed)

    def replay(self, topo: EmulatedTopology, policy: str, repetition: int,
               progress: Progress) -> list[dict[str, Any]]:
        """Every user streams the trace through ``policy``'s client; the frame rows."""
        from testbed.host_monitor import HostMonitor
        from testbed.systems.armada.task_images import wait_clean

        k = len(self.streams)
        plan = StreamPlan.of_scenario(self.scenario, policy)
        settings = deployment_of(plan.params)
        if settings:  # a deployment of its own, from a fleet where no task is left
            remove_app(topo, APP)
            wait_clean(topo)
            self._deploy(topo, progress, settings)
        elif k > 0 and (self.scenario.events
                        or (self.fleet is not None and self.fleet.actions)):
            remove_app(topo, APP)
            self._deploy(topo, progress)
        elif k > 0 and self.fleet is not None:
            self.before = replica_view(settle(topo))
        with HostMonitor(interval_s=0.5) as monitor:
            done = stream(topo, plan, k, self.run, self.frames_dir, self.trace_dir, repetition)
        record = stream_record(topo, plan, done, self.before)
        record.update(repetition=repetition, deployment=len(self.deployments) - 1,
                      host=_host(monitor),
                      host_samples=[[s.wall, s.idle_share] for s in monitor.samples])
        self.streams.append(record)
        mean = "-" if record["mean_ms"] is None else f"{record['mean_ms']:.0f} ms"
        progress(f"  {policy} (repetition {repetition}): {record['ok']}/{record['frames']} "
                 f"frames ok, mean {mean}")
        return done["rows"]

    def details(self) -> dict[str, Any]:
        """The deployments, every stream's record, the fleet it ran on and the host's
        CPU idle share from the first deployment on."""
        host = None if self.monitor is None else self.monitor.stop().to_dict()
        return {"fleet": None if self.fleet is None else dataclasses.asdict(self.fleet),
                "deployments": self.deployments, "streams": self.streams, "host": host,
                "matrix": self.matrix}


class StorageDriver:
    """Replays an ``armada-storage`` scenario (module docstring)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.run = ""
        self.prepared: dict[str, Any] = {}
        self.replays: list[dict[str, Any]] = []

    def prepare(self, topo: EmulatedTopology, run: str, trace_dir: Path,
                progress: Progress) -> None:
        """Captains and Cargos registered; the initial data set, the face frames and
        the trace's arrival instants."""
        from testbed.emulation.probe import in_netns
        from testbed.systems.armada.builders import DATASETS
        from testbed.systems.armada.storage_control import wait_for_cargos
        from workloads.armada_face_descriptors import encode_records, initial_records
        from workloads.armada_face_frames import load_face_frames
        from workloads.armada_faces import read_plan
        from workloads.trace import read_trace

        self.run = run
        beacon = beacon_service(self.scenario)
        servers = [s.node for s in self.scenario.services if s.program == CAPTAIN]
        cargos = [s.node for s in self.scenario.services if s.program == CARGO]
        manager = next(s for s in self.scenario.services if s.program == CARGO_MANAGER)
        wait_for_captains(topo, beacon, servers)
        ctl = topo.net.hosts[manager.node].pid
        local_cm = f"http://127.0.0.1:{manager.port}"
        in_netns(ctl, lambda: wait_for_cargos(local_cm, len(cargos)))
        plan = read_plan(trace_dir)
        tasks, _ = read_trace(trace_dir)
        arrivals = [t.arrival for t in sorted(tasks, key=lambda t: t.task_id)]
        source = topo.workdir / DATASETS / "initial.bin"  # below the Cargos' data root
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(encode_records(initial_records(plan.seed)))
        frames = list(load_face_frames(plan.images))
        self.prepared = {"plan": plan, "arrivals": arrivals, "source": source,
                         "frames": frames, "cargos": {c: topo.net.ip(c) for c in cargos},
                         "ctl": manager.node, "local_cm": local_cm,
                         "cm": f"http://{topo.net.ip(manager.node)}:{manager.port}",
                         "beacon": f"http://{topo.net.ip(beacon.node)}:{beacon.port}",
                         "local_beacon": f"http://127.0.0.1:{beacon.port}"}
        progress(f"{len(cargos)} Cargos alive; {len(frames)} face images, initial data set "
                 f"{source.stat().st_size} bytes")

    def replay(self, topo: EmulatedTopology, policy: str, repetition: int,
               progress: Progress) -> list[dict[str, Any]]:
        """One application with ``policy``'s storage, the trace through its task while
        the scenario's events hit the nodes; then, if a Cargo of the application was
        lost, the restoration awaited, and every acknowledged write read back from
        every ready replica."""
        from testbed.emulation.probe import in_netns
        from testbed.event_log import APPLIED
        from testbed.host_monitor import HostMonitor
        from testbed.systems.armada.storage_control import (
            Stream,
            allocate_and_deploy,
            nearest_task,
            read_back,
            replication_lag,
            serving_cargo,
            storage_view,
            stream_faces,
            wait_restored,
        )

        if policy not in STORAGE_POLICIES:
            raise EmulationError(f"policy {policy!r}: an armada-storage scenario replays "
                                 f"{', '.join(STORAGE_POLICIES)}")
        strategy, consistency = STORAGE_POLICIES[policy]
        prep = self.prepared
        ctl, user = topo.net.hosts[prep["ctl"]].pid, topo.net.hosts["u01"].pid
        cm, plan = prep["local_cm"], prep["plan"]
        app = f"{policy}-r{repetition}"
        with HostMonitor(interval_s=0.5) as monitor:
            deployed = in_netns(ctl, lambda: allocate_and_deploy(
                app, strategy, consistency, prep["source"], cm, prep["local_beacon"],
                prep["cm"], plan.seed, topo.secret.value))
            task = in_netns(user, lambda: nearest_task(prep["beacon"], app))
            node = task.get("node_id") or "?"
            where = topo.scenario.topology.node(node) if node != "?" else None
            serving = None if where is None else in_netns(
                ctl, lambda: serving_cargo(cm, app, (where.lat, where.lon)))
            faces = Stream(policy, plan.mode, repetition, node)
            began = time.time()
            events = topo.schedule_events(began, policy, repetition)
            try:
                in_netns(user, lambda: stream_faces(task["url"], prep["frames"], plan,
                                                    prep["arrivals"], faces, self.run,
                                                    began))
            finally:
                events.stop()
            mine = {c["cargo_id"] for c in deployed["allocation"]["replicas"]}
            lost = [line for line in topo.event_records
                    if (line["policy"], line["repetition"]) == (policy, repetition)
                    and line["action"] in ("crash", "leave") and line["target"] in mine
                    and line["outcome"] == APPLIED]
            after = in_netns(ctl, lambda: wait_restored(cm, app) if lost
                             else storage_view(cm, app))
            readback = in_netns(ctl, lambda: read_back(after, app, plan, faces.written))
            lag = in_netns(ctl, lambda: replication_lag(prep["cargos"], app))
            remove_app(topo, app)
        record = {"policy": policy, "repetition": repetition, "app": app,
                  "strategy": strategy, "consistency": consistency, "deployment": deployed,
                  "task_node": node, "serving_cargo": serving,
                  "lost": [{"target": line["target"], "action": line["action"],
                            "at": line["at"], "applied_wall": line["applied_wall"]}
                           for line in lost],
                  "restores": after.get("restores", []),
                  "replicas_after": [{"cargo_id": r["cargo_id"], "state": r["state"]}
                                     for r in after.get("replicas", [])],
                  "written": len(faces.written), "readback": readback,
                  "replication_lag": lag, "event_errors": events.errors,
                  "host": _host(monitor)}
        self.replays.append(record)
        ok = sum(r["outcome"] == "ok" for r in faces.rows)
        progress(f"  {policy} (repetition {repetition}): {ok}/{len(faces.rows)} frames ok "
                 f"on {node}; read back {readback['found']}/{readback['expected']}"
                 + (f"; restored after losing {', '.join(x['target'] for x in record['lost'])}"
                    if lost else ""))
        return faces.rows

    def details(self) -> dict[str, Any]:
        """Every replay's allocation, deployment, losses and restorations, read-back and
        replication lag."""
        return {"replays": self.replays}


def make_driver(scenario: Scenario) -> FrameDriver | StorageDriver:
    """The driver ``testbed run`` uses for an Armada scenario in emulation."""
    if any(s.program == CARGO_MANAGER for s in scenario.services):
        return StorageDriver(scenario)
    return FrameDriver(scenario)
