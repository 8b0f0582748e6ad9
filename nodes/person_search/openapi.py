"""The request schemas of the person-search services' OpenAPI documents.

Each service lists its routes once (:class:`nodes.common.Route`) and its document
(``GET /openapi.json``) is generated from that table. The schemas are written by hand
from ``docs/person_search.md`` (the services validate bodies with field tables and a
few hand-written checks, not with these schemas); the building blocks are every
service's (:mod:`nodes.openapi`).
"""

from __future__ import annotations

from nodes.openapi import POSITIVE, Schema, add_api, body, op

__all__ = ["ANALYSE", "RUN", "WORLD", "add_api", "op"]

INT0: Schema = {"type": "integer", "minimum": 0}

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
