"""The fork server runs modules as services and reports their exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.emulation.launcher import start_launcher
from testbed.emulation.ledger import Ledger, is_running
from testbed.errors import EmulationError


@pytest.fixture
def launcher(tmp_path: Path):
    ledger = Ledger("launcher-test", root=tmp_path / "ledgers")
    client = start_launcher(ledger, tmp_path)
    yield client
    client.close()
    assert ledger.teardown() == []
    assert not is_running(client.pid, client.start)


def test_spawned_module_runs_with_its_arguments(launcher, tmp_path: Path):
    src, dst = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text('{"b": 1, "a": [1, 2]}')
    pid = launcher.spawn(
        None, "json.tool", ["--sort-keys", str(src), str(dst)], tmp_path / "child.log"
    )
    assert launcher.wait(pid, timeout=10) == 0
    assert json.loads(dst.read_text()) == {"a": [1, 2], "b": 1}


def test_failure_is_reported_with_its_traceback(launcher, tmp_path: Path):
    log = tmp_path / "bad.log"
    pid = launcher.spawn(None, "json.tool", [str(tmp_path / "missing.json")], log)
    assert launcher.wait(pid, timeout=10) not in (0, None)
    assert "missing.json" in log.read_text()


def test_bad_requests_get_errors_and_the_launcher_survives(launcher):
    with pytest.raises(EmulationError, match="unknown op"):
        launcher.request(op="explode")
    with pytest.raises(EmulationError, match="module"):
        launcher.request(op="spawn", module=3, log="/dev/null")
    assert launcher.request(op="ping")["ok"] is True
