"""Network-emulation testbed harness for edge and compute-continuum research.

Layers point one way: scenario model (pure) -> policies and workloads (pure) ->
executors (emulation | simulation) -> services (``nodes``) and dispatch -> traces ->
reports. Modules of the pure layers import neither Mininet, aiohttp nor Docker.
"""

__version__ = "0.1.0"
