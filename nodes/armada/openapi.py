"""The Armada services' request schemas and routes for their OpenAPI documents.

The building blocks (:func:`nodes.openapi.op`, :func:`nodes.openapi.body`) are every
service's; the schemas are written by hand from the contract in ``docs/armada.md`` (the
services validate bodies with small field tables, not schemas), compact but complete
enough for a client generator or a curious human: every path, method, request body and
status. Every Armada document declares the bearer scheme of the Beacon's secured
operations (:func:`add_api`).
"""

from __future__ import annotations

from nodes.armada.configs import NODE_TYPES
from nodes.common import OWN, Handler, Route
from nodes.openapi import NUMBER, POSITIVE, STRING, Schema, body, op

LOCATION: Schema = {
    "type": "object",
    "required": ["lat", "lon"],
    "properties": {
        "lat": {"type": "number", "minimum": -90, "maximum": 90},
        "lon": {"type": "number", "minimum": -180, "maximum": 180},
    },
}
TAGS: Schema = {"type": "array", "items": {"type": "string", "minLength": 1}}
ARGS: Schema = {
    "type": "object",
    "additionalProperties": {"oneOf": [STRING, NUMBER, {"type": "boolean"}]},
}
TASK_SPEC: dict[str, Schema] = {
    "task_id": STRING,
    "app": STRING,
    "runtime": {"type": "string", "enum": ["process", "docker"]},
    "module": STRING,
    "image": STRING,
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
              op(errors=(400, 404, *fwd)), auth=OWN),
    ]


DEPLOY = body(
    {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,39}$"},
        "runtime": TASK_SPEC["runtime"],
        "module": STRING,
        "image": STRING,
        "args": ARGS,
        "cpu": TASK_SPEC["cpu"],
        "memory_mb": TASK_SPEC["memory_mb"],
        "locations": {"type": "array", "items": LOCATION, "minItems": 1},
        "need_storage": {"type": "boolean"},
        "tags": TAGS,
        "min_replicas": {"type": "integer", "minimum": 3},
    },
    ["name", "cpu", "memory_mb", "locations", "need_storage"],
)
QUERY = body(
    {"app": STRING, "lat": LOCATION["properties"]["lat"], "lon": LOCATION["properties"]["lon"],
     "tags": TAGS, "user": STRING},
    ["app", "lat", "lon"],
)
REGISTER = body(
    {
        "node_id": STRING,
        "url": STRING,
        "lat": LOCATION["properties"]["lat"],
        "lon": LOCATION["properties"]["lon"],
        "node_type": {"type": "string", "enum": list(NODE_TYPES)},
        "cpu": TASK_SPEC["cpu"],
        "memory_mb": TASK_SPEC["memory_mb"],
        "tags": TAGS,
    },
    ["node_id", "url", "lat", "lon", "node_type", "cpu", "memory_mb"],
)
PLACE = body(
    {**TASK_SPEC, "lat": LOCATION["properties"]["lat"], "lon": LOCATION["properties"]["lon"],
     "tags": TAGS},
    ["task_id", "app", "runtime", "cpu", "memory_mb", "lat", "lon"],
)
START = body(TASK_SPEC, ["task_id", "app", "runtime", "cpu", "memory_mb"])


# ------------------------------------------------------------------ storage layer

RECORD: Schema = {
    "type": "object",
    "required": ["id", "vector"],
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
        "vector": {"type": "array", "items": NUMBER, "minItems": 1, "maxItems": 4096},
    },
}
VERSIONED_RECORD: Schema = {
    **RECORD,
    "required": ["id", "vector", "ts", "origin"],
    "properties": {**RECORD["properties"], "ts": {"type": "integer", "minimum": 0},
                   "origin": STRING},
}
RECORDS: Schema = {"type": "array", "items": RECORD, "minItems": 1}
URLS: Schema = {"type": "array", "items": STRING}
CONSISTENCY: Schema = {"type": "string", "enum": ["strong", "eventual"]}
SOURCE: Schema = {
    "type": "object",
    "required": ["kind"],
    "properties": {
        "kind": {"type": "string", "enum": ["inline", "url", "file", "replicas"]},
        "records": RECORDS,
        "url": STRING,
        "path": STRING,
        "urls": URLS,
    },
}
CARGO_REGISTER = body(
    {
        "cargo_id": STRING,
        "url": STRING,
        "lat": LOCATION["properties"]["lat"],
        "lon": LOCATION["properties"]["lon"],
        "capacity_bytes": {"type": "integer", "minimum": 1},
        "node_type": {"type": "string", "enum": list(NODE_TYPES)},
        "tags": TAGS,
        "apps": {"type": "array", "items": STRING},
    },
    ["cargo_id", "url", "lat", "lon", "capacity_bytes"],
)
STORAGE_REQUEST = body(
    {
        "app": DEPLOY["properties"]["name"],
        "locations": {"type": "array", "items": LOCATION, "minItems": 1},
        "replication": {"type": "integer", "minimum": 1, "maximum": 10},
        "consistency": CONSISTENCY,
        "strategy": {"type": "string", "enum": ["nearest", "random"]},
        "quota_bytes": {"type": "integer", "minimum": 1},
        "dim": {"type": "integer", "minimum": 1, "maximum": 4096},
        "source": SOURCE,
    },
    ["app", "locations"],
)


STORAGE_QUERY = body(
    {"app": STRING, "lat": LOCATION["properties"]["lat"], "lon": LOCATION["properties"]["lon"],
     "topn": {"type": "integer", "minimum": 1, "maximum": 10}},
    ["app", "lat", "lon"],
)
CARGO_ALLOCATE = body(
    {"app": STRING, "quota_bytes": {"type": "integer", "minimum": 1},
     "dim": {"type": "integer", "minimum": 1, "maximum": 4096},
     "consistency": CONSISTENCY, "peers": URLS, "source": SOURCE},
    ["app", "quota_bytes"],
)
PEERS = body({"peers": URLS}, ["peers"])
WRITE = body({"records": RECORDS}, ["records"])
MATCH = body({"vector": RECORD["properties"]["vector"],
              "threshold": {"type": "number", "minimum": 0}}, ["vector"])
REPLICATE = body({"origin": STRING, "records": {"type": "array", "items": VERSIONED_RECORD}},
                 ["origin", "records"])
