"""Context-based person search (seed 001): a coordinator searches N edge data servers.

The priority P_i = Tc_i (k_i + 1) / (E_i + w V_i) against random and load-balance
selection, in the discrete-event simulator and over real HTTP to emulated edge servers.

The system's parts, by layer: the services ``nodes/person_search/`` (edge data server,
coordinator); the generator ``workloads/person_search.py`` (world, trace, ground truth);
here, the pure model (:mod:`.model`: Eq. 1, Algorithm 1, the response model), the
policies (:mod:`.policies`), what a scenario deploys (:mod:`.deployment`), the scenario
builder (:mod:`.builders`), the emulation driver (:mod:`.driver`), and two experiments
as study files: the simulator's (``studies/simulation/``, read back by
:mod:`.simulation_rows` into the tables of :mod:`.simulation_tables`, judged by
:mod:`.claim_checks`: :mod:`.simulation_experiment`) and the emulated one beside its
simulated twins (``studies/emulation/``: :mod:`.emulation_experiment`,
:mod:`.emulation_tables`, :mod:`.emulation_claims`), both over the per-world-seed
statistics of :mod:`.replicated`; the simulator is
:mod:`testbed.systems.person_search.sim`. The policies'
scenario parameters (the priority policy's candidate-set rule among them) are checked by
:func:`.policies.check_policy_params`.

Everything is named by import path: importing this package imports nothing heavy.
"""

from testbed.registry import Experiment, Program, System, TraceKind

_HERE = "testbed.systems.person_search"


def _experiment(name: str, part: str, description: str, title: str) -> Experiment:
    """Experiment ``name`` written as data: the study files of ``studies/<part>/``, the
    metric and claim functions of ``<part>_experiment.py``, the report ``<part>.md``."""
    return Experiment(name, description, studies=f"{_HERE}:studies/{part}",
                      metrics=f"{_HERE}.{part}_experiment:metrics",
                      claims=f"{_HERE}.{part}_experiment:claims",
                      paper="001: context-based person search on edge servers (priority "
                            "Eq. 1)",
                      report_dir="docs/results/person-search", report_file=f"{part}.md",
                      title=f"{title} (`{name}`)")


SYSTEM = System(
    name="person-search",
    description="context-based person search over edge data servers (seed 001)",
    programs=(
        Program("person_search.coordinator", "nodes.person_search.coordinator",
                "runs every search of a request against the edge servers (Algorithm 1)",
                config="nodes.person_search.configs:CoordinatorParams", self_contained=True),
        Program("person_search.edge_server", "nodes.person_search.edge_server",
                "an edge data server answering analyses after the paper's response model",
                config="nodes.person_search.configs:EdgeServerParams",
                context=("time_scale",)),
    ),
    generators={"person-search": "workloads.person_search:PersonSearch"},
    colours={"priority": "#882255", "load-balance": "#6699cc"},
    policies={
        "priority": "the item with the smallest P_i = Tc_i (k_i + 1) / (E_i + w V_i) (Eq. 1); "
                    "params: candidates (unanalysed | after-discovery), w, alpha, sigma_d, "
                    "t_s, compensation",
        "random": "a uniformly random unanalysed item at the required time T_R",
        "load-balance": "the unanalysed T_R item on the server running the fewest analyses",
    },
    builders={"person-search": "testbed.systems.person_search.builders:person_search_line"},
    emulate="testbed.systems.person_search.driver:make_driver",
    simulate="testbed.systems.person_search.sim:run_sim",
    experiments=(
        _experiment("person-search", "simulation",
                    "the simulator's Fig. 3, Fig. 4, 2-D grid and straight movers, each claim "
                    "judged under both readings of Eq. 7-8 and both candidate-set rules",
                    "Context-based person search: the simulator's experiments"),
        _experiment("person-search-emulation", "emulation",
                    "the same searches over real HTTP beside their simulated twins",
                    "Person search in emulation beside the simulator"),
    ),
    preload=("nodes.person_search.edge_server", "nodes.person_search.coordinator"),
    policy_seed="testbed.systems.person_search.sim:scenario_policy_seed",
    policy_params="nodes.person_search.policies:check_policy_params",
    trace_kinds=(
        TraceKind("search", "one analysis step of a person search",
                  (("step", "int"), ("item", "string"))),
    ),
)
