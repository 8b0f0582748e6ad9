"""What a person-search scenario deploys, read once for both executors.

A person-search scenario runs one coordinator (``person_search.coordinator``) and ``N``
edge data servers (``person_search.edge_server``) with ``server_index`` 0 .. N-1 and one
``Tc`` and sharing mode (a parameter a service leaves out is its program's default,
:class:`~nodes.person_search.configs.EdgeServerParams`); the servers' time scale is the
scenario's (their registered context). :func:`deployment` checks that and returns it as a
:class:`Deployment`: the simulator (:func:`testbed.systems.person_search.sim.run_sim`) takes the
servers' model and names from it, the emulation driver
(:mod:`testbed.systems.person_search.driver`) their addresses, so both executors run
the same servers and write the same ``target`` names into the trace.

Pure: reads the scenario model and the programs' parameter declarations only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nodes.person_search.configs import CoordinatorParams, EdgeServerParams
from testbed.errors import TestbedError
from testbed.scenario.model import Scenario, Service

COORDINATOR = "person_search.coordinator"
EDGE_SERVER = "person_search.edge_server"
#: What an edge server runs with for a parameter its service leaves out
EDGE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EdgeServerParams)}
#: The accounting of a coordinator whose service leaves it out
DEFAULT_ACCOUNTING = next(f.default for f in dataclasses.fields(CoordinatorParams)
                          if f.name == "accounting")


@dataclass(frozen=True)
class Deployment:
    """The person-search services of a scenario.

    ``coordinator`` is the coordinator's service; ``edges[s]`` edge server ``s``'s
    service (its ``server_index`` is ``s``); ``tc`` (model seconds), ``sharing`` and
    ``time_scale`` (the scenario's) are the servers' common response model and
    ``accounting`` the coordinator's reading of Eq. 7-8 in the durations.
    """

    coordinator: Service
    edges: tuple[Service, ...]
    tc: float
    sharing: str
    time_scale: float
    accounting: str = DEFAULT_ACCOUNTING

    @property
    def names(self) -> tuple[str, ...]:
        """Node name of each edge server, by server index (the trace's ``target``)."""
        return tuple(s.node for s in self.edges)

    @property
    def client(self) -> str:
        """The coordinator's node (the trace's ``client``: searches start there)."""
        return self.coordinator.node


def _common(scenario: Scenario, edges: list[Service], key: str) -> Any:
    """The value of ``params[key]`` every edge server shares, or a TestbedError."""
    default = EDGE_DEFAULTS[key]
    values = {repr(s.params.get(key, default)): s.params.get(key, default) for s in edges}
    if len(values) != 1:
        raise TestbedError(f"{scenario.name}: the {EDGE_SERVER} services disagree on "
                           f"params.{key} ({', '.join(sorted(values))}); the coordinator "
                           "runs one model over all of them")
    return next(iter(values.values()))


def deployment(scenario: Scenario) -> Deployment:
    """The coordinator and edge servers of ``scenario`` (a TestbedError naming the problem)."""
    coordinators = [s for s in scenario.services if s.program == COORDINATOR]
    if len(coordinators) != 1:
        raise TestbedError(f"{scenario.name}: expected one {COORDINATOR} service, "
                           f"found {len(coordinators)}")
    edges = sorted((s for s in scenario.services if s.program == EDGE_SERVER),
                   key=lambda s: s.params.get("server_index", -1))
    indices = [s.params.get("server_index") for s in edges]
    if not edges or indices != list(range(len(edges))):
        raise TestbedError(f"{scenario.name}: expected {EDGE_SERVER} services with "
                           f"params.server_index 0 .. N-1, found {indices}")
    sharing = str(_common(scenario, edges, "sharing"))
    tc = float(_common(scenario, edges, "tc"))
    return Deployment(coordinator=coordinators[0], edges=tuple(edges), tc=tc,
                      sharing=sharing, time_scale=scenario.time_scale,
                      accounting=str(coordinators[0].params.get("accounting",
                                                                DEFAULT_ACCOUNTING)))
