"""The run ledger removes what it recorded, newest first, and only that."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emulation import ledger as ledgermod
from testbed.emulation.ledger import Ledger, clean_stale, process_start_time, read_ledger


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_teardown_removes_in_reverse_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    order: list[str] = []
    monkeypatch.setitem(ledgermod.UNDO, "dir", lambda data: order.append(data["path"]))
    ledger = Ledger("t1", root=tmp_path)
    for name in ("a", "b", "c"):
        ledger.record("dir", path=name)
    assert ledger.teardown() == []
    assert order == ["c", "b", "a"]
    assert not ledger.path.exists()


def test_process_entry_kills_only_the_recorded_process(tmp_path: Path):
    proc = _sleeper()
    ledger = Ledger("t2", root=tmp_path)
    ledger.record_process(proc.pid)
    assert ledger.teardown() == []
    assert process_start_time(proc.pid) is None  # killed and reaped


def test_recycled_pid_is_not_signalled(tmp_path: Path):
    proc = _sleeper()
    ledger = Ledger("t3", root=tmp_path)
    entry = ledger.record_process(proc.pid)
    # Pretend the recorded process started at another time: it must be left alone.
    object.__setattr__(entry, "data", {**entry.data, "start": entry.data["start"] + 1})
    ledger._open[entry.seq] = entry
    assert ledger.teardown() == []
    assert proc.poll() is None
    proc.kill()
    proc.wait()


def test_forget_and_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    seen: list[str] = []
    monkeypatch.setitem(ledgermod.UNDO, "dir", lambda data: seen.append(data["path"]))
    ledger = Ledger("t4", root=tmp_path)
    kept = ledger.record("dir", path="kept")
    gone = ledger.record("dir", path="gone")
    ledger.forget(kept)
    ledger.release(gone)
    assert seen == ["gone"]
    _, entries = read_ledger(ledger.path)
    assert entries == []


def test_unknown_kind_is_refused(tmp_path: Path):
    ledger = Ledger("t5", root=tmp_path)
    with pytest.raises(KeyError):
        ledger.record("no-such-kind", x=1)


def test_clean_stale_undoes_a_killed_owner(tmp_path: Path):
    """A run killed with SIGKILL leaves its ledger; ``clean`` removes what it lists."""
    victim = _sleeper()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = textwrap.dedent(f"""
        import os, signal
        from testbed.emulation.ledger import Ledger
        ledger = Ledger("crashed", root={str(tmp_path)!r})
        ledger.record_process({victim.pid})
        ledger.record("dir", path={str(scratch)!r})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    owner = subprocess.run([sys.executable, "-c", script], check=False)
    assert owner.returncode == -9
    live = Ledger("live", root=tmp_path)  # a running run's ledger must not be touched
    other = _sleeper()
    live.record_process(other.pid)
    report = clean_stale(tmp_path)
    assert report == {"crashed": []}
    assert process_start_time(victim.pid) is None
    assert not scratch.exists()
    assert other.poll() is None and process_start_time(other.pid) is not None
    assert json.loads(live.path.read_text().splitlines()[0])["run"] == "live"
    live.teardown()
    assert process_start_time(other.pid) is None


LEADER = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN); time.sleep(60)"])
    print(child.pid, flush=True)
    time.sleep(60)
""")


def test_group_entry_ends_the_group_of_a_dead_leader(tmp_path: Path):
    """The launcher's case: its group outlives it, with a child nobody recorded (one
    that even ignores SIGTERM); the group entry still ends it."""
    import os
    import signal

    from testbed.emulation.ledger import is_running
    from testbed.poll import wait_until

    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    ledger = Ledger("group", root=tmp_path)
    ledger.record_process(leader.pid, group=True, grace=0.2)
    child = int(leader.stdout.readline())
    child_start = process_start_time(child)
    try:
        leader.kill()
        leader.wait()
        assert is_running(child, child_start)  # orphaned, still in the dead leader's group
        assert ledger.teardown() == []
        wait_until(lambda: not is_running(child, child_start), timeout=5,
                   what="the unrecorded child to end")
    finally:
        if is_running(child, child_start):
            os.kill(child, signal.SIGKILL)


def test_phase_syncs_once_and_keeps_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ledger = Ledger("phased", root=tmp_path)
    syncs: list[int] = []
    real_fsync = ledgermod.os.fsync
    monkeypatch.setattr(ledgermod.os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd)))
    with ledger.phase():
        with ledger.phase():  # nested: only the outermost syncs
            for i in range(50):
                ledger.record("dir", path=str(tmp_path / f"d{i}"))
        assert len(read_ledger(ledger.path)[1]) == 50  # in the file before the phase ends
    assert len(syncs) == 1
    ledger.record("dir", path=str(tmp_path / "outside"))  # outside a phase: synced at once
    assert len(syncs) == 2
    assert ledger.teardown() == []
    assert len(syncs) == 3  # the teardown's undone lines: one phase


def test_run_killed_mid_phase_leaves_a_ledger_clean_removes(tmp_path: Path):
    victims = [_sleeper() for _ in range(3)]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = textwrap.dedent(f"""
        import os, signal
        from testbed.emulation.ledger import Ledger
        ledger = Ledger("crashed-phase", root={str(tmp_path)!r})
        with ledger.phase():
            ledger.record("dir", path={str(scratch)!r})
            for pid in {[v.pid for v in victims]!r}:
                ledger.record_process(pid)
            # an intent whose interface was never made: clean must pass over it
            ledger.intend_interface("link", "tbtnever0", "tbtnev")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    owner = subprocess.run([sys.executable, "-c", script], check=False)
    assert owner.returncode == -9
    report = clean_stale(tmp_path)
    assert report == {"crashed-phase": []}
    for victim in victims:
        victim.wait(timeout=10)
        assert process_start_time(victim.pid) is None
    assert not scratch.exists()
    assert not (tmp_path / "crashed-phase.jsonl").exists()
