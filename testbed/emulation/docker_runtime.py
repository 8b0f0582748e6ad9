"""Docker containers as Mininet hosts.

A :class:`DockerHost` is a Mininet host whose network namespace belongs to a container
of the harness's private engine. The container is started with ``--network none`` (the
engine touches no network); Mininet's control shell is then started *inside the
container's network namespace only* (host filesystem and tools, container network), so
every piece of Mininet that configures a host (``addLink``, ``Intf.setIP``, routes, tc)
works unchanged and the host's interfaces land in the container.

Services run *in* the container (its filesystem, cgroup limits and pid namespace) with
:meth:`DockerHost.exec_service`; commands run through ``cmd``/``popen`` share only its
network. Containers are written in the run ledger as kind ``container`` and removed by
id through the engine that made them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
from docker.types import Mount
from mininet.node import Host

from testbed.emulation.docker_engine import (
    API_VERSION,
    Engine,
    base_mounts,
    ensure_base_image,
    safe_name,
)
from testbed.emulation.ledger import (
    Entry,
    Ledger,
    process_start_time,
    undo_handler,
    wait_gone,
)
from testbed.errors import EmulationError

CPU_PERIOD_US = 100_000
KEEPALIVE = ["/usr/bin/sleep", "infinity"]
LABEL_RUN = "edge-testbed.run"
LABEL_NODE = "edge-testbed.node"


@undo_handler("container")
def _undo_container(data: dict) -> None:
    """Remove a container by id through the engine that made it.

    When that engine is gone, so is the container's supervision; the engine's own ledger
    entry (older, so undone later) kills and unmounts whatever is left.
    """
    socket = Path(data["socket"])
    if not socket.exists():
        return
    client = docker.DockerClient(base_url=f"unix://{socket}", version=API_VERSION,
                                 timeout=60)
    try:
        deadline = time.monotonic() + 30.0
        while True:
            try:
                client.api.remove_container(data["id"], force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:  # 409: removal already in progress
                if exc.status_code != 409 or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
    except requests.exceptions.ConnectionError:
        return  # the engine died; its entry cleans up
    finally:
        client.close()


def cpu_quota(share: float) -> int:
    """CFS quota (per ``CPU_PERIOD_US``) for ``share`` of the whole machine in (0, 1]."""
    if not 0 < share <= 1:
        raise EmulationError(f"cpu share must be in (0, 1], found {share!r}")
    return max(1000, round(share * (os.cpu_count() or 1) * CPU_PERIOD_US))


@dataclass
class ExecHandle:
    """A service started in a container with :meth:`DockerHost.exec_service`."""

    client: docker.DockerClient
    exec_id: str
    pid: int
    pid_start: int | None
    argv: list[str]
    log_path: Path

    def _inspect(self) -> dict:
        return self.client.api.exec_inspect(self.exec_id)

    def running(self) -> bool:
        return bool(self._inspect()["Running"])

    def exit_code(self) -> int | None:
        """The exit code, None while the service runs."""
        info = self._inspect()
        return None if info["Running"] else info["ExitCode"]

    def wait(self, timeout: float) -> int:
        """Wait for the service to end; raise :class:`EmulationError` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (code := self.exit_code()) is None:
            if time.monotonic() > deadline:
                raise EmulationError(f"service {self.argv} still runs after {timeout} s")
            time.sleep(0.02)
        return code

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the service's process (a host pid pinned by start time)."""
        if process_start_time(self.pid) == self.pid_start:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class DockerHost(Host):
    """A Mininet host backed by a container of the harness's engine.

    Params (besides Mininet's): ``engine`` (an :class:`Engine`, required), ``image``
    (default: the base image), ``cpu`` (share of the whole machine in (0, 1]),
    ``memory_mb`` (hard limit, no swap), ``workdir`` (the run folder, for service logs:
    mounted read-write at the same path; default: a folder of the engine), ``ledger``
    (default: the engine's), ``run_prefix`` (container names are
    ``<run_prefix>-<node>``; default ``tb-<run id>``), ``mounts`` (extra
    :class:`docker.types.Mount`), ``environment``.
    """

    def __init__(self, name: str, engine: Engine | None = None, image: str | None = None,
                 cpu: float | None = None, memory_mb: int | None = None,
                 workdir: str | Path | None = None, ledger: Ledger | None = None,
                 run_prefix: str | None = None, mounts: list[Mount] | None = None,
                 environment: dict[str, str] | None = None, **params: object) -> None:
        if engine is None:
            raise EmulationError(f"DockerHost {name}: the 'engine' parameter is required")
        self.engine = engine
        self.client = engine.client
        self.ledger = ledger or engine.ledger
        self.image = image or ensure_base_image(engine.client)
        self.run_dir = Path(workdir) if workdir else engine.dir / "nodes" / name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        prefix = run_prefix or f"tb-{self.ledger.run_id}"
        self.container_name = f"{safe_name(prefix, 40)}-{safe_name(name, 40)}"
        self.container, self._entry = self._create_container(
            name, cpu, memory_mb, list(mounts or []), dict(environment or {}))
        self.container_pid = self._start_container()
        try:
            super().__init__(name, **params)
        except BaseException:
            self.ledger.release(self._entry)
            raise

    # ----------------------------------------------------------------- container

    def _create_container(self, name: str, cpu: float | None, memory_mb: int | None,
                          mounts: list[Mount], environment: dict[str, str]
                          ) -> tuple[docker.models.containers.Container, Entry]:
        limits: dict[str, object] = {}
        if cpu is not None:
            limits.update(cpu_period=CPU_PERIOD_US, cpu_quota=cpu_quota(cpu))
        if memory_mb is not None:
            limits.update(mem_limit=f"{int(memory_mb)}m", memswap_limit=f"{int(memory_mb)}m")
        run_mount = Mount(target=str(self.run_dir), source=str(self.run_dir), type="bind")
        try:
            container = self.client.containers.create(
                self.image, KEEPALIVE, name=self.container_name, hostname=name,
                network_mode="none", init=True, detach=True,
                labels={LABEL_RUN: self.engine.run_id, LABEL_NODE: name},
                mounts=[*base_mounts(), run_mount, *mounts], environment=environment,
                **limits)
        except docker.errors.APIError as exc:
            raise EmulationError(f"DockerHost {name}: cannot create container "
                                 f"{self.container_name}: {exc.explanation}") from exc
        entry = self.ledger.record("container", socket=str(self.engine.socket),
                                   id=container.id, name=self.container_name)
        return container, entry

    def _start_container(self) -> int:
        try:
            self.container.start()
            self.container.reload()
        except docker.errors.APIError as exc:
            self.ledger.release(self._entry)
            raise EmulationError(f"cannot start container {self.container_name}: "
                                 f"{exc.explanation}") from exc
        pid = int(self.container.attrs["State"]["Pid"])
        if not pid:
            self.ledger.release(self._entry)
            raise EmulationError(f"container {self.container_name} exited at start "
                                 f"({self.container.attrs['State'].get('Error')})")
        return pid

    # -------------------------------------------------------------- Mininet shell

    def startShell(self, mnopts: str | None = None) -> None:
        """Start Mininet's shell in the container's network namespace (not a new one)."""
        self._shell_starting = True
        try:
            super().startShell(mnopts)
        finally:
            self._shell_starting = False

    def _popen(self, cmd: list[str], **params: object) -> subprocess.Popen:
        """Spawn the control shell via ``nsenter --net`` instead of ``mnexec -n``."""
        if getattr(self, "_shell_starting", False) and cmd[0] == "mnexec":
            flags = cmd[1].replace("n", "")
            cmd = ["mnexec", flags, "nsenter", f"--net=/proc/{self.container_pid}/ns/net",
                   *cmd[2:]]
        return super()._popen(cmd, **params)

    # ------------------------------------------------------------------- services

    def exec_service(self, argv: list[str], env: dict[str, str] | None = None,
                     log: str | Path | None = None, workdir: str | None = None
                     ) -> ExecHandle:
        """Start ``argv`` detached inside the container, stdout and stderr appended to
        ``log`` (default ``<run folder>/<program>.log``; it must lie in the run folder,
        the one host folder the container can write)."""
        if log is None:
            log = self.run_dir / f"{safe_name(Path(argv[0]).name, 60)}.log"
        log_path = Path(log)
        if not log_path.resolve().is_relative_to(self.run_dir.resolve()):
            raise EmulationError(f"{self.name}: service log {log_path} is outside the run "
                                 f"folder {self.run_dir} mounted in the container")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()  # exists from now on, so readers never race the shell's redirect
        wrapped = ["/usr/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(log_path), *argv]
        try:
            exec_id = self.client.api.exec_create(
                self.container.id, wrapped, environment=env,
                workdir=workdir or str(self.run_dir))["Id"]
            self.client.api.exec_start(exec_id, detach=True)
        except docker.errors.APIError as exc:
            raise EmulationError(f"{self.name}: cannot start {argv}: {exc.explanation}"
                                 ) from exc
        deadline = time.monotonic() + 10.0
        while not (info := self.client.api.exec_inspect(exec_id))["Pid"]:
            if not info["Running"] and info["ExitCode"] is not None:
                raise EmulationError(f"{self.name}: {argv} exited at once with "
                                     f"{info['ExitCode']}; see {log_path}")
            if time.monotonic() > deadline:
                raise EmulationError(f"{self.name}: {argv} did not start within 10 s")
            time.sleep(0.01)
        return ExecHandle(self.client, exec_id, info["Pid"],
                          process_start_time(info["Pid"]), list(argv), log_path)

    def stop_service(self, handle: ExecHandle, timeout: float = 5.0) -> int | None:
        """SIGTERM a service, SIGKILL it after ``timeout``; return its exit code."""
        for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            handle.signal(sig)
            if wait_gone(handle.pid, handle.pid_start, grace):
                break
        try:
            return handle.wait(5.0)
        except (EmulationError, docker.errors.NotFound):
            return None  # the container is gone: no exit code to read

    def exec_run(self, argv: list[str], env: dict[str, str] | None = None
                 ) -> tuple[int, str]:
        """Run ``argv`` inside the container to completion: (exit code, stdout+stderr)."""
        result = self.container.exec_run(argv, environment=env)
        return result.exit_code, result.output.decode(errors="replace")

    # -------------------------------------------------------------------- control

    def crash(self) -> None:
        """Kill the container (SIGKILL to every process in it), as a node failure.

        Its network namespace stays alive (held by the Mininet shell), so links and
        addresses remain and the kernel still answers pings; services are gone.
        """
        try:
            self.container.kill()
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: not running any more
                raise

    def set_cpu(self, share: float) -> None:
        """Change the CPU limit live to ``share`` of the whole machine in (0, 1]."""
        self.container.update(cpu_period=CPU_PERIOD_US, cpu_quota=cpu_quota(share))

    def terminate(self) -> None:
        """Stop Mininet's shell, then remove the container (through the ledger)."""
        super().terminate()
        self.ledger.release(self._entry)
