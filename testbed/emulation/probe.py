"""HTTP from inside an emulated host's network namespace, without a subprocess.

The harness lives in the root namespace, where the emulated hosts' addresses are not
routed. A worker thread that enters a host's namespace (``setns`` applies to the calling
thread only) opens its sockets there, so the harness can wait for services to answer
and reset them between policies exactly as a client would see them.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from testbed.emulation.netns import enter_netns_of
from testbed.errors import EmulationError

T = TypeVar("T")


def in_netns(pid: int, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a fresh thread inside the network namespace of ``pid``."""
    result: dict[str, Any] = {}

    def body() -> None:
        try:
            enter_netns_of(pid)
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=body, name=f"netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def http_json(url: str, method: str = "GET", body: dict | None = None,
              timeout: float = 5.0, headers: dict[str, str] | None = None
              ) -> tuple[int, dict]:
    """One JSON request (with extra ``headers``, such as the run secret's); returns
    (status, decoded body). Errors of HTTP give their status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        try:
            return exc.code, json.loads(payload or b"{}")
        except ValueError:
            return exc.code, {"error": payload.decode(errors="replace")}


def wait_http_ok(pid: int, urls: list[str], timeout: float) -> float:
    """Wait until every URL answers 200 from inside ``pid``'s namespace.

    Returns the seconds it took; raises EmulationError naming the URLs that never did.
    """

    def poll() -> float:
        start = time.monotonic()
        pending = list(urls)
        while pending:
            still = []
            for url in pending:
                try:
                    status, _ = http_json(url, timeout=1.0)
                except (OSError, ValueError):
                    status = 0
                if status != 200:
                    still.append(url)
            pending = still
            if not pending:
                break
            if time.monotonic() - start > timeout:
                raise EmulationError(f"services did not answer within {timeout} s: "
                                     f"{', '.join(pending)}")
            time.sleep(0.02)
        return time.monotonic() - start

    return in_netns(pid, poll)


def _status(url: str, timeout: float) -> int:
    """The status of one plain ``GET url`` (0 when nothing answers), with a bare
    ``http.client`` connection: a fraction of ``urllib``'s cost per request."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


def wait_http_ok_each(targets: Sequence[tuple[int, str]], timeout: float) -> list[float]:
    """Wait until every ``(pid, url)`` answers 200 from inside ``pid``'s namespace.

    One worker thread moves from namespace to namespace (``setns`` per target) instead
    of one thread per target, and retries only what did not answer yet: hundreds of
    services, one per host, are checked in one pass. ``timeout`` runs from the last
    target that answered (each target gets it, as when they were waited for one by
    one). Returns, per target, the seconds until it first answered; raises
    :class:`EmulationError` naming the URLs that never answered.
    """
    if not targets:
        return []

    def poll() -> list[float]:
        start = progress = time.monotonic()
        answered: dict[int, float] = {}
        pending = list(enumerate(targets))
        while pending:
            still = []
            for index, (pid, url) in pending:
                enter_netns_of(pid)
                if _status(url, 1.0) == 200:
                    answered[index] = time.monotonic() - start
                else:
                    still.append((index, (pid, url)))
            if len(still) < len(pending):
                progress = time.monotonic()
            pending = still
            if pending and time.monotonic() - progress > timeout:
                shown = ", ".join(url for _, (_, url) in pending[:5])
                raise EmulationError(f"{len(pending)} services did not answer within "
                                     f"{timeout} s: {shown}")
            if pending:
                time.sleep(0.02)
        return [answered[index] for index in range(len(targets))]

    return in_netns(targets[0][0], poll)
