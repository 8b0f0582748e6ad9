"""A fork server that starts service processes inside emulated hosts cheaply.

Starting one fresh Python interpreter per service costs about 0.2 s of CPU and 48 MB
(importing aiohttp and numpy), which does not scale to hundreds of hosts on two cores.
The launcher imports the service modules once, then forks a child per service; the child
enters the host's network namespace (and its cgroups), and runs the module as
``__main__``. Pages stay shared copy-on-write, so each service costs a few MB. The code
object a module runs as ``__main__`` is also read (compiled, when no bytecode cache may
be written) once, in the launcher, not again in every child: at hundreds of services
that compile was most of a child's start-up.

Protocol: JSON lines over a unix socket. Requests::

    {"op": "spawn", "netns_pid": P, "module": "nodes.cpu_load", "argv": [...],
     "log": "/path/log", "cgroups": ["/sys/fs/cgroup/.../cgroup.procs"], "env": {},
     "cwd": "/run/work/folder"}
    {"op": "wait", "pid": N, "timeout": seconds}     -> {"exit": code or null}
    {"op": "ping"}

Children stay in the launcher's process group, so killing that group ends every
service the run started even if individual records were lost; the ledger's undo of the
launcher does so also after the launcher itself died. If the harness dies
while the launcher answers it, the launcher ends every child itself and exits.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from testbed.emulation.cpu_partition import confine, cpu_list, parse_cpu_list
from testbed.emulation.exits import wait_exits
from testbed.emulation.ledger import Ledger, process_start_time
from testbed.emulation.netns import enter_netns_of
from testbed.errors import EmulationError

#: Modules every run's services share; a system adds its own (``System.preload``).
PRELOAD = ("asyncio", "aiohttp", "aiohttp.web", "numpy", "nodes.common", "workloads.trace")
#: How long the launcher may take to collect a child that has ended (it reaps on SIGCHLD).
REAP_TIMEOUT_S = 5.0


def main_code(module: str) -> tuple[Any, CodeType]:
    """The spec and code object of ``module`` run as ``__main__`` (a package: its
    ``__main__`` submodule), as ``python -m module`` would find them."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise ImportError(f"no module named {module!r}")
    if spec.submodule_search_locations is not None:
        return main_code(f"{module}.__main__")
    code = spec.loader.get_code(spec.name) if spec.loader is not None else None
    if code is None:
        raise ImportError(f"module {module!r} has no code to run")
    return spec, code


def _run_as_main(spec: Any, code: CodeType) -> None:
    """Execute ``code`` as the ``__main__`` module, like ``runpy.run_module(...,
    run_name="__main__", alter_sys=True)`` but from an already compiled code object."""
    main = ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __spec__=spec, __loader__=spec.loader,
                         __package__=spec.parent, __cached__=spec.cached,
                         __builtins__=__builtins__)
    sys.modules["__main__"] = main
    if spec.origin:
        sys.argv[0] = spec.origin
    exec(code, main.__dict__)  # noqa: S102 - the module the harness asked to run


def _child(req: dict, spec: Any, program: CodeType) -> None:
    """Runs in the forked child: become the service. Never returns."""
    code = 1
    try:
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.closerange(3, 65536)  # the launcher's sockets belong to the launcher only
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        for procs in req.get("cgroups", []):
            Path(procs).write_text(str(os.getpid()))
        if req.get("netns_pid"):
            enter_netns_of(int(req["netns_pid"]))
        os.environ.update(req.get("env", {}))
        if req.get("cwd"):
            os.chdir(req["cwd"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.argv = [req["module"], *req.get("argv", [])]
        _run_as_main(spec, program)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - printed to the service's log, exit non-zero
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Server:
    def __init__(self, control: str) -> None:
        self.exits: dict[int, int] = {}
        self.children: set[int] = set()
        self.code: dict[str, tuple[Any, CodeType]] = {}  # module -> main_code(module)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(control)
        self.sock.listen(64)

    def on_signal(self, signum: int, _frame: object) -> None:
        """SIGCHLD: collect exit codes now. SIGTERM: end the children, then exit."""
        if signum == signal.SIGCHLD:
            self.reap()
            return
        self.end_children_and_exit()

    def end_children_and_exit(self) -> None:
        """SIGTERM every child, SIGKILL what is left after 3 s, then exit."""
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os._exit(0)

    def reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.children.discard(pid)
                self.exits[pid] = os.waitstatus_to_exitcode(status)

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "spawn":
            for key in ("module", "log"):
                if not isinstance(req.get(key), str):
                    return {"error": f"spawn: field {key!r} must be a string"}
            module = req["module"]
            if module not in self.code:
                try:
                    self.code[module] = main_code(module)
                except Exception as exc:  # noqa: BLE001 - a bad module must not end the launcher
                    # finding a module imports its parent package here, in the launcher:
                    # whatever that package raises is the request's error, not ours
                    return {"error": f"spawn: module {module!r}: {type(exc).__name__}: {exc}"}
            pid = os.fork()
            if pid == 0:
                self.sock.close()
                _child(req, *self.code[module])
            self.children.add(pid)
            return {"pid": pid}
        if op == "wait":
            pid = int(req["pid"])
            deadline = time.monotonic() + float(req.get("timeout", 0))
            while True:
                self.reap()
                if pid in self.exits:
                    return {"exit": self.exits[pid]}
                if pid not in self.children:
                    return {"error": f"pid {pid} is not a child of this launcher"}
                if time.monotonic() >= deadline:
                    return {"exit": None}
                time.sleep(0.01)
        return {"error": f"unknown op {op!r}"}

    def serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            with conn, conn.makefile("rwb") as stream:
                for line in stream:
                    try:
                        reply = self.handle(json.loads(line))
                    except (ValueError, KeyError, TypeError, OSError) as exc:
                        reply = {"error": f"{type(exc).__name__}: {exc}"}
                    try:
                        stream.write((json.dumps(reply) + "\n").encode())
                        stream.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        # the harness died while we answered: nobody will end the
                        # services it started but could not record, so end them all now
                        self.end_children_and_exit()
            self.reap()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control", required=True, help="unix socket path to listen on")
    parser.add_argument("--preload", action="append", default=[],
                        help="a further module to import before forking (repeatable)")
    parser.add_argument("--cpus", help="run itself and every child only on these CPUs (a CPU "
                                       "list: the hosts' side of a CPU partition)")
    args = parser.parse_args(argv)
    if args.cpus:
        try:
            confine(parse_cpu_list(args.cpus, "--cpus"))  # before any thread or child exists
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
    for name in (*PRELOAD, *args.preload):
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # keep preloaded objects out of the children's copy-on-write churn
    server = _Server(args.control)
    signal.signal(signal.SIGCHLD, server.on_signal)
    signal.signal(signal.SIGTERM, server.on_signal)
    server.serve()


class LauncherClient:
    """The harness's handle on a running launcher.

    The launcher answers one request at a time, so requests from several threads are
    serialised by a lock rather than interleaved on the socket. :meth:`wait` therefore
    waits here, on the child's pidfd, and asks the launcher only for the exit code: a
    driver waiting for its clients must not hold the launcher while a scheduled event
    needs it (a join's spawn, a load's burners).
    """

    def __init__(self, control: Path, pid: int) -> None:
        self.control = control
        self.pid = pid
        self.start = process_start_time(pid)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(str(control))
        self._stream = self._sock.makefile("rwb")
        self._lock = threading.Lock()
        self._starts: dict[int, int | None] = {}  # spawned pid -> its start time

    def request(self, **req: object) -> dict:
        with self._lock:
            self._stream.write((json.dumps(req) + "\n").encode())
            self._stream.flush()
            line = self._stream.readline()
        if not line:
            raise EmulationError(f"service launcher (pid {self.pid}) closed its control socket")
        reply = json.loads(line)
        if "error" in reply:
            raise EmulationError(f"service launcher: {reply['error']}")
        return reply

    def spawn(self, netns_pid: int | None, module: str, argv: list[str], log: Path,
              cgroups: list[str] | None = None, env: dict | None = None,
              cwd: Path | None = None) -> int:
        """Start ``python -m module argv...`` inside the namespace of ``netns_pid``, in
        the folder ``cwd`` (the launcher's own when ``None``)."""
        pid = self.request(op="spawn", netns_pid=netns_pid, module=module, argv=argv,
                           log=str(log), cgroups=cgroups or [], env=env or {},
                           cwd=str(cwd) if cwd is not None else None)["pid"]
        self._starts[pid] = process_start_time(pid)
        return pid

    def wait(self, pid: int, timeout: float) -> int | None:
        """Exit code of a child, or None if it still runs after ``timeout`` seconds."""
        start = self._starts.get(pid)
        if start is not None:
            if not wait_exits([(pid, start)], timeout):
                return None
            timeout = REAP_TIMEOUT_S  # ended: the launcher reaps it on SIGCHLD
        code = self.request(op="wait", pid=pid, timeout=timeout)["exit"]
        if code is not None:
            self._starts.pop(pid, None)
        return code

    def close(self) -> None:
        self._stream.close()
        self._sock.close()


def start_launcher(ledger: Ledger, workdir: Path, timeout: float = 30.0,
                   preload: Sequence[str] = (), cpus: frozenset[int] | None = None
                   ) -> LauncherClient:
    """Start the fork server in its own process group and wait until it answers.

    ``preload`` adds modules (a system's services) to import once before forking; ``cpus``
    confines the launcher and so every service and client it forks to those CPUs (the
    hosts' side of a :class:`~testbed.emulation.cpu_partition.Partition`).
    """
    control = workdir / "launcher.sock"
    log = (workdir / "launcher.log").open("ab")
    extra = [arg for name in preload for arg in ("--preload", name)]
    proc = subprocess.Popen([sys.executable, "-m", "testbed.emulation.launcher",
                             "--control", str(control), *extra,
                             *(["--cpus", cpu_list(cpus)] if cpus else [])], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    ledger.record_process(proc.pid, group=True, what="service launcher")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (workdir / "launcher.log").read_text()[-2000:]
            raise EmulationError(f"service launcher exited with {proc.returncode}: {tail}")
        if control.exists():
            try:
                client = LauncherClient(control, proc.pid)
                client.request(op="ping")
                return client
            except OSError:
                pass
        time.sleep(0.01)
    raise EmulationError(f"service launcher did not answer within {timeout} s")


if __name__ == "__main__":
    main()
