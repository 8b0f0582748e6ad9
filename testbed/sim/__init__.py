"""The discrete-event executor: the scenario's tiers, links and polling in model time.

:mod:`testbed.sim.engine` is the event loop (tier servers, network, state polling,
events); :mod:`testbed.sim.executor` turns a scenario and its materialised trace into
replays and trace rows (:func:`~testbed.sim.executor.run_sim`, used by
``testbed run --executor sim``). ``docs/simulator.md`` documents the model.
"""

from testbed.sim.executor import build_model, run_sim, simulate

__all__ = ["build_model", "run_sim", "simulate"]
