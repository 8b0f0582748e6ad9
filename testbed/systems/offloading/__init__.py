"""Queue-aware offloading (seed 002): clients place tasks on local, edge and cloud tiers.

The tier-server path: ``nodes/offloading/tier_server.py`` (the queueing servers), the in-host
dispatcher (:mod:`nodes.offloading.dispatcher`), the placement policies (:mod:`nodes.offloading.policies`),
the tier simulator (:mod:`testbed.systems.offloading.sim`), the emulation driver
(:mod:`testbed.systems.offloading.driver`) and the paper experiment as data: its study
files (``studies/<size>/``), metrics (:mod:`testbed.systems.offloading.experiment`,
:mod:`testbed.systems.offloading.metrics`, :mod:`testbed.systems.offloading.tables`) and
claims
(:mod:`testbed.systems.offloading.claim_checks`).
"""

from collections.abc import Iterator, Mapping

from nodes.offloading.policies import POLICIES
from testbed.registry import Experiment, Program, System


class _PolicyLines(Mapping[str, str]):
    """The placement policies of :data:`nodes.offloading.policies.POLICIES`, live, each with the
    first line of its class docstring (a policy added there is registered here too)."""

    def __getitem__(self, name: str) -> str:
        doc = (POLICIES[name].__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def __iter__(self) -> Iterator[str]:
        return iter(POLICIES)

    def __len__(self) -> int:
        return len(POLICIES)


SYSTEM = System(
    name="offloading",
    description="queue-aware offloading over local, edge and cloud tiers (seed 002)",
    programs=(
        Program("tier_server", "nodes.offloading.tier_server",
                "a tier's c-server FIFO queue that clients offload tasks to",
                config="nodes.offloading.tier_server_config:TierServerParams",
                context=("speed", "time_scale", "task_timeout"), task_server=True),
    ),
    generators={"bursty-pareto": "workloads.offloading:BurstyPareto"},
    colours={"edge-first": "#cc6677", "jsq": "#332288", "jsq-s": "#88ccee",
             "model-only": "#ddcc77", "queue-only": "#999933", "hybrid": "#117733",
             "hybrid-global-rate": "#44aa99", "hybrid-fixed-beta": "#aa4499",
             "oracle": "#661100"},
    policies=_PolicyLines(),
    emulate="testbed.systems.offloading.driver:make_driver",
    simulate="testbed.systems.offloading.sim_replay:run_sim",
    experiments=(
        Experiment("offloading",
                   "load sweep, bursts and edge capacity on both executors, and the claims "
                   "report",
                   studies="testbed.systems.offloading:studies",
                   metrics="testbed.systems.offloading.experiment:metrics",
                   claims="testbed.systems.offloading.claim_checks:claims",
                   paper=("002: queue-aware offloading across the continuum "
                          "(Allen-Cunneen + queue observation)"),
                   report_dir="docs/results/offloading", report_file="README.md",
                   title="Queue-aware offloading: the paper's claims, checked"),
    ),
    preload=("nodes.offloading.tier_server", "nodes.offloading.dispatcher", "nodes.offloading.policies"),
    policy_seed="testbed.systems.offloading.sim_replay:policy_seed",
    policy_params="nodes.offloading.policies:check_params",
)
