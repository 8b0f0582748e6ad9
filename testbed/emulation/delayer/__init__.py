"""The userspace link delayer: delay, jitter, loss and queue caps where the kernel has no netem.

One delayer process serves every delayed link of a run. A link is a pair of TAP devices,
one created inside each end's network namespace under the interface name the topology
wants; the delayer holds both file descriptors and forwards Ethernet frames between them.
Each direction of a link is shaped on its own:

* **delay** ``delay_ms``: one-way, applied to every frame of the direction;
* **jitter** ``jitter_ms``: a per-frame offset drawn uniformly from ``[-J, J]`` (the delay
  never goes below zero). A direction never reorders: a frame is released no earlier than
  its predecessor, so under load jitter skews the delay upwards rather than reordering
  (netem reorders when jitter exceeds the inter-frame gap; a FIFO wire does not);
* **loss** ``loss_pct``: per-frame Bernoulli drop drawn from a per-direction RNG seeded from
  the link's ``seed``, so a rerun with the same seed drops the same frame numbers;
* **queue** ``queue``: at most this many packets held per direction (netem's ``limit``,
  Mininet's ``max_queue_size``; a GSO frame of the compiled path counts as its segments);
  arrivals beyond it are dropped (drop-tail);
* **up/down**: a link that is down drops every frame, held frames included. The TAP
  devices stay administratively up, so addresses and routes survive a down/up cycle.

One module per job:

* :mod:`~testbed.emulation.delayer.timer`: the release timer (a ``timerfd`` armed at
  absolute CLOCK_MONOTONIC nanoseconds), 1 ns timer slack and SCHED_FIFO priority 50 (if
  permitted);
* :mod:`~testbed.emulation.delayer.tap`: TAP devices made in an end's namespace;
* :mod:`~testbed.emulation.delayer.relay`: the Python data path (``delayer-py``);
* :mod:`~testbed.emulation.delayer.compiled`: the compiled data path (``shaper-c``,
  :mod:`testbed.emulation.shaper`) as the control plane sees it, and the choice between
  the two: the compiled one when its library loads, else the Python one with one log line
  saying why (``--data-path`` or ``TESTBED_SHAPER``: ``auto``, ``c``, ``python``);
* :mod:`~testbed.emulation.delayer.lateness`: the process-wide release-lateness histogram
  (the ``lateness`` request) a run's fidelity guard reads;
* :mod:`~testbed.emulation.delayer.server`: the control socket (JSON lines: ``ping``,
  ``add_link``, ``set``, ``up``, ``remove``, ``remove_all``, ``stats``, ``lateness``) and the
  event loop;
* :mod:`~testbed.emulation.delayer.client` and :mod:`~testbed.emulation.delayer.launcher`:
  :class:`DelayerClient` and :func:`start_delayer`, the harness's side, exported here.

Run as ``python -m testbed.emulation.delayer --control /path/ctl.sock``
(:mod:`~testbed.emulation.delayer.__main__`); from Python use :func:`start_delayer` and
:class:`DelayerClient`. The delayer registers no undo handlers of its own: its ledger entry
is a plain process entry.
"""

from testbed.emulation.delayer.client import DelayerClient
from testbed.emulation.delayer.launcher import start_delayer

__all__ = ["DelayerClient", "start_delayer"]
