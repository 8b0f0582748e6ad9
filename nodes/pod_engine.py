"""The node's Docker engine as a service in a pod sees it (:mod:`nodes.pod` says what a
pod is and the contract with the harness): inspect the pod, build images locally, start,
watch, measure, stop and remove sibling containers. The Docker SDK is synchronous;
callers in an event loop run these methods in a thread.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import docker
import requests
from docker.types import Mount

from nodes.pod import LABEL_PARENT, LABEL_PREFIX, Exit, PodError

API_VERSION = "1.41"  # Debian 12's dockerd 20.10; newer engines accept it
CPU_PERIOD_US = 100_000
REMOVE_RETRY_S = 30.0


def _explain(exc: Exception) -> str:
    return str(getattr(exc, "explanation", None) or exc)


class PodEngine:
    """The node's engine seen from a service in the pod's service container ``pod``.

    ``socket`` is the engine's Unix socket as mounted in the pod. Raises
    :class:`PodError` when the engine does not answer or knows no such container.
    """

    def __init__(self, socket: str, pod: str, timeout_s: float = 60.0) -> None:
        self.client = docker.DockerClient(base_url=f"unix://{socket}", version=API_VERSION,
                                          timeout=timeout_s)
        try:
            info = self.client.api.inspect_container(pod)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            self.client.close()
            raise PodError(f"the engine at {socket} does not show pod {pod}: "
                           f"{_explain(exc)}") from None
        self.pod = info["Name"].lstrip("/")
        self.pod_image = info["Config"]["Image"]
        labels = info["Config"].get("Labels") or {}
        self.labels = {k: v for k, v in labels.items() if k.startswith(LABEL_PREFIX)}
        self.labels[LABEL_PARENT] = self.pod
        mode = info["HostConfig"].get("NetworkMode") or ""
        # the pod's network namespace: the sandbox's, or the service container's own
        self.network_mode = mode if mode.startswith("container:") else f"container:{info['Id']}"
        self._mounts = [m for m in info.get("Mounts", []) if m.get("Type") == "bind"]

    # --------------------------------------------------------------------- mounts

    def mounts(self, leave_out: Iterable[str] = (), add: Iterable[str] = (),
               writable: Mapping[str, str] | None = None) -> list[Mount]:
        """The pod's read-only bind mounts (same paths), but those at ``leave_out``,
        plus the host folders ``add`` (read-only, same paths) and ``writable``
        (``{path in the container: host folder}``)."""
        skip = {str(p) for p in leave_out}
        found = [Mount(target=m["Destination"], source=m["Source"], type="bind",
                       read_only=True)
                 for m in self._mounts if not m.get("RW") and m["Destination"] not in skip]
        have = {m["Target"] for m in found}
        found += [Mount(target=str(p), source=str(p), type="bind", read_only=True)
                  for p in add if str(p) not in have]
        found += [Mount(target=target, source=source, type="bind")
                  for target, source in (writable or {}).items()]
        return found

    def host_path(self, path: Path) -> Path | None:
        """Where ``path`` (inside the pod) is on the host, when it lies in one of the
        pod's writable bind mounts; None otherwise."""
        for m in sorted(self._mounts, key=lambda m: len(m["Destination"]), reverse=True):
            inside = Path(m["Destination"])
            if m.get("RW") and (path == inside or path.is_relative_to(inside)):
                return Path(m["Source"]) / path.relative_to(inside)
        return None

    # --------------------------------------------------------------------- images

    def ensure_image(self, repository: str, content_key: str,
                     files: Callable[[], Mapping[str, bytes]],
                     dockerfile: Iterable[str]) -> tuple[str, float | None]:
        """A local image ``repository:<hash>`` built ``FROM`` the pod's image with
        ``dockerfile``'s lines, the build context being ``files()`` (archive name to
        bytes; called only to build). The hash covers the lines and ``content_key``,
        which must change whenever the files do. Returns the tag and the build's
        seconds, None when the image was there already. Older tags of ``repository`` are
        removed after a build (those a container still uses stay)."""
        lines = [f"FROM {self.pod_image}", *dockerfile]
        digest = hashlib.sha256("\n".join([*lines, content_key]).encode())
        tag = f"{repository}:{digest.hexdigest()[:16]}"
        try:
            self.client.images.get(tag)
            return tag, None
        except docker.errors.ImageNotFound:
            pass
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise PodError(f"image {tag}: {_explain(exc)}") from None
        began = time.monotonic()
        context = _context_tar({"Dockerfile": "\n".join(lines).encode() + b"\n", **files()})
        try:
            self.client.images.build(fileobj=io.BytesIO(context), custom_context=True,
                                     tag=tag, pull=False, nocache=True, rm=True,
                                     forcerm=True, labels=dict(self.labels))
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise PodError(f"building image {tag}: {_explain(exc)}") from None
        took = time.monotonic() - began
        self._prune(repository, keep=tag)
        return tag, took

    def remove_image(self, repository: str) -> int:
        """Remove every tag of ``repository`` no container uses; how many were removed."""
        return self._prune(repository, keep=None)

    def _prune(self, repository: str, keep: str | None) -> int:
        removed = 0
        for image in self.client.images.list(name=repository):
            if keep in image.tags:
                continue
            for tag in image.tags:
                try:
                    self.client.images.remove(tag, noprune=False)
                    removed += 1
                except docker.errors.APIError:
                    pass  # in use by a container, or already gone
        return removed

    # ----------------------------------------------------------------- containers

    def run(self, name: str, image: str, argv: list[str], *, cpu: float, memory_mb: int,
            environment: Mapping[str, str], mounts: list[Mount],
            labels: Mapping[str, str]) -> str:
        """Create and start a sibling container in the pod's network namespace, limited
        to ``cpu`` cores (CFS quota per 100 ms) and ``memory_mb`` (swap included);
        returns its id. Raises :class:`PodError` with the engine's reason."""
        try:
            container = self.client.containers.create(
                image, argv, name=name, init=True, detach=True,
                network_mode=self.network_mode, mounts=mounts,
                environment=dict(environment), labels={**self.labels, **labels},
                cpu_period=CPU_PERIOD_US, cpu_quota=max(1000, round(cpu * CPU_PERIOD_US)),
                mem_limit=f"{int(memory_mb)}m", memswap_limit=f"{int(memory_mb)}m")
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise PodError(f"creating container {name}: {_explain(exc)}") from None
        try:
            container.start()
        except (docker.errors.DockerException, requests.RequestException) as exc:
            self.remove(container.id)
            raise PodError(f"starting container {name}: {_explain(exc)}") from None
        return str(container.id)

    def wait(self, container: str) -> Exit:
        """Block until the container ends; how it ended (a removed one: code -1)."""
        try:
            code = int(self.client.api.wait(container, timeout=None)["StatusCode"])
            state = self.client.api.inspect_container(container)["State"]
            return Exit(code, bool(state.get("OOMKilled")))
        except docker.errors.NotFound:
            return Exit(-1, False)

    def usage(self, container: str) -> tuple[float, int] | None:
        """CPU seconds used so far and memory bytes now, None when it is not running."""
        try:
            stats = self.client.api.stats(container, stream=False, one_shot=True)
        except (docker.errors.DockerException, requests.RequestException):
            return None
        cpu = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
        if cpu is None:
            return None
        return cpu / 1e9, int(stats.get("memory_stats", {}).get("usage") or 0)

    def stop(self, container: str, grace_s: float) -> None:
        """SIGTERM, SIGKILL after ``grace_s``, then remove the container."""
        try:
            self.client.api.stop(container, timeout=max(1, round(grace_s)))
        except (docker.errors.NotFound, requests.RequestException):
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 304:  # 304: not running
                raise PodError(f"stopping {container}: {_explain(exc)}") from None
        self.remove(container)

    def kill(self, container: str) -> None:
        """SIGKILL every process of the container (it is removed when it ends)."""
        try:
            self.client.api.kill(container)
        except docker.errors.APIError:
            pass  # not running any more, or gone

    def remove(self, container: str) -> None:
        """Remove the container whatever its state; a missing one is fine."""
        deadline = time.monotonic() + REMOVE_RETRY_S
        while True:
            try:
                self.client.api.remove_container(container, force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:  # 409: a removal already in progress
                if exc.status_code != 409 or time.monotonic() > deadline:
                    raise PodError(f"removing {container}: {_explain(exc)}") from None
            time.sleep(0.05)

    def children(self) -> list[str]:
        """Ids of every container this pod started (running or not)."""
        found = self.client.api.containers(all=True, quiet=True,
                                           filters={"label": f"{LABEL_PARENT}={self.pod}"})
        return [c["Id"] for c in found]

    def remove_children(self) -> int:
        """Remove every container this pod started; how many there were."""
        ids = self.children()
        for container in ids:
            self.remove(container)
        return len(ids)

    def close(self) -> None:
        self.client.close()


def _context_tar(files: Mapping[str, bytes]) -> bytes:
    """A build context: ``files`` in a tar archive, byte-stable (fixed times, owner)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()

