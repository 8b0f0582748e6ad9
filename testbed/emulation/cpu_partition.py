"""Split the machine's CPUs between the link delayer and the emulated hosts.

On a kernel without netem one delayer process relays every frame of every link, and a
plain TAP runs the receiving host's network stack inside the delayer's write. When both
share every CPU, the scheduler puts a receiver woken from that write on the delayer's
own CPU, where it waits behind the real-time relaying thread while another CPU idles
(traced in ``docs/shaping.md``): at high frame rates the receivers starve and drop
frames in their socket buffers. A partition gives the delayer CPUs of its own and the
hosts the others, as an emulator with dedicated cores would have: the delayer runs only
on ``shaper`` CPUs, and what a run starts in its hosts (the launcher's services and
clients, Docker containers) only on ``hosts`` CPUs. The hosts then have fewer CPUs, so
it suits runs whose links carry many frames more than runs whose services need every
CPU; it is off unless asked for.

``TESTBED_SHAPER_CPUS`` asks for it with a CPU list (``1``, ``2-3``, ``0,2``); every CPU
named must be one this process may use, and at least one such CPU must stay for the
hosts. The partition a run used is recorded in its ``metadata.json`` (``shaping_cpus``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CPUS_ENV = "TESTBED_SHAPER_CPUS"


@dataclass(frozen=True)
class Partition:
    """Which CPUs the delayer runs on and which the hosts' processes run on."""

    shaper: frozenset[int]
    hosts: frozenset[int]

    def as_dict(self) -> dict[str, list[int]]:
        """The partition for ``metadata.json`` and the delayer's ``ping``."""
        return {"shaper": sorted(self.shaper), "hosts": sorted(self.hosts)}

    @property
    def hosts_list(self) -> str:
        """The hosts' CPUs as a kernel CPU list (``taskset``, Docker's ``cpuset_cpus``)."""
        return cpu_list(self.hosts)


def parse_cpu_list(text: str, what: str = CPUS_ENV) -> frozenset[int]:
    """The CPUs of a kernel CPU list (``0-2,5``); a ValueError naming ``what`` and the
    expected form when ``text`` is not one."""
    cpus: set[int] = set()
    expected = "a CPU list such as '1', '2-3' or '0,2'"
    for part in text.strip().split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise ValueError(f"{what}: expected {expected}, got {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"{what}: expected {expected} (ranges low-high, CPUs from 0), "
                             f"got {text!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def cpu_list(cpus: frozenset[int] | set[int]) -> str:
    """``cpus`` as a kernel CPU list, runs of consecutive CPUs as ranges."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def partition(shaper_cpus: str | None, what: str = CPUS_ENV,
              available: frozenset[int] | None = None) -> Partition | None:
    """The partition giving the delayer ``shaper_cpus`` (None or blank: no partition) and
    the hosts the rest of ``available`` (default: the CPUs this process may use)."""
    if shaper_cpus is None or not shaper_cpus.strip():
        return None
    shaper = parse_cpu_list(shaper_cpus, what)
    usable = frozenset(os.sched_getaffinity(0) if available is None else available)
    foreign = shaper - usable
    if foreign:
        raise ValueError(f"{what}: CPU {cpu_list(foreign)} is not one this process may use "
                         f"(usable: {cpu_list(usable)})")
    hosts = usable - shaper
    if not hosts:
        raise ValueError(f"{what}: {shaper_cpus!r} leaves no CPU for the hosts (usable: "
                         f"{cpu_list(usable)}); name fewer CPUs")
    return Partition(shaper, hosts)


def env_partition() -> Partition | None:
    """The partition asked for by ``TESTBED_SHAPER_CPUS`` (None if unset or blank)."""
    return partition(os.environ.get(CPUS_ENV))


def confine(cpus: frozenset[int], pid: int = 0) -> None:
    """Run thread ``pid`` (0: the calling one) only on ``cpus``; threads and processes it
    starts afterwards inherit this."""
    os.sched_setaffinity(pid, cpus)
