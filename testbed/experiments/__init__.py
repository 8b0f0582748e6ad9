"""What every system's paper experiments share.

:mod:`testbed.experiments.emulated` is the frame of an emulated experiment (checks,
bring-up, teardown, results folder) and the report helpers; the experiments themselves
live in their systems' packages (``testbed/systems/<name>/``) and are registered there.
"""
