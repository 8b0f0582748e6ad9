"""The Captain: Armada's node agent, one per edge node.

It registers its node (location, type, capacity, tags) through the Beacon with the run
secret
and registers again whenever the Spinner stops health-checking it for ``recheck_s`` (the
Spinner forgot it, or declared it dead during a partition); the registration answer
lists the tasks the Spinner still places here, and any other task is stopped.

Tasks run with the ``process`` runtime: ``python -m <module> --host <task host> --port
<free port> <args>`` in its own process group (only programs of the allowlist,
``--task-module``, by default Armada's task programs; file and cgroup names come from
the task's validated identifier, never a path), so stopping a task stops everything it
started. The ``args`` are confined (:func:`~nodes.armada.fields.task_args_refusal`, a
400 naming the key): never an option the Captain sets itself (``--host``, ``--port``,
``--secret-file``), only the options an Armada program declares, and a URL only on the
Beacon's host, since the task presents the run secret to the services it names. With
``cgroup_parent`` each task gets a cgroup v2 child with its CPU and memory limits;
without, its CPU limit is not enforced by the Captain and its memory is watched (a task
over its limit is killed). Every ``sample_s`` the Captain measures each task's
utilisation (CPU seconds over the interval divided by ``interval * cpu``), resident
memory and load (the task's own ``GET /stats`` when it has one).

Tasks of the ``docker`` runtime run as containers beside the Captain's own in its
node's pod (:mod:`nodes.pod`), when the node gives the Captain its engine
(``--docker-socket``, ``--docker-pod``): same network namespace (the task is reachable at
the node's address), the task's CPU quota and memory limit, the image
:data:`~nodes.armada.task_image.TASK_IMAGE` built on the node from the Captain's own code
(:mod:`nodes.armada.task_image`; no registry), and the container removed when the task
ends or is stopped. A Captain without an engine refuses them with 422 naming why. On
shutdown (SIGTERM) the Captain deregisters and stops its tasks.

Run it as ``python -m nodes.armada.captain --host H --port P --beacon URL --node-id ID
--lat LAT --lon LON --cpu CORES --memory-mb MB [...]`` with the run secret in
``$TESTBED_SECRET_FILE`` (or ``--secret-file``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from nodes.armada import openapi as doc
from nodes.armada.agent import BeaconAgent
from nodes.armada.configs import START_TIMEOUT_S, TASK_MODULES, CaptainParams
from nodes.armada.fields import args_to_argv, task_args_refusal, task_fields
from nodes.armada.scheduler import EPSILON
from nodes.armada.task_image import (
    PROJECT_ROOT,
    TASK_IMAGE,
    dockerfile,
    image_files,
    repository,
    source_digest,
)
from nodes.common import (
    Address,
    Route,
    client_error,
    free_port,
    make_base_app,
    read_json_object,
    run_service,
)
from nodes.http import PeerError, call_json
from nodes.openapi import add_api
from nodes.pod import PodError
from nodes.secret import peer_headers, peer_session

_log = logging.getLogger("nodes.armada.captain")

READY_POLL_S = 0.05
STOP_GRACE_S = 3.0
CPU_PERIOD_US = 100_000
PR_SET_PDEATHSIG = 1
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class CaptainConfig:
    """Who this node is and how it behaves (the command-line options)."""

    beacon: str
    node_id: str
    url: str  # how others reach this Captain
    lat: float
    lon: float
    cpu: float
    memory_mb: int
    node_type: str = "volunteer"
    tags: list[str] = field(default_factory=list)
    advertise_host: str = "127.0.0.1"  # where tasks are reachable
    task_host: str = "127.0.0.1"  # what tasks bind (the command line: the Captain's --host)
    recheck_s: float = 5.0
    start_timeout_s: float = START_TIMEOUT_S
    sample_s: float = 1.0
    task_modules: tuple[str, ...] = TASK_MODULES
    cgroup_parent: Path | None = None
    workdir: Path = field(default_factory=lambda: Path("/tmp/armada-captain"))
    python: str = sys.executable
    #: The node's engine for ``docker`` tasks: its socket and the pod's service
    #: container (the Captain's own); None on a node without one.
    docker_socket: str | None = None
    docker_pod: str | None = None
    #: An engine ready to use instead (tests; anything with :class:`~nodes.pod.PodEngine`'s
    #: methods); None: connect to ``docker_socket`` at start.
    engine: Any = None


@dataclass
class RunningTask:
    """One task on this node."""

    task_id: str
    app: str
    runtime: str
    cpu: float
    memory_mb: int
    module: str
    args: dict[str, Any]
    port: int
    url: str
    status: str = "starting"  # starting | running | exited | failed
    reason: str | None = None
    pid: int | None = None
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    load: dict[str, Any] | None = None
    utilisation: float | None = None
    cpu_seconds: float = 0.0
    rss_mb: float = 0.0
    process: asyncio.subprocess.Process | None = None
    cgroup: Path | None = None
    has_stats: bool = True
    sampled: tuple[float, float] | None = None  # (monotonic time, cpu seconds)
    container: str | None = None  # docker runtime: the container's name
    container_id: str | None = None
    image: str | None = None  # docker runtime: the image's tag
    image_build_s: float | None = None  # the build this task waited for; None: cached
    ended: asyncio.Future[Any] | None = None  # docker runtime: resolves with its Exit

    def json(self) -> dict[str, Any]:
        """The task as the API shows it."""
        return {
            name: getattr(self, name)
            for name in (
                "task_id", "app", "runtime", "status", "reason", "url", "port", "pid", "cpu",
                "memory_mb", "started_at", "ready_at", "load", "utilisation", "cpu_seconds",
                "rss_mb", "container", "image", "image_build_s",
            )
        }

    @property
    def alive(self) -> bool:
        """Whether the task's process may still run."""
        return self.status in ("starting", "running")


def _die_with_captain() -> None:
    """In the forked child: be killed when the Captain dies, even by SIGKILL.

    A crashed Captain then leaves no orphan tasks serving behind the Spinner's back
    (Linux ``PR_SET_PDEATHSIG``).
    """
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def group_usage(groups: set[int]) -> dict[int, tuple[float, int]]:
    """CPU seconds (with reaped children) and resident bytes per process group, from /proc."""
    usage: dict[int, tuple[float, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                raw = f.read()
        except OSError:  # the process ended meanwhile
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        group = int(fields[2])
        if group in groups:
            cpu = sum(int(x) for x in fields[11:15]) / _CLK_TCK
            before = usage.get(group, (0.0, 0))
            usage[group] = (before[0] + cpu, before[1] + int(fields[21]) * _PAGE)
    return usage


def cgroup_usage(cgroup: Path) -> tuple[float, int]:
    """CPU seconds and memory bytes of a cgroup v2."""
    cpu = 0.0
    for line in (cgroup / "cpu.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            cpu = int(value) / 1e6
    return cpu, int((cgroup / "memory.current").read_text())


class Captain(BeaconAgent):
    """State, task runtime, registration agent and HTTP handlers of a Captain.

    Registration with the Spinner (and ``GET /status``) is
    :class:`~nodes.armada.agent.BeaconAgent`'s.
    """

    collection = "nodes"
    log = _log

    def __init__(self, config: CaptainConfig) -> None:
        self.config = config
        self.tasks: dict[str, RunningTask] = {}
        self._checked = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self.auth_headers: dict[str, str] = {}
        self._background: list[asyncio.Task[None]] = []
        self.registrations = 0
        self.engine: Any = config.engine  # the node's engine (docker runtime), or None
        self.engine_refusal: str | None = None  # why the docker runtime is unavailable
        self._log_host_dir: Any = None  # the task logs' folder, as the engine's host sees it
        self._image_lock = asyncio.Lock()  # one build per node at a time
        self._image_key: str | None = None
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="captain-docker")

    # ----------------------------------------------------------------- resources

    def free(self) -> tuple[float, int]:
        """CPU and memory not reserved by live tasks."""
        live = [t for t in self.tasks.values() if t.alive]
        return (
            self.config.cpu - sum(t.cpu for t in live),
            self.config.memory_mb - sum(t.memory_mb for t in live),
        )

    def status(self) -> dict[str, Any]:
        """The node and its tasks (the health-check answer)."""
        cfg = self.config
        free_cpu, free_memory = self.free()
        return {
            "node_id": cfg.node_id, "url": cfg.url, "lat": cfg.lat, "lon": cfg.lon,
            "node_type": cfg.node_type, "cpu": cfg.cpu, "memory_mb": cfg.memory_mb,
            "tags": cfg.tags, "free_cpu": free_cpu, "free_memory_mb": free_memory,
            "registrations": self.registrations, "time": time.time(),
            "tasks": [t.json() for t in self.tasks.values()],
        }

    @property
    def control_host(self) -> str:
        """The Beacon's host: where the run's services are, the only host a task's URL
        argument may name."""
        return urlsplit(self.config.beacon).hostname or ""

    @property
    def session(self) -> aiohttp.ClientSession:
        """Client session for the Beacon and the tasks (exists while the app runs)."""
        assert self._session is not None, "the Captain app is not running"
        return self._session

    # ------------------------------------------------------------------ runtime

    def _make_cgroup(self, task_id: str, cpu: float, memory_mb: int) -> Path:
        """Create the task's cgroup with its limits (raises OSError when impossible)."""
        parent = self.config.cgroup_parent
        assert parent is not None
        with contextlib.suppress(OSError):  # may already be enabled, or be the root
            (parent / "cgroup.subtree_control").write_text("+cpu +memory")
        group = parent / f"armada-{task_id}"
        group.mkdir(exist_ok=True)
        quota = max(1000, round(cpu * CPU_PERIOD_US))
        (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        (group / "memory.max").write_text(str(memory_mb * 1024 * 1024))
        return group

    async def start_task(self, spec: dict[str, Any]) -> RunningTask:
        """Spawn a task's program; raises a 409/422 client error when it cannot run here."""
        cfg = self.config
        task_id = spec["task_id"]
        if task_id in self.tasks and self.tasks[task_id].alive:
            raise client_error(web.HTTPConflict, f"task_id: {task_id} already runs here")
        if spec["runtime"] == "docker":
            self._check_docker(spec)
        module = spec.get("module")
        if module not in cfg.task_modules:
            raise client_error(
                web.HTTPUnprocessableEntity,
                f"module: expected one of the programs this Captain runs "
                f"({', '.join(cfg.task_modules)}), found {module!r}",
            )
        refusal = task_args_refusal(module, spec.get("args", {}), self.control_host)
        if refusal is not None:
            raise client_error(web.HTTPBadRequest, refusal)
        free_cpu, free_memory = self.free()
        if free_cpu + EPSILON < spec["cpu"] or free_memory < spec["memory_mb"]:
            raise client_error(
                web.HTTPConflict,
                f"not enough free resources: {free_cpu:g} CPU / {free_memory} MB free, "
                f"{spec['cpu']:g} CPU / {spec['memory_mb']} MB asked",
            )
        cgroup = None
        if cfg.cgroup_parent is not None and spec["runtime"] == "process":
            try:
                cgroup = self._make_cgroup(task_id, spec["cpu"], spec["memory_mb"])
            except OSError as exc:
                raise client_error(
                    web.HTTPUnprocessableEntity, f"cgroup: cannot create ({exc})"
                ) from None
        port = free_port()
        task = RunningTask(
            task_id, spec["app"], spec["runtime"], spec["cpu"], spec["memory_mb"], module,
            spec.get("args", {}), port, f"http://{cfg.advertise_host}:{port}", cgroup=cgroup,
        )
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        argv = [cfg.python, "-m", module, "--host", cfg.task_host, "--port", str(port),
                *args_to_argv(task.args)]
        if task.runtime == "docker":
            self.tasks[task_id] = task
            self._background.append(asyncio.create_task(self._run_container(task, argv)))
            return task
        log = os.open(cfg.workdir / f"{task_id}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                      0o644)
        try:
            task.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=_die_with_captain,
                env=task_environment(spec["app"], task_id, cfg),
            )
        finally:
            os.close(log)
        task.pid = task.process.pid
        if cgroup is not None:
            with contextlib.suppress(OSError):
                (cgroup / "cgroup.procs").write_text(str(task.pid))
        self.tasks[task_id] = task
        self._background.append(asyncio.create_task(
            self._watch(task, asyncio.ensure_future(task.process.wait()))))
        return task

    # ----------------------------------------------------------- docker runtime

    def _check_docker(self, spec: dict[str, Any]) -> None:
        """Refuse (422, naming why) a docker task this Captain cannot run."""
        if self.engine is None:
            raise client_error(web.HTTPUnprocessableEntity, self.engine_refusal or (
                "runtime: docker needs a container engine on this node, and this Captain "
                "has none (started without --docker-socket: its node runs services as "
                "processes; a node of runtime docker gives its Captain the node's engine)"))
        if spec.get("image") != TASK_IMAGE:
            raise client_error(
                web.HTTPUnprocessableEntity,
                f"image: expected {TASK_IMAGE} (the task image this Captain builds on its "
                f"node from its task programs; no registry is reachable), "
                f"found {spec.get('image')!r:.80}")
        if self._log_host_dir is None:
            raise client_error(
                web.HTTPUnprocessableEntity,
                f"runtime: docker: the Captain's workdir {self.config.workdir} is not in a "
                "host folder mounted into its pod, so a task container could not write "
                "its log there")

    def _in_thread(self, call: Callable[..., Any], *args: Any, **kwargs: Any
                   ) -> asyncio.Future[Any]:
        """Run a (blocking) engine call in the Captain's pool of engine threads."""
        return asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(call, *args, **kwargs))

    async def _task_image(self) -> tuple[str, float | None]:
        """The node's task image, built now unless cached: (tag, build seconds)."""
        async with self._image_lock:
            if self._image_key is None:
                self._image_key = await self._in_thread(source_digest)
            return await self._in_thread(self.engine.ensure_image,
                                         repository(self.config.node_id), self._image_key,
                                         image_files, dockerfile())

    async def _run_container(self, task: RunningTask, argv: list[str]) -> None:
        """Build the image if the node lacks it, start the task's container, watch it."""
        cfg, engine = self.config, self.engine
        log = cfg.workdir / f"{task.task_id}.log"
        name = f"{engine.pod}-{task.task_id}"
        mounts = engine.mounts(leave_out=[str(PROJECT_ROOT)], add=[sys.prefix],
                               writable={str(cfg.workdir): str(self._log_host_dir)})
        try:
            task.image, task.image_build_s = await self._task_image()
            if not task.alive:  # stopped while its image was built
                return
            task.container_id = await self._in_thread(
                engine.run, name, task.image,
                ["/usr/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(log), *argv],
                cpu=task.cpu, memory_mb=task.memory_mb,
                environment=container_environment(task.app, task.task_id, cfg),
                mounts=mounts, labels={"armada.task": task.task_id, "armada.app": task.app})
        except PodError as exc:
            if task.alive:
                task.status, task.reason = "failed", str(exc)
            return
        task.container = name
        task.ended = self._in_thread(engine.wait, task.container_id)
        if not task.alive:  # stopped while it was being created
            await self._in_thread(engine.stop, task.container_id, STOP_GRACE_S)
        await self._watch(task, task.ended)

    async def _watch(self, task: RunningTask, ended: asyncio.Future[Any]) -> None:
        """Mark the task running once it answers ``/health``; record how it ends (a
        container is removed then)."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while task.status == "starting" and not ended.done():
            try:
                status, _ = await call_json(self.session, "GET", f"{task.url}/health",
                                            timeout_s=1.0)
            except PeerError:
                status = 0
            if status == 200 and task.status == "starting":
                task.status, task.ready_at = "running", time.time()
            elif time.monotonic() > deadline:
                self._fail(task, f"no answer to /health within "
                                 f"{self.config.start_timeout_s:g} s")
            else:
                await asyncio.wait({ended}, timeout=READY_POLL_S)
        outcome = await ended
        code, oom = (outcome.code, outcome.oom_killed) if task.container_id else (outcome, False)
        if task.alive:
            was_running = task.status == "running"
            task.status = "exited" if was_running else "failed"
            task.reason = f"exit status {code}" + ("" if was_running else " before serving")
            if oom:
                task.status = "failed"
                task.reason = f"memory limit exceeded: killed at {task.memory_mb} MB"
        if task.container_id is not None:
            with contextlib.suppress(PodError):
                await self._in_thread(self.engine.remove, task.container_id)
        self._drop_cgroup(task)

    def _fail(self, task: RunningTask, reason: str) -> None:
        """Kill a task that broke its contract."""
        task.status, task.reason = "failed", reason
        if task.container_id is not None:
            self._in_thread(self.engine.kill, task.container_id)
        self._signal(task, signal.SIGKILL)

    @staticmethod
    def _signal(task: RunningTask, sig: signal.Signals) -> None:
        if task.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(task.pid, sig)

    @staticmethod
    def _drop_cgroup(task: RunningTask) -> None:
        if task.cgroup is not None:
            with contextlib.suppress(OSError):
                task.cgroup.rmdir()

    async def stop_task(self, task: RunningTask, reason: str = "stopped by the Captain") -> None:
        """SIGTERM the task's process group (or container), SIGKILL after a grace
        period; wait for it. A container is removed."""
        if task.runtime == "docker":
            if task.alive:
                task.status, task.reason = "exited", reason
            if task.container_id is not None:
                with contextlib.suppress(PodError):
                    await self._in_thread(self.engine.stop, task.container_id, STOP_GRACE_S)
                assert task.ended is not None
                await task.ended
            return
        if task.process is None or task.process.returncode is not None:
            return
        if task.alive:
            task.status, task.reason = "exited", reason
        self._signal(task, signal.SIGTERM)
        try:
            await asyncio.wait_for(task.process.wait(), STOP_GRACE_S)
        except TimeoutError:
            self._signal(task, signal.SIGKILL)
            await task.process.wait()

    # -------------------------------------------------------------- measurements

    async def sample(self) -> None:
        """Measure utilisation, memory and load of every live task once."""
        live = [t for t in self.tasks.values()
                if t.alive and (t.pid is not None or t.container_id is not None)]
        by_group = group_usage({t.pid for t in live if t.pid is not None and t.cgroup is None})
        boxed = [t for t in live if t.container_id is not None]
        usages = dict(zip([t.task_id for t in boxed], await asyncio.gather(
            *(self._in_thread(self.engine.usage, t.container_id) for t in boxed))))
        now = time.monotonic()
        for task in live:
            if task.container_id is not None:
                if (usage := usages[task.task_id]) is None:
                    continue
                cpu, rss = usage
            elif task.cgroup is not None:
                try:
                    cpu, rss = cgroup_usage(task.cgroup)
                except (OSError, ValueError):
                    continue
            else:
                cpu, rss = by_group.get(task.pid, (task.cpu_seconds, 0))
            # Utilisation counts from the first sample after the task serves: the
            # interpreter's start-up is not load.
            if task.status == "running" and task.sampled is not None and now > task.sampled[0]:
                used = max(0.0, cpu - task.sampled[1])
                task.utilisation = used / ((now - task.sampled[0]) * task.cpu)
            if task.status == "running":
                task.sampled = (now, cpu)
            task.cpu_seconds, task.rss_mb = cpu, rss / 2**20
            if task.pid is not None and task.cgroup is None and task.rss_mb > task.memory_mb:
                self._fail(task, f"memory limit exceeded: {task.rss_mb:.0f} MB > "
                                 f"{task.memory_mb} MB")
        await asyncio.gather(*(self._poll_stats(t) for t in live if t.status == "running"))

    async def _poll_stats(self, task: RunningTask) -> None:
        if not task.has_stats:
            return
        try:
            status, body = await call_json(self.session, "GET", f"{task.url}/stats",
                                           timeout_s=min(1.0, self.config.sample_s))
        except PeerError:
            return
        if status == 200 and isinstance(body, dict):
            task.load = {k: body.get(k) for k in ("in_flight", "completed")}
        elif status in (404, 405):
            task.has_stats = False

    async def sample_loop(self) -> None:
        """Measure every ``sample_s``."""
        while True:
            await self.sample()
            await asyncio.sleep(self.config.sample_s)

    # -------------------------------------------------------------- registration

    @property
    def agent_id(self) -> str:
        """The node id."""
        return self.config.node_id

    def registration(self) -> dict[str, Any]:
        """The node as the Spinner registers it."""
        cfg = self.config
        return {
            "node_id": cfg.node_id, "url": cfg.url, "lat": cfg.lat, "lon": cfg.lon,
            "node_type": cfg.node_type, "cpu": cfg.cpu, "memory_mb": cfg.memory_mb,
            "tags": cfg.tags,
        }

    async def registered(self, answer: dict[str, Any], sent: float) -> None:
        """Stop the tasks started before ``sent`` that the Spinner no longer places here."""
        placed = set(answer.get("tasks", []))
        orphans = [t for t in self.tasks.values()
                   if t.alive and t.task_id not in placed and t.started_at < sent]
        why = "no longer placed here by the Spinner"
        await asyncio.gather(*(self.stop_task(t, why) for t in orphans))

    # ------------------------------------------------------------------ lifecycle

    async def start(self, app: web.Application) -> None:
        """Startup hook: the node's engine (if any), session, registration agent,
        sampler."""
        await self._connect_engine()
        self._session = peer_session(app)
        self.auth_headers = peer_headers(app)
        self._background += [asyncio.create_task(self.agent_loop()),
                             asyncio.create_task(self.sample_loop())]

    async def _connect_engine(self) -> None:
        """Reach the node's engine (``docker_socket``), remove the containers an earlier
        Captain of this pod left (its node crashed), and find where task logs go. When
        that fails, docker tasks are refused with the reason."""
        cfg = self.config
        if self.engine is None and cfg.docker_socket is not None:
            if cfg.docker_pod is None:
                self.engine_refusal = ("runtime: docker: this Captain was given an engine "
                                       "(--docker-socket) but not its pod (--docker-pod)")
                return
            from nodes.pod_engine import PodEngine  # the Docker SDK: only when needed

            try:
                self.engine = await self._in_thread(PodEngine, cfg.docker_socket,
                                                    cfg.docker_pod)
            except PodError as exc:
                self.engine_refusal = f"runtime: docker: this Captain cannot use its node's engine ({exc})"
                self.log.warning("%s", self.engine_refusal)
                return
        if self.engine is None:
            return
        left = await self._in_thread(self.engine.remove_children)
        if left:
            self.log.info("removed %d container(s) an earlier Captain of this pod left", left)
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        self._log_host_dir = self.engine.host_path(cfg.workdir)

    async def stop(self, app: web.Application) -> None:
        """Cleanup hook (SIGTERM): deregister, stop every task (removing containers),
        stop background work."""
        await self.deregister()
        await asyncio.gather(*(self.stop_task(t) for t in self.tasks.values()))
        for job in self._background:
            job.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.engine is not None:
            with contextlib.suppress(PodError):
                await self._in_thread(self.engine.remove_children)
            self.engine.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        await self.session.close()

    # ------------------------------------------------------------------ handlers

    def _task(self, request: web.Request) -> RunningTask:
        task = self.tasks.get(request.match_info["task_id"])
        if task is None:
            raise client_error(web.HTTPNotFound, f"no such task: {request.match_info['task_id']}")
        return task

    async def handle_start(self, request: web.Request) -> web.Response:
        """``POST /tasks``: start a task (202; it is ``starting`` until it serves)."""
        spec = await read_json_object(request, task_fields())
        task = await self.start_task(spec)
        return web.json_response(task.json(), status=202)

    async def handle_tasks(self, request: web.Request) -> web.Response:
        """``GET /tasks``."""
        return web.json_response({"tasks": [t.json() for t in self.tasks.values()]})

    async def handle_task(self, request: web.Request) -> web.Response:
        """``GET /tasks/{task_id}``."""
        return web.json_response(self._task(request).json())

    async def handle_remove(self, request: web.Request) -> web.Response:
        """``DELETE /tasks/{task_id}``: stop the task and forget it."""
        task = self._task(request)
        await self.stop_task(task)
        self.tasks.pop(task.task_id, None)
        return web.json_response(task.json())

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"ok": True, "node_id": self.config.node_id})


CAPTAIN_KEY = web.AppKey("captain", Captain)


def make_app(config: CaptainConfig) -> web.Application:
    """Build the Captain application (its state is ``app[CAPTAIN_KEY]``)."""
    captain = Captain(config)
    routes = [
        Route("GET", "/status", captain.handle_status,
              "node and task status (the Spinner's health check)", doc.op()),
        Route("POST", "/tasks", captain.handle_start, "start a task",
              doc.op(202, doc.start_body(config.task_modules), (400, 409, 422))),
        Route("GET", "/tasks", captain.handle_tasks, "list tasks", doc.op()),
        Route("GET", "/tasks/{task_id}", captain.handle_task, "one task", doc.op(errors=(404,))),
        Route("DELETE", "/tasks/{task_id}", captain.handle_remove, "stop a task",
              doc.op(errors=(404,))),
        Route("GET", "/health", captain.handle_health, "liveness", doc.op()),
    ]
    app = make_base_app()
    app[CAPTAIN_KEY] = captain
    add_api(app, "Armada Captain",
                "Node agent: runs tasks, measures their load and utilisation.", routes)
    app.on_startup.append(captain.start)
    app.on_cleanup.append(captain.stop)
    return app


def task_identity(app: str, task_id: str, cfg: Any) -> dict[str, str]:
    """What a task learns from its Captain besides its arguments: its app, its id, and
    the node it runs on (a task that needs storage locates its nearest Cargo with it)."""
    return {"ARMADA_APP": app, "ARMADA_TASK_ID": task_id, "ARMADA_NODE_ID": cfg.node_id,
            "ARMADA_NODE_LAT": repr(cfg.lat), "ARMADA_NODE_LON": repr(cfg.lon)}


def task_environment(app: str, task_id: str, cfg: Any) -> dict[str, str]:
    """A process task's environment: the Captain's, and :func:`task_identity`."""
    return {**os.environ, **task_identity(app, task_id, cfg)}


def container_environment(app: str, task_id: str, cfg: Any) -> dict[str, str]:
    """A container task's environment: :func:`task_identity` and the harness's
    ``TESTBED_*`` variables (where the run secret's file is: a path, never the value),
    nothing else of the Captain's."""
    return {**{k: v for k, v in os.environ.items() if k.startswith("TESTBED_")},
            "LANG": "C.UTF-8", **task_identity(app, task_id, cfg)}


def app_from_params(params: CaptainParams, address: Address) -> web.Application:
    """The Captain of a command line, reachable at ``address`` (its real port)."""
    node_id = params.node_id or socket.gethostname()
    config = CaptainConfig(
        beacon=params.beacon.rstrip("/"), node_id=node_id,
        url=address.url(params.advertise_host), lat=params.lat, lon=params.lon,
        cpu=params.cpu, memory_mb=params.memory_mb, node_type=params.node_type,
        tags=[t for t in params.tags.split(",") if t],
        advertise_host=address.reachable_host(params.advertise_host),
        task_host=params.task_host or address.host,  # by default, where the Captain listens
        recheck_s=params.recheck_s, sample_s=params.sample_s,
        start_timeout_s=params.start_timeout_s,
        task_modules=tuple(params.task_module) or TASK_MODULES,
        cgroup_parent=Path(params.cgroup_parent) if params.cgroup_parent else None,
        workdir=Path(params.workdir).absolute() / node_id,
        docker_socket=params.docker_socket, docker_pod=params.docker_pod,
    )
    return make_app(config)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the Captain of the command line until SIGTERM/SIGINT."""
    return run_service(CaptainParams, app_from_params, argv, prog="python -m nodes.armada.captain",
                       description=__doc__.splitlines()[0], port=0, logger=_log,
                       pick_free_port=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
