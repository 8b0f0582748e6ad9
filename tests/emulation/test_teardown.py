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
from testbed.replays import RunIncomplete
from testbed.runner import run_scenario
from testbed.scenario.loader import load_scenario
from testbed.systems.offloading.driver import DispatchDriver

pytestmark = pytest.mark.emulation
PROJECT = Path(__file__).resolve().parents[2]


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
    env = {**os.environ, "TESTBED_LEDGER_ROOT": str(ledgers)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", "continuum", "--duration", "400",
         "--out", str(tmp_path / "run")],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "services answering" in line:
                break
        else:
            pytest.fail("run ended before its services answered:\n" + "".join(lines))
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
    env = {**os.environ, "TESTBED_LEDGER_ROOT": str(ledgers)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", "continuum", "--duration", "400",
         "--out", str(tmp_path / "run")],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "services answering" in line:
                break
        else:
            pytest.fail("run ended before its services answered:\n" + "".join(lines))
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
