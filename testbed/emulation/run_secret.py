"""The run secret on disk: where an emulation run keeps the credential its services check.

Each run makes a fresh secret (:func:`nodes.secret.make_secret`) and writes it to
``SECRET_ROOT/<prefix>/secret``: the folder is 0700 and the file 0600, both root's, on a
tmpfs, outside every results folder. Services are given the file's path in
``TESTBED_SECRET_FILE`` (never the value, never in argv); a Docker node sees the folder
through a read-only bind mount at the same path. The folder is a ledger entry, so the
teardown (or ``testbed clean`` after a crash) removes it with the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nodes.secret import SECRET_ENV, RunSecret, make_secret, write_secret_file
from testbed.emulation.ledger import Ledger

SECRET_ROOT = Path(os.environ.get("TESTBED_SECRET_ROOT", "/run/edge-testbed/secrets"))


@dataclass(frozen=True)
class SecretFile:
    """A run's secret and the file that holds it."""

    secret: RunSecret
    path: Path

    @property
    def folder(self) -> Path:
        """The folder holding the file (what a container mounts)."""
        return self.path.parent

    def env(self) -> dict[str, str]:
        """The environment that hands the secret to a service."""
        return {SECRET_ENV: str(self.path)}


def start_run_secret(ledger: Ledger, prefix: str, root: Path | None = None) -> SecretFile:
    """Make the run's secret and its file, recorded in ``ledger`` before it is written."""
    root = SECRET_ROOT if root is None else root
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    folder = root / prefix
    ledger.record("dir", path=str(folder))
    folder.mkdir(mode=0o700)
    secret = make_secret()
    return SecretFile(secret, write_secret_file(folder / "secret", secret))
