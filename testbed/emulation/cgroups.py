"""CPU and memory limits for process-runtime services, through the kernel's cgroups.

One cgroup per limited node, under ``edge-testbed/<run>/`` in each controller
hierarchy (cgroup v1: ``cpu`` and ``memory``; cgroup v2: one unified folder). Each
folder is recorded in the run ledger so teardown removes it after its processes ended.
"""

from __future__ import annotations

import os
from pathlib import Path

from testbed.emulation.ledger import Ledger

CGROUP_ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000


def is_unified() -> bool:
    """True on a cgroup v2 (unified) machine."""
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def _mkdirs(path: Path, ledger: Ledger) -> None:
    """Create ``path`` and missing parents, recording each created folder."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        folder.mkdir()
        ledger.record("cgroup", path=str(folder))


def _enable_v2_controllers(path: Path) -> None:
    """Delegate cpu and memory down to ``path`` (cgroup v2 subtree control)."""
    rel = path.relative_to(CGROUP_ROOT)
    folder = CGROUP_ROOT
    for part in rel.parts:
        control = folder / "cgroup.subtree_control"
        for controller in ("+cpu", "+memory"):
            try:
                control.write_text(controller)
            except OSError:
                pass  # the controller may be absent or already enabled
        folder = folder / part


class NodeCgroup:
    """The cgroup(s) holding one node's service processes."""

    def __init__(self, ledger: Ledger, run_id: str, node: str,
                 cpu: float | None, memory_mb: int | None) -> None:
        self.paths: list[Path] = []
        rel = Path("edge-testbed") / run_id / node
        quota = None if cpu is None else max(1000, int(cpu * os.cpu_count() * CFS_PERIOD_US))
        if is_unified():
            path = CGROUP_ROOT / rel
            _mkdirs(path, ledger)
            _enable_v2_controllers(path)
            if quota is not None:
                (path / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
            if memory_mb is not None:
                (path / "memory.max").write_text(str(memory_mb * 2**20))
            self.paths.append(path)
            return
        if quota is not None:
            path = CGROUP_ROOT / "cpu" / rel
            _mkdirs(path, ledger)
            (path / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
            self.paths.append(path)
        if memory_mb is not None:
            path = CGROUP_ROOT / "memory" / rel
            _mkdirs(path, ledger)
            (path / "memory.limit_in_bytes").write_text(str(memory_mb * 2**20))
            self.paths.append(path)

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its pid into to join this node's limits."""
        return [str(p / "cgroup.procs") for p in self.paths]
