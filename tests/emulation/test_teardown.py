"""Everything a run creates is removed on success, on an exception, on SIGINT and SIGTERM.

Each test reads the run's ledger while the run is live (what it created), lets the run
end the way under test, and then checks every listed process, interface, bridge and
cgroup is gone and no ledger is left for ``testbed clean``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation.ledger import Entry, is_running, read_ledger
from testbed.poll import wait_until
from testbed.replays import RunIncomplete
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario
from testbed.systems.offloading.driver import DispatchDriver
from tests.emulation.live_run import PROJECT, start_continuum

pytestmark = pytest.mark.emulation


def _live_entries(ledger_root: Path) -> list[Entry]:
    paths = list(ledger_root.glob("*.jsonl"))
    assert len(paths) == 1, paths
    return read_ledger(paths[0])[1]


def _assert_gone(entries: list[Entry]) -> None:
    kinds = {e.kind for e in entries}
    assert {"process", "link", "bridge"} <= kinds, kinds
    for entry in entries:
        data = entry.data
        if entry.kind == "process":
            assert not is_running(data["pid"], data["start"]), data
        elif entry.kind in ("link", "bridge"):
            assert not Path(f"/sys/class/net/{data['name']}").exists(), data
        elif entry.kind in ("cgroup", "dir"):
            assert not Path(data["path"]).exists(), data


def test_success_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Entry] = []
    real = DispatchDriver.replay

    def spy(self, topo, *args, **kwargs):
        seen.extend(read_ledger(topo.infra.ledger.path)[1])
        return real(self, topo, *args, **kwargs)

    monkeypatch.setattr(DispatchDriver, "replay", spy)
    scenario = load_scenario("continuum").with_overrides(duration=4, policies=["jsq"])
    run_scenario(scenario, out=tmp_path / "run", progress=lambda _l: None,
                 ledger_root=tmp_path / "ledgers")
    _assert_gone(seen)
    assert list((tmp_path / "ledgers").iterdir()) == []


def test_exception_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Entry] = []

    def failing(self, topo, *args, **kwargs):
        seen.extend(read_ledger(topo.infra.ledger.path)[1])
        raise RuntimeError("policy blew up")

    monkeypatch.setattr(DispatchDriver, "replay", failing)
    scenario = load_scenario("continuum").with_overrides(duration=4)
    with pytest.raises(RunIncomplete):
        run_scenario(scenario, out=tmp_path / "run", progress=lambda _l: None,
                     ledger_root=tmp_path / "ledgers")
    failed = json.loads((tmp_path / "run" / "metadata.json").read_text())["failed"]
    assert failed and all("blew up" in f["error"] for f in failed)
    _assert_gone(seen)
    assert list((tmp_path / "ledgers").iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_leaves_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    ledgers = tmp_path / "ledgers"
    proc = start_continuum(tmp_path / "run", ledgers)
    try:
        entries = _live_entries(ledgers)
        deadline = time.monotonic() + 30
        while not list((tmp_path / "run" / "work").glob("rows-*.jsonl")):
            assert time.monotonic() < deadline, "dispatchers never started"
            time.sleep(0.05)
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, rest  # 130 for SIGINT, 143 for SIGTERM
    assert "stopped by" in rest
    _assert_gone(entries)
    assert list(ledgers.iterdir()) == []


def test_second_ctrl_c_never_skips_teardown(tmp_path: Path) -> None:
    """SIGINTs that arrive while the teardown runs are acknowledged, never obeyed."""
    ledgers = tmp_path / "ledgers"
    proc = start_continuum(tmp_path / "run", ledgers)
    try:
        entries = _live_entries(ledgers)
        (path,) = ledgers.glob("*.jsonl")
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30
        while path.exists() and '"undone"' not in path.read_text():
            assert time.monotonic() < deadline, "teardown never began"
            time.sleep(0.005)
        for _ in range(3):  # impatient user: Ctrl-C again while teardown runs
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest
    assert "stopped by SIGINT" in rest
    _assert_gone(entries)
    assert list(ledgers.iterdir()) == []


def _spawn_unrecorded(launcher_pid: int, log: Path) -> int:
    """A service started through the run's launcher but never written in its ledger
    (what a harness killed between the launcher's answer and its record leaves)."""
    import socket

    argv = (Path(f"/proc/{launcher_pid}/cmdline").read_bytes().decode().split("\0"))
    control = argv[argv.index("--control") + 1]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(control)
        stream = sock.makefile("rwb")
        stream.write(json.dumps({"op": "spawn", "module": "nodes.cpu_load",
                                 "argv": ["--duty", "0.01"], "log": str(log)}).encode()
                     + b"\n")
        stream.flush()
        return json.loads(stream.readline())["pid"]


def test_sigkill_then_clean_leaves_nothing(tmp_path: Path) -> None:
    """`testbed run` SIGKILLed mid-run, its launcher dead too (as an OOM kill leaves
    it): `testbed clean` ends every process of the run, the unrecorded child included,
    and removes its interfaces, its ledger and its prefix reservation."""
    from testbed.emulation.ledger import process_start_time

    ledgers = tmp_path / "ledgers"
    proc = start_continuum(tmp_path / "run", ledgers)
    entries = _live_entries(ledgers)
    try:
        (launcher,) = [e.data for e in entries if e.data.get("what") == "service launcher"]
        prefix = next(e.data["name"] for e in entries if e.kind == "bridge")[:6]
        proc.kill()
        proc.wait()
        child = _spawn_unrecorded(launcher["pid"], tmp_path / "unrecorded.log")
        child_start = process_start_time(child)
        assert is_running(child, child_start)
        os.kill(launcher["pid"], signal.SIGKILL)  # nobody is left to end the child
        wait_until(lambda: not is_running(launcher["pid"], launcher["start"]), timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    clean = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], cwd=PROJECT,
                           env={**os.environ, "TESTBED_LEDGER_ROOT": str(ledgers)},
                           capture_output=True, text=True, timeout=120, check=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert not is_running(child, child_start), "the unrecorded child survived clean"
    _assert_gone(entries)
    assert [n for n in os.listdir("/sys/class/net") if n.startswith(prefix)] == []
    assert list(ledgers.iterdir()) == []
    from testbed.emulation.names import PREFIX_ROOT

    assert not (PREFIX_ROOT / f"{prefix}.lock").exists()
    assert prefix in clean.stdout  # "run prefixes freed: ..."
