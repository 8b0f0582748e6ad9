"""What this machine and this process can hold: memory, read from the kernel.

The run limits (:mod:`testbed.limits`) and the scenario loader's node memory check
compare a scenario's needs with these numbers, so a run that cannot fit is refused
before anything is built instead of dying in an allocation or the OOM killer.

``available`` is the least of three headrooms, each only where it applies:

* ``MemAvailable`` of ``/proc/meminfo`` (what the kernel can give without swapping);
* the memory limit of this process's cgroup and of every ancestor (v1
  ``memory.limit_in_bytes`` minus ``memory.usage_in_bytes``, v2 ``memory.max`` minus
  ``memory.current``), as a container or ``systemd-run -p MemoryMax=`` sets it;
* the address-space rlimit (``ulimit -v``, ``prlimit --as``) minus this process's
  ``VmSize``.

Reading is pure (no imports beyond the standard library); a file that cannot be read
counts as no limit.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
MIB = 2**20
_UNLIMITED = 2**60  # cgroup v1 writes 2^63 - page size for "no limit"


@dataclass(frozen=True)
class Memory:
    """Memory in bytes: the machine's ``total`` and what this process may still use."""

    total: int
    available: int
    #: which headroom ``available`` is (``MemAvailable``, ``cgroup memory limit``,
    #: ``address-space limit``)
    bound_by: str = "MemAvailable"


def _meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes by field name (empty if unreadable)."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def _read_int(path: Path) -> int | None:
    """An integer file of the cgroup tree (``max`` and unreadable files: ``None``)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_headroom() -> int | None:
    """The least limit-minus-usage over this process's memory cgroup and its ancestors."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            root, limit_name, usage_name = (Path("/sys/fs/cgroup/memory"),
                                            "memory.limit_in_bytes", "memory.usage_in_bytes")
        elif controllers == "":
            root, limit_name, usage_name = Path("/sys/fs/cgroup"), "memory.max", "memory.current"
        else:
            continue
        here = Path(path)
        while True:
            folder = root / str(here).lstrip("/")
            limit = _read_int(folder / limit_name)
            if limit is not None and limit < _UNLIMITED:
                found.append(max(0, limit - (_read_int(folder / usage_name) or 0)))
            if here == here.parent:
                break
            here = here.parent
    return min(found) if found else None


def _address_space_headroom() -> int | None:
    """The address-space rlimit minus this process's virtual size, if a limit is set."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    size = 0
    try:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                size = int(line.split()[1]) * 1024
    except OSError:
        pass
    return max(0, soft - size)


def memory() -> Memory:
    """This machine's memory and what this process may still use of it (read now)."""
    info = _meminfo()
    total = info.get("MemTotal", 0)
    candidates = [(info.get("MemAvailable", total), "MemAvailable")]
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        candidates.append((cgroup, "cgroup memory limit"))
    address = _address_space_headroom()
    if address is not None:
        candidates.append((address, "address-space limit"))
    available, bound_by = min(candidates, key=lambda c: c[0])
    return Memory(total=total, available=available, bound_by=bound_by)


def process_room() -> int | None:
    """How many more processes the kernel can give out: the least of ``pid_max`` and
    ``threads-max`` minus the threads that exist now (``/proc/loadavg``), and for an
    ordinary user ``ulimit -u`` (root is not held to it). ``None``: unknown."""
    limits: list[int] = []
    for name in ("pid_max", "threads-max"):
        value = _read_int(Path("/proc/sys/kernel") / name)
        if value is not None:
            limits.append(value)
    if not limits:
        return None
    try:
        existing = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        existing = 0
    room = min(limits) - existing
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if not is_root() and soft != resource.RLIM_INFINITY:
        room = min(room, soft - existing)  # an approximation: ulimit -u counts the user's
    return max(0, room)


def total_memory() -> int:
    """This machine's memory in bytes (``MemTotal``; 0 if unknown)."""
    return _meminfo().get("MemTotal", 0)


def is_root() -> bool:
    """Whether this process runs as root (emulation, calibration and cleaning need it)."""
    return os.geteuid() == 0
