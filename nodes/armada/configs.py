"""The parameters of every Armada program, importable without aiohttp, OpenCV or numpy.

One frozen dataclass per program (:mod:`nodes.config` explains the declarations): the
scenario loader checks a service's ``params`` against it when a scenario loads, and the
program's command line is generated from it. The constants these declarations need
live here too, and the services import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodes.armada.selection import DEFAULT_OVERLOAD, DEFAULT_PRECISION, TOPN
from nodes.config import ParamError, option

#: What a contributed node is: dedicated (run by the deployer) or volunteer.
NODE_TYPES = ("dedicated", "volunteer")
#: The fewest replicas an application keeps (the paper's three).
MIN_REPLICAS = 3
#: A task that does not answer /health by then has failed. A replica's start (a fresh
#: interpreter importing aiohttp and OpenCV, then warming its detector) takes about 0.6 s
#: at full speed, but 50-60 s on a 0.04-core node of this machine: under CFS throttling
#: the imports cost several times their unthrottled CPU time.
START_TIMEOUT_S = 120.0
#: The programs a Captain runs as tasks unless told otherwise (``--task-module``).
TASK_MODULES = ("nodes.armada.echo_task", "nodes.armada.detect_task",
                "nodes.armada.face_task")
#: A Cargo's declared capacity unless told otherwise (the paper's 2 GB).
DEFAULT_CAPACITY_BYTES = 2 * 1024**3
#: The largest initial data set a Cargo reads from a URL or a file source.
DEFAULT_MAX_SOURCE_BYTES = 256 * 1024**2
#: How far ahead of a Cargo's clock a replicated version may be (the nodes of one
#: testbed share the host's clock; real nodes are NTP-synchronised to milliseconds).
DEFAULT_MAX_CLOCK_SKEW_S = 2.0
#: The quota of an allocation that does not say.
DEFAULT_QUOTA_BYTES = 64 * 1024**2
#: The Cargo Manager's state file, inside its ``--state-dir``.
STATE_FILE = "cargo-manager.json"
#: A frame task's body limit and waiting-frame limit.
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
DEFAULT_QUEUE_LIMIT = 32
#: The object detectors of ``nodes.armada.detect_task`` (its ``DETECTORS``).
DETECTOR_NAMES = ("haar-face", "haar-fullbody", "haar-upperbody", "hog")
#: The face task's ops (``workloads.armada_faces.MODES``).
FACE_OPS = ("read", "write", "read-write")

_URL = "http://host:port"


def _latitude() -> Any:
    return option(required=True, lo=-90, hi=90, help="latitude of the node, degrees")


def _longitude() -> Any:
    return option(required=True, lo=-180, hi=180, help="longitude of the node, degrees")


def _node_type() -> Any:
    return option("volunteer", choices=NODE_TYPES, help="what kind of node this is")


def _tags() -> Any:
    return option("", help="the node's tags, comma-separated")


def _advertise_host() -> Any:
    return option(help="address others use (default: --host, or 127.0.0.1 when that is "
                       "0.0.0.0)")


def _recheck_s() -> Any:
    return option(5.0, gt=0, help="register again after this long without a health check")


def _node_id(what: str) -> Any:
    return option(help=f"this {what}'s id (default: the host name)")


def _precision() -> Any:
    return option(DEFAULT_PRECISION, lo=1, hi=12, help="GeoHash precision of proximity")


@dataclass(frozen=True)
class BeaconParams:
    """``python -m nodes.armada.beacon``: the public entry point."""

    app_manager: str = option(required=True, metavar="URL",
                              help=f"the Application Manager, {_URL}")
    spinner: str = option(required=True, metavar="URL", help=f"the Spinner, {_URL}")
    cargo_manager: str | None = option(metavar="URL",
                                       help=f"the Cargo Manager, {_URL} (storage layer)")
    tokens: str | None = option(metavar="FILE", help="file of user tokens accepted for "
                                                      "changes besides the run secret, one "
                                                      "per line")
    timeout_s: float = option(10.0, gt=0, help="how long an upstream may take to answer")


@dataclass(frozen=True)
class AppManagerParams:
    """``python -m nodes.armada.app_manager``: applications, discovery, auto-scaling."""

    spinner: str = option(required=True, metavar="URL", help=f"the Spinner, {_URL}")
    cargo_manager: str | None = option(metavar="URL",
                                       help=f"the Cargo Manager, {_URL} (storage layer)")
    poll_s: float = option(1.0, gt=0, help="how often replicas are polled and scaled")
    precision: int = _precision()
    overload: float = option(DEFAULT_OVERLOAD, gt=0,
                             help="utilisation above which a replica is not a candidate")
    topn: int = option(TOPN, lo=1, help="candidates in a query's answer")
    users_per_replica: int = option(4, lo=1, help="users near a replica before scaling up")
    scale_up_util: float = option(0.75, gt=0, help="mean utilisation that adds a replica")
    scale_down_util: float = option(0.25, lo=0, help="mean utilisation that removes one")
    cooldown_s: float = option(5.0, lo=0, help="least time between two scaling actions")
    user_ttl_s: float = option(20.0, gt=0, help="how long a user's location is remembered")
    max_replicas: int = option(12, lo=MIN_REPLICAS, help="most replicas of an application")

    def __post_init__(self) -> None:
        if not self.scale_down_util < self.scale_up_util:
            raise ParamError("scale_down_util",
                             f"a value below scale_up_util ({self.scale_up_util:g})",
                             repr(self.scale_down_util))


@dataclass(frozen=True)
class HealthCheckParams:
    """A registry's health checks (the Spinner's and the Cargo Manager's)."""

    health_interval_s: float = option(1.0, gt=0, help="time between two rounds of checks")
    health_timeout_s: float = option(0.5, gt=0, help="how long one check may take")
    max_missed: int = option(3, lo=1, help="missed checks before a node is dead")


@dataclass(frozen=True)
class SpinnerParams(HealthCheckParams):
    """``python -m nodes.armada.spinner``: compute nodes and task placement."""

    precision: int = _precision()


@dataclass(frozen=True)
class CaptainParams:
    """``python -m nodes.armada.captain``: the node agent that runs tasks."""

    beacon: str = option(required=True, metavar="URL",
                         help=f"the Beacon, {_URL} (registered with the run secret)")
    node_id: str | None = _node_id("node")
    lat: float = _latitude()
    lon: float = _longitude()
    cpu: float = option(required=True, gt=0, help="cores for tasks")
    memory_mb: int = option(required=True, lo=1, help="memory for tasks, MiB")
    node_type: str = _node_type()
    tags: str = _tags()
    advertise_host: str | None = _advertise_host()
    task_host: str | None = option(help="address tasks bind (default: the Captain's own "
                                        "--host, so a Captain on loopback keeps its tasks "
                                        "there)")
    recheck_s: float = _recheck_s()
    start_timeout_s: float = option(START_TIMEOUT_S, gt=0,
                                    help="a task not answering /health by then has failed")
    sample_s: float = option(1.0, gt=0, help="time between two samples of the tasks")
    task_module: tuple[str, ...] = option(
        repeat=True, metavar="MODULE",
        help="a program tasks may run; without one, Armada's task programs "
             f"({', '.join(TASK_MODULES)})")
    cgroup_parent: str | None = option(metavar="DIR",
                                       help="cgroup v2 directory for the tasks' cgroups")
    workdir: str = option("/tmp/armada-captain", metavar="DIR",
                          help="the tasks' logs go to DIR/<node id>")
    docker_socket: str | None = option(
        metavar="PATH", help="the node's Docker engine socket, for tasks of the docker "
                             "runtime (a docker node's harness sets it; without it they "
                             "are refused)")
    docker_pod: str | None = option(
        metavar="CONTAINER", help="the Captain's own container: docker tasks join its "
                                  "pod (network namespace, read-only mounts)")


@dataclass(frozen=True)
class CargoManagerParams(HealthCheckParams):
    """``python -m nodes.armada.cargo_manager``: storage nodes and allocations."""

    quota_mb: float = option(DEFAULT_QUOTA_BYTES / 1024**2, gt=0,
                             help="default quota of an allocation, MiB")
    seed: int | None = option(help="seed of the random strategy")
    state_dir: str | None = option(metavar="DIR",
                                   help=f"keep the metadata in DIR/{STATE_FILE} (loaded at "
                                        "start)")


@dataclass(frozen=True)
class CargoParams:
    """``python -m nodes.armada.cargo``: a storage node."""

    data_dir: str = option(required=True, metavar="DIR", help="where the store lives")
    data_root: str | None = option(metavar="DIR", help="file sources are read only below DIR "
                                   "(without it, file sources are refused)")
    max_source_mb: float = option(DEFAULT_MAX_SOURCE_BYTES / 1024**2, gt=0,
                                  help="largest initial data set read from a URL or file, "
                                       "MiB (the quota bounds it too)")
    max_clock_skew_s: float = option(DEFAULT_MAX_CLOCK_SKEW_S, gt=0,
                                     help="a replicated version this far ahead of the "
                                          "local clock is refused")
    cargo_id: str | None = _node_id("Cargo")
    lat: float = _latitude()
    lon: float = _longitude()
    capacity_gb: float = option(DEFAULT_CAPACITY_BYTES / 1024**3, gt=0,
                                help="declared persistent capacity, GiB")
    node_type: str = _node_type()
    tags: str = _tags()
    beacon: str | None = option(metavar="URL",
                                help=f"the Beacon to register through, {_URL} (with the "
                                     "run secret)")
    advertise_host: str | None = _advertise_host()
    recheck_s: float = _recheck_s()
    write_timeout_s: float = option(10.0, gt=0, help="a write not acknowledged by then: 503")
    max_lag_s: float = option(5.0, gt=0, help="bound of the eventual replication lag")
    peer_timeout_s: float = option(5.0, gt=0, help="how long a peer may take to answer")



@dataclass(frozen=True)
class FrameTaskParams:
    """What the frame tasks (detection, face recognition) share."""

    workers: int = option(1, lo=1, help="frames processed at once")
    threads: int = option(1, lo=1, help="OpenCV threads for the whole process")
    max_body_bytes: int = option(DEFAULT_MAX_BODY_BYTES, lo=1, help="largest frame")
    queue_limit: int = option(DEFAULT_QUEUE_LIMIT, lo=1,
                              help="frames that may wait; more get 503")


@dataclass(frozen=True)
class DetectTaskParams(FrameTaskParams):
    """``python -m nodes.armada.detect_task``: object detection on JPEG frames."""

    detector: str = option("hog", choices=DETECTOR_NAMES, help="the OpenCV detector")


@dataclass(frozen=True)
class FaceTaskParams(FrameTaskParams):
    """``python -m nodes.armada.face_task``: face recognition against a face store."""

    memory_store: bool = option(False, help="keep the face data in the task, loaded with "
                                            "the initial data set")
    storage_manager: str | None = option(
        metavar="URL", help="the Cargo Manager to find data replicas through (the task's "
                            "app and location come from the Captain's ARMADA_* environment)")
    op: str = option("read-write", choices=FACE_OPS,
                     help="the op of frames without an X-Face-Op header")
    model_seed: int = option(0, lo=0,
                             help="the workload seed: identity centres and observation noise")
    initial: int | None = option(lo=1, help="records of the initial data set (memory_store; "
                                            "default: the workload's)")
    threshold: float | None = option(lo=0, help="match threshold (default: the identity "
                                                "model's)")

    def __post_init__(self) -> None:
        if self.memory_store == (self.storage_manager is not None):
            found = "both" if self.memory_store else "neither"
            raise ParamError("storage_manager",
                             "exactly one store: memory_store or storage_manager", found)


@dataclass(frozen=True)
class EchoTaskParams:
    """``python -m nodes.armada.echo_task``: the task contract without a detector."""

    work_ms: float = option(0.0, lo=0, help="CPU milliseconds burnt per request")
    name: str = option("echo", help="the name the task reports")


#: The declared parameters of Armada's task programs, by module: a deployment's ``args``
#: may name only these (:func:`nodes.armada.fields.task_args_refusal`).
TASK_PARAMS: dict[str, type] = {
    "nodes.armada.echo_task": EchoTaskParams,
    "nodes.armada.detect_task": DetectTaskParams,
    "nodes.armada.face_task": FaceTaskParams,
}
