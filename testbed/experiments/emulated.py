"""The frame every emulated experiment shares: checks, bring-up, measurement, results.

An experiment driver (Armada's, person search's) supplies two functions: ``prepare``
materialises what the run needs before the network exists (traces, frames, ground
truth) and ``measure`` drives the brought-up topology. :func:`run_emulated_experiment`
does the rest the same way for all of them: it refuses to run without root or into a
non-empty folder, brings the scenario up under a ledger, tears everything down on every
exit (signals included), and writes traces, summary and self-describing metadata like
``testbed run``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.scenario import Scenario

Progress = Callable[[str], None]


def run_emulated_experiment(scenario: Scenario, plan: Any, size: str, out: Path,
                            prepare: Callable[[str, Path], Any],
                            measure: Callable[[Any, str, Scenario, Any], dict[str, Any]],
                            result_key: str, progress: Progress = print,
                            ledger_root: Path | None = None) -> Path:
    """Run one experiment on the emulated network; write its results folder ``out``.

    ``prepare(run, workdir)`` runs first (its value is handed to ``measure``);
    ``measure(topo, run, scenario, prepared)`` must return a dict holding ``rows`` (trace
    rows) and ``result_key`` (the experiment's own results, also written as
    ``<result_key>.json``); its other keys go to ``metadata.json``. ``plan`` is a
    dataclass recorded in the metadata.
    """
    from testbed import traces
    from testbed.emulation.executor import bring_up, stop_on_signals
    from testbed.emulation.ledger import Ledger
    from testbed.emulation.network import stop_network
    from testbed.runner import _git_commit, _versions, machine_details, new_run_id

    if os.geteuid() != 0:
        raise TestbedError("emulation needs root (network namespaces, tc, cgroups): run as root")
    run = new_run_id(scenario)
    if out.exists() and any(out.iterdir()):
        raise TestbedError(f"--out {out}: the folder exists and is not empty")
    workdir = out / "work"
    workdir.mkdir(parents=True)
    started = time.time()
    prepared = prepare(run, workdir)

    ledger = Ledger(run, root=ledger_root)
    details: dict[str, Any] = {"ledger": str(ledger.path)}
    with stop_on_signals():
        try:
            topo = bring_up(scenario, ledger, workdir, f"tb{run[-4:]}", progress)
            try:
                details.update(measure(topo, run, scenario, prepared))
            finally:
                stop_network(topo.net)
        finally:
            errors = ledger.teardown()
            if errors:
                progress("teardown left errors: " + "; ".join(errors))
    rows = details.pop("rows")
    result = details.pop(result_key)
    df = traces.rows_to_frame(rows)
    traces.write_traces(df, out)
    traces.write_summary({**traces.summarize(df), result_key: result}, out)
    meta = {"run": run, "experiment": scenario.name, "size": size,
            "plan": dataclasses.asdict(plan), "scenario": scenario.resolved(),
            "source": scenario.source, "executor": "emulation", "versions": _versions(),
            "git_commit": _git_commit(), "machine": machine_details(), "started": started,
            "wall_s": time.time() - started, "teardown_errors": errors, **details}
    (out / "metadata.json").write_text(json.dumps(meta, indent=2, default=str))
    (out / f"{result_key}.json").write_text(json.dumps(result, indent=2))
    return out
