"""Mininet hosts and Linux bridges set up without a shell round trip per setting.

Mininet configures a host with five commands in its shell (``ifconfig`` down, hardware
address, up, the address, ``lo`` up), each waited for in turn, plus one per link end
to bring it up, and a bridge with one ``brctl addif`` per port: about ten round trips
of a few milliseconds per host, one after another, which is most of a large network's
build time. Here:

* :class:`BatchedHost` sends its whole configuration as one ``ip -batch`` in its shell
  and does not wait: :func:`finish_config` collects every host's answer afterwards, so
  the hosts' shells work side by side while the harness goes on;
* :class:`BatchedBridge` creates the bridge, enslaves and raises every port with one
  ``ip -batch`` run from the harness (the bridges live in the root namespace), and
  removes all bridges of a network with one more at shutdown (:meth:`batchShutdown`,
  Mininet's hook for that).

Link ends on these nodes are made with Mininet's ``up`` setting left out
(:data:`LEAVE_DOWN`): the host's batch or the bridge's raises them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

from mininet.node import Host
from mininet.nodelib import LinuxBridge

from testbed.errors import EmulationError

#: Interface parameters that skip Mininet's per-interface ``ifconfig up`` round trip.
LEAVE_DOWN: dict[str, Any] = {"up": None}
STATUS = "tbt-status="


def run_ip_batch(lines: Sequence[str], force: bool = False) -> None:
    """Run ``ip -batch`` over ``lines`` in the harness's namespace; ``force`` goes on
    past failing lines (removal of what may be gone already)."""
    if not lines:
        return
    argv = ["ip", *(["-force"] if force else []), "-batch", "-"]
    done = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 and not force:
        raise EmulationError(f"ip -batch failed: {done.stderr.strip()[:500]}")


def _here_string(lines: Iterable[str]) -> str:
    """``lines`` as one bash ``$'...'`` word (for ``ip -batch - <<< WORD``)."""
    body = "\\n".join(lines)
    if "'" in body or "\\" in body.replace("\\n", ""):
        raise EmulationError(f"unexpected quote in an ip batch: {body!r}")
    return f"$'{body}'"


class BatchedHost(Host):
    """A Mininet host whose configuration is one ``ip -batch`` sent without waiting."""

    def config(self, mac: str | None = None, ip: str | None = None,
               defaultRoute: Any = None, lo: str = "up", **params: Any) -> dict:
        """Set the default interface's address and MAC, raise every interface and
        ``lo``; the answer is read by :func:`finish_config`."""
        lines = []
        intf = self.defaultIntf() if self.intfs else None
        if intf is not None and mac:
            intf.mac = mac
            lines.append(f"link set dev {intf.name} address {mac}")
        if intf is not None and ip:
            address, _, plen = ip.partition("/")
            intf.ip, intf.prefixLen = address, int(plen or 8)
            lines.append(f"addr add {address}/{intf.prefixLen} dev {intf.name}")
        lines += [f"link set dev {i.name} up" for i in self.intfList() if i.name != "lo"]
        lines.append(f"link set dev lo {lo}")
        if defaultRoute:
            raise EmulationError(f"{self.name}: a default route is not supported here")
        send(self, f"ip -batch - <<< {_here_string(lines)}")
        return {}


def send(host: BatchedHost, command: str) -> None:
    """Start ``command`` in ``host``'s shell without waiting (:func:`finish_config`
    collects its status)."""
    host.sendCmd(f"{command}; echo {STATUS}$?")


def finish_config(hosts: Iterable[Any]) -> None:
    """Wait for the command each :class:`BatchedHost` was sent (its configuration);
    raise naming the first host whose command failed."""
    failed = []
    for host in hosts:
        if isinstance(host, BatchedHost) and host.waiting:
            output, _, status = host.waitOutput().rpartition(STATUS)
            if status.strip() != "0":
                failed.append(f"{host.name}: {output.strip()[:300]}")
    if failed:
        raise EmulationError(f"host configuration failed on {len(failed)} hosts; first "
                             f"{failed[0]}")


class BatchedBridge(LinuxBridge):
    """A Linux bridge made, with every port enslaved and up, by one ``ip -batch``."""

    def start(self, _controllers: Any) -> None:
        ports = [i.name for i in self.intfList() if self.name in i.name]
        run_ip_batch([f"link add name {self.name} type bridge",
                      *(f"link set dev {port} master {self.name}" for port in ports),
                      *(f"link set dev {port} up" for port in ports),
                      f"link set dev {self.name} up"])

    @classmethod
    def batchShutdown(cls, switches: Sequence[Any], run: Any = None) -> Sequence[Any]:
        """Delete every bridge of ``switches`` and its ports with one ``ip -batch``
        (Mininet's hook; ports already gone, like a delayer's TAPs, are passed over)."""
        lines = []
        for switch in switches:
            for intf in list(switch.intfs.values()):
                if switch.name in intf.name:
                    lines.append(f"link del dev {intf.name}")
                    switch.delIntf(intf)
                    intf.link = None
            lines.append(f"link del dev {switch.name}")
        run_ip_batch(lines, force=True)
        return switches
