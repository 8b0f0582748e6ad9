"""OpenAPI 3.0 descriptions of the person-search services, served at ``GET /openapi.json``.

Written by hand from ``docs/person_search.md`` (the services validate bodies with field
tables and a few hand-written checks, not with these schemas). The building blocks
(:func:`~nodes.armada.openapi.op`, :func:`~nodes.armada.openapi.body`) are the Armada
services' own.
"""

from __future__ import annotations

from typing import Any

from nodes.armada.openapi import Schema, add_openapi, body, op

__all__ = ["add_openapi", "coordinator_spec", "edge_server_spec"]

INT0: Schema = {"type": "integer", "minimum": 0}
POSITIVE: Schema = {"type": "number", "exclusiveMinimum": 0}

WORLD = body(
    {
        "slots": {"type": "integer", "minimum": 1, "maximum": 1000},
        "present": {
            "type": "object",
            "description": 'keys "1" .. "<slots>": the targets the item of that slot contains',
            "additionalProperties": {"type": "array", "items": INT0},
        },
        "epoch": {"type": "string", "minLength": 1},
    },
    ["slots", "present", "epoch"],
)
ANALYSE = body(
    {"search": INT0, "item": INT0, "factor": {**POSITIVE, "maximum": 1e6}},
    ["search", "item"],
)
RUN = body(
    {
        "servers": {"type": "array", "minItems": 1,
                    "items": {"type": "string", "pattern": "^https?://"}},
        "layout": {"type": "string", "enum": ["line", "grid"]},
        "slots": {"type": "integer", "minimum": 1, "maximum": 1000},
        "starts": {"type": "array", "minItems": 1, "items": INT0},
        "policy": {"type": "string", "enum": ["priority", "random", "load-balance"]},
        "policy_params": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "alpha": {"type": "number", "minimum": 0},
                "sigma_d": POSITIVE,
                "w": {"type": "number", "minimum": 0},
                "t_s": {**POSITIVE, "nullable": True},
                "compensation": {"type": "string", "enum": ["none", "response-time"]},
                "candidates": {"type": "string", "enum": ["unanalysed", "after-discovery"]},
            },
        },
        "policy_seed": {"type": "integer"},
        "tc": POSITIVE,
        "time_scale": {"type": "number", "minimum": 1},
        "accounting": {"type": "string", "enum": ["plain", "compensated"]},
        "request_timeout_s": POSITIVE,
    },
    ["servers", "layout", "slots", "starts", "policy", "policy_seed", "time_scale"],
)


def document(title: str, description: str, paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A whole OpenAPI document with ``/health`` and ``/openapi.json`` added."""
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": "1.0", "description": description},
        "paths": {
            **paths,
            "/health": {"get": op("liveness, state and configuration")},
            "/openapi.json": {"get": op("this description")},
        },
    }


def edge_server_spec() -> dict[str, Any]:
    """The edge data server."""
    return document(
        "Person-search edge data server",
        "Stores one edge server's items and their ground truth; answers analysis requests "
        "after the paper's response-model duration.",
        {
            "/world": {"put": op("load the stored items' truth", 200, WORLD, (400, 409))},
            "/analyse": {
                "post": op("analyse one item for one target", 200, ANALYSE, (400, 404, 409)),
            },
        },
    )


def coordinator_spec() -> dict[str, Any]:
    """The search coordinator (the cloud server)."""
    return document(
        "Person-search coordinator",
        "Runs every search of a request concurrently against the edge servers "
        "(Algorithm 1 with one of the policies).",
        {"/runs": {"post": op("run every search to its end", 200, RUN, (400, 409, 502))}},
    )
