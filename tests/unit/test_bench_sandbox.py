"""The benchmarks' sandbox reports only what its own run left behind."""

from __future__ import annotations

import os
import subprocess

from testbed.poll import wait_until
from tests.bench import Sandbox


def _in_new_netns() -> subprocess.Popen:
    """A process in a network namespace of its own (its inode stands for a host's)."""
    return subprocess.Popen(["unshare", "-n", "sleep", "60"])


def _netns_inode(pid: int) -> int:
    """The namespace inode of ``pid`` once it differs from this process's (``unshare``
    execs its command after entering the new namespace)."""
    mine = os.stat("/proc/self/ns/net").st_ino
    return wait_until(lambda: (inode := os.stat(f"/proc/{pid}/ns/net").st_ino) != mine
                      and inode, timeout=10.0, what=f"process {pid} in its own namespace")


def test_namespace_inode_reused_after_teardown_is_not_the_runs():
    # A namespace's inode is reused once the namespace is freed: a process started after
    # the snapshot that holds an inode the run once saw is another run's host.
    with Sandbox("verify-reuse") as sandbox:
        sandbox.snapshot()
        assert sandbox.teardown() == []
        later = _in_new_netns()
        try:
            sandbox._namespaces.add(_netns_inode(later.pid))
            assert sandbox.verify() == []
        finally:
            later.kill()
            later.wait()


def test_process_older_than_teardown_in_the_runs_namespace_is_reported():
    leaked = _in_new_netns()
    try:
        inode = _netns_inode(leaked.pid)
        with Sandbox("verify-leak") as sandbox:
            sandbox.snapshot()
            sandbox._namespaces.add(inode)  # as if snapshot() had seen the run's host
            assert sandbox.teardown() == []
            problems = sandbox.verify()
        assert any(str(leaked.pid) in p and "namespaces" in p for p in problems)
    finally:
        leaked.kill()
        leaked.wait()
