"""``testbed experiment armada-startup``: how long a deployment takes to serve, by task
runtime, and what a node's first task image costs.

One fleet (``armada-fleet`` with ``task_runtime: docker``: every edge node is a docker
node whose Captain has the node's engine) is brought up once. Each replication then
deploys the detector through the Beacon, one replica per node, three ways in turn on
the same nodes and Captains:

* ``process``: the Captain runs the replica as a process in its node (its container);
* ``docker-first``: as a container in the node's pod, after the harness removed every
  node's task image, so each Captain first builds its node's image (the paper's
  start-up point: the first deployment on a node brings the image);
* ``docker-cached``: as a container again, the image now cached on every node.

Measured per deployment: from the deployment request to the first replica serving
(the Application Manager's ``first_running_at``, the harness's request instant on the
same clock) and to every replica serving, and per replica the Captain's image build.
After each deployment the application is removed and the harness waits until no task
runs and no task container is left. The order of ``process`` and the two docker
deployments alternates between replications, so a drift over the run does not favour
one runtime. The report gives means with 95 % t-intervals across replications and
paired differences (same replication, same nodes).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from testbed.errors import EmulationError
from testbed.experiments.sizes import size_plan
from testbed.scenario import Scenario
from testbed.systems.armada.builders import Fleet
from testbed.systems.armada.control import (
    APP,
    CAPTAIN,
    Progress,
    beacon_service,
    call,
    deploy_everywhere,
    remove_app,
    wait,
)

VARIANTS = ("process", "docker-first", "docker-cached")
CLEAN_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class StartupPlan:
    """How many edge nodes (of ``node_cores`` each), and how many replications of the
    three deployments."""

    nodes: int
    node_cores: float
    replications: int
    duration_s: float = 5.0  # the scenario's; nothing streams


STARTUP_SIZES = {"small": StartupPlan(nodes=3, node_cores=0.25, replications=2),
                 "full": StartupPlan(nodes=3, node_cores=0.25, replications=10)}


def startup_fleet(plan: StartupPlan) -> Fleet:
    """The fleet every deployment runs on: docker nodes, one user (who does not stream)."""
    return Fleet(nodes=plan.nodes, users=1, node_cores=(plan.node_cores,),
                 duration=plan.duration_s, task_runtime="docker")


def variant_order(replication: int) -> tuple[str, ...]:
    """The deployments of a replication: process first in even ones, last in odd ones
    (the first image always before the cached one)."""
    return VARIANTS if replication % 2 == 0 else (*VARIANTS[1:], VARIANTS[0])


def run_startup(size: str, out: Path, progress: Progress = print,
                ledger_root: Path | None = None) -> Path:
    """Bring the fleet of ``size`` up once and measure every deployment (module
    docstring); results in ``out/startup.json`` beside the standard results folder."""
    from testbed.experiments.emulated import run_emulated_experiment
    from testbed.systems.armada.fleet import fleet_scenario

    plan = size_plan(size, STARTUP_SIZES)
    fleet = startup_fleet(plan)
    scenario = dataclasses.replace(fleet_scenario(fleet, "armada-startup", ("armada",)),
                                   repetitions=1)

    def measure(topo: Any, run: str, scn: Scenario, _prepared: Any) -> dict[str, Any]:
        return {"rows": [], "startup": measure_startups(topo, scn, fleet, plan, progress)}

    return run_emulated_experiment(scenario, plan, size, out, lambda _run, _dir: None,
                                   measure, "startup", progress, ledger_root)


def measure_startups(topo: Any, scenario: Scenario, fleet: Fleet, plan: StartupPlan,
                     progress: Progress) -> dict[str, Any]:
    """Every replication's three deployments on the brought-up fleet."""
    from testbed.emulation.probe import in_netns

    beacon = beacon_service(scenario)
    captains = {s.node: s.port for s in scenario.services if s.program == CAPTAIN}
    servers = sorted(captains)
    ctl = topo.net.hosts[beacon.node]
    deployments = []
    for k in range(plan.replications):
        for variant in variant_order(k):
            runtime = "process" if variant == "process" else "docker"
            if variant == "docker-first":
                forget_task_images(topo, servers)
            status, asked = deploy_everywhere(topo, beacon, topo.secret.value, servers,
                                              runtime, cpu=fleet.cpu_per_replica)
            replicas = [r for r in status["replicas"] if r["status"] == "running"]
            tasks = in_netns(ctl.pid, lambda rs=replicas: [
                captain_task(topo, r["node_id"], captains[r["node_id"]], r["task_id"])
                for r in rs])
            ready = [r["ready_at"] for r in replicas]
            record = {"replication": k, "variant": variant, "runtime": runtime,
                      "asked": asked, "created_at": status["created_at"],
                      "first_s": status["first_running_at"] - asked,
                      "all_s": max(ready) - asked,
                      "replicas": [{"node": t["node"], "ready_s": r["ready_at"] - asked,
                                    "image": t.get("image"),
                                    "image_build_s": t.get("image_build_s")}
                                   for r, t in zip(replicas, tasks, strict=True)]}
            deployments.append(record)
            builds = [r["image_build_s"] for r in record["replicas"]
                      if r["image_build_s"] is not None]
            progress(f"replication {k + 1}/{plan.replications} {variant}: first replica "
                     f"serving after {record['first_s']:.2f} s, all after "
                     f"{record['all_s']:.2f} s"
                     + (f"; images built in {min(builds):.2f}-{max(builds):.2f} s"
                        if builds else ""))
            remove_app(topo, APP)
            wait_clean(topo, ctl, captains)
    return {"plan": dataclasses.asdict(plan), "fleet": fleet.to_params(),
            "nodes": servers, "deployments": deployments}


def captain_task(topo: Any, node: str, port: int, task_id: str) -> dict[str, Any]:
    """A task as its Captain shows it (image, build time), with its node."""
    code, body = call(f"http://{topo.net.ip(node)}:{port}/tasks/{task_id}")
    if code != 200:
        raise EmulationError(f"Captain of {node} answered {code} for task {task_id}: {body}")
    return {**body, "node": node}


def forget_task_images(topo: Any, nodes: list[str]) -> None:
    """Remove every node's task image from the run's engine, so each Captain builds its
    own again (what a node that never ran the application lacks)."""
    from nodes.armada.task_image import repository

    client = topo.infra.engine.client
    for node in nodes:
        for image in client.images.list(name=repository(node)):
            client.images.remove(image.id, force=False)
        if client.images.list(name=repository(node)):
            raise EmulationError(f"the task image of {node} could not be removed")


def wait_clean(topo: Any, ctl: Any, captains: dict[str, int]) -> None:
    """Wait until no Captain runs a task and no task container is left in the engine."""
    from testbed.emulation.probe import in_netns

    client = topo.infra.engine.client

    def idle() -> bool:
        for node, port in captains.items():
            code, body = call(f"http://{topo.net.ip(node)}:{port}/tasks")
            if code != 200 or any(t["status"] in ("starting", "running")
                                  for t in body["tasks"]):
                return False
        return not client.containers.list(all=True, filters={"label": f"armada.app={APP}"})

    in_netns(ctl.pid, lambda: wait(idle, CLEAN_TIMEOUT_S,
                                   "every task stopped and its container removed"))


# ------------------------------------------------------------------------ report


def startup_table(result: dict[str, Any]) -> dict[str, Any]:
    """Per variant, the intervals across replications of the first and the last
    replica's start-up and of the image builds; paired differences per replication."""
    from testbed.analysis.stats import replication_interval

    by: dict[str, dict[int, dict[str, Any]]] = {v: {} for v in VARIANTS}
    for d in result["deployments"]:
        by[d["variant"]][d["replication"]] = d
    rows = {}
    for variant, found in by.items():
        builds = [sum(r["image_build_s"] or 0.0 for r in d["replicas"]) / len(d["replicas"])
                  for d in found.values()]
        rows[variant] = {
            "n": len(found),
            "first": replication_interval([d["first_s"] for d in found.values()]),
            "all": replication_interval([d["all_s"] for d in found.values()]),
            "build": replication_interval(builds),
            "built": sum(r["image_build_s"] is not None
                         for d in found.values() for r in d["replicas"]),
            "replicas": sum(len(d["replicas"]) for d in found.values())}
    shared = sorted(set.intersection(*(set(f) for f in by.values())))

    def paired(a: str, b: str, key: str) -> Any:
        return replication_interval([by[a][k][key] - by[b][k][key] for k in shared])

    diffs = {"docker-cached - process": {key: paired("docker-cached", "process", key)
                                         for key in ("first_s", "all_s")},
             "docker-first - docker-cached": {key: paired("docker-first", "docker-cached", key)
                                              for key in ("first_s", "all_s")}}
    return {"rows": rows, "diffs": diffs, "paired": len(shared)}


def _compare(interval: Any, what: str, unit: str = "s") -> str:
    """A sentence on a paired difference: its sign and whether its interval excludes 0."""
    from testbed.analysis.stats import pm

    if interval.low is None:
        return f"{what}: {pm(interval, 2, unit=' ' + unit)} (one replication: no interval)"
    if interval.low > 0:
        word = "longer: the interval lies above zero"
    elif interval.high < 0:
        word = "shorter: the interval lies below zero"
    else:
        word = "no difference the replications can tell: the interval holds zero"
    return f"{what}: {pm(interval, 2, unit=' ' + unit)} ({word})"


def write_startup_report(out: Path, report: Path, command: str) -> Path:
    """The Markdown report of a ``run_startup`` folder."""
    from testbed.analysis.stats import pm
    from testbed.experiments.emulated import report_header

    result = json.loads((out / "startup.json").read_text())
    table = startup_table(result)
    plan = result["plan"]
    what = (f"{plan['nodes']} edge nodes of {plan['node_cores']:g} cores, docker nodes of "
            f"one fleet brought up once; per replication the detector deployed with one "
            f"replica per node three ways on the same nodes and Captains; "
            f"{plan['replications']} replications.")
    lines = report_header("Armada: deployment start-up by task runtime", command, out, what)
    lines += [("| deployment | replications | request to first replica serving (s) | "
              "to every replica serving (s) | image build per replica (s) | "
              "replicas that built their image |"),
              "|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        row = table["rows"][variant]
        lines.append(f"| {variant} | {row['n']} | {pm(row['first'], 2)} | "
                     f"{pm(row['all'], 2)} | {pm(row['build'], 2)} | "
                     f"{row['built']} of {row['replicas']} |")
    diffs = table["diffs"]
    cached, first = diffs["docker-cached - process"], diffs["docker-first - docker-cached"]
    lines += ["", ("Means with 95 % t-intervals across replications; differences are paired "
              f"within a replication ({table['paired']} pairs)."), "", "## Conclusions", "",
              "- " + _compare(cached["first_s"], "A container replica (cached image) against "
                              "a process replica, to the first replica serving"),
              "- " + _compare(cached["all_s"], "The same, to every replica serving"),
              "- " + _compare(first["first_s"], "A node's first task image against its "
                              "cached one, to the first replica serving"),
              "- " + _compare(first["all_s"], "The same, to every replica serving"),
              "",
              "## What the numbers are", "",
              ("- A deployment's start-up runs from the harness's `POST /apps` to the "
              "Application Manager's `first_running_at` (the first replica answering "
              "`/health` to its Captain) and to the last replica's `ready_at`; both clocks "
              "are this host's."),
              ("- A process replica runs in its node's service container under the node's "
              "CPU limit, beside the Captain; a container replica runs in a container of "
              "its own in the node's pod (same network namespace) under its own CPU quota "
              "of the same cores (`docs/docker.md`, `docs/armada.md`)."),
              ("- The first image is built on the node from the Captain's own code "
              "(`nodes/armada/task_image.py`: one layer of the project's Python packages "
              "with their bytecode, `FROM` the harness's base image, whose interpreter and "
              "libraries are mounted from the host). No registry is reachable here, so "
              "the paper's first-image cost, a pull of a whole image over the network, "
              "is represented by this local build only: a real first pull would add the "
              "image's transfer time."),
              ""]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    return report


