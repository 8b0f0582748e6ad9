"""When a process counts as gone (``ledger.is_running``, ``ovs.is_alive``): a zombie
leader alone is not enough while its other threads still run, as they hold its
descriptors (the machine's OVS lock among them)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from testbed.emulation.ledger import is_running, process_start_time
from testbed.emulation.ovs import is_alive
from testbed.poll import wait_until

LEADER_EXITS_FIRST = r"""
#include <pthread.h>
#include <unistd.h>
static void *worker(void *arg) { (void)arg; for (;;) pause(); return 0; }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_exit(0); /* the leader becomes a zombie; the worker thread runs on */
}
"""


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[0]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_zombie_leader_with_a_running_thread_is_still_alive(tmp_path: Path) -> None:
    source, binary = tmp_path / "leader.c", tmp_path / "leader"
    source.write_text(LEADER_EXITS_FIRST)
    subprocess.run(["gcc", "-pthread", "-o", str(binary), str(source)], check=True)
    proc = subprocess.Popen([str(binary)])
    try:
        start = process_start_time(proc.pid)
        wait_until(lambda: _state(proc.pid) == "Z", what="the leader thread to exit")
        assert is_alive(proc.pid) and is_alive(proc.pid, start)
        assert is_running(proc.pid, start)
        proc.send_signal(signal.SIGKILL)
        wait_until(lambda: not is_alive(proc.pid), what="the whole process to end")
        assert not is_running(proc.pid, start)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert not is_alive(proc.pid)
