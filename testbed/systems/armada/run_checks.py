"""What each executor refuses of an Armada scenario, before a run writes anything. Pure.

The simulator replays fleets built by ``armada-fleet`` only
(:func:`testbed.systems.armada.sim_replay.check_simulable`); the emulation refuses a fleet whose
nodes ask for more cores than this host can honour (a fleet for the simulator only says
``host_cores: null``, which lifts the builder's own bound), and a fleet of container
replicas (``task_runtime: docker``), whose start-up it does not model.
"""

from __future__ import annotations

from collections.abc import Mapping

from testbed.errors import TestbedError
from testbed.scenario.model import Scenario
from testbed.systems.armada.builders import HOST_CORES, Fleet


def check_run(scenario: Scenario, executor: str) -> None:
    """Raise a :class:`TestbedError` when ``executor`` cannot run ``scenario``."""
    build = scenario.raw.get("build")
    if executor == "sim":
        from testbed.systems.armada.sim_replay import check_simulable

        check_simulable(scenario)
        params = build.get("params", {}) if isinstance(build, Mapping) else {}
        if params.get("task_runtime", "process") != "process":
            raise TestbedError(
                f"{scenario.source}: build.params.task_runtime: expected process for "
                "--executor sim (the simulator's replicas start and serve as the "
                f"calibrated processes do), found {params['task_runtime']!r}; run it "
                "with --executor emulation")
        return
    if isinstance(build, Mapping) and build.get("builder") == "armada-fleet":
        fleet = Fleet.from_params(build.get("params", {}))
        if fleet.cores_needed > HOST_CORES:
            raise TestbedError(
                f"{scenario.source}: build.params.node_cores: expected at most "
                f"{HOST_CORES:g} cores over every node for emulation (what this 2-core host "
                f"can honour), found up to {fleet.cores_needed:g}; run it with --executor "
                "sim, or use fewer or smaller nodes")
