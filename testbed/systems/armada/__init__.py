"""Armada (seed 000): an edge cloud over volunteer nodes, with its storage layer.

Services under ``nodes/armada/`` (Beacon, Application Manager, Spinner, Captain, Cargo
Manager, Cargo, the tasks), the client SDK under ``nodes/armada/sdk/``, the in-host user
(``nodes/armada/user.py``), and in this package: the scenario builders
(:mod:`~testbed.systems.armada.builders`), the emulation driver of ``testbed run``
(:mod:`~testbed.systems.armada.driver`), the streaming core it shares with the fleet
experiments (:mod:`~testbed.systems.armada.fleet`) and the experiments, each study files
under ``studies/`` with the metric and claim functions of its ``*_experiment.py``.
Fleets built by ``armada-fleet`` also run in the simulator
(:mod:`testbed.systems.armada.sim_replay`, on :mod:`testbed.systems.armada.sim`), with
replica times from the calibration ``testbed calibrate armada-detector`` measures
(:mod:`~testbed.systems.armada.calibration_run`). This module imports nothing but the
registry's dataclasses.
"""

from testbed.registry import Calibration, Experiment, Program, System, TraceKind

_REPORTS = "docs/results/armada"
_CONFIGS = "nodes.armada.configs:"  # the programs' parameters, importable without aiohttp
_TASK_RUNTIMES = ("process", "docker")  # how Captains run replicas (--task-runtime)
#: How the claims index names the paper.
PAPER = "000: Armada, an edge cloud over volunteer nodes"


def _study_experiment(name: str, description: str, judged: bool = True,
                      **options: tuple[str, ...]) -> Experiment:
    """Experiment ``armada-<x>`` written as data: study files in ``studies/<x>/``, the
    metric and (when ``judged``) claim functions of ``<x>_experiment.py`` (``-`` as
    ``_``), the report ``<x>.md`` in ``docs/results/armada``; ``options`` as keywords,
    each setting the fleet builder's parameter of its name in every study."""
    short = name.removeprefix("armada-")
    entry = short.replace("-", "_")
    module = f"testbed.systems.armada.{entry}_experiment"
    return Experiment(name, description, studies=f"testbed.systems.armada:studies/{entry}",
                      metrics=f"{module}:metrics",
                      claims=f"{module}:claims" if judged else "",
                      paper=PAPER, report_dir=_REPORTS, report_file=f"{short}.md",
                      title=f"Armada: {description} (`{name}`)",
                      options={k.replace("_", "-"): v for k, v in options.items()},
                      option_paths={k.replace("_", "-"): f"build.params.{k}" for k in options})


SYSTEM = System(
    name="armada",
    description="edge cloud over volunteer nodes with performance-aware selection and "
                "storage (seed 000)",
    programs=(
        Program("armada.beacon", "nodes.armada.beacon",
                "entry point: forwards users to the Application Manager and Captains to the "
                "Spinner", config=_CONFIGS + "BeaconParams", self_contained=True),
        Program("armada.app_manager", "nodes.armada.app_manager",
                "keeps each application's replicas and users' candidate lists",
                config=_CONFIGS + "AppManagerParams"),
        Program("armada.spinner", "nodes.armada.spinner",
                "registry of Captains with health checks; places replicas",
                config=_CONFIGS + "SpinnerParams"),
        Program("armada.captain", "nodes.armada.captain",
                "node agent: runs task replicas on its node", config=_CONFIGS + "CaptainParams",
                context=("docker_socket", "docker_pod")),
        Program("armada.cargo_manager", "nodes.armada.cargo_manager",
                "storage control: allocates Cargos, re-replicates on a loss",
                config=_CONFIGS + "CargoManagerParams"),
        Program("armada.cargo", "nodes.armada.cargo",
                "storage node: durable records and vector search", config=_CONFIGS + "CargoParams"),
    ),
    generators={"frame-stream": "workloads.armada_frame_stream:FrameStream",
                "face-recognition": "workloads.armada_faces:FaceRecognition"},
    colours={"armada": "#117733", "armada-light": "#44aa99", "geo-nearest": "#332288",
             "edge-to-cloud": "#cc6677", "server-reconnect": "#aa4499", "nearest": "#6699cc",
             "eventual": "#ddcc77"},
    policies={
        "armada": "the SDK probes its TopN candidates with a frame and streams to the fastest",
        "armada-light": "the SDK probes its TopN candidates with a small request",
        "geo-nearest": "the geographically nearest replica, the next-nearest on a failure",
        "random": "a uniformly random replica each round (storage: Cargos allocated at "
                  "random, strong consistency)",
        "edge-to-cloud": "the nearest edge replica; the cloud for good after a failure",
        "server-reconnect": "one server; on a failure query again and reconnect to another",
        "nearest": "storage: the Cargos nearest the application, strong consistency",
        "eventual": "storage: the nearest Cargos, eventual consistency",
    },
    builders={"armada-fleet": "testbed.systems.armada.builders:armada_fleet",
              "armada-storage": "testbed.systems.armada.builders:armada_storage"},
    emulate="testbed.systems.armada.driver:make_driver",
    simulate="testbed.systems.armada.sim_replay:run_sim",
    run_check="testbed.systems.armada.run_checks:check_run",
    experiments=(
        _study_experiment("armada-selection", "does every user's SDK pick its best node "
                          "(latency matrix, Table 6)"),
        _study_experiment("armada-failover", "a streaming user's node crashes: SDK failover "
                          "against server-reconnect (Fig. 10 (a))"),
        _study_experiment("armada-scalability", "latency as users and edge nodes grow: SDK "
                          "against geo-nearest and random (Fig. 9)",
                          task_runtime=_TASK_RUNTIMES),
        _study_experiment("armada-failures", "edge nodes fail one by one: SDK against "
                          "edge-to-cloud (Fig. 10 (b))", task_runtime=_TASK_RUNTIMES),
        _study_experiment("armada-churn", "volunteer nodes leave and rejoin during a "
                          "stream", task_runtime=_TASK_RUNTIMES),
        _study_experiment("armada-load", "background load on the serving node: how fast "
                          "the SDK moves the user", task_runtime=_TASK_RUNTIMES),
        _study_experiment("armada-startup", "deployment start-up (request to first "
                          "replica serving) of process and container replicas on one "
                          "fleet, and of a node's first task image against its cached one",
                          judged=False),
        _study_experiment("armada-paper-scale", "latency as users (to 1000) and edge "
                          "nodes (to 200) grow on nodes of whole cores, in the simulator "
                          "(Fig. 9 at paper scale), with herding measured"),
        _study_experiment("armada-executors", "Armada on nodes of a quarter or half a "
                          "core, emulated and simulated on the same fleets, trace and seeds"),
        _study_experiment("armada-storage", "Cargo selection, consistency and a Cargo "
                          "failure under face recognition",
                          cargo_runtime=("process", "docker")),
    ),
    calibrations=(
        Calibration("armada-detector", "the real detector's start-up and request times "
                    "against CPU share: the calibration the simulator reads",
                    run="testbed.systems.armada.calibration_run:run_calibration",
                    report="testbed.systems.armada.calibration_run:"
                           "write_calibration_report",
                    report_file="calibration.md", report_dir=_REPORTS),
    ),
    preload=("nodes.armada.user",),
    policy_seed="testbed.systems.armada.model:replay_seed",
    policy_params="testbed.systems.armada.model:check_policy_params",
    trace_kinds=(
        TraceKind("frame", "a camera frame sent to a detection replica",
                  (("frame_stream", "string"), ("frame_index", "int"),
                   ("frame_deadline_s", "float"))),
        TraceKind("storage", "a frame of a face-recognition task and its Cargo operation",
                  (("op", "string"), ("key", "string"), ("bytes", "int"),
                   ("replica", "string"), ("read_ms", "float"), ("write_ms", "float"),
                   ("recognised", "int"))),
    ),
)
