"""Experiments that reproduce published claims with the harness, and their reports.

:mod:`testbed.experiments.offloading` defines and runs the queue-aware offloading
experiments and computes their metrics; :mod:`testbed.experiments.claims` writes the
claims document (Markdown and plots) from those metrics.
"""
