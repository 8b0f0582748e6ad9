"""Docker containers as Mininet hosts.

A :class:`DockerHost` is a Mininet host whose network namespace belongs to containers of
the harness's private engine, in the shape of a pod: a *sandbox* container started with
``--network none`` (the engine touches no network) only holds the namespace, and the
node's *service* container joins it (``--network container:<sandbox>``). Mininet's
control shell is started *inside that network namespace only* (host filesystem and
tools, container network), so every piece of Mininet that configures a host
(``addLink``, ``Intf.setIP``, routes, tc) works unchanged and the host's interfaces land
in the container.

Services run *in* the service container (its filesystem, cgroup limits, pid namespace and
volumes) with :meth:`DockerHost.exec_service`; commands run through ``cmd``/``popen``
share only its network. Because the namespace belongs to the sandbox, the service
container can be killed (:meth:`DockerHost.crash`), started again
(:meth:`DockerHost.restart`) or replaced by a fresh one of the same image
(:meth:`DockerHost.recreate`) while links, addresses and shaping stay. Named Docker
volumes (``volumes={name: path}``) outlive all three: they are what a node keeps on
disk. Containers are written in the run ledger as kind ``container``, volumes as kind
``docker_volume``; both are removed by name or id through the engine that made them.

With ``engine_access`` the node's services get the engine itself (its socket mounted
into the service container): they may start sibling containers in the pod
(:mod:`nodes.pod`), each labelled ``edge-testbed.parent=<service container>``. The host
records, before any service runs, a ``docker_children`` ledger entry that removes every
container so labelled, and :meth:`DockerHost.crash` kills them with the node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
from docker.types import Mount
from mininet.node import Host

from nodes.pod import LABEL_PARENT
from testbed.emulation.docker_engine import (
    API_VERSION,
    Engine,
    base_mounts,
    ensure_base_image,
    safe_name,
)
from testbed.emulation.exits import wait_exits
from testbed.emulation.ledger import (
    Entry,
    Ledger,
    is_running,
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


def _remove_children(client: docker.DockerClient, parent: str) -> None:
    """Remove every container labelled as started by the pod container ``parent``."""
    for found in client.api.containers(all=True, quiet=True,
                                       filters={"label": f"{LABEL_PARENT}={parent}"}):
        try:
            client.api.remove_container(found["Id"], force=True, v=True)
        except docker.errors.NotFound:
            pass


@undo_handler("docker_children")
def _undo_children(data: dict) -> None:
    """Remove the containers a pod's services started in the pod (found by label)."""
    socket = Path(data["socket"])
    if not socket.exists():
        return  # the engine is gone; a new engine removes leftover containers at its start
    client = docker.DockerClient(base_url=f"unix://{socket}", version=API_VERSION,
                                 timeout=60)
    try:
        _remove_children(client, data["parent"])
    except requests.exceptions.ConnectionError:
        return
    finally:
        client.close()


@undo_handler("docker_volume")
def _undo_volume(data: dict) -> None:
    """Remove a named volume through the engine that made it (after its containers:
    the ledger undoes newest first, and a volume is recorded before its containers)."""
    socket = Path(data["socket"])
    if not socket.exists():
        return  # the engine is gone; a new engine removes leftover volumes at its start
    client = docker.DockerClient(base_url=f"unix://{socket}", version=API_VERSION,
                                 timeout=60)
    try:
        client.api.remove_volume(data["name"], force=True)
    except docker.errors.NotFound:
        pass
    except requests.exceptions.ConnectionError:
        return
    finally:
        client.close()


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def container_processes(init_pid: int) -> list[int]:
    """Every process of the container whose init is ``init_pid``: the members of the
    init's ``pids`` cgroup (v1) or of its unified cgroup (v2 only) that share its pid
    namespace; processes exec'd into a container are the init's siblings, not its
    children. Empty when no such cgroup is found."""
    try:
        lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    entries = [line.split(":", 2) for line in lines]
    folders = [Path("/sys/fs/cgroup/pids", path.lstrip("/")) for _, controllers, path
               in entries if "pids" in controllers.split(",") and path != "/"]
    folders += [Path("/sys/fs/cgroup", path.lstrip("/")) for hid, controllers, path
                in entries if hid == "0" and not controllers and path != "/"]
    namespace = _pid_namespace(init_pid)
    for folder in folders:
        try:
            pids = [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            continue
        return [pid for pid in pids if namespace and _pid_namespace(pid) == namespace]
    return []


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
    """A Mininet host backed by containers of the harness's engine.

    Params (besides Mininet's): ``engine`` (an :class:`Engine`, required), ``image``
    (default: the base image), ``cpu`` (share of the whole machine in (0, 1]),
    ``memory_mb`` (hard limit, no swap), ``workdir`` (the run folder, for service logs:
    mounted read-write at the same path; default: a folder of the engine), ``ledger``
    (default: the engine's), ``run_prefix`` (the service container is named
    ``<run_prefix>-<node>``, its sandbox ``<run_prefix>-<node>-net``; default
    ``tb-<run id>``), ``mounts`` (extra :class:`docker.types.Mount`), ``volumes``
    (``{name: absolute path in the container}``: named volumes
    ``<run_prefix>-<node>-<name>``, created for the run and removed with it),
    ``environment``, ``engine_access`` (mount the engine's socket into the service
    container at its own path, :attr:`engine_socket`, for services that start sibling
    containers; they are removed with the node, see the module docstring), ``cpuset`` (a
    CPU list the service container runs on: the hosts' side of a CPU partition, see
    :mod:`testbed.emulation.cpu_partition`).
    """

    def __init__(self, name: str, engine: Engine | None = None, image: str | None = None,
                 cpu: float | None = None, memory_mb: int | None = None,
                 workdir: str | Path | None = None, ledger: Ledger | None = None,
                 run_prefix: str | None = None, mounts: list[Mount] | None = None,
                 volumes: dict[str, str] | None = None,
                 environment: dict[str, str] | None = None, engine_access: bool = False,
                 cpuset: str | None = None, **params: object) -> None:
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
        self._entries: list[Entry] = []  # volumes, sandbox, service container: in order
        self.engine_socket = engine.socket if engine_access else None
        try:
            self.volumes = self._create_volumes(name, dict(volumes or {}))
            run_mount = Mount(target=str(self.run_dir), source=str(self.run_dir),
                              type="bind")
            volume_mounts = [Mount(target=path, source=volume, type="volume")
                             for volume, path in self.volumes.values()]
            socket_mount = [Mount(target=str(engine.socket), source=str(engine.socket),
                                  type="bind")] if engine_access else []
            self._config: dict[str, object] = {
                "mounts": [*base_mounts(), run_mount, *(mounts or []), *volume_mounts,
                           *socket_mount],
                "environment": dict(environment or {}),
                **self._limits(cpu, memory_mb),
                **({"cpuset_cpus": cpuset} if cpuset else {})}
            self.sandbox = self._create(f"{self.container_name}-net", name,
                                        network_mode="none", hostname=name,
                                        mounts=base_mounts())
            self.sandbox_pid = self._start(self.sandbox)
            if engine_access:  # before anything in the pod can start a child
                self._entries.append(self.ledger.record(
                    "docker_children", socket=str(engine.socket), parent=self.container_name))
            self.container = self._create(self.container_name, name,
                                          network_mode=f"container:{self.sandbox.id}",
                                          **self._config)
            self._start_service_container()
            super().__init__(name, **params)
        except BaseException:
            self._release_all()
            raise

    # ----------------------------------------------------------------- container

    @staticmethod
    def _limits(cpu: float | None, memory_mb: int | None) -> dict[str, object]:
        limits: dict[str, object] = {}
        if cpu is not None:
            limits.update(cpu_period=CPU_PERIOD_US, cpu_quota=cpu_quota(cpu))
        if memory_mb is not None:
            limits.update(mem_limit=f"{int(memory_mb)}m", memswap_limit=f"{int(memory_mb)}m")
        return limits

    def _create_volumes(self, node: str, volumes: dict[str, str]
                        ) -> dict[str, tuple[str, str]]:
        """Create the node's named volumes: ``{name: (volume name, path)}``."""
        made: dict[str, tuple[str, str]] = {}
        for short, path in volumes.items():
            if not str(path).startswith("/"):
                raise EmulationError(f"DockerHost {node}: volume {short!r} must be mounted "
                                     f"at an absolute path, found {path!r}")
            volume = f"{self.container_name}-{safe_name(short, 40)}"
            try:
                self.client.volumes.create(volume, labels={LABEL_RUN: self.engine.run_id,
                                                           LABEL_NODE: node})
            except docker.errors.APIError as exc:
                raise EmulationError(f"DockerHost {node}: cannot create volume {volume}: "
                                     f"{exc.explanation}") from exc
            self._entries.append(self.ledger.record(
                "docker_volume", socket=str(self.engine.socket), name=volume))
            made[short] = (volume, str(path))
        return made

    def _create(self, container_name: str, node: str, **options: object
                ) -> docker.models.containers.Container:
        try:
            container = self.client.containers.create(
                self.image, KEEPALIVE, name=container_name, init=True, detach=True,
                labels={LABEL_RUN: self.engine.run_id, LABEL_NODE: node}, **options)
        except docker.errors.APIError as exc:
            raise EmulationError(f"DockerHost {node}: cannot create container "
                                 f"{container_name}: {exc.explanation}") from exc
        self._entries.append(self.ledger.record("container", socket=str(self.engine.socket),
                                                id=container.id, name=container_name))
        return container

    @staticmethod
    def _start(container: docker.models.containers.Container) -> int:
        """Start ``container``; its init's host pid."""
        try:
            container.start()
            container.reload()
        except docker.errors.APIError as exc:
            raise EmulationError(f"cannot start container {container.name}: "
                                 f"{exc.explanation}") from exc
        pid = int(container.attrs["State"]["Pid"])
        if not pid:
            raise EmulationError(f"container {container.name} exited at start "
                                 f"({container.attrs['State'].get('Error')})")
        return pid

    def _start_service_container(self) -> int:
        """Start the service container; records its init's pid and start time (so a
        crash never signals a recycled pid) and how long the start took
        (``container_start_s``: what a join of a crashed node pays for it)."""
        began = time.monotonic()
        self.container_pid = self._start(self.container)
        self.container_start = process_start_time(self.container_pid)
        self.container_start_s = time.monotonic() - began
        return self.container_pid

    def _release_all(self) -> None:
        """Remove what this host made, newest first (service container, sandbox, volumes)."""
        while self._entries:
            self.ledger.release(self._entries.pop())

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
            cmd = ["mnexec", flags, "nsenter", f"--net=/proc/{self.sandbox_pid}/ns/net",
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
        """Kill the service container (SIGKILL to every process in it), as a node failure.

        The network namespace stays alive (held by the sandbox and the Mininet shell), so
        links and addresses remain and the kernel still answers pings; services are gone,
        and so are the containers they started in the pod.
        """
        self.kill()
        self.settle_crash()

    def kill(self) -> None:
        """The instant part of :meth:`crash`: SIGKILL every process of the service
        container from the host at once (its services, exec'd beside the init, and its
        background load) and return once they are gone. An engine call would take tens
        of milliseconds more, and the init takes as long again to tear its pid namespace
        down; the engine notices by itself, and :meth:`settle_crash` waits for both."""
        if not is_running(self.container_pid, self.container_start):
            return
        procs = [(pid, process_start_time(pid)) for pid in container_processes(
            self.container_pid) if pid != self.container_pid]
        init = (self.container_pid, self.container_start)
        for pid, start in [*procs, init]:
            if is_running(pid, start):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not wait_exits(procs or [init], timeout=30):  # the init alone: no cgroup read
            raise EmulationError(f"{self.name}: the service container's processes still "
                                 "run 30 s after SIGKILL")

    def settle_crash(self) -> None:
        """After :meth:`kill`: wait until the container's init has ended and the engine
        has recorded it, and remove the containers the node's services had started in
        the pod."""
        if not wait_exits([(self.container_pid, self.container_start)], timeout=30):
            raise EmulationError(f"{self.name}: the service container's init still runs "
                                 "30 s after SIGKILL")
        self.container.wait(timeout=30)
        if self.engine_socket is not None:  # what the node's services started dies too
            _remove_children(self.client, self.container_name)

    def running(self) -> bool:
        """Whether the service container runs."""
        self.container.reload()
        return self.container.status == "running"

    def restart(self) -> int:
        """Start the service container again after :meth:`crash` (killing it first if it
        still runs): same writable layer, same volumes, same network namespace. Services
        are not restarted: start them again with :meth:`exec_service`. Returns the new
        init's pid."""
        if self.running():
            self.crash()
        return self._start_service_container()

    def recreate(self) -> int:
        """Replace the service container by a fresh one of the same image and settings,
        as a node re-installed from its image: the writable layer is new, only the
        volumes (and bind mounts) carry data over. Returns the new init's pid."""
        self.ledger.release(self._entries.pop())  # the service container's: the newest
        self.container = self._create(self.container_name, self.name,
                                      network_mode=f"container:{self.sandbox.id}",
                                      **self._config)
        return self._start_service_container()

    def set_cpu(self, share: float) -> None:
        """Change the CPU limit live to ``share`` of the whole machine in (0, 1]."""
        self.container.update(cpu_period=CPU_PERIOD_US, cpu_quota=cpu_quota(share))

    def terminate(self) -> None:
        """Stop Mininet's shell, then remove the containers and volumes (through the
        ledger)."""
        super().terminate()
        self._release_all()
