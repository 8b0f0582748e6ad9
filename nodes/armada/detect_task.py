"""The object-detection task: the server-side program Armada deploys as replicas.

Each ``POST /infer`` carries one JPEG frame (``Content-Type: image/jpeg``). The task
decodes it and runs a real detector that ships inside the OpenCV wheel, so nothing is
downloaded at run time:

* ``hog`` (default): OpenCV's HOG descriptor with its default people detector
  (``detectMultiScale``, window stride 8x8, padding 8x8, pyramid scale 1.05); a
  detection's score is the SVM weight.
* ``haar-face``, ``haar-fullbody``, ``haar-upperbody``: the bundled Haar cascades, on the
  equalised grey image (scale factor 1.1, 3 neighbours); the score is the cascade's
  level weight.

Concurrency is bounded: at most ``workers`` frames are processed at once, each in a
worker thread (OpenCV releases the GIL, so the event loop keeps answering ``/health``
and ``/stats`` while frames are processed). Further frames wait in FIFO order, so
queueing is real and shows in ``queue_ms``; beyond ``queue_limit`` waiting frames a
frame is refused with 503 instead of being queued without bound. A frame whose client
disconnects while it waits leaves the queue; one already being processed finishes (its
worker is not handed to another frame before that).

OpenCV's own thread pool is limited to ``threads`` (default 1) for the whole process,
so one frame uses at most one core and a task's speed is set by its CPU limit and
``workers``, as on the heterogeneous nodes of the Armada paper, rather than by how
many cores the host happens to have.

Answer of ``/infer`` (200): ``{"detections": [[x, y, w, h, score], ...],
"server_arrival", "start", "end"`` (wall epoch seconds: body received, processing
began, processing ended), ``"queue_ms", "processing_ms"`` (decoding included),
``"queue_at_arrival"`` (frames waiting when this one arrived), ``"frame_shape"``
(``[height, width, channels]``) ``, "detector"}``. Errors are JSON ``{"error": ...}``:
400 (empty body, not a JPEG, undecodable), 408 (body still arriving after the body
timeout), 413 (body larger than ``max_body_bytes``), 415 (another content type), 503
(queue full).

``GET /health`` says the task is up; ``GET /stats`` reports what the Captain needs for
load and utilisation: frames in flight (waiting + processing), completed, rejected and
failed counts, the mean processing time, CPU seconds used by the process and wall
seconds since start. ``GET /openapi.json`` describes the API.

Run it as ``python -m nodes.armada.detect_task --host H --port P [--workers N]
[--detector hog|haar-face|haar-fullbody|haar-upperbody] [--threads T]
[--max-body-bytes B] [--queue-limit Q]``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import cv2
import numpy as np
from aiohttp import web

from nodes.armada.configs import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_QUEUE_LIMIT,
    DetectTaskParams,
)
from nodes.armada.frame_task import WorkerPool, frame_operation, read_jpeg
from nodes.common import PUBLIC, Address, Route, client_error, json_errors, run_service
from nodes.openapi import add_api, op

_log = logging.getLogger("nodes.armada.detect_task")


class Detector(Protocol):
    """Finds objects in a BGR image; returns ``[x, y, w, h, score]`` per object."""

    def detect(self, image: np.ndarray) -> list[list[float]]:
        """Run the detector on ``image``."""
        ...


def _boxes(rects: Any, scores: Any) -> list[list[float]]:
    """Pair OpenCV's rectangles with their scores as plain JSON-ready lists."""
    rects_array = np.asarray(rects, dtype=float).reshape(-1, 4)
    scores_array = np.asarray(scores, dtype=float).reshape(-1)
    return [
        [*(float(v) for v in rect), float(score)]
        for rect, score in zip(rects_array, scores_array, strict=True)
    ]


class HogPeople:
    """OpenCV's HOG descriptor with its default (Dalal-Triggs) people detector."""

    def __init__(self) -> None:
        self._hog = cv2.HOGDescriptor()
        self._hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())

    def detect(self, image: np.ndarray) -> list[list[float]]:
        """People in ``image``, scored by the SVM weight."""
        rects, weights = self._hog.detectMultiScale(
            image, winStride=(8, 8), padding=(8, 8), scale=1.05
        )
        return _boxes(rects, weights)


class HaarCascade:
    """One of the Haar cascades bundled with the OpenCV wheel (``cv2.data``)."""

    def __init__(self, file_name: str) -> None:
        path = cv2.data.haarcascades + file_name
        self._cascade = cv2.CascadeClassifier(path)
        if self._cascade.empty():
            raise ValueError(f"{path}: OpenCV could not load this cascade")

    def detect(self, image: np.ndarray) -> list[list[float]]:
        """Objects in ``image``, scored by the cascade's level weight."""
        grey = cv2.equalizeHist(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY))
        rects, _, weights = self._cascade.detectMultiScale3(
            grey, scaleFactor=1.1, minNeighbors=3, outputRejectLevels=True
        )
        return _boxes(rects, weights)


DETECTORS: dict[str, Callable[[], Detector]] = {
    "hog": HogPeople,
    "haar-face": lambda: HaarCascade("haarcascade_frontalface_default.xml"),
    "haar-fullbody": lambda: HaarCascade("haarcascade_fullbody.xml"),
    "haar-upperbody": lambda: HaarCascade("haarcascade_upperbody.xml"),
}


class DetectTask:
    """The task's state: detector per worker thread, FIFO slots and counters."""

    def __init__(
        self, detector: str, workers: int, threads: int, max_body_bytes: int, queue_limit: int
    ) -> None:
        self.detector_name = detector
        self.workers = workers
        self.threads = threads
        self.max_body_bytes = max_body_bytes
        self.queue_limit = queue_limit
        self._factory = DETECTORS[detector]
        self._factory()  # fail at start-up, not on the first frame, if it cannot load
        self._local = threading.local()
        self.pool = WorkerPool(workers, queue_limit, "detect")
        # Every worker's detector runs once before serving: the first client's probe
        # then finds warm replicas, so probes compare like with like.
        image = np.zeros((240, 320, 3), dtype=np.uint8)  # a small frame: several scales
        self.pool.warm_up(lambda: self._detector().detect(image))
        self.completed = 0
        self.failed = 0
        self._processing_total_s = 0.0
        self._started_wall = time.time()

    def _detector(self) -> Detector:
        """This worker thread's own detector (OpenCV objects are not shared)."""
        detector = getattr(self._local, "detector", None)
        if detector is None:
            detector = self._local.detector = self._factory()
        return detector

    def _process(self, data: bytes) -> tuple[float, float, Any, list[list[float]] | None]:
        """Decode and detect in a worker thread: (start, end, shape, detections or None)."""
        start = time.time()
        image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            return start, time.time(), None, None
        detections = self._detector().detect(image)
        return start, time.time(), list(image.shape), detections

    async def handle_infer(self, request: web.Request) -> web.Response:
        """``POST /infer``: queue, decode and detect one frame."""
        data = await read_jpeg(request, self.max_body_bytes)
        server_arrival = time.time()
        queue_at_arrival = self.pool.waiting
        try:
            start, end, shape, detections = await self.pool.run(self._process, data)
        except web.HTTPServiceUnavailable:  # the queue is full: rejected, not failed
            raise
        except Exception:
            self.failed += 1
            raise
        if detections is None:
            self.failed += 1
            raise client_error(web.HTTPBadRequest, "body: the JPEG image could not be decoded")
        self.completed += 1
        self._processing_total_s += end - start
        return web.json_response(
            {
                "detections": detections,
                "server_arrival": server_arrival,
                "start": start,
                "end": end,
                "queue_ms": (start - server_arrival) * 1000.0,
                "processing_ms": (end - start) * 1000.0,
                "queue_at_arrival": queue_at_arrival,
                "frame_shape": shape,
                "detector": self.detector_name,
            }
        )

    async def handle_health(self, _: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response(
            {"status": "ok", "detector": self.detector_name, "workers": self.workers}
        )

    async def handle_stats(self, _: web.Request) -> web.Response:
        """``GET /stats``: load and utilisation figures for the Captain."""
        mean = self._processing_total_s / self.completed * 1000.0 if self.completed else None
        return web.json_response(
            {
                "detector": self.detector_name,
                "workers": self.workers,
                "threads": self.threads,
                "in_flight": self.pool.waiting + self.pool.running,
                "waiting": self.pool.waiting,
                "running": self.pool.running,
                "completed": self.completed,
                "rejected": self.pool.rejected,
                "failed": self.failed,
                "mean_processing_ms": mean,
                "cpu_seconds": time.process_time(),
                "uptime_s": time.time() - self._started_wall,
            }
        )

    async def close(self, _: web.Application) -> None:
        """Stop the worker threads (after the frames they are processing)."""
        self.pool.close()


NUMBER: dict[str, Any] = {"type": "number"}
#: The schemas the task's OpenAPI document refers to.
COMPONENTS: dict[str, Any] = {
    "schemas": {
        "Inference": {
            "type": "object",
            "required": [
                "detections", "server_arrival", "start", "end", "queue_ms",
                "processing_ms", "queue_at_arrival", "frame_shape", "detector",
            ],
            "properties": {
                "detections": {
                    "type": "array",
                    "items": {"type": "array", "items": NUMBER,
                              "minItems": 5, "maxItems": 5},
                },
                "server_arrival": NUMBER,
                "start": NUMBER,
                "end": NUMBER,
                "queue_ms": NUMBER,
                "processing_ms": NUMBER,
                "queue_at_arrival": {"type": "integer", "minimum": 0},
                "frame_shape": {"type": "array", "items": {"type": "integer"}},
                "detector": {"type": "string", "enum": sorted(DETECTORS)},
            },
        },
        "Stats": {
            "type": "object",
            "properties": {
                "detector": {"type": "string"},
                "workers": {"type": "integer"},
                "threads": {"type": "integer"},
                "in_flight": {"type": "integer"},
                "waiting": {"type": "integer"},
                "running": {"type": "integer"},
                "completed": {"type": "integer"},
                "rejected": {"type": "integer"},
                "failed": {"type": "integer"},
                "mean_processing_ms": {"type": "number", "nullable": True},
                "cpu_seconds": NUMBER,
                "uptime_s": NUMBER,
            },
        },
    }
}


def _routes(task: DetectTask) -> list[Route]:
    """The task's endpoints, with their OpenAPI operations."""
    return [
        Route("POST", "/infer", task.handle_infer, "Detect objects in one JPEG frame",
              frame_operation(task.max_body_bytes, {"$ref": "#/components/schemas/Inference"}),
              auth=PUBLIC),
        Route("GET", "/health", task.handle_health, "liveness", op()),
        Route("GET", "/stats", task.handle_stats, "load and utilisation",
              op(answer={"$ref": "#/components/schemas/Stats"})),
    ]


def make_app(
    detector: str = "hog",
    workers: int = 1,
    threads: int = 1,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
) -> web.Application:
    """Build the task's application; raises :class:`ValueError` on a bad setting.

    Sets OpenCV's process-wide thread count to ``threads``.
    """
    if detector not in DETECTORS:
        raise ValueError(f"detector must be one of {', '.join(DETECTORS)}, found {detector!r}")
    for name, value in (("workers", workers), ("threads", threads),
                        ("max_body_bytes", max_body_bytes), ("queue_limit", queue_limit)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, found {value}")
    cv2.setNumThreads(threads)
    task = DetectTask(detector, workers, threads, max_body_bytes, queue_limit)
    app = web.Application(middlewares=[json_errors], client_max_size=max_body_bytes)
    add_api(app, "Armada object-detection task", "One JPEG frame per POST /infer, "
            "objects found by an OpenCV detector (nodes/armada/detect_task.py).",
            _routes(task), COMPONENTS)
    app.on_cleanup.append(task.close)
    return app


def app_from_params(params: DetectTaskParams, address: Address) -> web.Application:
    """The task of a command line."""
    return make_app(params.detector, params.workers, params.threads, params.max_body_bytes,
                    params.queue_limit)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the task of the command line until SIGTERM/SIGINT."""
    return run_service(DetectTaskParams, app_from_params, argv,
                       prog="python -m nodes.armada.detect_task",
                       description=__doc__.splitlines()[0], port=8000, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
