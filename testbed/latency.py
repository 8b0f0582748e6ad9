"""The latency decomposition every client writes into its trace rows.

One place defines how a completed request's wall-clock timestamps become the trace's
columns (docs/traces.md), so task and frame rows mean the same thing. Queueing and
service were compressed by ``time_scale`` and are scaled back to model time; the
network part is physical and is never scaled.
"""

from __future__ import annotations

from typing import Any


def completed_columns(dispatch_model: float, dispatch_wall: float, response_wall: float,
                      server_arrival: float, start: float, end: float,
                      time_scale: float) -> dict[str, Any]:
    """The timing columns of a completed request, from client and server timestamps."""
    network = (response_wall - dispatch_wall) - (end - server_arrival)
    wait = (start - server_arrival) * time_scale
    service = (end - start) * time_scale
    latency = network + wait + service
    return {
        "response_model": dispatch_model + latency,
        "server_arrival_wall": server_arrival,
        "start_wall": start,
        "end_wall": end,
        "response_wall": response_wall,
        "latency_s": latency,
        "network_s": network,
        "wait_s": wait,
        "service_s": service,
        "latency_wall_s": response_wall - dispatch_wall,
    }
