"""Machine-wide locks say whom they wait for; a lock file is never seen unlocked.

Real ``flock`` locks between real processes, on temporary files; no root needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emulation.docker_engine import _acquire_lock, _data_root_free

WAITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from testbed.emulation.docker_engine import _acquire_lock
    _acquire_lock(Path(sys.argv[1]), 20, "second-run")
    print("got it", flush=True)
""")


def test_second_docker_run_says_what_it_waits_for(tmp_path: Path) -> None:
    data_root = tmp_path / "docker"
    held = _acquire_lock(data_root, 1, "first-run")
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(data_root)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = waiter.stderr.readline()  # printed before it starts waiting
        assert not _data_root_free(data_root)
    finally:
        os.close(held)
        out, rest = waiter.communicate(timeout=30)
    assert line.startswith("testbed: waiting up to 20 s for the Docker data root "
                           f"{data_root}, in use by run first-run (pid {os.getpid()})"), line
    assert out == "got it\n" and waiter.returncode == 0, rest
    assert rest == ""  # one line, no more
    assert _data_root_free(data_root)


def test_busy_lock_without_wait_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    from testbed.emulation import locks

    path = tmp_path / "thing.lock"
    held = locks.acquire(path, "holder-run", "the thing")
    try:
        with pytest.raises(locks.LockBusy) as info:
            locks.acquire(path, "other-run", "the thing", hint="try later")
        assert str(info.value) == (f"the thing is in use by run holder-run (pid {os.getpid()}) "
                                   f"(lock {path}); try later")
    finally:
        os.close(held)
    os.close(locks.acquire(path, "other-run", "the thing"))  # free once released


def test_created_lock_file_is_locked_and_exclusive(tmp_path: Path) -> None:
    from testbed.emulation import locks

    path = tmp_path / "name.lock"
    fd = locks.create_locked(path, "maker", note="x")
    assert fd is not None
    try:
        assert locks.create_locked(path, "second") is None  # the name is taken
        assert not locks.is_free(path)
        assert locks.holder(path) == f"run maker (pid {os.getpid()})"
        assert list(tmp_path.iterdir()) == [path]  # no temporary file left
    finally:
        os.close(fd)
    assert locks.is_free(path)
    probe = locks.lock_if_free(path)
    assert probe is not None
    os.close(probe)


def test_holder_waits_for_the_line_of_a_holder_that_just_took_the_lock(tmp_path: Path) -> None:
    """Between a holder's flock and its line the file is empty, or names an ended
    holder: the busy message must still name the live one once it has written."""
    import threading

    from testbed.emulation import locks

    path = tmp_path / "thing.lock"
    path.write_text('{"run": "ended-run", "pid": 999999999, "since": 0}\n')  # stale line
    writer = threading.Timer(0.2, lambda: path.write_text(
        json.dumps({"run": "live-run", "pid": os.getpid(), "since": 1}) + "\n"))
    writer.start()
    try:
        assert locks.holder(path) == f"run live-run (pid {os.getpid()})"
    finally:
        writer.join()
    path.write_text("")
    assert locks.holder(path, wait_s=0.05) == "unknown"  # nobody ever wrote: bounded wait
