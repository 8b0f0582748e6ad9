"""Emulation tests: real namespaces, links, processes and containers (root)."""

from __future__ import annotations

import os
import shutil

import pytest


def require_docker() -> None:
    """Skip the calling test module unless it runs as root with Debian's dockerd."""
    if os.geteuid() != 0 or shutil.which("dockerd", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("needs root and dockerd", allow_module_level=True)
