"""A run's names on the machine: its reserved prefix and the interface names built on it.

Everything a run makes in the root network namespace carries its prefix ``tb`` + 4
base-36 characters (a switch ``s<i>`` is the bridge ``<prefix>s<i>``, its ports
``<prefix>s<i>-e<port>``). Two live runs must never share a prefix: Mininet's Linux
bridge deletes an existing bridge of its name before creating its own, and teardown
deletes by name. So a prefix is *reserved* on the machine before anything is named
with it:

* :func:`reserve_prefix` creates ``PREFIX_ROOT/<prefix>.lock`` already locked
  (:func:`testbed.emulation.locks.create_locked`: a temporary file linked into place, so
  two runs can never both create it) and holds its ``flock`` while the run lives; a
  prefix whose lock file exists, or that some interface already starts with, is
  skipped for another random one;
* the lock file names the run's ledger and stays until that ledger is gone: removed
  when the run's teardown removed everything (the ledger's removal hook), or by
  :func:`release_stale_prefixes` (``testbed clean``) once a killed run's ledger has
  been cleaned. A killed run's prefix is therefore never reused before its leftovers
  are removed.

:func:`interface_plan` names every interface of a topology before anything is built and
refuses names longer than Linux's 15 characters; :func:`check_absent` refuses to build
over an interface that already exists (the build would delete it). Every user of the
root namespace reserves its prefix this way: a scenario run, ``testbed calibrate`` (its
``h1 -- s1 -- h2`` pair) and the benchmarks' sandboxes. The ``tbt`` family is left to
fixed names of the tests and the netem probe (``tbtprobe0``), so a reserved prefix's
random part never starts with ``t``.
"""

from __future__ import annotations

import json
import os
import secrets
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testbed.emulation import locks
from testbed.errors import EmulationError
from testbed.scenario.model import Topology

PREFIX_ROOT = Path(os.environ.get("TESTBED_PREFIX_ROOT", "/run/edge-testbed/prefixes"))
ALPHABET = string.digits + string.ascii_lowercase
IFNAMSIZ = 15  # Linux: interface names hold at most 15 bytes
RESERVE_ATTEMPTS = 64


def random_prefix() -> str:
    """``tb`` + 4 random base-36 characters, the first not ``t`` (1.6 million choices)."""
    first = secrets.choice(ALPHABET.replace("t", ""))
    return "tb" + first + "".join(secrets.choice(ALPHABET) for _ in range(3))


def candidates() -> Iterator[str]:
    """Prefixes to try, in order (tests replace this to force a collision)."""
    while True:
        yield random_prefix()


def _lock_path(prefix: str, root: Path) -> Path:
    return root / f"{prefix}.lock"


def _interfaces() -> list[str]:
    try:
        return os.listdir("/sys/class/net")
    except OSError:
        return []


class _Reservation:
    """The held lock of one prefix; :meth:`release` runs once the ledger is removed."""

    def __init__(self, prefix: str, path: Path, fd: int) -> None:
        self.prefix, self.path, self.fd = prefix, path, fd

    def release(self) -> None:
        """Give the prefix back: remove its lock file (still ours: we hold it), then
        drop the lock."""
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


class RunLedger(Protocol):
    """What a reservation needs of the run's ledger (:class:`testbed.emulation.ledger.Ledger`
    is one): its run, its file, a hook for when it is removed, what it lists. Named here
    so that this module does not import the ledger, which asks it who holds a prefix."""

    run_id: str
    path: Path

    def on_removed(self, hook: Callable[[], None]) -> None: ...

    def open_entries(self) -> list[Any]: ...

    def teardown(self) -> list[str]: ...


def reserve_prefix(ledger: RunLedger, root: Path | None = None) -> str:
    """Reserve a prefix no live or uncleaned run holds, for the run of ``ledger``; the
    prefix. Held until ``ledger`` is removed (its teardown removed everything);
    otherwise until ``testbed clean`` removed what the ledger lists.

    Raises :class:`EmulationError` when no free prefix was found, after removing the
    ledger if nothing was recorded in it yet (a caller's ledger that already lists
    resources is the caller's to tear down).
    """
    root = Path(root) if root is not None else PREFIX_ROOT
    root.mkdir(parents=True, exist_ok=True)
    tried = []
    for prefix, _ in zip(candidates(), range(RESERVE_ATTEMPTS), strict=False):
        tried.append(prefix)
        path = _lock_path(prefix, root)
        fd = locks.create_locked(path, ledger.run_id, prefix=prefix,
                                 ledger=str(Path(ledger.path).resolve()))
        if fd is None:
            continue  # a live run's, or a killed run's not yet cleaned
        if any(name.startswith(prefix) for name in _interfaces()):
            path.unlink(missing_ok=True)  # something not of the harness uses it
            os.close(fd)
            continue
        ledger.on_removed(_Reservation(prefix, path, fd).release)
        return prefix
    if not ledger.open_entries():
        ledger.teardown()
    raise EmulationError(f"no free run prefix after {len(tried)} tries (last {tried[-1]}): "
                         f"every one is held in {root}; run `testbed clean` if runs crashed")


def reserved_by(prefix: str, root: Path | None = None) -> str | None:
    """The run holding ``prefix`` (its lock file's ``run``), or None if nobody does."""
    root = Path(root) if root is not None else PREFIX_ROOT
    try:
        return json.loads(_lock_path(prefix, root).read_text().splitlines()[0]).get("run")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def release_stale_prefixes(root: Path | None = None) -> list[str]:
    """Remove the lock files of prefixes whose run is gone *and* whose ledger no longer
    exists (cleaned); the prefixes freed. A prefix whose ledger is still there stays
    reserved: what that ledger lists may still carry its name."""
    root = Path(root) if root is not None else PREFIX_ROOT
    freed = []
    if not root.is_dir():
        return freed
    for path in sorted(root.glob("*.lock")):
        fd = locks.lock_if_free(path)
        if fd is None:
            continue  # a live run holds it (or it went meanwhile)
        try:
            try:
                ledger = json.loads(path.read_text().splitlines()[0]).get("ledger")
            except (OSError, ValueError, IndexError, AttributeError):
                ledger = None  # unreadable: a torn write of a run that died creating it
            if ledger is None or not Path(ledger).exists():
                path.unlink(missing_ok=True)
                freed.append(path.stem)
        finally:
            os.close(fd)
    return freed


# ---------------------------------------------------------------- interface names

#: Ports a Linux bridge may take: the kernel's limit is 1023 (BR_MAX_PORTS 1024, port 0
#: reserved); a switch with more links is built as a fabric of bridges (:class:`Fabric`).
BRIDGE_MAX_PORTS = 1000


@dataclass(frozen=True)
class Fabric:
    """One scenario switch built as a two-level tree of Linux bridges, because it has
    more links than one bridge takes: a ``root`` bridge joined to every leaf bridge by a
    veth trunk (``trunks[k]`` is ``(leaf end, root end)`` of leaf ``k``); the switch's
    links are spread over the leaves in link order, at most ``max_ports - 1`` per leaf.
    A tree has no loop, so no spanning tree is needed and every host reaches every
    other through at most three bridges."""

    root: str
    leaves: tuple[str, ...]
    trunks: tuple[tuple[str, str], ...]

    @property
    def bridges(self) -> tuple[str, ...]:
        return (self.root, *self.leaves)


@dataclass(frozen=True)
class InterfacePlan:
    """Every interface name a topology gets with one prefix.

    ``switches`` maps a scenario switch to its bridge name (the root bridge of a
    fabric); ``links`` holds, in the topology's link order, the interface names at each
    end (``<bridge>-e<port>`` on a switch, ``<host>-eth<port>`` in a host's namespace);
    ``attach`` the bridge each end is a port of (None for a host's end); ``fabrics`` the
    switches built as trees of bridges.
    """

    prefix: str
    switches: dict[str, str]
    links: tuple[tuple[str, str], ...]
    attach: tuple[tuple[str | None, str | None], ...] = ()
    fabrics: dict[str, Fabric] = field(default_factory=dict)

    @property
    def bridges(self) -> list[str]:
        """Every bridge to make: one per switch, a root and its leaves per fabric."""
        return [b for sw, name in self.switches.items()
                for b in (self.fabrics[sw].bridges if sw in self.fabrics else (name,))]

    @property
    def root_names(self) -> list[str]:
        """The names made in the root namespace: bridges, switch ports, trunks."""
        ports = [n for pair in self.links for n in pair if n.startswith(self.prefix)]
        trunks = [n for fabric in self.fabrics.values() for pair in fabric.trunks
                  for n in pair]
        return [*self.bridges, *ports, *trunks]


def plan_fabric(bridge: str, ports: int, max_ports: int) -> Fabric | None:
    """The fabric for a switch named ``bridge`` with ``ports`` links when one bridge of
    at most ``max_ports`` ports cannot hold them; None when it can."""
    if not isinstance(max_ports, int) or isinstance(max_ports, bool) or max_ports < 3:
        raise EmulationError(f"max_ports: expected an integer of at least 3 (a leaf "
                             f"bridge takes a host and its trunk), got {max_ports!r}")
    if ports <= max_ports:
        return None
    per_leaf = max_ports - 1  # one port of every leaf is its trunk
    count = -(-ports // per_leaf)
    if count > max_ports:
        raise EmulationError(f"switch bridge {bridge}: {ports} links need {count} leaf "
                             f"bridges, more than a root bridge of {max_ports} ports takes")
    leaves = tuple(f"{bridge}f{k}" for k in range(count))
    trunks = tuple((f"{leaf}-t", f"{bridge}-e{k}") for k, leaf in enumerate(leaves))
    for name in (*leaves, *(n for pair in trunks for n in pair)):
        _check_length(name, f"fabric of bridge {bridge!r}")
    return Fabric(root=bridge, leaves=leaves, trunks=trunks)


def interface_plan(topology: Topology, prefix: str,
                   max_ports: int | None = BRIDGE_MAX_PORTS) -> InterfacePlan:
    """Name every bridge and link end of ``topology``; raise :class:`EmulationError`
    naming the first interface longer than Linux's 15 characters. A switch with more
    than ``max_ports`` links becomes a :class:`Fabric` (None: never, e.g. for Open
    vSwitch bridges, which have no such limit)."""
    switches: dict[str, str] = {}
    for node in topology.nodes:
        if node.is_switch:
            switches[node.name] = f"{prefix}s{len(switches)}"
            _check_length(switches[node.name], f"bridge of switch {node.name!r}")
    degree: dict[str, int] = {}
    for link in topology.links:
        for end in (link.a, link.b):
            degree[end] = degree.get(end, 0) + 1
    fabrics: dict[str, Fabric] = {}
    if max_ports is not None:
        for switch, bridge in switches.items():
            fabric = plan_fabric(bridge, degree.get(switch, 0), max_ports)
            if fabric is not None:
                fabrics[switch] = fabric
    per_leaf = (max_ports or 0) - 1  # host ports of a fabric's leaf bridge
    ports: dict[str, int] = {}
    links = []
    attach = []
    for link in topology.links:
        pair: list[str] = []
        where: list[str | None] = []
        for end in (link.a, link.b):
            port = ports.get(end, 0)
            ports[end] = port + 1
            if end in fabrics:
                bridge = fabrics[end].leaves[port // per_leaf]
                pair.append(f"{bridge}-e{port % per_leaf}")
            elif end in switches:
                bridge = switches[end]
                pair.append(f"{bridge}-e{port}")
            else:
                bridge = None
                pair.append(f"{end}-eth{port}")
            where.append(bridge)
            _check_length(pair[-1], f"port {port} of node {end!r}, link {link.name}")
        links.append((pair[0], pair[1]))
        attach.append((where[0], where[1]))
    return InterfacePlan(prefix=prefix, switches=switches, links=tuple(links),
                         attach=tuple(attach), fabrics=fabrics)


def _check_length(name: str, what: str) -> None:
    if len(name) > IFNAMSIZ:
        raise EmulationError(
            f"topology: interface {name!r} ({what}) has {len(name)} characters; Linux "
            f"allows {IFNAMSIZ}: give that node fewer links or the topology fewer switches")


def check_absent(names: Iterable[str]) -> None:
    """Refuse to build when an interface of these names already exists in the root
    namespace: it is not this run's, and building would delete it."""
    present = set(_interfaces())
    taken = [name for name in names if name in present]
    if taken:
        raise EmulationError(
            f"interface {taken[0]} already exists ({len(taken)} of this run's names are "
            "taken) and is not this run's; nothing was built over it. Remove it, or run "
            "`testbed clean` if a crashed run left it")
