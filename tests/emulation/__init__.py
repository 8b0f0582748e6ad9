"""Emulation tests: real namespaces, links, processes and containers (root)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest


def require_docker() -> None:
    """Skip the calling test module unless it runs as root with Debian's dockerd."""
    if os.geteuid() != 0 or shutil.which("dockerd", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("needs root and dockerd", allow_module_level=True)


@contextmanager
def experiment_run(name: str, report: Path, options: Sequence[str] = ()) -> Iterator[Path]:
    """Run ``testbed experiment NAME`` at its small size as a researcher does, its report
    into ``report``; yields the results folder (under ``/tmp``, short enough for the
    cells' sockets), removed afterwards."""
    from testbed.cli import main

    out = Path(tempfile.mkdtemp(prefix="exp", dir="/tmp"))
    try:
        assert main(["experiment", name, *options, "--out", str(out),
                     "--report", str(report)]) == 0
        yield out
    finally:
        shutil.rmtree(out, ignore_errors=True)
