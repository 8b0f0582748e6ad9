"""The face-recognition task: the server-side program of the Armada storage experiments.

Each ``POST /recognise`` carries one JPEG frame as its body (``Content-Type:
image/jpeg``) and says in headers what the frame shows, because descriptors come from a
seeded identity model instead of an embedding network (``docs/face_recognition.md``):

* ``X-Face-Identity`` (required): the person in the frame, an integer >= 0;
* ``X-Face-Observation`` (required): which photo of that person it is, an integer >= 0
  (the workload's frame ``k`` is observation ``k + 1``; 0 is the initial data set's);
* ``X-Face-Op`` (optional): ``read``, ``write`` or ``read-write``; the task's ``--op``
  when absent.

The task decodes the frame and runs the bundled frontal-face Haar cascade for real
(:mod:`nodes.armada.face_recognition`), in a worker thread: at most ``workers`` frames at
once, further ones wait in FIFO order, and beyond ``queue_limit`` waiting frames a frame
gets 503. If the cascade finds a face, the largest one is the subject: its descriptor is
the identity model's vector for (identity, observation), and the task performs the op
against the face store (:class:`FaceStore`):

* ``read``: ``match(vector, threshold)``, the nearest stored descriptor within the
  threshold;
* ``write``: ``insert(identity, vector)``, the labelled descriptor (record id = identity);
* ``read-write``: the read, then the write only if the read recognised nobody.

A frame without a face performs no op. Storage calls are not bounded by ``workers``
(they wait on the network, not the CPU). Nothing is cached in the task: every read goes
to the store, as in the paper (tasks do not buffer labelled faces locally).

Answer (200): ``{"faces": [[x, y, w, h], ...], "face"`` (the subject, or null)``,
"identity", "observation", "op"`` (asked)``, "performed"`` (``[]``, ``["read"]``,
``["write"]`` or ``["read", "write"]``)``, "recognised"`` (true/false after a read, else
null)``, "matched_id", "distance"`` (of the read's match, else null)``, "inserted",
"frame_shape", "server_arrival", "start", "end", "queue_ms", "detect_ms"`` (decoding and
detection)``, "describe_ms", "read_ms", "write_ms", "storage_ms"`` (read + write; each
store call measured around the awaited call, so it includes connecting to the store when
the store connects per call)``}``. Errors are JSON ``{"error": ...}``: 400 (empty body,
not a JPEG, undecodable, a missing or malformed header), 408 (body still arriving after
the body timeout), 413, 415, 503 (queue full) and 502 (the store failed:
:class:`StoreError`).

``GET /health`` says the task is up; ``GET /stats`` reports ``in_flight`` (frames between
arrival and answer), ``completed``, ``rejected``, ``failed``, read/write/match counts,
mean detection and storage times, CPU seconds and uptime ``GET /openapi.json``
describes the API (:func:`routes`).

Run it as ``python -m nodes.armada.face_task --host H --port P (--memory-store |
--storage-manager URL) [--op read|write|read-write] [--model-seed S] [--initial N]
[--threshold T] [--workers N] [--threads T] [--max-body-bytes B] [--queue-limit Q]``.
``--memory-store`` keeps the data in the task (loaded with :func:`initial_records`), for
smoke runs; ``--storage-manager`` is the Cargo-backed store (:class:`CargoFaceStore`:
the storage SDK, nearest live replica, a fresh connection per call).
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import cv2
import numpy as np
from aiohttp import web

from nodes.armada.configs import DEFAULT_MAX_BODY_BYTES, DEFAULT_QUEUE_LIMIT, FaceTaskParams
from nodes.armada.face_recognition import FaceIndex, decode, describe, subject, warm_up
from nodes.armada.face_recognition import cascade as face_cascade
from nodes.armada.frame_task import WorkerPool, frame_operation, read_jpeg
from nodes.common import PUBLIC, Address, Route, client_error, json_errors, run_service
from nodes.config import CannotStart
from nodes.openapi import add_api, op
from workloads.armada_face_descriptors import INITIAL_RECORDS, IdentityModel, initial_records
from workloads.armada_face_frames import Box
from workloads.armada_faces import MAX_IDENTITIES, MODES

IDENTITY_HEADER = "X-Face-Identity"
OBSERVATION_HEADER = "X-Face-Observation"
OP_HEADER = "X-Face-Op"
#: Largest identity or observation a request may name.
MAX_HEADER_INT = 2**63 - 1

_log = logging.getLogger("nodes.armada.face_task")


class StoreError(Exception):
    """The face store could not answer (unreachable, refused, timed out)."""


class StoreNotWiredError(CannotStart):
    """The Cargo-backed face store lacks what it needs to find the app's replicas."""


class FaceStore(Protocol):
    """Where the labelled face descriptors live: the Cargo replica, or memory for tests.

    A Cargo-backed store connects to the Cargo for every call (no pooled connection), so
    the task's ``read_ms`` and ``write_ms`` include connecting, as in the paper. Failures
    are raised as :class:`StoreError`.
    """

    async def match(self, vector: np.ndarray, threshold: float) -> tuple[int, float] | None:
        """``(id, distance)`` of the nearest stored descriptor within ``threshold``."""
        ...

    async def insert(self, record_id: int, vector: np.ndarray) -> None:
        """Store the labelled descriptor (replacing the one of ``record_id``, if any)."""
        ...

    async def close(self) -> None:
        """Release connections; the task calls it when it stops."""
        ...


#: Builds the task's store when the task starts (inside its event loop).
StoreFactory = Callable[[], Awaitable[FaceStore]]


class MemoryFaceStore:
    """A :class:`FaceStore` in the task's memory, with the Cargo's semantics.

    Records are insert-or-replace by id and a match is the nearest record by Euclidean
    distance within the threshold. ``delay_s`` adds a wait to every call (a stand-in for
    a network round trip in tests).
    """

    def __init__(self, records: Sequence[tuple[int, Any]] = (), delay_s: float = 0.0) -> None:
        self.index = FaceIndex()
        for record_id, vector in records:
            self.index.put(record_id, vector)
        self.delay_s = delay_s
        self.matches = 0
        self.inserts = 0

    async def match(self, vector: np.ndarray, threshold: float) -> tuple[int, float] | None:
        """The nearest record within ``threshold``."""
        self.matches += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self.index.match(vector, threshold)

    async def insert(self, record_id: int, vector: np.ndarray) -> None:
        """Insert or replace one record."""
        self.inserts += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.index.put(record_id, vector)

    async def close(self) -> None:
        """Nothing to release."""


def memory_store_factory(records: Sequence[tuple[int, Any]] = ()) -> StoreFactory:
    """A factory for a :class:`MemoryFaceStore` holding ``records``."""

    async def build() -> FaceStore:
        return MemoryFaceStore(records)

    return build


class CargoFaceStore:
    """A :class:`FaceStore` on the application's Cargo replicas (the storage SDK).

    Every call opens a fresh connection to the nearest live replica (``keep_alive`` off),
    so read and write times include connecting to the Cargo, as in the paper; a replica
    that fails is left for the next one by the SDK. Refusals and unavailability are
    raised as :class:`StoreError`.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    async def match(self, vector: np.ndarray, threshold: float) -> tuple[int, float] | None:
        """The nearest stored descriptor within ``threshold``, from the nearest replica."""
        from nodes.armada.sdk.storage import StorageError

        try:
            found = await self.client.match(vector, threshold)
        except (StorageError, ValueError) as exc:
            raise StoreError(f"match: {exc}") from None
        return (int(found.id), float(found.distance)) if found.matched else None

    async def insert(self, record_id: int, vector: np.ndarray) -> None:
        """Write the labelled descriptor (acknowledged per the app's consistency)."""
        from nodes.armada.sdk.storage import StorageError

        try:
            await self.client.write(record_id, vector)
        except (StorageError, ValueError) as exc:
            raise StoreError(f"write: {exc}") from None

    async def close(self) -> None:
        """Close the SDK's connections."""
        await self.client.close()


def cargo_store_factory(storage_manager: str, app: str | None = None,
                        lat: float | None = None, lon: float | None = None) -> StoreFactory:
    """The factory of the Cargo-backed store found through ``storage_manager``.

    ``app``, ``lat`` and ``lon`` (the application and where this task runs) default to
    the environment a Captain gives its tasks (``ARMADA_APP``, ``ARMADA_NODE_LAT``,
    ``ARMADA_NODE_LON``); without them the factory refuses with
    :class:`StoreNotWiredError` naming what is missing.
    """
    import os

    app = app or os.environ.get("ARMADA_APP")
    where = {"lat": lat if lat is not None else os.environ.get("ARMADA_NODE_LAT"),
             "lon": lon if lon is not None else os.environ.get("ARMADA_NODE_LON")}
    missing = [k for k, v in (("app (ARMADA_APP)", app), ("lat (ARMADA_NODE_LAT)", where["lat"]),
                              ("lon (ARMADA_NODE_LON)", where["lon"])) if v in (None, "")]
    if missing:
        raise StoreNotWiredError(f"--storage-manager {storage_manager}: the Cargo store needs "
                                 f"{', '.join(missing)}; a Captain sets them for its tasks")

    async def build() -> FaceStore:
        from nodes.armada.sdk.storage import StorageClient, StorageError

        client = StorageClient(storage_manager, str(app), float(where["lat"]),
                               float(where["lon"]), keep_alive=False)
        try:
            await client.start()
        except StorageError as exc:
            await client.close()
            raise StoreError(f"locate {app} through {storage_manager}: {exc}") from None
        return CargoFaceStore(client)

    return build


def _header_int(request: web.Request, name: str) -> int:
    """Header ``name`` as an integer in [0, MAX_HEADER_INT], or a JSON 400."""
    text = request.headers.get(name)
    if text is None:
        raise client_error(web.HTTPBadRequest,
                           f"{name}: expected an integer >= 0, found nothing")
    try:
        value = int(text.strip(), 10)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_HEADER_INT:
        raise client_error(web.HTTPBadRequest, f"{name}: expected an integer >= 0, "
                           f"found {text[:40]!r}")
    return value


def _ms(seconds: float) -> float:
    return seconds * 1000.0


class FaceTask:
    """The task's state: model, store, worker threads, FIFO slots and counters."""

    def __init__(
        self,
        store_factory: StoreFactory,
        op: str,
        model: IdentityModel,
        threshold: float,
        workers: int,
        threads: int,
        max_body_bytes: int,
        queue_limit: int,
    ) -> None:
        self.store_factory = store_factory
        self.store: FaceStore | None = None
        self.op = op
        self.model = model
        self.threshold = threshold
        self.workers = workers
        self.threads = threads
        self.max_body_bytes = max_body_bytes
        self.queue_limit = queue_limit
        self.pool = WorkerPool(workers, queue_limit, "face")
        self.pool.warm_up(warm_up)  # every worker's cascade runs once before serving
        self.in_flight = 0
        self.completed = 0
        self.failed = 0
        self.counts = {"faces": 0, "no_face": 0, "reads": 0, "writes": 0, "recognised": 0}
        self._detect_total_s = 0.0
        self._storage_total_s = 0.0
        self._storage_calls = 0
        self._started_wall = time.time()

    async def start(self, _: web.Application) -> None:
        """Build the store inside the running loop."""
        self.store = await self.store_factory()

    async def close(self, _: web.Application) -> None:
        """Close the store and stop the worker threads."""
        if self.store is not None:
            await self.store.close()
        self.pool.close()

    @staticmethod
    def _detect(data: bytes) -> tuple[float, float, list[int] | None, list[Box]]:
        """Decode and detect in a worker thread: (start, end, shape or None, faces)."""
        start = time.time()
        try:
            image = decode(data)
        except ValueError:
            return start, time.time(), None, []
        faces = face_cascade().detect(image)
        return start, time.time(), list(image.shape), faces

    def _metadata(self, request: web.Request) -> tuple[int, int, str]:
        """(identity, observation, op) from the headers, or a JSON 400."""
        identity = _header_int(request, IDENTITY_HEADER)
        if identity >= self.model.identities:
            raise client_error(web.HTTPBadRequest, f"{IDENTITY_HEADER}: expected an integer "
                               f"below {self.model.identities}, found {identity}")
        observation = _header_int(request, OBSERVATION_HEADER)
        op = request.headers.get(OP_HEADER, self.op)
        if op not in MODES:
            raise client_error(web.HTTPBadRequest, f"{OP_HEADER}: expected one of "
                               f"{', '.join(MODES)}, found {op[:40]!r}")
        return identity, observation, op

    async def _timed(self, call: Awaitable[Any]) -> tuple[Any, float]:
        """Await one store call: (its result, seconds); failures become a JSON 502."""
        begin = time.perf_counter()
        try:
            result = await call
        except StoreError as exc:
            raise client_error(web.HTTPBadGateway, f"storage: {exc}") from None
        elapsed = time.perf_counter() - begin
        self._storage_total_s += elapsed
        self._storage_calls += 1
        return result, elapsed

    async def handle_recognise(self, request: web.Request) -> web.Response:
        """``POST /recognise``: detect for real, describe, then read and/or write."""
        self.in_flight += 1
        try:
            response = await self._recognise(request)
        except web.HTTPException as exc:
            if exc.status != 503:
                self.failed += 1
            raise
        finally:
            self.in_flight -= 1
        self.completed += 1
        return response

    async def _recognise(self, request: web.Request) -> web.Response:
        identity, observation, op = self._metadata(request)
        data = await read_jpeg(request, self.max_body_bytes)
        server_arrival = time.time()
        start, detected, shape, faces = await self.pool.run(self._detect, data)
        if shape is None:
            raise client_error(web.HTTPBadRequest, "body: the JPEG image could not be decoded")
        self._detect_total_s += detected - start
        face = subject(faces)
        answer: dict[str, Any] = {
            "faces": [list(b) for b in faces], "face": None if face is None else list(face),
            "identity": identity, "observation": observation, "op": op, "performed": [],
            "recognised": None, "matched_id": None, "distance": None, "inserted": False,
            "frame_shape": shape, "server_arrival": server_arrival, "start": start,
            "queue_ms": _ms(start - server_arrival), "detect_ms": _ms(detected - start),
            "describe_ms": 0.0, "read_ms": 0.0, "write_ms": 0.0, "storage_ms": 0.0,
        }
        if face is None:
            self.counts["no_face"] += 1
        else:
            self.counts["faces"] += 1
            await self._perform(answer, face)
        answer["end"] = time.time()
        return web.json_response(answer)

    async def _perform(self, answer: dict[str, Any], face: Box) -> None:
        """Describe the subject face and run the op against the store, filling ``answer``."""
        store = self.store
        if store is None:  # only before start-up finished
            raise client_error(web.HTTPServiceUnavailable, "storage: not connected yet")
        begin = time.perf_counter()
        vector = describe(self.model, face, answer["identity"], answer["observation"])
        answer["describe_ms"] = _ms(time.perf_counter() - begin)
        op = answer["op"]
        if op in ("read", "read-write"):
            found, elapsed = await self._timed(store.match(vector, self.threshold))
            self.counts["reads"] += 1
            answer["performed"].append("read")
            answer["read_ms"] = _ms(elapsed)
            answer["recognised"] = found is not None
            if found is not None:
                self.counts["recognised"] += 1
                answer["matched_id"], answer["distance"] = int(found[0]), float(found[1])
        if op == "write" or (op == "read-write" and not answer["recognised"]):
            _, elapsed = await self._timed(store.insert(answer["identity"], vector))
            self.counts["writes"] += 1
            answer["performed"].append("write")
            answer["write_ms"] = _ms(elapsed)
            answer["inserted"] = True
        answer["storage_ms"] = answer["read_ms"] + answer["write_ms"]

    async def handle_health(self, _: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"status": "ok", "op": self.op, "workers": self.workers,
                                  "threshold": self.threshold})

    async def handle_stats(self, _: web.Request) -> web.Response:
        """``GET /stats``: load and utilisation figures for the Captain."""
        detected = self.counts["faces"] + self.counts["no_face"]
        return web.json_response({
            "op": self.op,
            "workers": self.workers,
            "threads": self.threads,
            "in_flight": self.in_flight,
            "waiting": self.pool.waiting,
            "completed": self.completed,
            "rejected": self.pool.rejected,
            "failed": self.failed,
            **self.counts,
            "mean_detect_ms": _ms(self._detect_total_s / detected) if detected else None,
            "mean_storage_ms": (_ms(self._storage_total_s / self._storage_calls)
                                if self._storage_calls else None),
            "cpu_seconds": time.process_time(),
            "uptime_s": time.time() - self._started_wall,
        })


def _header(name: str, schema: dict[str, Any], required: bool, what: str) -> dict[str, Any]:
    """A header parameter of ``POST /recognise``."""
    return {"name": name, "in": "header", "required": required, "schema": schema,
            "description": what}


def routes(task: FaceTask) -> list[Route]:
    """The task's endpoints, with their OpenAPI operations: the headers state the bounds
    :meth:`FaceTask._metadata` checks (an identity below the model's, an observation up
    to :data:`MAX_HEADER_INT`, one of the ops)."""
    recognise = {**frame_operation(task.max_body_bytes, errors=(502,)), "parameters": [
        _header(IDENTITY_HEADER, {"type": "integer", "minimum": 0,
                                  "maximum": task.model.identities - 1},
                True, "the person in the frame"),
        _header(OBSERVATION_HEADER, {"type": "integer", "minimum": 0,
                                     "maximum": MAX_HEADER_INT},
                True, "which photo of that person it is"),
        _header(OP_HEADER, {"type": "string", "enum": list(MODES)}, False,
                f"the op against the store (default: the task's, {task.op})"),
    ]}
    return [
        Route("POST", "/recognise", task.handle_recognise,
              "recognise the face in one JPEG frame against the face store", recognise,
              auth=PUBLIC),
        Route("GET", "/health", task.handle_health, "liveness", op()),
        Route("GET", "/stats", task.handle_stats, "load, counts and mean times", op()),
    ]


def make_app(
    store_factory: StoreFactory,
    op: str = "read-write",
    model_seed: int = 0,
    threshold: float | None = None,
    workers: int = 1,
    threads: int = 1,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
) -> web.Application:
    """Build the task's application; raises :class:`ValueError` on a bad setting.

    ``store_factory`` is awaited once when the application starts; its store is closed
    at cleanup. ``model_seed`` must be the workload's seed (the initial data set was
    drawn with it); ``threshold`` defaults to the identity model's recommended one. Sets
    OpenCV's process-wide thread count to ``threads``.
    """
    if op not in MODES:
        raise ValueError(f"op must be one of {', '.join(MODES)}, found {op!r}")
    if isinstance(model_seed, bool) or not isinstance(model_seed, int) or model_seed < 0:
        raise ValueError(f"model_seed must be an integer >= 0, found {model_seed!r}")
    model = IdentityModel(MAX_IDENTITIES, seed=model_seed)
    threshold = model.threshold if threshold is None else threshold
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0, found {threshold!r}")
    for name, value in (("workers", workers), ("threads", threads),
                        ("max_body_bytes", max_body_bytes), ("queue_limit", queue_limit)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, found {value}")
    cv2.setNumThreads(threads)
    task = FaceTask(store_factory, op, model, threshold, workers, threads, max_body_bytes,
                    queue_limit)
    app = web.Application(middlewares=[json_errors], client_max_size=max_body_bytes)
    add_api(app, "Armada face-recognition task", "One JPEG frame per POST /recognise, what "
            "it shows in headers, read and/or written against the face store "
            "(nodes/armada/face_task.py).", routes(task))
    app.on_startup.append(task.start)
    app.on_cleanup.append(task.close)
    return app


def app_from_params(params: FaceTaskParams, address: Address) -> web.Application:
    """The task of a command line, on the store it names (:class:`StoreNotWiredError`
    when the Cargo store lacks its Captain's environment: the runner refuses to start)."""
    if params.storage_manager is not None:
        factory = cargo_store_factory(params.storage_manager)
    else:
        initial = INITIAL_RECORDS if params.initial is None else params.initial
        factory = memory_store_factory(initial_records(params.model_seed, initial))
    return make_app(factory, params.op, params.model_seed, params.threshold, params.workers,
                    params.threads, params.max_body_bytes, params.queue_limit)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the task of the command line until SIGTERM/SIGINT."""
    return run_service(FaceTaskParams, app_from_params, argv,
                       prog="python -m nodes.armada.face_task",
                       description=__doc__.splitlines()[0], port=8000, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
