"""The echo server's scenario parameters (no web framework imported)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def echo_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``service_ms``: how long the server takes per request (a number in (0, 1000])."""
    for key in params:
        if key != "service_ms":
            raise ValueError(f"params.{key}: expected the key service_ms, found <unknown key>")
    value = params.get("service_ms", 5)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1000:
        raise ValueError(f"params.service_ms: expected a number in (0, 1000], found {value!r}")
    return {"service_ms": float(value)}
