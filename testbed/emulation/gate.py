"""A node that looks crashed to every other host while its services start behind it.

A scheduled ``join`` must take effect at its instant, but starting a service and
waiting for its ``/health`` takes hundreds of milliseconds (a container restart more):
many model seconds at a ``time_scale`` of 20. So the scheduler starts the node's
services *ahead* of the join, behind a closed gate, and opens the gate at the due
instant. Behind a closed gate the node is what a crashed node is to the others: every
TCP segment from another host is answered with a reset and every UDP datagram with
"port unreachable" (what a host without listeners sends), and the node's own new
connections and datagrams to other hosts are refused; the kernel still answers pings,
as a crashed node's does. Loopback is untouched, so the harness checks the services'
health from inside the node.

The rules (iptables, in the node's own network namespace) are installed once per node
and match only while the node's addresses are in an ``xt_recent`` list: closing and
opening the gate is one write to ``/proc/<pid>/net/xt_recent/<list>`` (tens of
microseconds), not an iptables run (10-20 ms, most of a model second). The rules and the
list go away with the namespace; nothing needs a ledger entry.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from testbed.errors import EmulationError

#: The ``xt_recent`` list (per network namespace) holding the node's addresses while the
#: gate is closed.
LIST = "tbgate"
_MATCH_DST = f"-m recent --name {LIST} --rcheck --rdest"
_MATCH_SRC = f"-m recent --name {LIST} --rcheck --rsource"
RULES = "\n".join((
    "*filter",
    f"-I INPUT ! -i lo -p tcp {_MATCH_DST} -j REJECT --reject-with tcp-reset",
    f"-I INPUT ! -i lo -p udp {_MATCH_DST} -j REJECT --reject-with icmp-port-unreachable",
    f"-I OUTPUT ! -o lo -p tcp --syn {_MATCH_SRC} -j REJECT --reject-with tcp-reset",
    f"-I OUTPUT ! -o lo -p udp {_MATCH_SRC} -j REJECT --reject-with icmp-port-unreachable",
    "COMMIT", ""))


class Gate:
    """The gate of the node whose network namespace holds process ``netns_pid`` (its
    Mininet shell), for the node's IPv4 ``addresses``."""

    def __init__(self, netns_pid: int, addresses: Sequence[str]) -> None:
        self.netns_pid = netns_pid
        self.addresses = list(addresses)
        self.installed = False
        self.closed = False

    @property
    def list_path(self) -> Path:
        """The ``xt_recent`` list of the node's namespace, as the harness sees it."""
        return Path(f"/proc/{self.netns_pid}/net/xt_recent/{LIST}")

    def install(self) -> None:
        """Add the gate's rules to the node's namespace (once; they match nothing until
        :meth:`close`)."""
        if self.installed:
            return
        done = subprocess.run(["nsenter", f"--net=/proc/{self.netns_pid}/ns/net",
                               "iptables-restore", "--noflush"], input=RULES, text=True,
                              capture_output=True, timeout=30, check=False)
        if done.returncode != 0:
            raise EmulationError(f"cannot install the join gate in the namespace of pid "
                                 f"{self.netns_pid}: {done.stderr.strip()}")
        self.installed = True

    def close(self) -> None:
        """From now on the node looks crashed to every other host."""
        self.install()
        self._write("".join(f"+{address}\n" for address in self.addresses))
        self.closed = True

    def open(self) -> None:
        """The node is reachable again (its services answer from this instant)."""
        if self.closed:
            self._write("/\n")
            self.closed = False

    def _write(self, text: str) -> None:
        try:
            with self.list_path.open("w") as fh:
                for line in text.splitlines(keepends=True):  # the kernel takes one per write
                    fh.write(line)
                    fh.flush()
        except OSError as exc:
            raise EmulationError(f"join gate of the namespace of pid {self.netns_pid}: "
                                 f"cannot write {self.list_path}: {exc}") from exc
