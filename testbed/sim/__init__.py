"""The discrete-event simulators, pure (no Mininet, aiohttp, Docker or requests).

Each module here is one engine, or the replay of scenarios on one; a system with a
simulator registers its replay function as ``System.simulate``, and ``testbed run
--executor sim`` reaches it only through the registry. ``docs/simulator.md`` documents
the models.
"""
