"""The run secret's value stays out of everything a run leaves or shows (root only).

A real ``testbed run`` of the offloading continuum, watched by
:mod:`tests.emulation.secret_watch`; the Armada run (whose services register, deploy and
present the secret to each other) is watched the same way by
``tests/emulation/test_armada_run.py``, which checks its failover on that one run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.emulation.secret_watch import assert_secret_kept, watched_run

pytestmark = pytest.mark.emulation


def test_the_run_secret_reaches_no_file_log_or_command_line(tmp_path: Path) -> None:
    seen, out = watched_run(tmp_path, "continuum", "--duration", "40", "--policies", "jsq")
    assert_secret_kept(seen, out)
