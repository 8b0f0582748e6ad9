"""The Armada services' request schemas and routes for their OpenAPI documents.

The building blocks (:func:`nodes.openapi.op`, :func:`nodes.openapi.body`) are every
service's; the schemas are written by hand from the contract in ``docs/armada.md`` (the
services validate bodies with the field tables of :mod:`nodes.armada.fields`, not with
schemas), compact but complete enough for a client generator or a curious human: every
path, method, request body and status, and the bounds the field tables check, from
their own constants (identifier and name patterns, non-empty strings, closed location
objects, array lengths, numeric ranges, which of ``module`` and ``image`` a runtime
needs). What OpenAPI 3.0 cannot say, or a fuzzer should not act on, is left to a
description: the names of ``args`` (3.0 has no ``propertyNames``) and the shape of a URL
(``http://host:port``: a generated one would name hosts the service then contacts). Every
Armada document declares the bearer scheme of the Beacon's secured operations
(:func:`add_api`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from nodes.armada.configs import NODE_TYPES
from nodes.armada.fields import (
    ID_RE,
    MAX_ARG_CHARS,
    MAX_DIM,
    MAX_RECORD_ID,
    MODULE_RE,
    NAME_RE,
    RUNTIMES,
    runtime_needs,
)
from nodes.common import OWN, Handler, Route
from nodes.openapi import NUMBER, POSITIVE, Schema, body, op


def pattern(regex: re.Pattern[str]) -> Schema:
    """A string matching ``regex`` entirely (the field tables' ``fullmatch``)."""
    return {"type": "string", "pattern": f"^{regex.pattern}$"}


#: A non-empty string (``str_field``).
TEXT: Schema = {"type": "string", "minLength": 1}
#: An identifier: a task id, or an app as a task names it (``id_field``).
ID: Schema = pattern(ID_RE)
#: An application name (``NAME_RE``).
NAME: Schema = pattern(NAME_RE)
#: ``http://host:port`` (``url_field``); its shape is in words, so a generated request
#: never names a host the service would then contact.
URL: Schema = {"type": "string", "minLength": 1, "description": "http://host:port"}
LOCATION: Schema = {
    "type": "object",
    "required": ["lat", "lon"],
    "additionalProperties": False,
    "properties": {
        "lat": {"type": "number", "minimum": -90, "maximum": 90},
        "lon": {"type": "number", "minimum": -180, "maximum": 180},
    },
}
LOCATIONS: Schema = {"type": "array", "items": LOCATION, "minItems": 1, "maxItems": 100}
TAGS: Schema = {"type": "array", "items": TEXT}
ARGS: Schema = {
    "type": "object",
    "description": "names like frame_size (a letter, then letters, digits, _ or -): "
                   "options the program declares, never the Captain's own (host, port, "
                   "secret_file); a URL option only on the Beacon's host",
    "additionalProperties": {"oneOf": [{"type": "string", "maxLength": MAX_ARG_CHARS},
                                       NUMBER, {"type": "boolean"}]},
}
TASK_SPEC: dict[str, Schema] = {
    "task_id": ID,
    "app": ID,
    "runtime": {"type": "string", "enum": ["process", "docker"]},
    "module": pattern(MODULE_RE),
    "image": TEXT,
    "args": ARGS,
    "cpu": POSITIVE,
    "memory_mb": {"type": "integer", "minimum": 1},
}

def registry_routes(
    collection: str, id_field: str, noun: str, register: Schema, leaves: str,
    handle_register: Handler, handle_list: Handler, handle_one: Handler,
    handle_leave: Handler,
) -> list[Route]:
    """A manager's node registry: register or refresh, list, one node, a node leaves.

    ``collection`` is the path (``nodes``), ``id_field`` the path parameter (``node_id``),
    ``noun`` what a node is called (``node``: "list nodes"), ``register`` the
    registration body and ``leaves`` what a leave sets off (after "a node leaves; ").
    """
    one = f"/{collection}/{{{id_field}}}"
    return [
        Route("POST", f"/{collection}", handle_register, f"register or refresh a {noun}",
              op(200, register, (400,))),
        Route("GET", f"/{collection}", handle_list, f"list {noun}s", op()),
        Route("GET", one, handle_one, f"one {noun}", op(errors=(404,))),
        Route("DELETE", one, handle_leave, f"a {noun} leaves; {leaves}", op(errors=(404,))),
    ]


def forwarded_registry_routes(
    collection: str, id_field: str, noun: str, register: Schema, registering: str,
    handle_register: Handler, handle_list: Handler, handle_leave: Handler,
) -> list[Route]:
    """The Beacon's forwarding of a registry (:func:`registry_routes`): registering
    (``registering`` says what, e.g. "a compute node") and leaving need a token, any
    call may meet an unreachable or silent manager (502, 504), and a path segment with
    an encoded separator or ``%`` is refused (400, :func:`nodes.armada.beacon.confined_path`)."""
    fwd = (502, 504)
    return [
        Route("POST", f"/{collection}", handle_register, f"register {registering}",
              op(200, register, (400, *fwd)), auth=OWN),
        Route("GET", f"/{collection}", handle_list, f"list {noun}s", op(errors=fwd)),
        Route("DELETE", f"/{collection}/{{{id_field}}}", handle_leave, f"a {noun} leaves",
              {**op(errors=(400, 404, *fwd)), "parameters": [segment(id_field)]}, auth=OWN),
    ]


def runtime_body(properties: dict[str, Schema], required: list[str],
                 runtime_required: bool = True) -> Schema:
    """A closed body holding a task specification, with the rule of its runtime: the
    process runtime needs ``module``, the docker runtime ``module`` and ``image`` (one
    shape each; ``runtime`` defaults to process unless ``runtime_required``)."""
    shapes = []
    for runtime in RUNTIMES:
        named = runtime_required or runtime == "docker"
        shapes.append(body({**properties, "runtime": {"type": "string", "enum": [runtime]}},
                           [*required, *(["runtime"] if named else []),
                            *runtime_needs(runtime)]))
    return {"oneOf": shapes}


DEPLOY = runtime_body(
    {
        "name": NAME,
        "module": TASK_SPEC["module"],
        "image": TASK_SPEC["image"],
        "args": ARGS,
        "cpu": TASK_SPEC["cpu"],
        "memory_mb": TASK_SPEC["memory_mb"],
        "locations": LOCATIONS,
        "need_storage": {"type": "boolean"},
        "tags": TAGS,
        "min_replicas": {"type": "integer", "minimum": 3, "maximum": 100},
    },
    ["name", "cpu", "memory_mb", "locations", "need_storage"], runtime_required=False,
)
QUERY = body(
    {"app": TEXT, "lat": LOCATION["properties"]["lat"], "lon": LOCATION["properties"]["lon"],
     "tags": TAGS, "user": TEXT},
    ["app", "lat", "lon"],
)
REGISTER = body(
    {
        "node_id": TEXT,
        "url": URL,
        "lat": LOCATION["properties"]["lat"],
        "lon": LOCATION["properties"]["lon"],
        "node_type": {"type": "string", "enum": list(NODE_TYPES)},
        "cpu": TASK_SPEC["cpu"],
        "memory_mb": TASK_SPEC["memory_mb"],
        "tags": TAGS,
    },
    ["node_id", "url", "lat", "lon", "node_type", "cpu", "memory_mb"],
)
PLACE = runtime_body(
    {**TASK_SPEC, "lat": LOCATION["properties"]["lat"], "lon": LOCATION["properties"]["lon"],
     "tags": TAGS},
    ["task_id", "app", "cpu", "memory_mb", "lat", "lon"],
)


def start_body(modules: Iterable[str]) -> Schema:
    """``POST /tasks`` at a Captain: a task running one of the Captain's ``modules``
    (its ``--task-module`` allowlist; another program is refused with 422), as a
    process or, in the image ``armada-task`` the Captain builds, as a container (a
    Captain without an engine refuses it with 422)."""
    return runtime_body({**TASK_SPEC, "module": {"type": "string", "enum": list(modules)}},
                        ["task_id", "app", "cpu", "memory_mb"])


def segment(name: str, schema: Schema | None = None) -> dict[str, Any]:
    """The path parameter ``name`` of a Beacon route: ``schema``, by default text that
    needs no percent-encoding and is no dot segment (what :func:`nodes.armada.beacon.
    confined_path` lets through; an operation's parameter overrides its path's)."""
    return {"name": name, "in": "path", "required": True,
            "schema": schema or {"type": "string", "pattern": r"^[A-Za-z0-9_~-][A-Za-z0-9_.~-]*$"}}


# ------------------------------------------------------------------ storage layer

RECORD: Schema = {
    "type": "object",
    "required": ["id", "vector"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": MAX_RECORD_ID},
        "vector": {"type": "array", "items": NUMBER, "minItems": 1, "maxItems": MAX_DIM},
    },
}
VERSIONED_RECORD: Schema = {
    **RECORD,
    "required": ["id", "vector", "ts", "origin"],
    "properties": {**RECORD["properties"],
                   "ts": {"type": "integer", "minimum": 0, "maximum": MAX_RECORD_ID},
                   "origin": {"type": "string"}},
}
RECORDS: Schema = {"type": "array", "items": RECORD, "minItems": 1, "maxItems": 100_000}
URLS: Schema = {"type": "array", "items": URL, "maxItems": 100}
CONSISTENCY: Schema = {"type": "string", "enum": ["strong", "eventual"]}


def source(*kinds: str) -> Schema:
    """Where an application's initial data set comes from: one closed shape per kind
    (``source_field``)."""
    shapes = {
        "inline": {"records": RECORDS},
        "url": {"url": {"type": "string", "minLength": 1,
                        "description": "http://host[:port]/path"}},
        "file": {"path": TEXT},
        "replicas": {"urls": {**URLS, "minItems": 1}},
    }
    return {"oneOf": [body({"kind": {"type": "string", "enum": [kind]}, **shapes[kind]},
                           ["kind", *shapes[kind]]) for kind in kinds]}


CARGO_REGISTER = body(
    {
        "cargo_id": TEXT,
        "url": URL,
        "lat": LOCATION["properties"]["lat"],
        "lon": LOCATION["properties"]["lon"],
        "capacity_bytes": {"type": "integer", "minimum": 1},
        "node_type": {"type": "string", "enum": list(NODE_TYPES)},
        "tags": TAGS,
        "apps": {"type": "array", "items": {"type": "string"}},
    },
    ["cargo_id", "url", "lat", "lon", "capacity_bytes"],
)
STORAGE_REQUEST = body(
    {
        "app": NAME,
        "locations": LOCATIONS,
        "replication": {"type": "integer", "minimum": 1, "maximum": 10},
        "consistency": CONSISTENCY,
        "strategy": {"type": "string", "enum": ["nearest", "random"]},
        "quota_bytes": {"type": "integer", "minimum": 1},
        "dim": {"type": "integer", "minimum": 1, "maximum": MAX_DIM},
        "source": source("inline", "url", "file"),
    },
    ["app", "locations"],
)


STORAGE_QUERY = body(
    {"app": TEXT, "lat": LOCATION["properties"]["lat"], "lon": LOCATION["properties"]["lon"],
     "topn": {"type": "integer", "minimum": 1, "maximum": 10}},
    ["app", "lat", "lon"],
)
CARGO_ALLOCATE = body(
    {"app": NAME, "quota_bytes": {"type": "integer", "minimum": 1},
     "dim": {"type": "integer", "minimum": 1, "maximum": MAX_DIM},
     "consistency": CONSISTENCY, "peers": URLS,
     "source": source("inline", "url", "file", "replicas")},
    ["app", "quota_bytes"],
)
PEERS = body({"peers": URLS}, ["peers"])
WRITE = body({"records": RECORDS}, ["records"])
MATCH = body({"vector": RECORD["properties"]["vector"],
              "threshold": {"type": "number", "minimum": 0}}, ["vector"])
REPLICATE = body({"origin": TEXT, "records": {"type": "array", "items": VERSIONED_RECORD,
                                              "minItems": 1, "maxItems": 100_000}},
                 ["origin", "records"])
