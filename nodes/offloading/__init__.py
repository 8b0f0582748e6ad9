"""What the queue-aware offloading system runs inside hosts, and the pure rules it shares
with its simulator (``testbed/systems/offloading/``): the tier server
(:mod:`nodes.offloading.tier_server`), the client-side dispatcher
(:mod:`nodes.offloading.dispatcher`), the placement policies
(:mod:`nodes.offloading.policies`) and the queueing formulas they use
(:mod:`nodes.offloading.queueing`)."""
