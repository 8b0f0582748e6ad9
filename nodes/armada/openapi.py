"""OpenAPI 3.0 descriptions of the Armada services, served at ``GET /openapi.json``.

Written by hand from the contract in ``docs/armada.md`` (the services validate bodies
with small field tables, not schemas), compact but complete enough for a client
generator or a curious human: every path, method, request body and status.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

Schema = dict[str, Any]

NUMBER: Schema = {"type": "number"}
STRING: Schema = {"type": "string"}
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
ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
ANY_OBJECT: Schema = {"type": "object"}
TASK_SPEC: dict[str, Schema] = {
    "task_id": STRING,
    "app": STRING,
    "runtime": {"type": "string", "enum": ["process", "docker"]},
    "module": STRING,
    "image": STRING,
    "args": ARGS,
    "cpu": {"type": "number", "exclusiveMinimum": 0},
    "memory_mb": {"type": "integer", "minimum": 1},
}
REASONS = {
    400: "malformed body (the reason names the field)",
    401: "no or malformed Authorization header",
    403: "token not accepted",
    404: "unknown object",
    409: "refused in the current state",
    422: "understood but cannot be done here",
    502: "upstream unreachable",
    504: "upstream did not answer in time",
}
#: The storage layer's own statuses.
STORAGE_REASONS = {
    413: "body too large",
    503: "not acknowledged in time, or the application is still syncing here",
    507: "insufficient storage (capacity or quota)",
}


def body(properties: dict[str, Schema], required: list[str]) -> Schema:
    """A closed JSON object schema."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def op(
    summary: str,
    ok: int = 200,
    request: Schema | None = None,
    errors: tuple[int, ...] = (),
    secured: bool = False,
) -> dict[str, Any]:
    """One operation: JSON request (optional), a JSON success and JSON errors.

    The errors are listed by status, except the storage layer's (:data:`STORAGE_REASONS`),
    which follow in the order ``errors`` gives them.
    """
    common = [code for code in errors if code not in STORAGE_REASONS]
    storage = [code for code in errors if code in STORAGE_REASONS]
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {
            str(ok): {"description": "success", "content": _json(ANY_OBJECT)},
            **{
                str(code): {"description": REASONS[code], "content": _json(ERROR)}
                for code in sorted({*common, *((401, 403) if secured else ())})
            },
            **{
                str(code): {"description": STORAGE_REASONS[code], "content": _json(ERROR)}
                for code in storage
            },
        },
    }
    if request is not None:
        operation["requestBody"] = {"required": True, "content": _json(request)}
    if secured:
        operation["security"] = [{"bearer": []}]
    return operation


def _json(schema: Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def document(title: str, description: str, paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A whole OpenAPI document; every service also has ``/health`` and ``/openapi.json``."""
    paths = {
        **paths,
        "/health": {"get": op("liveness")},
        "/openapi.json": {"get": op("this description")},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": "1.0", "description": description},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def registry_paths(
    collection: str, id_field: str, noun: str, register: Schema, leaves: str
) -> dict[str, dict[str, Any]]:
    """A manager's node registry: register or refresh, list, one node, a node leaves.

    ``collection`` is the path (``nodes``), ``id_field`` the path parameter (``node_id``),
    ``noun`` what a node is called (``node``: "list nodes"), ``register`` the
    registration body and ``leaves`` what a leave sets off (after "a node leaves; ").
    """
    return {
        f"/{collection}": {
            "post": op(f"register or refresh a {noun}", 200, register, (400,)),
            "get": op(f"list {noun}s"),
        },
        f"/{collection}/{{{id_field}}}": {
            "get": op(f"one {noun}", errors=(404,)),
            "delete": op(f"a {noun} leaves; {leaves}", errors=(404,)),
        },
    }


def forwarded_registry_paths(
    collection: str, id_field: str, noun: str, register: Schema, registering: str
) -> dict[str, dict[str, Any]]:
    """The Beacon's forwarding of a registry (:func:`registry_paths`): registering
    (``registering`` says what, e.g. "a compute node") and leaving need a token, and any
    call may meet an unreachable or silent manager (502, 504)."""
    fwd = (502, 504)
    return {
        f"/{collection}": {
            "post": op(f"register {registering}", 200, register, (400, *fwd), True),
            "get": op(f"list {noun}s", errors=fwd),
        },
        f"/{collection}/{{{id_field}}}": {
            "delete": op(f"a {noun} leaves", errors=(404, *fwd), secured=True),
        },
    }


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
        "node_type": {"type": "string", "enum": ["dedicated", "volunteer"]},
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


def beacon_spec() -> dict[str, Any]:
    """The Beacon: the public entry point."""
    fwd = (502, 504)
    return document(
        "Armada Beacon",
        "Single public entry point; checks tokens and forwards to the Application "
        "Manager and the Spinner.",
        {
            "/apps": {
                "post": op("deploy an application", 201, DEPLOY, (400, 409, *fwd), True),
                "get": op("list applications", errors=fwd),
            },
            "/apps/{name}": {
                "get": op("application status", errors=(404, *fwd)),
                "delete": op("remove an application", errors=(404, *fwd), secured=True),
            },
            "/query": {"post": op("candidate list for a user", 200, QUERY, (400, 404, *fwd))},
            **forwarded_registry_paths("nodes", "node_id", "node", REGISTER, "a compute node"),
        },
    )


def app_manager_spec() -> dict[str, Any]:
    """The Application Manager."""
    return document(
        "Armada Application Manager",
        "Applications and replicas, service discovery (candidate lists), auto-scaling.",
        {
            "/apps": {
                "post": op("deploy an application", 201, DEPLOY, (400, 409, 502)),
                "get": op("list applications"),
            },
            "/apps/{name}": {
                "get": op("application status", errors=(404,)),
                "delete": op("remove an application", errors=(404,)),
            },
            "/query": {"post": op("candidate list for a user", 200, QUERY, (400, 404))},
        },
    )


def spinner_spec() -> dict[str, Any]:
    """The Spinner."""
    return document(
        "Armada Spinner",
        "Compute nodes (registration, health checks, free resources) and task placement.",
        {
            **registry_paths("nodes", "node_id", "node", REGISTER, "its tasks are re-placed"),
            "/tasks": {
                "post": op("place and start a task", 201, PLACE, (400, 409)),
                "get": op("list tasks (?app=name)"),
            },
            "/tasks/{task_id}": {
                "get": op("one task", errors=(404,)),
                "delete": op("stop and forget a task", errors=(404,)),
            },
        },
    )


def captain_spec() -> dict[str, Any]:
    """The Captain."""
    return document(
        "Armada Captain",
        "Node agent: runs tasks, measures their load and utilisation.",
        {
            "/status": {"get": op("node and task status (the Spinner's health check)")},
            "/tasks": {
                "post": op("start a task", 202, START, (400, 409, 422)),
                "get": op("list tasks"),
            },
            "/tasks/{task_id}": {
                "get": op("one task", errors=(404,)),
                "delete": op("stop a task", errors=(404,)),
            },
        },
    )


def add_openapi(app: web.Application, spec: dict[str, Any]) -> None:
    """Serve ``spec`` at ``GET /openapi.json``."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response(spec)

    app.router.add_get("/openapi.json", handler)


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
        "node_type": {"type": "string", "enum": ["dedicated", "volunteer"]},
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


def beacon_storage_paths() -> dict[str, dict[str, Any]]:
    """The Beacon's paths forwarded to the Cargo Manager (when it has one)."""
    return forwarded_registry_paths("cargos", "cargo_id", "Cargo", CARGO_REGISTER,
                                    "a storage node (Cargo)")


def cargo_manager_spec() -> dict[str, Any]:
    """The Cargo Manager."""
    return document(
        "Armada Cargo Manager",
        "Storage nodes (registration, health checks), allocation of replicated storage, "
        "re-replication and data access point queries.",
        {
            **registry_paths("cargos", "cargo_id", "Cargo", CARGO_REGISTER,
                             "its data is re-replicated"),
            "/storage": {
                "post": op("allocate storage for an application (200 if it exists)",
                                   201, STORAGE_REQUEST, (400, 409, 502, 507)),
                "get": op("list allocations"),
            },
            "/storage/{app}": {
                "get": op("one allocation", errors=(404,)),
                "delete": op("release an allocation and delete its data", errors=(404,)),
            },
            "/query": {
                "post": op("data access points for a task, nearest first", 200, body(
                    {"app": STRING, "lat": LOCATION["properties"]["lat"],
                     "lon": LOCATION["properties"]["lon"],
                     "topn": {"type": "integer", "minimum": 1, "maximum": 10}},
                    ["app", "lat", "lon"]), (400, 404)),
            },
        },
    )


def cargo_spec() -> dict[str, Any]:
    """The Cargo."""
    app_errors = (404,)
    return document(
        "Armada Cargo",
        "Storage node: durable per-application record stores, replication, matching.",
        {
            "/status": {"get": op("node, capacity and applications (the health check)")},
            "/stats": {"get": op("counters and replication lag per application "
                                 "(?samples=1 adds every lag sample)")},
            "/apps": {
                "post": op("allocate an application and load its data set", 201,
                                   body({"app": STRING, "quota_bytes": {"type": "integer",
                                                                        "minimum": 1},
                                         "dim": {"type": "integer", "minimum": 1,
                                                 "maximum": 4096},
                                         "consistency": CONSISTENCY, "peers": URLS,
                                         "source": SOURCE}, ["app", "quota_bytes"]),
                                   (400, 409, 413, 422, 502, 507)),
                "get": op("list applications"),
            },
            "/apps/{app}": {
                "get": op("one application", errors=app_errors),
                "delete": op("release it and delete its data", errors=app_errors),
            },
            "/apps/{app}/peers": {
                "put": op("set the other replicas", 200, body({"peers": URLS}, ["peers"]),
                          (400, 404)),
            },
            "/apps/{app}/records": {
                "post": op("insert or replace records", 200,
                                   body({"records": RECORDS}, ["records"]),
                                   (400, 404, 413, 503, 507)),
                "get": op("records with versions by id (?after=ID&limit=N)",
                          errors=(400, 404)),
            },
            "/apps/{app}/records/{id}": {
                "get": op("one record", errors=(400, 404, 503)),
            },
            "/apps/{app}/match": {
                "post": op("nearest record to a vector, within a threshold", 200,
                                   body({"vector": RECORD["properties"]["vector"],
                                         "threshold": {"type": "number", "minimum": 0}},
                                        ["vector"]), (400, 404, 503)),
            },
            "/apps/{app}/replicate": {
                "post": op("records a peer originated (last writer wins)", 200,
                                   body({"origin": STRING,
                                         "records": {"type": "array",
                                                     "items": VERSIONED_RECORD}},
                                        ["origin", "records"]), (400, 404, 413)),
            },
        },
    )
