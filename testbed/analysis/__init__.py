"""The analysis layer: from a results folder's traces to numbers with their intervals.

:mod:`~testbed.analysis.traces` reads and writes the per-task traces,
:mod:`~testbed.analysis.stats` holds the interval methods, :mod:`~testbed.analysis.compare`
and :mod:`~testbed.analysis.compare_folders` compare policies and folders, and
:mod:`~testbed.analysis.fidelity` judges an emulation's fidelity. Nothing here names a
system, brings up a network or draws a figure.
"""
