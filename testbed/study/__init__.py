"""Studies: replicated parameter sweeps over a scenario, run as resumable cells.

:mod:`~testbed.study.spec` reads study files, :mod:`~testbed.study.cells` runs one cell,
:mod:`~testbed.study.engine` sends cells to a Dask cluster, :mod:`~testbed.study.summary`
makes the table across replications and :mod:`~testbed.study.run` ties them together.
"""
