"""The SDN controller: os-ken running the project's learning switch, as a child process.

os-ken 4.x (the maintained fork of Ryu, whose 4.34 no longer runs on Python 3.11) ships
no manager script, so this module is also the launcher::

    python -m testbed.emulation.controller --port 6653 [--host 127.0.0.1]

:func:`start_controller` spawns that launcher, records it in the run's ledger and returns
once it listens; :meth:`Controller.remote` gives the Mininet controller object that
points switches at it; :func:`wait_connected` waits until a bridge's OpenFlow connection
is up (OVS retries with a back-off, so this takes up to a few seconds).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

from mininet.node import RemoteController

from testbed.emulation.ledger import Entry, Ledger
from testbed.emulation.ovs import OvsInstance
from testbed.errors import EmulationError

APP = "testbed.emulation.osken_switch"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_POLL_S = 0.02
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def is_listening(pid: int, port: int) -> bool:
    """True once process ``pid`` holds a TCP socket listening on ``port``.

    Read from ``/proc`` rather than by connecting, so the controller never sees a
    half-open OpenFlow session from the harness.
    """
    inodes = _socket_inodes(pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port and cols[3] == "0A" and cols[9] in inodes:
                return True
    return False


class OsKenRemoteController(RemoteController):
    """Mininet's remote controller, minus the telnet probe (:func:`start_controller`
    has already waited for the listener)."""

    def checkListening(self) -> None:
        """Nothing to check: the controller listened before this object existed."""

    def stop(self) -> None:
        """End this node's helper shell (Mininet's remote controller would leave it)."""
        self.terminate()


@dataclass
class Controller:
    """A running os-ken controller process."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    ledger: Ledger
    entry: Entry
    log: IO[bytes]
    start_s: float
    """Wall seconds from spawning the launcher to its listening socket."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def remote(self, name: str = "c0") -> OsKenRemoteController:
        """A Mininet controller object pointing at this controller."""
        return OsKenRemoteController(name, ip=self.host, port=self.port)

    def log_text(self) -> str:
        """What the controller has written to its log so far."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        """Terminate the controller and mark it removed in the ledger. Idempotent."""
        self.ledger.release(self.entry)
        self.process.poll()
        self.log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_controller(ledger: Ledger, port: int | None = None, host: str = "127.0.0.1",
                     log_path: Path | None = None, timeout: float = 15.0) -> Controller:
    """Start the os-ken learning-switch controller and wait until it listens.

    ``port`` defaults to a free port on ``host``. Its output goes to ``log_path`` (or an
    anonymous temporary file), readable with :meth:`Controller.log_text`. Raises
    :class:`EmulationError` with the log if it exits or does not listen in ``timeout``.
    """
    began = time.monotonic()
    port = free_port(host) if port is None else port
    # The file outlives this call: the Controller owns it.
    log: IO[bytes] = tempfile.TemporaryFile() if log_path is None else open(log_path, "w+b")  # noqa: SIM115
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "testbed.emulation.controller", "--host", host,
         "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        start_new_session=True)
    entry = ledger.record_process(process.pid, group=True, name="os-ken")
    controller = Controller(host=host, port=port, process=process, ledger=ledger,
                            entry=entry, log=log, start_s=0.0)
    deadline = time.monotonic() + timeout
    while not is_listening(process.pid, port):
        if process.poll() is not None or time.monotonic() > deadline:
            reason = (f"exited with code {process.returncode}" if process.returncode is not None
                      else f"did not listen on {host}:{port} within {timeout:.0f} s")
            text = controller.log_text()
            controller.stop()
            raise EmulationError(f"os-ken controller {reason}; its output:\n{text[-3000:]}")
        time.sleep(_POLL_S)
    controller.start_s = time.monotonic() - began
    return controller


def controller_status(ovs: OvsInstance, bridge: str) -> list[dict[str, str]]:
    """The OVS Controller records of ``bridge``: target, is_connected, role, status."""
    ids = _controller_ids(ovs, bridge)
    raw = ovs.vsctl("--format=csv", "--data=bare", "--no-headings",
                    "--columns=target,is_connected,status", "list", "Controller",
                    *ids) if ids else ""
    rows = []
    for line in raw.splitlines():
        target, connected, status = (line.split(",", 2) + ["", ""])[:3]
        rows.append({"target": target, "is_connected": connected, "status": status})
    return rows


def _controller_ids(ovs: OvsInstance, bridge: str) -> list[str]:
    return _UUID.findall(ovs.vsctl("get", "Bridge", bridge, "controller"))


def _programmed_by_controller(ovs: OvsInstance, bridge: str) -> bool:
    flows = ovs.ofctl("-O", "OpenFlow13", "dump-flows", bridge, check=False)
    return "CONTROLLER" in flows


def wait_connected(ovs: OvsInstance, bridge: str, timeout: float = 15.0) -> float:
    """Wait until ``bridge`` has an OpenFlow session with one of its controllers.

    Either sign counts: the bridge's Controller record says ``is_connected``, or the
    bridge's flow table holds an entry that sends to the controller (the learning
    switch installs its table-miss entry as soon as the session is up; a ``secure``
    bridge has none before). The second sign matters: OVS writes ``is_connected`` into
    its database only every few seconds, about 4 s after the session really started.
    Returns the seconds waited; raises :class:`EmulationError` naming the controllers'
    status when ``timeout`` passes first.
    """
    began = time.monotonic()
    deadline = began + timeout
    ids = _controller_ids(ovs, bridge)
    if not ids:
        raise EmulationError(f"bridge {bridge} has no controller configured")
    while True:
        if _programmed_by_controller(ovs, bridge) or any(
                ovs.vsctl("get", "Controller", uuid, "is_connected").strip() == "true"
                for uuid in ids):
            return time.monotonic() - began
        if time.monotonic() > deadline:
            raise EmulationError(f"bridge {bridge} did not connect to its controller within "
                                 f"{timeout:.0f} s: {controller_status(ovs, bridge)}")
        time.sleep(_POLL_S)


def main(argv: list[str] | None = None) -> None:
    """Run the learning-switch app under os-ken until terminated (the launcher)."""
    parser = argparse.ArgumentParser(
        prog="python -m testbed.emulation.controller",
        description="Run the project's OpenFlow 1.3 learning switch under os-ken.")
    parser.add_argument("--port", type=int, required=True, help="OpenFlow TCP port")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--verbose", action="store_true", help="log at debug level")
    args = parser.parse_args(argv)

    from os_ken import cfg
    from os_ken import log as osken_log
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller as _listen_options  # noqa: F401 (registers them)

    osken_log.early_init_log(logging.DEBUG if args.verbose else logging.INFO)
    cfg.CONF(args=["--ofp-listen-host", args.host, "--ofp-tcp-listen-port", str(args.port)],
             project="os_ken")
    osken_log.init_log()
    AppManager.run_apps([APP])


if __name__ == "__main__":
    main()
