"""A minimal system defined in the test tree: it proves a new system plugs into the
generic harness with no edit to it.

``echo`` runs one tiny HTTP program (:mod:`tests.testsystem.server`) on N server nodes
behind a star (:func:`tests.testsystem.builder.star`), drives it with evenly spaced
pings (:class:`tests.testsystem.workload.EchoPings`) and compares two placement rules
(``first`` and ``round-robin``), on both executors. Everything it brings is this
package; :func:`register` is the one call that makes the harness see it (a real system
lives in ``testbed/systems/<name>/`` and is found without the call).
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.registry import Experiment, Program, System, TraceKind, register

_HERE = __name__

SYSTEM = System(
    name="echo",
    description="a test system: pings answered by N echo servers",
    programs=(Program("echo.server", f"{_HERE}.server", "answers POST /echo after a fixed time",
                      config=f"{_HERE}.config:echo_params", task_server=True),),
    generators={"echo-pings": f"{_HERE}.workload:EchoPings"},
    policies={"first": "always the first server", "round-robin": "servers in turn",
              "broken": "servers in turn; fails on a client's third ping"},
    builders={"echo-star": f"{_HERE}.builder:star"},
    emulate=f"{_HERE}.driver:make_driver",
    simulate=f"{_HERE}.sim:run_sim",
    experiments=(Experiment("echo-compare", "first against round-robin on every executor",
                            studies=f"{_HERE}:studies", metrics=f"{_HERE}.experiment:metrics",
                            claims=f"{_HERE}.experiment:claims", paper="Echo",
                            title="Echo: first against round-robin",
                            report_dir="results/echo", report_file="echo.md"),),
    trace_kinds=(TraceKind("ping", "one echo request", (("echo_seq", "int"),)),),
)

SCENARIO = __file__.rsplit("/", 1)[0] + "/echo.yaml"


def register_echo() -> Callable[[], None]:
    """Register the echo system; returns the function that removes it."""
    return register(SYSTEM)
