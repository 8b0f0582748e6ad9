"""A minimal Armada task program: the task contract without a detector.

It answers ``GET /health``, ``POST /infer`` (any body: a frame; the answer reports the
server-side timings and, with ``--work-ms``, burns that much CPU per request so load and
utilisation are real) and ``GET /stats`` (requests in flight and completed), which is
all a Captain, the Application Manager and the SDK rely on; ``GET /openapi.json``
describes them. A body still arriving after the body timeout gets 408, as on every
service (:func:`nodes.common.read_body_in_time`). Used by tests and smoke runs;
the real workload is ``nodes.armada.detect_task``.

Run it as ``python -m nodes.armada.echo_task --host H --port P [--work-ms MS]
[--name NAME]``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence

from aiohttp import web

from nodes.armada.configs import EchoTaskParams
from nodes.common import PUBLIC, Address, Route, json_errors, read_body_in_time, run_service
from nodes.openapi import add_api, binary, op

_log = logging.getLogger("nodes.armada.echo_task")
MAX_FRAME_BYTES = 8 * 2**20


class EchoTask:
    """Counters and handlers."""

    def __init__(self, work_ms: float, name: str) -> None:
        self.work_s = work_ms / 1000
        self.name = name
        self.in_flight = 0
        self.completed = 0

    async def handle_infer(self, request: web.Request) -> web.Response:
        """``POST /infer``: read the frame, optionally burn CPU, report timings."""
        self.in_flight += 1
        try:
            arrival = time.time()
            frame = await read_body_in_time(request)
            start = time.time()
            deadline = time.process_time() + self.work_s
            while time.process_time() < deadline:  # CPU work, slowed by the CPU limit
                pass
            end = time.time()
        finally:
            self.in_flight -= 1
        self.completed += 1
        return web.json_response({
            "name": self.name, "bytes": len(frame), "server_arrival": arrival,
            "start": start, "end": end, "processing_s": end - start, "detections": [],
        })

    async def handle_health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        return web.json_response({"ok": True, "name": self.name})

    async def handle_stats(self, request: web.Request) -> web.Response:
        """``GET /stats``."""
        return web.json_response({"in_flight": self.in_flight, "completed": self.completed})


def make_app(work_ms: float = 0.0, name: str = "echo") -> web.Application:
    """Build the echo task application."""
    task = EchoTask(work_ms, name)
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_FRAME_BYTES)
    add_api(app, "Armada echo task", "The task contract without a detector: any body "
            "per POST /infer (nodes/armada/echo_task.py).", [
        Route("POST", "/infer", task.handle_infer, "take a frame, burn the CPU asked, report",
              op(request=binary(MAX_FRAME_BYTES), errors=(408, 413),
                 media_type="application/octet-stream"), auth=PUBLIC),
        Route("GET", "/health", task.handle_health, "liveness", op()),
        Route("GET", "/stats", task.handle_stats, "requests in flight and completed", op()),
    ])
    return app


def app_from_params(params: EchoTaskParams, address: Address) -> web.Application:
    """The echo task of a command line."""
    return make_app(params.work_ms, params.name)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the echo task of the command line until SIGTERM/SIGINT."""
    return run_service(EchoTaskParams, app_from_params, argv,
                       prog="python -m nodes.armada.echo_task",
                       description=__doc__.splitlines()[0], port=8080, logger=_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
