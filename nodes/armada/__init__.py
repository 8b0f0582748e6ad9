"""Armada, the edge cloud of the first seed: Beacon, Application Manager, Spinner, Captain.

The pure parts (GeoHash, the candidate-list algorithm, the placement scheduler) import
nothing from aiohttp so they can be unit tested and reused by the simulator; the services
are runnable as ``python -m nodes.armada.<name>``. The contract is ``docs/armada.md``.
"""
