"""A child process that ends with its parent: ``PR_SET_PDEATHSIG``.

A study's emulation cell runs as a ``testbed run`` child of a Dask worker. When the
study is interrupted, the cluster ends its workers, but a child the kernel does not tie
to its parent would keep emulating (and holding the host's network, CPU and lock). The
cell therefore sets ``TESTBED_DIE_WITH_PARENT`` in the child's environment, and the child
asks the kernel, first thing, for SIGINT when its parent dies: the same signal as Ctrl-C,
so its teardown runs and removes what it built.
"""

from __future__ import annotations

import ctypes
import os
import signal

ENV = "TESTBED_DIE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None = None) -> bool:
    """When ``ENV`` is set: deliver SIGINT to this process when its parent dies; returns
    whether it was asked. If the parent is already gone (``os.getppid()`` no longer the
    one recorded in ``ENV``, or ``expected_parent``), SIGINT is raised at once."""
    value = os.environ.get(ENV)
    if not value:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0) != 0:
        return False
    parent = expected_parent if expected_parent is not None else (
        int(value) if value.isdigit() else None)
    if parent is not None and os.getppid() != parent:  # died before the request took
        os.kill(os.getpid(), signal.SIGINT)
    return True
