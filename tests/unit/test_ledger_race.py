"""``clean`` racing live runs: it removes only what stopped runs left, never a live run's.

Real owner processes create ledgers while a ``clean`` loops over the same folder; half of
the runs end at once (their ledgers vanish while ``clean`` reads), the others stay live.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from testbed.emulation.ledger import clean_stale
from testbed.poll import wait_until

OWNER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from testbed.emulation.ledger import Ledger
    root, scratch, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    kept = []
    for i in range(n):
        folder = scratch / f"{os.getpid()}-{i}"
        folder.mkdir()
        ledger = Ledger(f"r{os.getpid()}-{i}", root=root)
        ledger.record("dir", path=str(folder))
        if i % 2:
            ledger.teardown()  # a run that ends at once: its ledger vanishes under clean
        else:
            kept.append((ledger, folder))
    lost = [str(f) for ledger, f in kept if not ledger.path.exists() or not f.exists()]
    for ledger, _ in kept:
        ledger.teardown()
    print(" ".join(lost))
    sys.exit(1 if lost else 0)
""")


def test_looping_clean_never_removes_a_live_run(tmp_path: Path) -> None:
    root, scratch = tmp_path / "ledgers", tmp_path / "scratch"
    root.mkdir()
    scratch.mkdir()
    failures: list[str] = []
    done = threading.Event()
    rounds = [0]

    def cleaner() -> None:
        while not done.is_set():
            try:
                clean_stale(root)
            except Exception as exc:  # noqa: BLE001 - the assertion below reports it
                failures.append(f"{type(exc).__name__}: {exc}")
            rounds[0] += 1

    thread = threading.Thread(target=cleaner)
    thread.start()
    try:
        wait_until(lambda: rounds[0] > 0, timeout=10)
        owners = [subprocess.Popen([sys.executable, "-c", OWNER, str(root), str(scratch), "100"],
                                   stdout=subprocess.PIPE, text=True) for _ in range(3)]
        outputs = [(p.communicate(timeout=120)[0], p.returncode) for p in owners]
    finally:
        done.set()
        thread.join()
    assert all(code == 0 for _, code in outputs), outputs  # 150 live runs, none touched
    assert failures == [], failures[:3]
    assert rounds[0] > 1
    assert list(root.glob("*.jsonl")) == [] and list(scratch.iterdir()) == []


def test_zombie_owner_counts_as_ended(tmp_path: Path) -> None:
    """An owner that exited but is not yet reaped by its parent is a stopped run."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = textwrap.dedent(f"""
        from testbed.emulation.ledger import Ledger
        Ledger("zombie", root={str(tmp_path / 'ledgers')!r}).record("dir", path={str(scratch)!r})
    """)
    owner = subprocess.Popen([sys.executable, "-c", script])
    try:
        def state() -> str:
            return Path(f"/proc/{owner.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

        wait_until(lambda: state() == "Z", timeout=30)  # exited, not reaped: a zombie
        assert clean_stale(tmp_path / "ledgers") == {"zombie": []}
        assert not scratch.exists()
    finally:
        owner.wait()
