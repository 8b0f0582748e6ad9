"""Reusable network topologies, one YAML file per topology, shipped as package data.

A scenario names one with ``topology: <name>`` to use ``topologies/<name>.yaml``; the
format is the ``topology`` section described in ``docs/scenario.md``. Load one on its own
with :func:`testbed.scenario.load_topology`.
"""
