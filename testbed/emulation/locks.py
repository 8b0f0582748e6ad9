"""Machine-wide ``flock`` locks the runs of this harness share, with who holds them.

A lock is a file whose descriptor a live process holds ``flock``-ed; the kernel drops it
when that process (and every process it passed the descriptor to) is gone, so a killed
run never leaves a lock behind. The holder writes one JSON line into the file (run,
pid, since when), so a run that meets a taken lock can say whom it waits for.

* :func:`acquire` takes an existing-or-new lock file: at once, or waiting up to a
  timeout and printing one line that says what it waits for; with no wait it fails at
  once with one line naming the holder (:class:`LockBusy`).
* :func:`create_locked` makes a *new* lock file that is locked before it is visible
  (a temporary file, locked, then linked into place), or returns ``None`` if that name
  exists: what reserves a run's name prefix.
* :func:`is_free` probes a lock without keeping it.

Descriptors are close-on-exec, so programs the harness starts never inherit a lock
unless they are handed it on purpose (``pass_fds``).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from testbed.errors import EmulationError

DEFAULT_HINT = "wait for that run to end"


class LockBusy(EmulationError):
    """Another live process holds the lock (the message names it)."""


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _write_holder(fd: int, run: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps({"run": run, "pid": os.getpid(), "since": time.time()})
                   + "\n").encode(), 0)


#: How long :func:`holder` waits for a new holder to write its line.
HOLDER_WAIT_S = 1.0


def _holder_line(path: Path) -> tuple[str, int] | None:
    """The (run, pid) the lock file's first line names, if it names one."""
    try:
        info = json.loads(Path(path).read_text().splitlines()[0])
        return str(info["run"]), int(info["pid"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(path: Path, wait_s: float = HOLDER_WAIT_S) -> str:
    """Who holds (or last held) the lock ``path``: ``run R (pid N)``, or ``unknown``.

    A holder writes its line just after it takes the lock, so a run that meets the lock
    in between finds the file empty or still naming an ended holder: it waits (up to
    ``wait_s``) for a line naming a live process before settling for what it found.
    """
    deadline = time.monotonic() + wait_s
    while True:
        found = _holder_line(path)
        if (found is not None and _alive(found[1])) or time.monotonic() >= deadline:
            return "unknown" if found is None else f"run {found[0]} (pid {found[1]})"
        time.sleep(0.01)


def say(line: str) -> None:
    """The default way a waiting lock tells the user: one line on stderr."""
    print(f"testbed: {line}", file=sys.stderr, flush=True)


def acquire(path: Path, run: str, what: str, timeout: float = 0.0,
            tell: Callable[[str], None] = say, hint: str = DEFAULT_HINT) -> int:
    """Lock ``path`` for ``run``; the locked descriptor (close it to release).

    ``what`` names the guarded thing in messages ("the Docker data root /var/..."),
    ``hint`` what the user can do about a busy lock.
    When another process holds it: with ``timeout`` 0 raise :class:`LockBusy` at once;
    otherwise ``tell`` one line saying what this run waits for and for how long, then
    wait, and raise :class:`LockBusy` if it is still held after ``timeout`` seconds.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not _try(fd):
            if timeout <= 0:
                raise LockBusy(f"{what} is in use by {holder(path)} (lock {path}); {hint}")
            tell(f"waiting up to {timeout:g} s for {what}, in use by {holder(path)} "
                 f"(lock {path})")
            deadline = time.monotonic() + timeout
            while not _try(fd):
                if time.monotonic() >= deadline:
                    raise LockBusy(f"{what} is still in use by {holder(path)} after "
                                   f"{timeout:g} s (lock {path}); {hint}")
                time.sleep(0.05)
        _write_holder(fd, run)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_locked(path: Path, run: str, **extra: object) -> int | None:
    """Create the lock file ``path`` already locked for ``run``; its descriptor, or
    ``None`` when ``path`` exists (someone else's, live or not yet cleaned).

    The file is written and locked under a temporary name and then hard-linked into
    place, so no other process ever sees it unlocked or empty. ``extra`` is stored in
    the holder line (e.g. which ledger the reservation belongs to).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh inode: nobody else can hold it
        os.write(fd, (json.dumps({"run": run, "pid": os.getpid(), "since": time.time(),
                                  **extra}) + "\n").encode())
        os.fsync(fd)
        os.link(tmp, path)
    except FileExistsError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return fd


def lock_if_free(path: Path) -> int | None:
    """The lock on the existing file ``path`` if nobody holds it (its descriptor, still
    naming the file at ``path``), else ``None`` (held, or the file is gone)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    if _try(fd):
        try:  # the holder may have removed and someone re-created it meanwhile
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
    os.close(fd)
    return None


def is_free(path: Path) -> bool:
    """True when nobody holds the lock ``path`` right now (or it does not exist)."""
    if not Path(path).exists():
        return True
    fd = lock_if_free(path)
    if fd is None:
        return not Path(path).exists()
    os.close(fd)  # closing drops the probe lock too
    return True
