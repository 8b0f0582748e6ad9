"""A private, userspace Open vSwitch for one run, and the Mininet switch that uses it.

Machines without the ``openvswitch`` kernel module (this project's CI VMs) can still run
OVS with its userspace datapath (``datapath_type=netdev``). :func:`start_ovs` starts an
``ovsdb-server`` and an ``ovs-vswitchd`` of the run's own, with a fresh database and every
socket, pidfile and log inside a private folder, so nothing touches a system-wide OVS.
The instance is written in the run's ledger as it starts, so a crash is cleaned from the
ledger alone.

Facts this module is built around (see ``docs/ovs.md``):

* only one userspace ``ovs-vswitchd`` works per network namespace: it owns the tap
  ``ovs-netdev``. :func:`start_ovs` first takes the machine-wide lock ``OVS_LOCK`` (held
  until the instance's ``ovs-vswitchd`` is undone, and handed to the daemons so it also
  outlives a killed harness), refusing at once with one line naming the run that holds
  it; it then refuses to start when that tap already exists (an OVS not of the harness,
  or a crashed run's leftover);
* the taps of a netdev datapath are *persistent*: a plain ``SIGTERM`` or a crash leaves
  ``ovs-netdev`` and one tap per bridge behind. Teardown asks the daemon to
  ``exit --cleanup`` and then deletes any such tap that no process holds any more;
* ``ovs-vswitchd`` reaches ports through ``AF_PACKET``; packets whose checksum the sender
  left to hardware (veth ``tx`` offload) arrive broken, so TCP hangs. The switch class
  turns ``tx`` offload off on both ends of each of its links.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Self

from mininet.node import OVSSwitch
from mininet.util import errRun

from testbed.emulation import locks
from testbed.emulation.ledger import (
    Entry,
    Ledger,
    is_running,
    process_start_time,
    undo_handler,
    wait_gone,
)
from testbed.errors import EmulationError

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
NETDEV_TAP = "ovs-netdev"
"""The tap a userspace ``ovs-vswitchd`` creates for its datapath (one per namespace)."""

ENV_KEYS = ("OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR")
_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; keep a margin
_COMMAND_TIMEOUT_S = 15.0

_ACTIVE: OvsInstance | None = None
OVS_LOCK = Path(os.environ.get("TESTBED_OVS_LOCK", "/run/edge-testbed/ovs.lock"))
"""Held by the run whose private userspace OVS runs on this machine."""
# This process's descriptor of the OVS lock, by instance folder; the ``ovs_vswitchd``
# undo closes it, so the lock goes with the daemon however the run is torn down.
_HELD_LOCKS: dict[str, int] = {}


def _release_lock(rundir: str) -> None:
    fd = _HELD_LOCKS.pop(rundir, None)
    if fd is not None:
        os.close(fd)


def _run(argv: list[str], env: dict[str, str] | None = None,
         timeout: float = _COMMAND_TIMEOUT_S,
         pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env}, check=False,
                          pass_fds=pass_fds)


def is_alive(pid: int, start: int | None = None) -> bool:
    """True while ``pid`` runs (and, given ``start``, is still that same process).

    The ledger's rule (:func:`is_running`): a zombie counts as gone, as detached OVS
    daemons are reparented to init, which may reap them only later, unless its other
    threads are still exiting, since they hold the machine's OVS lock.
    """
    if start is None:
        start = process_start_time(pid)
    return start is not None and is_running(pid, start)


def _interface_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def tap_holders(name: str) -> list[int]:
    """Pids of the processes holding the tun/tap device ``name`` open.

    A persistent tap that no process holds is an orphan: its owner died without removing
    it. Read from ``/proc/*/fdinfo`` (the kernel prints ``iff:<name>`` for tun fds).
    """
    needle = f"iff:\t{name}\n"
    holders = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fdinfo").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if needle in fd.read_text():
                    holders.append(int(proc.name))
                    break
            except OSError:
                continue
    return holders


def _is_tun(name: str) -> bool:
    return Path(f"/sys/class/net/{name}/tun_flags").exists()


def _delete_orphan_tap(name: str) -> None:
    """Delete the persistent tap ``name`` if it exists and no process holds it."""
    if _interface_exists(name) and _is_tun(name) and not tap_holders(name):
        _run(["ip", "link", "del", name])


@undo_handler("ovs_vswitchd")
def _undo_vswitchd(data: dict) -> None:
    """Stop a private ``ovs-vswitchd`` so that it removes its datapath and taps.

    ``exit --cleanup`` deletes the bridges' taps and ``ovs-netdev``; signals are the
    fallback. Whatever tap of the instance is left without a holder is then deleted.
    """
    pid, start = data["pid"], data.get("start")
    if is_alive(pid, start):
        ctl = Path(data["rundir"]) / f"ovs-vswitchd.{pid}.ctl"
        if ctl.exists():
            try:
                _run(["ovs-appctl", "-t", str(ctl), "--timeout=5", "exit", "--cleanup"],
                     timeout=8)
            except subprocess.TimeoutExpired:
                pass
        if not wait_gone(pid, start, 5.0):
            for sig in ("TERM", "KILL"):
                _run(["kill", f"-{sig}", str(pid)])
                if wait_gone(pid, start, 3.0):
                    break
    _delete_orphan_tap(NETDEV_TAP)
    _release_lock(data["rundir"])


@undo_handler("ovs_bridge")
def _undo_bridge(data: dict) -> None:
    """Delete a bridge of a private OVS instance, and its tap if it was left behind."""
    socket = Path(data["db"])
    if socket.exists():
        # Wait for ovs-vswitchd to apply the change only if it still runs.
        wait = [] if is_alive(data["vswitchd"], data.get("vswitchd_start")) else ["--no-wait"]
        try:
            _run(["ovs-vsctl", f"--db=unix:{socket}", "--timeout=5", *wait, "--if-exists",
                  "del-br", data["name"]], timeout=8)
        except subprocess.TimeoutExpired:
            pass
    _delete_orphan_tap(data["name"])


@dataclass
class OvsInstance:
    """A running private Open vSwitch: its folder, daemons and environment.

    ``env`` holds the variables with which the stock OVS tools (``ovs-vsctl``,
    ``ovs-ofctl``, ``ovs-appctl``) find this instance. While the instance runs they are
    also exported into ``os.environ``, because Mininet runs ``ovs-vsctl`` both from the
    Python process and from its switches' shells; :meth:`stop` restores the old values.
    """

    workdir: Path
    ledger: Ledger
    ovsdb_pid: int
    vswitchd_pid: int
    start_s: float
    """Wall seconds from the call of :func:`start_ovs` to a daemon ready for bridges."""
    entries: list[Entry] = field(default_factory=list)
    bridges: dict[str, Entry] = field(default_factory=dict)
    _saved_env: dict[str, str | None] = field(default_factory=dict)

    @property
    def db_socket(self) -> Path:
        return self.workdir / "db.sock"

    @property
    def env(self) -> dict[str, str]:
        return {key: str(self.workdir) for key in ENV_KEYS}

    @property
    def running(self) -> bool:
        return is_alive(self.vswitchd_pid)

    def vsctl(self, *args: str, check: bool = True) -> str:
        """Run ``ovs-vsctl`` against this instance; returns its stdout."""
        return self._tool("ovs-vsctl", f"--db=unix:{self.db_socket}", "--timeout=10", *args,
                          check=check)

    def ofctl(self, *args: str, check: bool = True) -> str:
        """Run ``ovs-ofctl`` against this instance (bridges resolve to its rundir)."""
        return self._tool("ovs-ofctl", *args, check=check)

    def _tool(self, *argv: str, check: bool) -> str:
        result = _run(list(argv), env=self.env)
        if check and result.returncode != 0:
            raise EmulationError(f"{' '.join(argv)} failed ({result.returncode}): "
                                 f"{result.stderr.strip()}")
        return result.stdout

    def register_bridge(self, name: str) -> Entry:
        """Record bridge ``name`` (just created on this instance) in the ledger."""
        if name not in self.bridges:
            self.bridges[name] = self.ledger.record(
                "ovs_bridge", name=name, db=str(self.db_socket), vswitchd=self.vswitchd_pid,
                vswitchd_start=process_start_time(self.vswitchd_pid))
        return self.bridges[name]

    def release_bridge(self, name: str) -> None:
        """Delete bridge ``name`` (if still there) and mark it removed in the ledger."""
        entry = self.bridges.pop(name, None)
        if entry is not None:
            self.ledger.release(entry)

    def _export_env(self) -> None:
        global _ACTIVE
        self._saved_env = {key: os.environ.get(key) for key in ENV_KEYS}
        os.environ.update(self.env)
        _ACTIVE = self

    def _restore_env(self) -> None:
        global _ACTIVE
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}
        if _ACTIVE is self:
            _ACTIVE = None

    def stop(self) -> None:
        """Delete the bridges, stop both daemons and remove what they left. Idempotent."""
        for name in list(self.bridges):
            self.release_bridge(name)
        for entry in reversed(self.entries):
            self.ledger.release(entry)
        self.entries.clear()
        self._restore_env()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def active_instance() -> OvsInstance:
    """The private OVS instance started by :func:`start_ovs` and not yet stopped."""
    if _ACTIVE is None:
        raise EmulationError("no private Open vSwitch is running: call "
                             "testbed.emulation.ovs.start_ovs() before building OVS switches")
    return _ACTIVE


def _read_pid(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError) as exc:
        raise EmulationError(f"{path}: no pid written by the daemon ({exc})") from exc


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _check_no_other_userspace_ovs() -> None:
    if not _interface_exists(NETDEV_TAP):
        return
    holders = tap_holders(NETDEV_TAP)
    who = (f"held by pid {', '.join(map(str, holders))}" if holders
           else "held by no process: left over by a userspace OVS that died")
    raise EmulationError(
        f"another userspace Open vSwitch already runs in this network namespace "
        f"(interface {NETDEV_TAP} exists, {who}); only one userspace ovs-vswitchd works per "
        f"namespace. Stop that run first, or clean a crashed run with `testbed clean`.")


def _daemon(argv: list[str], env: dict[str, str], pidfile: Path, log: Path,
            pass_fds: tuple[int, ...] = ()) -> int:
    """Run an OVS daemon with ``--detach`` (returns once it is ready); its pid."""
    pidfile.unlink(missing_ok=True)
    try:
        result = _run(argv, env=env, pass_fds=pass_fds)
    except subprocess.TimeoutExpired as exc:
        if pidfile.exists():  # the daemon forked but never became ready: end it
            pid = _read_pid(pidfile)
            start = process_start_time(pid)
            _run(["kill", "-KILL", str(pid)])
            wait_gone(pid, start, 3.0)
        raise EmulationError(f"{argv[0]} did not become ready within "
                             f"{_COMMAND_TIMEOUT_S:.0f} s; log:\n{_log_tail(log)}") from exc
    if result.returncode != 0:
        raise EmulationError(f"{argv[0]} failed to start ({result.returncode}): "
                             f"{result.stderr.strip()}\nlog:\n{_log_tail(log)}")
    return _read_pid(pidfile)


def start_ovs(ledger: Ledger, workdir: Path | str) -> OvsInstance:
    """Start a private userspace Open vSwitch whose state all lives in ``workdir``.

    The folder is created if needed (and then recorded for removal); a database left in
    it by an earlier, stopped instance is replaced by a fresh one. Both daemons are
    recorded in ``ledger`` as soon as they run. Raises :class:`EmulationError` if another
    run holds the machine's OVS lock, another userspace OVS already owns this namespace
    or a daemon fails to start.
    """
    began = time.monotonic()
    workdir = Path(workdir).resolve()
    if len(str(workdir / "ovs-vswitchd.4194304.ctl")) > _SOCKET_PATH_MAX:
        raise EmulationError(f"OVS workdir {workdir}: path too long for unix sockets "
                             f"(keep it under {_SOCKET_PATH_MAX - 30} characters)")
    if not SCHEMA.exists():
        raise EmulationError(f"{SCHEMA} not found: install Debian's openvswitch-switch")
    lock = locks.acquire(OVS_LOCK, ledger.run_id, "the machine's userspace Open vSwitch",
                         hint="only one userspace ovs-vswitchd works per network "
                              "namespace; wait for that run to end")
    _HELD_LOCKS[str(workdir)] = lock
    entries: list[Entry] = []
    try:
        _check_no_other_userspace_ovs()
    except BaseException:
        _release_lock(str(workdir))
        raise
    if not workdir.exists():
        workdir.mkdir(parents=True)
        entries.append(ledger.record("dir", path=str(workdir)))
    env = {key: str(workdir) for key in ENV_KEYS}
    try:
        for pidfile in ("ovsdb-server.pid", "ovs-vswitchd.pid"):
            old = workdir / pidfile
            if old.exists() and is_alive(_read_pid(old)):
                raise EmulationError(f"{workdir}: an OVS instance still runs there "
                                     f"({pidfile} names a live process)")
        db = workdir / "conf.db"
        db.unlink(missing_ok=True)
        created = _run(["ovsdb-tool", "create", str(db), str(SCHEMA)])
        if created.returncode != 0:
            raise EmulationError(f"ovsdb-tool create {db} failed: {created.stderr.strip()}")
        ovsdb_pid = _daemon(
            ["ovsdb-server", str(db), f"--remote=punix:{workdir / 'db.sock'}",
             f"--pidfile={workdir / 'ovsdb-server.pid'}",
             f"--log-file={workdir / 'ovsdb-server.log'}", "--detach", "--no-chdir"],
            env, workdir / "ovsdb-server.pid", workdir / "ovsdb-server.log")
        entries.append(ledger.record_process(ovsdb_pid, name="ovsdb-server"))
        init = _run(["ovs-vsctl", f"--db=unix:{workdir / 'db.sock'}", "--no-wait", "init"],
                    env=env)
        if init.returncode != 0:
            raise EmulationError(f"ovs-vsctl init failed: {init.stderr.strip()}")
        # --disable-system: never touch kernel datapaths (a system OVS may own some).
        vswitchd_pid = _daemon(
            ["ovs-vswitchd", f"unix:{workdir / 'db.sock'}", "--disable-system",
             f"--pidfile={workdir / 'ovs-vswitchd.pid'}",
             f"--log-file={workdir / 'ovs-vswitchd.log'}", "--detach", "--no-chdir"],
            env, workdir / "ovs-vswitchd.pid", workdir / "ovs-vswitchd.log", (lock,))
        entries.append(ledger.record("ovs_vswitchd", pid=vswitchd_pid,
                                     start=process_start_time(vswitchd_pid),
                                     rundir=str(workdir)))
    except BaseException:
        for entry in reversed(entries):
            ledger.release(entry)
        _release_lock(str(workdir))
        raise
    instance = OvsInstance(workdir=workdir, ledger=ledger, ovsdb_pid=ovsdb_pid,
                           vswitchd_pid=vswitchd_pid, start_s=time.monotonic() - began,
                           entries=entries)
    instance._export_env()
    return instance


Runner = Callable[..., Any]


def _runner_for(instance: OvsInstance) -> Runner:
    """A Mininet ``errRun`` replacement whose shell commands see ``instance``'s env."""
    prefix = " ".join(f"{key}={shlex.quote(value)}" for key, value in instance.env.items())

    def run(*cmd: Any, **kwargs: Any) -> Any:
        text = cmd[0] if len(cmd) == 1 else " ".join(str(arg) for arg in cmd)
        if not isinstance(text, str):
            text = " ".join(str(arg) for arg in text)
        if text.startswith("ovs-vsctl "):  # never hang on a daemon that died
            text = text.replace("ovs-vsctl ", "ovs-vsctl --timeout=10 ", 1)
        kwargs["shell"] = True
        return errRun(f"{prefix} {text}", **kwargs)

    return run


class UserspaceOVSSwitch(OVSSwitch):
    """A Mininet OVS switch on the run's private userspace Open vSwitch.

    Always ``datapath='user'`` (netdev) and OpenFlow 1.3 unless told otherwise. The fail
    mode follows the controllers given at start: ``secure`` with a controller,
    ``standalone`` (a learning bridge) without one, unless ``failMode`` is passed. After
    start, the bridge is recorded in the ledger and ``tx`` checksum offload is turned off
    on both ends of each port's link. The switch's name is the bridge's name: give it the
    run's prefix.
    """

    isSetup = False

    def __init__(self, name: str, ovs: OvsInstance | None = None, failMode: str | None = None,
                 protocols: str = "OpenFlow13", **params: Any) -> None:
        self.ovs = ovs if ovs is not None else active_instance()
        self._auto_fail_mode = failMode is None
        self._bridge_started = False
        params["datapath"] = "user"
        super().__init__(name, failMode=failMode or "secure", protocols=protocols, **params)

    @classmethod
    def setup(cls) -> None:
        """Check the OVS tools (the stock check would query the system-wide OVS)."""
        version = _run(["ovs-vsctl", "--version"])
        found = re.findall(r"\d+\.\d+", version.stdout)
        if version.returncode != 0 or not found:
            raise EmulationError("ovs-vsctl not found: install Debian's openvswitch-switch")
        cls.OVSVersion = found[0]

    @classmethod
    def isOldOVS(cls) -> bool:
        """Never: Debian ships OVS 3.x (and the stock check warns on every call)."""
        return False

    def startShell(self, mnopts: str | None = None) -> None:
        """Start the node's shell with this instance's OVS environment exported."""
        super().startShell(mnopts)
        exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in self.ovs.env.items())
        self.cmd(f"export {exports}")

    def start(self, controllers: list[Any]) -> None:
        if self._auto_fail_mode:
            self.failMode = "secure" if controllers else "standalone"
        super().start(controllers)
        if not self.batch:
            self._after_start()

    def attach(self, intf: Any) -> None:
        super().attach(intf)
        self._tx_off(intf)

    def _after_start(self) -> None:
        if self._bridge_started:
            return
        self._bridge_started = True
        self.ovs.register_bridge(self.name)
        for intf in self.intfList():
            if self.ports.get(intf):
                self._tx_off(intf)

    def _tx_off(self, intf: Any) -> None:
        """Turn off tx checksum offload on ``intf`` and on the other end of its link."""
        ends = [intf]
        link = getattr(intf, "link", None)
        if link is not None:
            ends += [end for end in (link.intf1, link.intf2) if end is not intf]
        for end in ends:
            node = getattr(end, "node", None)
            if node is not None and getattr(node, "shell", None) is not None:
                node.cmd("ethtool -K", end.name, "tx off")

    @classmethod
    def batchStartup(cls, switches: tuple[Any, ...], run: Runner = errRun) -> tuple[Any, ...]:
        for instance, group in _by_instance(switches):
            super().batchStartup(group, run=_runner_for(instance))
        for switch in switches:
            switch._after_start()
        return switches

    @classmethod
    def batchShutdown(cls, switches: tuple[Any, ...], run: Runner = errRun) -> tuple[Any, ...]:
        for instance, group in _by_instance(switches):
            super().batchShutdown(group, run=_runner_for(instance))
            for switch in group:
                instance.release_bridge(switch.name)
        return switches

    def stop(self, deleteIntfs: bool = True) -> None:
        super().stop(deleteIntfs)
        self.ovs.release_bridge(self.name)


def _by_instance(switches: tuple[Any, ...]) -> list[tuple[OvsInstance, tuple[Any, ...]]]:
    ordered = sorted(switches, key=lambda s: id(s.ovs))
    return [(group[0].ovs, group) for group in
            (tuple(g) for _, g in groupby(ordered, key=lambda s: id(s.ovs)))]
