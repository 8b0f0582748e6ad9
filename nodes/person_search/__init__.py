"""Context-based person search as HTTP services: edge data servers and a coordinator.

* :mod:`nodes.person_search.edge_server` is one edge server: it stores its items' ground
  truth (which targets each of its slots contains) and answers analysis requests after
  the duration the paper's response model gives
  (:class:`~nodes.person_search.model.AnalysisServer`, driven in wall-clock
  seconds).
* :mod:`nodes.person_search.coordinator` is the cloud server: it runs every search of a
  request (Algorithm 1, :class:`~nodes.person_search.model.Search`)
  concurrently against the edge servers with one of the person-search policies,
  mirroring the discrete-event simulator.

The HTTP contract is ``docs/person_search.md``. What both services share beyond
``nodes.common`` is :mod:`nodes.person_search.serving`; their parameters are
:mod:`nodes.person_search.configs`. This package imports nothing itself, so the scenario
loader can load the parameters without aiohttp.
"""
