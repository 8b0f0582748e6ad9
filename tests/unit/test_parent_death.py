"""A study's emulation cell ends with the worker that started it (``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from testbed.poll import wait_until

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from testbed.parent_death import die_with_parent
    out = Path(sys.argv[1])
    signal.signal(signal.SIGINT, lambda *_: (out.write_text("interrupted"), sys.exit(0)))
    asked = die_with_parent()
    Path(sys.argv[2]).write_text(f"{asked} {os.getpid()}")
    time.sleep(30)
""")
PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    from testbed.parent_death import ENV
    env = {**os.environ} if sys.argv[3] == "unset" else {**os.environ, ENV: str(os.getpid())}
    env.pop(ENV, None) if sys.argv[3] == "unset" else None
    subprocess.Popen([sys.executable, "-c", sys.argv[4], sys.argv[1], sys.argv[2]], env=env)
    while not Path(sys.argv[2]).exists():
        time.sleep(0.05)
""")


def _run(tmp_path: Path, mode: str) -> tuple[Path, Path]:
    out, ready = tmp_path / f"{mode}.out", tmp_path / f"{mode}.ready"
    subprocess.run([sys.executable, "-c", PARENT, str(out), str(ready), mode, CHILD],
                   check=True, timeout=30)
    return out, ready


def test_the_child_is_interrupted_when_its_parent_ends(tmp_path: Path) -> None:
    out, ready = _run(tmp_path, "set")
    assert ready.read_text().split()[0] == "True"
    wait_until(out.exists, timeout=10, what="the child's SIGINT")
    assert out.read_text() == "interrupted"


def test_without_the_variable_nothing_is_asked(tmp_path: Path) -> None:
    out, ready = _run(tmp_path, "unset")
    asked, pid = ready.read_text().split()
    try:
        assert asked == "False"
        assert not out.exists()
    finally:
        os.kill(int(pid), signal.SIGKILL)  # the child outlived its parent: end it here
