"""The ``echo-star`` scenario builder: one client, N echo servers behind one switch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def star(params: Mapping[str, Any]) -> dict[str, Any]:
    """``servers`` (1-8, default 2) echo servers, server i's link ``(i + 1) * delay_ms``
    one-way (``delay_ms`` in [0, 50], default 2); answers the topology and services."""
    for key in params:
        if key not in ("servers", "delay_ms"):
            raise ValueError(f"params.{key}: expected one of the keys servers, delay_ms, "
                             "found <unknown key>")
    servers = params.get("servers", 2)
    if not isinstance(servers, int) or isinstance(servers, bool) or not 1 <= servers <= 8:
        raise ValueError(f"params.servers: expected an integer in [1, 8], found {servers!r}")
    delay = params.get("delay_ms", 2)
    if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay <= 50:
        raise ValueError(f"params.delay_ms: expected a number in [0, 50], found {delay!r}")
    nodes = [{"name": "c1", "role": "client", "tier": "local"}, {"name": "s1", "role": "switch"}]
    links = [{"a": "c1", "b": "s1", "delay_ms": 0}]
    services = []
    for i in range(servers):
        nodes.append({"name": f"e{i + 1}", "role": "server", "tier": "edge"})
        links.append({"a": f"e{i + 1}", "b": "s1", "delay_ms": (i + 1) * delay})
        services.append({"name": f"echo{i + 1}", "program": "echo.server", "node": f"e{i + 1}",
                         "params": {"service_ms": 5}})
    return {"topology": {"nodes": nodes, "links": links}, "services": services}
