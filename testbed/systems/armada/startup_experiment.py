"""``armada-startup``: how long a deployment takes to serve, by task runtime, and what a
node's first task image costs, as data.

The study files (``studies/startup/<size>/startup.yaml``) run one fleet of docker nodes
(``studies/startup/startup.scenario.yaml``: an ``armada-fleet`` whose Captains have
their node's engine) per replication, and replay three policy entries of the SDK that
differ only in how their deployment is made (``task_runtime``, ``task_images``), each
from a deployment of its own on the same nodes and Captains:

* ``process``: the Captains run the replicas as processes in their nodes;
* ``docker-first``: as containers in the nodes' pods, after the harness removed every
  node's task image, so each Captain first builds its node's image (the first
  deployment on a node brings the image);
* ``docker-cached``: as containers, the image already on every node (the run's first
  deployment, before any replay, built it).

The policy order rotates from replication to replication, so a drift over a run does
not favour one runtime. :func:`metrics` reads each deployment the driver recorded: from
the deployment request to the first replica serving (the Application Manager's
``first_running_at``) and to the last (its ``ready_at``), and each Captain's image
build; means with their intervals across replications, and paired differences within a
replication. The seed states no start-up numbers, so no claim is judged. Report:
``docs/results/armada/startup.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.analysis.stats import pm, replication_interval, side
from testbed.experiments.results import StudyResult

VARIANTS = ("process", "docker-first", "docker-cached")
#: The paired comparisons the report makes: (variant, against, what it tells).
PAIRS = (("docker-cached", "process",
          "a container replica (cached image) against a process replica"),
         ("docker-first", "docker-cached",
          "a node's first task image against its cached one"))


def deployment_numbers(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """One deployment: seconds from the request to the first and to the last replica
    serving, the mean image build per replica (0 for a replica that built none) and how
    many replicas built their image."""
    tasks = deployment["tasks"]
    builds = [t["image_build_s"] for t in tasks]
    return {"first_s": deployment["first_running_at"] - deployment["asked"],
            "all_s": max(t["ready_at"] for t in tasks) - deployment["asked"],
            "build_s": float(np.mean([b or 0.0 for b in builds])) if builds else None,
            "built": sum(b is not None for b in builds), "replicas": len(tasks),
            "images": sorted({t["image"] or "-" for t in tasks}),
            "settings": dict(deployment.get("settings", {}))}


def startup_runs(result: StudyResult) -> list[dict[str, Any]]:
    """Per finished cell and replayed variant: :func:`deployment_numbers` of the
    deployment its stream ran on, with the replication and its place in the order."""
    runs = []
    for cell in sorted(result.finished(), key=lambda c: c.replication):
        driver = cell.metadata()["driver"]
        for place, stream in enumerate(driver["streams"]):
            deployment = driver["deployments"][stream["deployment"]]
            if "tasks" not in deployment:
                continue  # not a deployment of the policy's own
            runs.append({"replication": cell.replication, "variant": stream["policy"],
                         "place": place, "degraded": cell.degraded,
                         "frames": stream["frames"], "ok": stream["ok"],
                         **deployment_numbers(deployment)})
    return runs


def _by_variant(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, Mapping[str, Any]]]:
    by: dict[str, dict[int, Mapping[str, Any]]] = {v: {} for v in VARIANTS}
    for run in runs:
        by.setdefault(run["variant"], {})[run["replication"]] = run
    return by


def paired(runs: Sequence[Mapping[str, Any]], variant: str, against: str,
           key: str) -> Any:
    """The interval across replications of ``variant``'s ``key`` minus ``against``'s in
    the same replication (``None`` without a pair)."""
    by = _by_variant(runs)
    shared = sorted(set(by.get(variant, {})) & set(by.get(against, {})))
    if not shared:
        return None
    return replication_interval([by[variant][r][key] - by[against][r][key] for r in shared])


def reading(interval: Any) -> str:
    """What a paired difference's interval lets the replications tell."""
    if interval is None or interval.low is None:
        return "one replication: no interval"
    return {"higher": "longer: the interval lies above zero",
            "lower": "shorter: the interval lies below zero",
            "tied": "no difference the replications can tell: the interval holds zero"}[
        side(interval)]


def metrics(results: Mapping[str, StudyResult], size: str) -> dict[str, Any]:
    """Every deployment's numbers, and the report's two tables."""
    runs = [run for result in results.values() for run in startup_runs(result)]
    return {"size": size, "runs": runs,
            "tables": [variant_table(runs), pair_table(runs)] if runs else []}


def variant_table(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per variant: replications, the start-ups and image builds with their intervals."""
    rows = []
    for variant, found in _by_variant(runs).items():
        done = list(found.values())
        if not done:
            continue

        def across(key: str, done: list[Mapping[str, Any]] = done) -> Any:
            return replication_interval([d[key] for d in done if d[key] is not None],
                                        bounded=True)

        rows.append([variant, str(len(done)), pm(across("first_s"), 2),
                     pm(across("all_s"), 2), pm(across("build_s"), 2),
                     f"{sum(d['built'] for d in done)} of {sum(d['replicas'] for d in done)}"])
    return {"title": "Deployment start-up by task runtime",
            "columns": ["deployment", "replications", "request to first replica serving s",
                        "to every replica serving s", "image build per replica s",
                        "replicas that built their image"], "rows": rows,
            "note": ("From the harness's `POST /apps` to the Application Manager's "
                     "`first_running_at` (the first replica answering `/health` to its "
                     "Captain) and to the last replica's `ready_at`, both on this host's "
                     "clock; means with 95 % t-intervals across replications. A process "
                     "replica runs in its node's service container under the node's CPU "
                     "limit, beside the Captain; a container replica in a container of "
                     "its own in the node's pod under its own quota of the same cores. The "
                     "first image is built on the node from the Captain's own code "
                     "(`nodes/armada/task_image.py`); no registry is reachable here, so a "
                     "real first pull would add the image's transfer time.")}


def pair_table(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The paired differences of :data:`PAIRS`, to the first and to every replica."""
    rows = []
    for variant, against, what in PAIRS:
        for key, to in (("first_s", "first replica serving"),
                        ("all_s", "every replica serving")):
            diff = paired(runs, variant, against, key)
            rows.append([f"{variant} − {against}", to, "-" if diff is None else str(diff.n),
                         pm(diff, 2, unit=" s"), reading(diff)])
    return {"title": "Paired differences within a replication",
            "columns": ["difference", "to", "pairs", "seconds", "what it tells"],
            "rows": rows,
            "note": "; ".join(f"{v} − {a}: {what}" for v, a, what in PAIRS) + "."}
