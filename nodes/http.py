"""The JSON calls services and in-host clients make to each other.

One helper so every service handles an unreachable peer alike: it returns the peer's
status and decoded JSON body, and turns connection failures and timeouts into
:class:`PeerError` with a readable reason (the caller decides whether that is a 502, a
missed health check or a retry); and the readings of an error answer every client
reports the same way (:func:`error_of`, :func:`error_text`).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class PeerError(Exception):
    """A peer could not be reached or did not answer in time (``timeout`` tells which)."""

    def __init__(self, reason: str, timeout: bool = False) -> None:
        super().__init__(reason)
        self.timeout = timeout


async def call_json(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    timeout_s: float = 5.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """``method url`` with a JSON ``body``; returns ``(status, decoded body or None)``."""
    try:
        async with session.request(
            method,
            url,
            json=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            raw = await resp.read()
            try:
                decoded = json.loads(raw) if raw else None
            except ValueError:
                decoded = {"error": raw[:200].decode("utf-8", "replace")}
            return resp.status, decoded
    except TimeoutError:
        raise PeerError(f"no answer from {url} within {timeout_s:g} s", timeout=True) from None
    except aiohttp.ClientError as exc:
        raise PeerError(f"{url}: {type(exc).__name__}: {exc}") from None


def error_of(status: int, body: Any) -> str:
    """The ``error`` reason of a peer's answer, or a description of it."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return f"status {status}"


def error_text(text: str) -> str:
    """The ``error`` of a JSON error body given as text, or the (shortened) raw body."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return text[:200]
