"""Scenario model and loader: what an experiment is, read and validated from YAML.

This package is pure: loading a scenario checks it completely but builds nothing. See
``docs/scenario.md`` for the file format.
"""

from testbed.scenario.loader import (
    builtin_scenarios,
    builtin_topologies,
    load_scenario,
    load_topology,
    scenario_from_dict,
)
from testbed.scenario.model import (
    TIMING_FLOOR_S,
    Event,
    ExecutorDefaults,
    Link,
    Node,
    Scenario,
    Service,
    Topology,
    Workload,
)

__all__ = [
    "TIMING_FLOOR_S",
    "Event",
    "ExecutorDefaults",
    "Link",
    "Node",
    "Scenario",
    "Service",
    "Topology",
    "Workload",
    "builtin_scenarios",
    "builtin_topologies",
    "load_scenario",
    "load_topology",
    "scenario_from_dict",
]
