"""Shaped Mininet links for both shaping backends, changeable while the network runs.

* :class:`DelayedLink` (``userspace`` backend): the link is a pair of TAP devices made by
  the delayer process inside each end's namespace, with the interface names the topology
  wants; delay, jitter, loss and queue cap live in the delayer, bandwidth in HTB on both
  TAPs.
* :class:`NetemLink` (``netem`` backend): Mininet's ``TCLink`` (HTB + netem child on both
  veth ends), reconfigured in place on changes.

Both keep their current :class:`LinkParams` in ``link.shape`` and offer ``set_params`` and
``set_up``; :func:`make_link`, :func:`set_link_params` and :func:`set_link_up` are the
backend-neutral entry points. A link that is down drops every frame in both directions
while its interfaces stay administratively up (addresses and routes are kept), on both
backends.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mininet.link import Link, TCLink
from mininet.net import Mininet
from mininet.node import Node, OVSSwitch

from testbed.emulation.delayer import DelayerClient
from testbed.emulation.shaping import clear_command, htb_commands
from testbed.errors import EmulationError

_link_ids = itertools.count(1)


@dataclass(frozen=True)
class LinkParams:
    """Shaping of one link, applied to each direction separately.

    ``delay_ms`` and ``jitter_ms`` are one-way; ``loss_pct`` is per direction; ``queue`` is
    the cap on frames held per direction (None: the backend default, 1000 on both);
    ``bw_mbit`` None means unshaped; ``seed`` seeds the delayer's loss and jitter draws
    (netem draws are not seeded).
    """

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    bw_mbit: float | None = None
    queue: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("delay_ms", "jitter_ms", "loss_pct"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or math.isnan(value) or value < 0:
                raise EmulationError(f"link {name} must be a number >= 0, got {value!r}")
        if self.loss_pct > 100:
            raise EmulationError(f"link loss_pct must be <= 100, got {self.loss_pct!r}")
        if self.bw_mbit is not None and not (isinstance(self.bw_mbit, (int, float))
                                             and self.bw_mbit > 0):
            raise EmulationError(f"link bw_mbit must be > 0 or None, got {self.bw_mbit!r}")
        if self.queue is not None and not (isinstance(self.queue, int) and self.queue >= 1):
            raise EmulationError(f"link queue must be an integer >= 1 or None, "
                                 f"got {self.queue!r}")
        if not isinstance(self.seed, int):
            raise EmulationError(f"link seed must be an integer, got {self.seed!r}")

    @classmethod
    def from_spec(cls, spec: Any) -> LinkParams:
        """Read the fields from a mapping or any object with those attributes (or None)."""
        if spec is None:
            return cls()
        if isinstance(spec, LinkParams):
            return spec
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(spec, Mapping):
            found = {k: spec[k] for k in names if spec.get(k) is not None}
        else:
            found = {k: getattr(spec, k) for k in names if getattr(spec, k, None) is not None}
        return cls(**found)

    def delayer_fields(self) -> dict[str, Any]:
        """The fields the delayer applies (everything but bandwidth)."""
        fields = {"delay_ms": float(self.delay_ms), "jitter_ms": float(self.jitter_ms),
                  "loss_pct": float(self.loss_pct), "seed": self.seed}
        if self.queue is not None:
            fields["queue"] = self.queue
        return fields

    def tc_kwargs(self, up: bool = True) -> dict[str, Any]:
        """Mininet ``TCIntf.config`` arguments; a down link is emulated as 100 % loss."""
        loss = 100.0 if not up else self.loss_pct
        kwargs: dict[str, Any] = {"bw": self.bw_mbit, "max_queue_size": self.queue,
                                  "loss": loss or None, "delay": None, "jitter": None}
        if self.delay_ms or self.jitter_ms:
            kwargs["delay"] = f"{self.delay_ms:g}ms"  # netem needs a delay to take a jitter
        if self.jitter_ms:
            kwargs["jitter"] = f"{self.jitter_ms:g}ms"
        return kwargs


def _run(node: Node, command: str) -> None:
    """Run a shell command in ``node``; fail on a non-zero exit status (tc also prints
    harmless warnings, e.g. about the HTB quantum at high rates, so output is no signal)."""
    output, _, status = node.cmd(f"{command}; echo tbt-status=$?").rpartition("tbt-status=")
    if status.strip() != "0":
        raise EmulationError(f"{node.name}: `{command}` failed: {output.strip()}")


class DelayedLink(Link):
    """A Mininet link whose two interfaces are TAPs served by the userspace delayer."""

    def __init__(self, node1: Node, node2: Node, delayer: DelayerClient,
                 params: LinkParams | None = None, link_id: str | None = None,
                 **kwargs: Any) -> None:
        if kwargs.get("fast") is False:
            raise EmulationError("DelayedLink needs fast=True (TAPs are made in place)")
        self.delayer = delayer
        self.shape = params or LinkParams()
        self.up = True
        self.link_id = link_id or f"{node1.name}-{node2.name}-{next(_link_ids)}"
        self._in_delayer = False
        try:
            super().__init__(node1, node2, **kwargs)
            if self.shape.bw_mbit:
                self._shape_bandwidth(None)
        except BaseException:
            self.delete()
            raise

    def makeIntfPair(self, intfname1: str, intfname2: str, addr1: str | None = None,
                     addr2: str | None = None, node1: Node | None = None,
                     node2: Node | None = None, deleteIntfs: bool = True) -> None:
        """Ask the delayer for the TAP pair instead of making a veth pair (Mininet hook)."""
        if node1 is None or node2 is None:
            raise EmulationError("DelayedLink needs both nodes to make its TAPs")
        # Open vSwitch's userspace datapath reads its ports as plain frames, so a link to an
        # OVS switch must never carry whole TSO segments (the delayer's compiled data path
        # otherwise keeps them whole; the kernel segments before a TAP without offloads).
        offload = not any(isinstance(n, OVSSwitch) for n in (node1, node2))
        self.delayer.add_link(self.link_id, (node1.pid, intfname1), (node2.pid, intfname2),
                              offload=offload, **self.shape.delayer_fields())
        self._in_delayer = True

    def _intfs(self) -> list[Any]:
        return [i for i in (getattr(self, "intf1", None), getattr(self, "intf2", None)) if i]

    def _shape_bandwidth(self, old_bw: float | None) -> None:
        for intf in self._intfs():
            if old_bw:
                _run(intf.node, clear_command(intf.name))
            if self.shape.bw_mbit:
                for command in htb_commands(intf.name, self.shape.bw_mbit):
                    _run(intf.node, command)

    def set_params(self, **changes: Any) -> None:
        """Change shaping while running; only the fields given change."""
        old, new = self.shape, dataclasses.replace(self.shape, **changes)
        delayer_changes = {k: v for k, v in new.delayer_fields().items()
                           if v != old.delayer_fields().get(k)}
        if delayer_changes:
            self.delayer.set(self.link_id, **delayer_changes)
        self.shape = new
        if new.bw_mbit != old.bw_mbit:
            self._shape_bandwidth(old.bw_mbit)

    def set_up(self, up: bool) -> None:
        """Cut (drop everything, held frames included) or restore the link."""
        self.delayer.up(self.link_id, up)
        self.up = up

    def delete(self) -> None:
        """Remove the TAPs through the delayer; safe to call twice or after the delayer died."""
        if self._in_delayer:
            try:
                self.delayer.remove(self.link_id)
            except EmulationError:
                if self.delayer.alive():
                    raise
            self._in_delayer = False
        for intf in self._intfs():
            intf.node.delIntf(intf)
            intf.link = None
        self.intf1 = self.intf2 = None


class NetemLink(TCLink):
    """Mininet's ``TCLink`` that remembers its shaping so it can be changed or cut later."""

    def __init__(self, node1: Node, node2: Node, params: LinkParams | None = None,
                 **kwargs: Any) -> None:
        self.shape = params or LinkParams()
        self.up = True
        super().__init__(node1, node2, **kwargs, **self.shape.tc_kwargs())

    def _apply(self) -> None:
        for intf in (self.intf1, self.intf2):
            intf.cmd(clear_command(intf.name))  # TCIntf.config skips clearing when unshaped
            result = intf.config(**self.shape.tc_kwargs(self.up))
            outputs = (result or {}).get("tcoutputs", [])
            errors = [line for o in outputs for line in o.splitlines()
                      if line.strip() and not line.startswith("Warning:")]
            if errors:
                raise EmulationError(f"{intf.name}: tc failed: {errors}")

    def set_params(self, **changes: Any) -> None:
        """Change shaping while running; only the fields given change."""
        self.shape = dataclasses.replace(self.shape, **changes)
        self._apply()

    def set_up(self, up: bool) -> None:
        """Cut (netem 100 % loss both ways) or restore the link."""
        self.up = up
        self._apply()


ShapedLink = DelayedLink | NetemLink


def make_link(net: Mininet, node_a: Node, node_b: Node, link_spec: Any, backend: str,
              delayer: DelayerClient | None = None,
              intf_names: tuple[str, str] | None = None,
              link_id: str | None = None, **link_opts: Any) -> ShapedLink:
    """Add a shaped link between two nodes of ``net`` with the chosen backend.

    ``link_spec`` is a mapping or object with :class:`LinkParams` field names;
    ``intf_names`` are the interface names at ``node_a`` and ``node_b``; ``link_opts`` go
    to Mininet's link class (e.g. ``txo=0, rxo=0`` for veths on a userspace OVS bridge:
    integers, because Mininet's string options turn ``False`` into the truthy 'False').
    """
    params = LinkParams.from_spec(link_spec)
    names = {"intfName1": intf_names[0], "intfName2": intf_names[1]} if intf_names else {}
    if backend == "userspace":
        if delayer is None:
            raise EmulationError("the userspace link backend needs a running delayer")
        return net.addLink(node_a, node_b, cls=DelayedLink, delayer=delayer, params=params,
                           link_id=link_id, **names, **link_opts)
    if backend == "netem":
        return net.addLink(node_a, node_b, cls=NetemLink, params=params, **names,
                           **link_opts)
    raise EmulationError(f"link backend must be 'netem' or 'userspace', got {backend!r}")


def release_all(delayer: DelayerClient, links: list[Any]) -> None:
    """Remove every delayed link of ``delayer`` at once (teardown of a whole network).

    The links' own :meth:`DelayedLink.delete` then only updates Mininet's bookkeeping.
    """
    delayer.remove_all()
    for link in links:
        if isinstance(link, DelayedLink):
            link._in_delayer = False


def set_link_params(link: ShapedLink, **changes: Any) -> None:
    """Change ``delay_ms``, ``jitter_ms``, ``loss_pct``, ``bw_mbit``, ``queue`` or ``seed``."""
    link.set_params(**changes)


def set_link_up(link: ShapedLink, up: bool) -> None:
    """Bring a link down (every frame dropped both ways) or back up."""
    link.set_up(up)
