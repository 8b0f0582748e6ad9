"""The client of a delayer's control socket: one JSON line out, one back, per request.

:class:`DelayerClient` speaks the control protocol of
:mod:`testbed.emulation.delayer.server` for the harness (the link builder, the executor,
calibration); a refused or unanswered request raises :class:`EmulationError`. A client
made by :func:`~testbed.emulation.delayer.launcher.start_delayer` also holds the ledger
entry of the process it started, so :meth:`DelayerClient.stop` ends it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

from testbed.emulation.ledger import Entry, Ledger
from testbed.errors import EmulationError


class DelayerClient:
    """Synchronous client of one delayer's control socket (safe to share between threads)."""

    def __init__(self, path: str | Path, timeout: float = 10.0, ledger: Ledger | None = None,
                 entry: Entry | None = None) -> None:
        self.path = str(path)
        self.timeout = timeout
        self._ledger, self._entry = ledger, entry
        self._sock: socket.socket | None = None
        self._file: Any = None
        self._lock = threading.Lock()
        self.process: subprocess.Popen | None = None

    @property
    def entry(self) -> Entry | None:
        """The ledger entry of the delayer process when this client started it."""
        return self._entry

    @property
    def pid(self) -> int | None:
        """The delayer's pid when this client started it."""
        return self._entry.data["pid"] if self._entry else None

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self._sock, self._file = sock, sock.makefile("rb")

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return the reply; a refused request raises EmulationError."""
        with self._lock:
            try:
                if self._sock is None:
                    self._connect()
                assert self._sock is not None
                self._sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
                line = self._file.readline()
                if not line:
                    raise ConnectionError("the delayer closed the control connection")
            except OSError as exc:
                self._close()
                raise EmulationError(f"delayer at {self.path} does not answer {op!r}: "
                                     f"{exc}") from exc
        reply = json.loads(line)
        if not reply.get("ok"):
            raise EmulationError(f"delayer refused {op!r}: {reply.get('error')}")
        return reply

    def ping(self) -> dict[str, Any]:
        return self.request("ping")

    def add_link(self, link_id: str, a: tuple[int, str], b: tuple[int, str],
                 **params: Any) -> dict[str, Any]:
        """Create TAP ``a[1]`` in the namespace of pid ``a[0]`` and ``b[1]`` likewise, linked."""
        return self.request("add_link", id=link_id, a={"pid": a[0], "ifname": a[1]},
                            b={"pid": b[0], "ifname": b[1]}, **params)

    def set(self, link_id: str, direction: str = "both", **params: Any) -> dict[str, Any]:
        return self.request("set", id=link_id, direction=direction, **params)

    def up(self, link_id: str, up: bool) -> dict[str, Any]:
        return self.request("up", id=link_id, up=up)

    def remove(self, link_id: str) -> dict[str, Any]:
        return self.request("remove", id=link_id)

    def remove_all(self) -> list[str]:
        """Remove every link of this delayer at once; returns their ids."""
        return self.request("remove_all")["removed"]

    def stats(self, link_id: str) -> dict[str, Any]:
        return self.request("stats", id=link_id)

    def lateness(self, reset: bool = False) -> dict[str, Any]:
        """Release lateness over every link since the last reset (``count``, ``p50_us``,
        ``p99_us``, ``max_us``); ``reset`` starts a new count after this answer."""
        reply = self.request("lateness", reset=reset)
        return {k: reply[k] for k in ("count", "p50_us", "p99_us", "max_us")}

    def alive(self) -> bool:
        """Whether the delayer answers a ping."""
        try:
            self.ping()
            return True
        except EmulationError:
            return False

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def close(self) -> None:
        """Close the control connection (the delayer keeps running)."""
        with self._lock:
            self._close()

    def stop(self) -> None:
        """End the delayer this client started (its TAPs vanish with it)."""
        self.close()
        if self._ledger is not None and self._entry is not None:
            self._ledger.release(self._entry)
