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


def test_client_death_mid_answer_ends_every_child(tmp_path: Path):
    """A harness killed while the launcher answers: the launcher ends its children
    (one the harness never recorded included) instead of dying of a broken pipe."""
    import os
    import signal
    import subprocess
    import sys

    from testbed.emulation.ledger import process_start_time
    from testbed.poll import wait_until

    ledger = Ledger("launcher-death", root=tmp_path / "ledgers")
    client = start_launcher(ledger, tmp_path)
    child = client.spawn(None, "nodes.cpu_load", ["--duty", "0.01"], tmp_path / "child.log")
    start = process_start_time(child)
    client.close()  # the dying harness below is the launcher's next client
    script = (f"import json, socket; s = socket.socket(socket.AF_UNIX); "
              f"s.connect({str(client.control)!r}); "
              f"s.sendall(json.dumps({{'op': 'wait', 'pid': {child}, 'timeout': 1}})"
              f".encode() + b'\\n'); print('sent', flush=True); "
              f"import time; time.sleep(60)")
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout.readline().strip() == "sent"
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
        wait_until(lambda: not is_running(client.pid, client.start), timeout=15)
        assert not is_running(child, start), "the launcher's child outlived it"
        assert "BrokenPipeError" not in (tmp_path / "launcher.log").read_text()
    finally:
        ledger.teardown()


def test_package_runs_its_main_submodule_with_its_file_as_argv0(launcher, tmp_path: Path):
    # unittest's __main__ names itself "python -m unittest" only when sys.argv[0] is its
    # own __main__.py file, as under ``python -m unittest``
    log = tmp_path / "unittest.log"
    pid = launcher.spawn(None, "unittest", ["--help"], log)
    assert launcher.wait(pid, timeout=10) == 0
    assert "python -m unittest" in log.read_text()


def test_unknown_module_is_refused_before_forking(launcher, tmp_path: Path):
    with pytest.raises(EmulationError, match="no_such_module_here"):
        launcher.spawn(None, "no_such_module_here", [], tmp_path / "x.log")
    assert launcher.request(op="ping")["ok"] is True


def test_a_package_that_raises_on_import_is_refused_and_the_launcher_survives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding a service module imports its parent package inside the launcher; what
    that package raises becomes the request's error instead of ending the launcher."""
    package = tmp_path / "lib" / "raising_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('broken on purpose')\n")
    (package / "svc.py").write_text("print('never')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    ledger = Ledger("launcher-raising", root=tmp_path / "ledgers")
    client = start_launcher(ledger, tmp_path)
    try:
        with pytest.raises(EmulationError, match="RuntimeError: broken on purpose"):
            client.spawn(None, "raising_package.svc", [], tmp_path / "x.log")
        assert client.request(op="ping")["ok"] is True
    finally:
        client.close()
        assert ledger.teardown() == []
