"""Waiting for many services, each in its own host's namespace, in one pass."""

from __future__ import annotations

import http.server
import os
import socket
import threading

import pytest

from testbed.emulation.probe import wait_http_ok_each
from testbed.errors import EmulationError


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_target_answering_returns_and_a_silent_one_is_named() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ok = f"http://127.0.0.1:{server.server_address[1]}/health"
        me = os.getpid()  # this process's namespace stands for a host's
        wait_http_ok_each([(me, ok), (me, ok)], timeout=5.0)  # raises unless both answer
        silent = f"http://127.0.0.1:{_free_port()}/health"
        missing = f"http://127.0.0.1:{server.server_address[1]}/nowhere"
        with pytest.raises(EmulationError, match=r"2 services did not answer within 0.3 s"
                                                 r".*nowhere") as info:
            wait_http_ok_each([(me, ok), (me, silent), (me, missing)], timeout=0.3)
        assert silent in str(info.value)
    finally:
        server.shutdown()
        server.server_close()
