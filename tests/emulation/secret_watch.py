"""Watching a real ``testbed run`` for its secret (root only), for the tests that check
the run secret's value stays out of everything a run leaves or shows.

:func:`watched_run` learns the secret while the run is live: when its services answer,
the ``testbed`` process is paused (SIGSTOP, so its teardown cannot start meanwhile), the
secret folder is found through the run's ledger and its file read, then the run goes on.
Meanwhile a watcher reads the command line of every process on the machine. Afterwards
:func:`assert_secret_kept` checks that the value is in no file of the results folder
(byte search through every file, logs and ``metadata.json`` included), on no command
line seen while the run lived, not in the ledger and not in the command's output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import pytest

from testbed.emulation.ledger import clean_stale
from testbed.emulation.run_secret import SECRET_ROOT

PROJECT = Path(__file__).resolve().parents[2]
SCAN_EVERY_S = 0.05


@dataclass
class CmdlineWatch:
    """Every ``(pid, parent pid, command line)`` seen on the machine while it runs."""

    seen: set[tuple[int, int, bytes]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def scan(self) -> None:
        """Read every live process's command line once."""
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
                ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            self.seen.add((int(name), ppid, cmdline))

    def __enter__(self) -> Self:
        def loop() -> None:
            while not self._stop.wait(SCAN_EVERY_S):
                self.scan()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def tree(self, root: int) -> list[bytes]:
        """The command lines of ``root`` and every descendant seen."""
        children: dict[int, list[tuple[int, bytes]]] = {}
        for pid, ppid, cmdline in self.seen:
            children.setdefault(ppid, []).append((pid, cmdline))
        found, todo, visited = [], [root], set()
        while todo:
            pid = todo.pop()
            if pid in visited:
                continue
            visited.add(pid)
            for child, cmdline in children.get(pid, []):
                found.append(cmdline)
                todo.append(child)
        return found


@dataclass
class Observed:
    """What one watched run showed."""

    secret: bytes
    secret_folder: Path
    ledger_text: bytes
    output: str
    returncode: int
    pid: int
    watch: CmdlineWatch


def _live_secret(ledgers: Path) -> tuple[bytes, Path, bytes]:
    """The run's secret, its folder (from the ledger's entry under ``SECRET_ROOT``) and
    the ledger's text, read while the run is paused."""
    (ledger,) = ledgers.glob("*.jsonl")
    text = ledger.read_bytes()
    entries = [json.loads(line) for line in text.splitlines()[1:]]
    folders = [Path(e["data"]["path"]) for e in entries
               if e.get("kind") == "dir" and Path(e["data"]["path"]).parent == SECRET_ROOT]
    assert len(folders) == 1, f"expected one secret folder in the ledger, found {folders}"
    return (folders[0] / "secret").read_bytes().strip(), folders[0], text


def watched_run(tmp_path: Path, *args: str) -> tuple[Observed, Path]:
    """``testbed run ARGS --out tmp_path/run`` under a command-line watch, its secret
    read while it is live; what it showed, and its results folder."""
    ledgers, out = tmp_path / "ledgers", tmp_path / "run"
    env = {**os.environ, "TESTBED_LEDGER_ROOT": str(ledgers)}
    with CmdlineWatch() as watch:
        proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", *args,
                                 "--out", str(out)], cwd=PROJECT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        lines: list[bytes] = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if b"services answering" in line:
                    break
            else:
                proc.wait()
                pytest.fail("run ended before its services answered:\n"
                            + b"".join(lines).decode(errors="replace"))
            os.kill(proc.pid, signal.SIGSTOP)  # no teardown can start while we read
            try:
                secret, folder, ledger_text = _live_secret(ledgers)
                watch.scan()  # every process of the run is up right now
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            lines.extend(proc.stdout)
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            clean_stale(ledgers)  # whatever happened, leave nothing behind
    output = b"".join(lines).decode(errors="replace")
    return Observed(secret, folder, ledger_text, output, code, proc.pid, watch), out


def files_holding(folder: Path, value: bytes) -> list[str]:
    """Every file under ``folder`` whose bytes contain ``value`` (relative paths)."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and not path.is_symlink() and value in path.read_bytes())


def assert_secret_kept(seen: Observed, out: Path) -> None:
    """The watched run succeeded and its secret is in no file of ``out``, not in the
    ledger, not in the output and on no command line seen while it lived; its secret
    folder is gone and the places searched are the real ones."""
    assert seen.returncode == 0, seen.output
    assert len(seen.secret) >= 32 and b"\n" not in seen.secret
    assert not seen.secret_folder.exists(), "teardown left the secret folder"
    # The places searched are the real ones: the metadata and the services' logs.
    assert (out / "metadata.json").is_file() and list(out.glob("work/service-*.log"))
    assert files_holding(out, seen.secret) == []
    assert seen.secret not in seen.ledger_text
    assert seen.secret.decode() not in seen.output
    run_tree = seen.watch.tree(seen.pid)
    assert any(b"testbed.emulation.launcher" in c for c in run_tree), "launcher never seen"
    assert "(netem shaping)" in seen.output or any(
        b"testbed.emulation.delayer" in c for c in run_tree), "delayer never seen"
    leaked = [c for _, _, c in seen.watch.seen if seen.secret in c]
    assert leaked == [], f"the secret is on {len(leaked)} command line(s)"
