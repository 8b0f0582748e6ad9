"""What the frame-processing tasks share (object detection, face recognition).

Both tasks take one JPEG frame per request and process it with OpenCV in a worker
thread:

* :func:`read_jpeg` reads the request's body as a JPEG frame (400/413/415 otherwise),
  within the service's body timeout like every body (408 for a slower one,
  :func:`nodes.common.read_body_in_time`); :func:`frame_operation` is the OpenAPI
  operation of such a request;
* :class:`WorkerPool` bounds concurrency: at most ``workers`` frames are processed at
  once, each in a worker thread (OpenCV releases the GIL, so the event loop keeps
  answering), further frames wait in FIFO order, and beyond ``queue_limit`` waiting
  frames a frame is refused with 503 instead of being queued without bound. A frame
  whose client disconnects while it waits leaves the queue; one already being processed
  finishes, and its worker is not handed to another frame before that.

Their shared parameters are :class:`nodes.armada.configs.FrameTaskParams`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from nodes.common import client_error, read_body_in_time
from nodes.openapi import ANY_OBJECT, Schema, binary, op

JPEG_MAGIC = b"\xff\xd8\xff"

T = TypeVar("T")


def too_large(reason: str, max_size: int, actual_size: int) -> web.HTTPRequestEntityTooLarge:
    """A 413 with a JSON body (aiohttp's own names the shared 64 KiB limit)."""
    return web.HTTPRequestEntityTooLarge(
        max_size=max_size, actual_size=actual_size, text=json.dumps({"error": reason}),
        content_type="application/json",
    )


async def read_jpeg(request: web.Request, max_body_bytes: int) -> bytes:
    """The request's JPEG body, or a JSON 400 (empty, not a JPEG), 408 (still arriving
    after the body timeout), 413 (larger than ``max_body_bytes``) or 415 (another
    ``Content-Type``) error."""
    if request.content_type != "image/jpeg":
        raise client_error(
            web.HTTPUnsupportedMediaType,
            f"Content-Type: expected image/jpeg, found {request.content_type or 'nothing'}",
        )
    reason = f"body: expected at most {max_body_bytes} bytes, found more"
    length = request.content_length
    if length is not None and length > max_body_bytes:
        raise too_large(reason, max_body_bytes, length)
    try:
        data = await read_body_in_time(request)
    except web.HTTPRequestEntityTooLarge:
        raise too_large(reason, max_body_bytes, max_body_bytes + 1) from None
    if not data:
        raise client_error(web.HTTPBadRequest, "body: expected a JPEG image, found nothing")
    if not data.startswith(JPEG_MAGIC):
        raise client_error(
            web.HTTPBadRequest,
            f"body: expected a JPEG image (starting FF D8 FF), found {data[:8].hex(' ')}",
        )
    return data


#: What a frame request may be answered besides its success: :func:`read_jpeg`'s
#: refusals and a full queue (503, :class:`WorkerPool`).
FRAME_ERRORS = (400, 408, 413, 415, 503)


def frame_operation(max_body_bytes: int, answer: Schema = ANY_OBJECT,
                    errors: tuple[int, ...] = ()) -> dict[str, Any]:
    """The OpenAPI operation of a frame request: a JPEG body of at most
    ``max_body_bytes`` bytes, ``answer`` on success, :data:`FRAME_ERRORS` and ``errors``."""
    return op(request=binary(max_body_bytes), errors=(*FRAME_ERRORS, *errors),
              media_type="image/jpeg", answer=answer)


class WorkerPool:
    """``workers`` worker threads behind a FIFO queue of at most ``queue_limit`` frames.

    ``waiting`` counts the frames queued for a worker, ``running`` those being
    processed, ``rejected`` those refused because the queue was full.
    """

    def __init__(self, workers: int, queue_limit: int, thread_name_prefix: str) -> None:
        self.workers = workers
        self.queue_limit = queue_limit
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix=thread_name_prefix)
        self._slots = asyncio.Semaphore(workers)
        self.waiting = 0
        self.running = 0
        self.rejected = 0

    def warm_up(self, warm: Callable[[], Any]) -> None:
        """Run ``warm`` once in every worker thread before serving (blocks until done).

        Each thread's first frame builds its OpenCV objects and scratch buffers, several
        times a warm frame's cost on a CPU-limited node; doing it here keeps that out of
        the first clients' frames.
        """
        gate = threading.Barrier(self.workers)

        def one() -> None:
            gate.wait(timeout=30.0)  # one job per thread: each blocks until all started
            warm()

        for job in [self.executor.submit(one) for _ in range(self.workers)]:
            job.result()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Queue for a worker, then run ``fn(*args)`` in its thread; its result.

        Raises a JSON 503 (counted in ``rejected``) when ``queue_limit`` frames already
        wait. A caller cancelled while waiting leaves the queue; one cancelled while its
        frame is processed leaves the worker busy until ``fn`` returns.
        """
        if self.waiting >= self.queue_limit:
            self.rejected += 1
            raise client_error(web.HTTPServiceUnavailable, f"queue full: {self.waiting} frames "
                               f"already waiting (queue_limit {self.queue_limit})")
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        future = asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(lambda _: self._finish())
            raise
        except Exception:
            self._finish()
            raise
        self._finish()
        return result

    def _finish(self) -> None:
        """A frame left its worker: give the slot to the next waiting frame."""
        self.running -= 1
        self._slots.release()

    def close(self) -> None:
        """Stop the worker threads (after the frames they are processing)."""
        self.executor.shutdown(wait=True, cancel_futures=True)
