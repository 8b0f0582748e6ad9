"""What every system's paper experiments share: an experiment is data.

:mod:`testbed.experiments.files` finds an experiment's study files per size,
:mod:`testbed.experiments.engine` runs them through the study engine and hands the
studies (:mod:`testbed.experiments.results`) to the experiment's metric and claim
functions; the experiments themselves (study files, metrics, claims) live in their
systems' packages (``testbed/systems/<name>/``) and are registered there.
"""
