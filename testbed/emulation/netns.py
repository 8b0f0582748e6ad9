"""Entering another process's network namespace from Python (3.11 has no ``os.setns``)."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    """Move the calling thread into the namespace behind ``fd``."""
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def enter_netns_of(pid: int) -> None:
    """Move the calling thread into the network namespace of process ``pid``."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        setns(fd)
    finally:
        os.close(fd)
