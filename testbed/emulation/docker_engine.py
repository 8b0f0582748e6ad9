"""The harness's own Docker engine and its registry-free base image.

The harness never talks to a Docker engine it did not start: a machine's engine may
belong to someone else, and its default flags rewrite the host firewall (FORWARD policy
DROP), which silently breaks Linux-bridge switches. :func:`start_engine` runs a private
``dockerd`` that leaves the firewall, IP forwarding and bridges alone, listens on a
private socket, and keeps every piece of run-time state (exec root, its managed
containerd, pid file, socket, log) in one folder per engine under ``RUN_ROOT``.

Only the image store (the data root) is shared between runs, so the base image is built
once. Two engines on one data root would corrupt it, so the data root is guarded by an
``flock`` on a file beside it. The locked descriptor is inherited by ``dockerd`` (and
from it by containerd and the shims), so the lock is held exactly as long as any engine
process that may touch the data root lives, even if the harness itself is killed.

The engine is written in the run ledger as one ``docker_engine`` entry; its undo handler
stops ``dockerd`` and then removes, by path and by cgroup, whatever an unclean stop left:
containerd, shims, container processes, mounts, cgroups and the engine's folder.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import docker
import requests
from docker.types import Mount

from testbed.emulation import locks
from testbed.emulation.ledger import Entry, Ledger, process_start_time, undo_handler, wait_gone
from testbed.errors import EmulationError

DATA_ROOT = Path(os.environ.get("TESTBED_DOCKER_DATA_ROOT", "/var/lib/edge-testbed/docker"))
RUN_ROOT = Path(os.environ.get("TESTBED_DOCKER_RUN_ROOT", "/run/edge-testbed/docker"))
API_VERSION = "1.41"  # Debian 12's dockerd 20.10; newer engines still accept it
BASE_REPOSITORY = "edge-testbed/base"

# Host folders dockerd/containerd 20.10 create at fixed paths whatever their flags say
# (plugin discovery, shim sockets). Removed at teardown only if this engine made them
# and they are empty.
_FIXED_DIRS = (Path("/run/docker/plugins"), Path("/run/docker"),
               Path("/run/containerd/s"), Path("/run/containerd"))
_DOCKERD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def safe_name(text: str, limit: int) -> str:
    """``text`` reduced to characters valid in container, cgroup and folder names."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "run"
    return cleaned[:limit]


# --------------------------------------------------------------------------- the lock

def _lock_path(data_root: Path) -> Path:
    return data_root.parent / f"{data_root.name}.lock"


def _acquire_lock(data_root: Path, timeout: float, run_id: str) -> int:
    """Lock ``data_root`` for this harness; wait at most ``timeout`` seconds for it,
    saying in one line what the run waits for when another engine holds it."""
    return locks.acquire(
        _lock_path(data_root), run_id, f"the Docker data root {data_root}",
        timeout=timeout,
        hint="wait for that run to end, or give this run its own data root "
             "(TESTBED_DOCKER_DATA_ROOT)")


# This process's descriptor of each running engine's lock, by engine folder. The undo
# handler closes it, so the lock goes away with the engine however it is torn down.
_HELD_LOCKS: dict[str, int] = {}


def _release_lock(engine_dir: str) -> None:
    fd = _HELD_LOCKS.pop(engine_dir, None)
    if fd is not None:
        os.close(fd)  # the engine's own processes still hold it until they are gone


def _data_root_free(data_root: Path) -> bool:
    """True when no engine (nor harness) holds the data root's lock right now."""
    return locks.is_free(_lock_path(data_root))


# ------------------------------------------------------------------------- the engine

@dataclass
class Engine:
    """A running private ``dockerd``; stop it with :meth:`stop` or the run's ledger."""

    ledger: Ledger
    entry: Entry
    dir: Path
    socket: Path
    data_root: Path
    pid: int
    client: docker.DockerClient
    _process: subprocess.Popen = field(repr=False)

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def exec_root(self) -> Path:
        return self.dir / "exec"

    @property
    def run_id(self) -> str:
        return self.ledger.run_id

    def containerd_pid(self) -> int | None:
        """Pid of the containerd this engine manages, None when it is not running."""
        try:
            pid = int((self.exec_root / "containerd" / "containerd.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if process_start_time(pid) is not None else None

    def stop(self) -> None:
        """Stop the engine and everything it ran; idempotent."""
        self.client.close()
        self.ledger.release(self.entry)
        self._process.poll()  # the undo handler reaped it; let Popen notice

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _dockerd_argv(engine_dir: Path, data_root: Path, cgroup_parent: str,
                  namespace: str) -> list[str]:
    exec_root = engine_dir / "exec"
    return [
        "dockerd",
        "--config-file", str(engine_dir / "daemon.json"),
        "--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
        "--userland-proxy=false",
        "--storage-driver", "overlay2",
        "--data-root", str(data_root),
        "--exec-root", str(exec_root),
        "--pidfile", str(engine_dir / "dockerd.pid"),
        "-H", f"unix://{engine_dir / 'docker.sock'}",
        "--containerd-namespace", namespace,
        "--containerd-plugins-namespace", f"{namespace}-plugins",
        "--cgroup-parent", cgroup_parent,
        "--shutdown-timeout", "5",
    ]


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_engine(ledger: Ledger, *, data_root: Path | None = None,
                 lock_timeout: float = 60.0, ready_timeout: float = 30.0) -> Engine:
    """Start a private ``dockerd`` for this run and wait until its API answers.

    ``data_root`` (default ``DATA_ROOT``) keeps images between runs; if another engine of
    the harness holds it, wait up to ``lock_timeout`` seconds, then raise
    :class:`EmulationError`. The engine is recorded in ``ledger`` before it is used.
    """
    if shutil.which("dockerd", path=_DOCKERD_PATH) is None:
        raise EmulationError("dockerd not found: install Debian's docker.io package")
    data_root = Path(data_root) if data_root is not None else DATA_ROOT
    data_root.mkdir(parents=True, exist_ok=True)
    lock_fd = _acquire_lock(data_root, lock_timeout, ledger.run_id)
    entry: Entry | None = None
    try:
        RUN_ROOT.mkdir(parents=True, exist_ok=True)
        engine_dir = Path(tempfile.mkdtemp(prefix=safe_name(ledger.run_id, 16) + "-",
                                           dir=RUN_ROOT))
        (engine_dir / "daemon.json").write_text("{}\n")  # never read /etc/docker's
        namespace = "tb-" + hashlib.sha256(str(engine_dir).encode()).hexdigest()[:12]
        cgroup_parent = f"/edge-testbed-{engine_dir.name}"
        fixed_dirs_made = [str(p) for p in _FIXED_DIRS if not p.exists()]
        with (engine_dir / "dockerd.log").open("wb") as log:
            process = subprocess.Popen(
                _dockerd_argv(engine_dir, data_root, cgroup_parent, namespace),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(lock_fd,),
                env={"PATH": _DOCKERD_PATH, "HOME": "/root", "LANG": "C.UTF-8"})
        _HELD_LOCKS[str(engine_dir)] = lock_fd
        entry = ledger.record(
            "docker_engine", pid=process.pid, start=process_start_time(process.pid),
            dir=str(engine_dir), data_root=str(data_root), cgroup_parent=cgroup_parent,
            fixed_dirs=fixed_dirs_made)
        socket = engine_dir / "docker.sock"
        client = _wait_ready(process, socket, engine_dir / "dockerd.log", ready_timeout)
        _remove_stale_containers(client)
        return Engine(ledger=ledger, entry=entry, dir=engine_dir, socket=socket,
                      data_root=data_root, pid=process.pid, client=client,
                      _process=process)
    except BaseException:
        if entry is not None:
            ledger.release(entry)  # also drops the lock
        else:
            os.close(lock_fd)
        raise


def _wait_ready(process: subprocess.Popen, socket: Path, log: Path,
                timeout: float) -> docker.DockerClient:
    """Wait until ``/_ping`` answers on ``socket``; fail early if dockerd exits."""
    client = docker.DockerClient(base_url=f"unix://{socket}", version=API_VERSION,
                                 timeout=60)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            client.close()
            raise EmulationError(f"dockerd exited with {process.returncode} while "
                                 f"starting; its log ends with:\n{_log_tail(log)}")
        if socket.exists():
            try:
                if client.ping():
                    return client
            except (requests.exceptions.ConnectionError, docker.errors.APIError):
                pass
        if time.monotonic() >= deadline:
            client.close()
            raise EmulationError(f"dockerd did not answer on {socket} within {timeout} s; "
                                 f"its log ends with:\n{_log_tail(log)}")
        time.sleep(0.02)


def _remove_stale_containers(client: docker.DockerClient) -> None:
    """Remove containers and volumes an earlier, killed run left in the data root.

    The data root is the harness's own and locked, so any container or volume in it
    belongs to a run that is over (dockerd already killed its processes while starting).
    Volumes live as long as their run: a run's ledger removes them at its teardown.
    """
    for container in client.containers.list(all=True, ignore_removed=True):
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    for volume in client.volumes.list():
        try:
            volume.remove(force=True)
        except docker.errors.NotFound:
            pass


# ------------------------------------------------------------- teardown of an engine

def _pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains ``text`` (an engine's private path)."""
    found = []
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _cgroup_dirs(parent: str) -> list[Path]:
    """Every folder of cgroup ``parent`` (and below) in every mounted v1/v2 hierarchy."""
    dirs: list[Path] = []
    root = Path("/sys/fs/cgroup")
    hierarchies = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    for top in [root, *hierarchies]:
        base = top / parent.lstrip("/")
        if base.is_dir():
            dirs.extend(Path(p) for p, _, _ in os.walk(base))
    return dirs


def _cgroup_pids(dirs: list[Path]) -> set[int]:
    pids: set[int] = set()
    for folder in dirs:
        try:
            pids.update(int(x) for x in (folder / "cgroup.procs").read_text().split())
        except OSError:
            continue
    return pids


def _kill_all(pids: set[int] | list[int]) -> None:
    started = {pid: process_start_time(pid) for pid in pids}
    for pid, start in started.items():
        if start is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid, start in started.items():
        if start is not None:
            wait_gone(pid, start, 5.0)


def _unescape_mount_path(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below ``prefix``, deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape_mount_path(line.split()[4])
        if point == str(prefix) or point.startswith(str(prefix) + "/"):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _unmount_under(prefix: Path) -> None:
    for point in _mounts_under(prefix):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


@undo_handler("docker_engine")
def _undo_engine(data: dict) -> None:
    """Stop one private engine and remove whatever it left, found by path and cgroup."""
    _release_lock(data["dir"])
    pid, start = data["pid"], data.get("start")
    if process_start_time(pid) == start:
        os.kill(pid, signal.SIGTERM)  # dockerd stops its containers and containerd
        if not wait_gone(pid, start, 30.0):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, start, 5.0)
    engine_dir = Path(data["dir"])
    # Left only by an unclean stop: container processes, then containerd and shims.
    for _ in range(3):
        leftovers = _cgroup_pids(_cgroup_dirs(data["cgroup_parent"]))
        if not leftovers:
            break
        _kill_all(leftovers)
    _kill_all(_pids_mentioning(str(engine_dir)))
    _unmount_under(engine_dir)
    data_root = Path(data["data_root"])
    if _data_root_free(data_root):  # no other engine is using its mounts
        _unmount_under(data_root)
    for folder in sorted(_cgroup_dirs(data["cgroup_parent"]), key=lambda p: len(p.parts),
                         reverse=True):
        try:
            folder.rmdir()
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise EmulationError(f"cannot remove cgroup {folder}: {exc}") from exc
    shutil.rmtree(engine_dir, ignore_errors=True)
    for made in data.get("fixed_dirs", []):
        try:
            Path(made).rmdir()  # only when empty: another engine may be using it
        except OSError:
            pass


# ------------------------------------------------------------------- the base image

_IMAGE_DIRS = ("usr", "usr/bin", "usr/lib", "usr/lib64", "usr/libexec", "usr/local",
               "usr/sbin", "usr/share", "etc", "dev", "proc", "sys", "run", "tmp", "var",
               "var/tmp", "root", "home")
_IMAGE_LINKS = (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                ("sbin", "usr/sbin"))
_IMAGE_CHANGES = (
    "ENV PATH=/usr/local/bin:/usr/bin:/usr/sbin",
    "ENV LANG=C.UTF-8",
    'CMD ["/usr/bin/sleep", "infinity"]',
)
# Host pieces a container needs, mounted read-only at the same paths. /usr/sbin stays
# the image's own (writable) folder: dockerd mounts its init at /sbin/docker-init.
_HOST_USR = ("/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local",
             "/usr/share")
_HOST_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ssl",
             "/etc/ca-certificates", "/etc/alternatives", "/etc/mime.types",
             "/etc/protocols", "/etc/services", "/etc/python3", "/etc/python3.11")


def _base_image_tar() -> bytes:
    """The image's only layer: empty folders and the usr-merge links, byte-stable."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in _IMAGE_DIRS:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name.endswith("tmp") else 0o755
            tar.addfile(info)
        for name, target in _IMAGE_LINKS:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buf.getvalue()


def base_image_tag() -> str:
    """``edge-testbed/base:<hash>``, the hash covering everything that defines the image."""
    digest = hashlib.sha256(_base_image_tar())
    digest.update("\n".join(_IMAGE_CHANGES).encode())
    return f"{BASE_REPOSITORY}:{digest.hexdigest()[:16]}"


def ensure_base_image(client: docker.DockerClient) -> str:
    """Import the base image unless an identical one exists; return its tag.

    No registry is involved: the image is a tar stream imported into the engine.
    """
    tag = base_image_tag()
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    repository, version = tag.split(":")
    client.api.import_image_from_data(_base_image_tar(), repository=repository,
                                      tag=version, changes=list(_IMAGE_CHANGES))
    client.images.get(tag)  # raises if the import did not produce it
    return tag


def venv_root() -> Path:
    """The project's virtual environment (the running one, else ``PROJECT_ROOT/.venv``)."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix)
    return PROJECT_ROOT / ".venv"


def venv_python() -> str:
    """The interpreter services run with, valid both on the host and in containers."""
    return str(venv_root() / "bin" / "python")


def base_mounts() -> list[Mount]:
    """Read-only bind mounts that make the base image run the project from its venv.

    The trade-off: containers are instant and tiny but tied to this host's paths and
    packages (same ``/usr``, same project folder); they are not portable images.
    """
    paths = [p for p in (*_HOST_USR, *_HOST_ETC) if os.path.lexists(p)]
    project = PROJECT_ROOT
    paths.append(str(project))
    venv = venv_root().resolve()
    if not venv.is_relative_to(project):
        paths.append(str(venv))
    return [Mount(target=p, source=p, type="bind", read_only=True) for p in paths]
