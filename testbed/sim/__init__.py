"""The discrete-event simulators, pure (no Mininet, aiohttp, Docker or requests).

A system with a simulator registers its ``run_sim`` as ``System.simulate``:

- :mod:`testbed.sim.tiers` is the tier-server engine (c FIFO servers per tier, links,
  state polling, events) and :mod:`testbed.sim.tiers_replay` turns an offloading
  scenario and its materialised trace into replays and trace rows;
- :mod:`testbed.sim.person_search` is the person-search engine (Algorithm 1 over N
  edge data servers).

``docs/simulator.md`` documents the models.
"""
