"""The echo program: ``POST /echo`` answers after ``--service-ms``, with its timestamps.

Run as ``python -m tests.testsystem.server --host H --port P --service-ms S``.
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv: list[str] | None = None) -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--service-ms", type=float, default=5.0)
    args = parser.parse_args(argv)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._answer(200, {"ok": True})
            else:
                self._answer(404, {"error": f"no such endpoint: {self.path}"})

        def do_POST(self) -> None:
            arrival = time.time()
            length = int(self.headers.get("Content-Length") or 0)
            try:
                task = json.loads(self.rfile.read(length) or b"{}")["task_id"]
            except (ValueError, KeyError, TypeError):
                self._answer(400, {"error": "body: expected {\"task_id\": N}"})
                return
            time.sleep(args.service_ms / 1000.0)
            self._answer(200, {"task_id": task, "server_arrival": arrival, "start": arrival,
                               "end": time.time()})

        def log_message(self, *_args: object) -> None:
            """Quiet: one line per request would drown the service log."""

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
