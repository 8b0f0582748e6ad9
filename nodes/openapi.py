"""Building blocks of the services' OpenAPI 3.0 documents (``GET /openapi.json``).

A service lists its routes once (:class:`nodes.common.Route`), each with a summary and
an operation made by :func:`op`; :func:`add_api` registers the routes and generates the
document from the same table, so a route cannot be served undocumented or documented
but not served. Each system writes its request schemas with :func:`body`; a raw body
(a task's JPEG frame) is :func:`binary` under its media type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from nodes.common import Route, add_routes

Schema = dict[str, Any]

NUMBER: Schema = {"type": "number"}
#: A number > 0, in OpenAPI 3.0's form (``exclusiveMinimum`` is a boolean there).
POSITIVE: Schema = {"type": "number", "minimum": 0, "exclusiveMinimum": True}
STRING: Schema = {"type": "string"}
ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
ANY_OBJECT: Schema = {"type": "object"}
#: What each error status means, in every service's document.
REASONS = {
    400: "malformed body (the reason names the field)",
    404: "unknown object",
    409: "refused in the current state",
    408: "body not received within the body timeout",
    413: "body too large",
    415: "unsupported Content-Type",
    422: "understood but cannot be done here",
    502: "upstream unreachable",
    503: "not acknowledged in time, or not ready here yet",
    504: "upstream did not answer in time",
    507: "insufficient storage (capacity or quota)",
}


def body(properties: dict[str, Schema], required: list[str]) -> Schema:
    """A closed JSON object schema."""
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:  # OpenAPI 3.0 wants a non-empty list, or none
        schema["required"] = required
    return schema


def binary(max_bytes: int) -> Schema:
    """A raw request body of at most ``max_bytes`` bytes (for :func:`op`'s
    ``media_type`` other than JSON)."""
    return {"type": "string", "format": "binary", "maxLength": max_bytes}


def op(
    ok: int = 200,
    request: Schema | None = None,
    errors: tuple[int, ...] = (),
    *,
    media_type: str = "application/json",
    answer: Schema = ANY_OBJECT,
) -> dict[str, Any]:
    """One operation (all but its summary): a request body (optional) of ``media_type``
    (JSON unless told), a JSON success (``answer``, any object unless told) and JSON
    errors (by status). An operation with a body also answers 408 and 413 (every
    service reads bodies under the same time and size limits, :mod:`nodes.common`).
    Whether it needs a credential is the route's ``auth``: the generated document adds
    the bearer scheme, 401 and 403 to every guarded route."""
    if request is not None:
        errors = (*errors, 408, 413)
    operation: dict[str, Any] = {
        "responses": {
            str(ok): {"description": "success", "content": _json(answer)},
            **{
                str(code): {"description": REASONS[code], "content": _json(ERROR)}
                for code in sorted(set(errors))
            },
        },
    }
    if request is not None:
        operation["requestBody"] = {"required": True,
                                    "content": {media_type: {"schema": request}}}
    return operation


def _json(schema: Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def add_api(app: web.Application, title: str, description: str, routes: list[Route],
            components: Mapping[str, Any] | None = None) -> None:
    """Register ``routes`` on ``app`` and serve their document at ``GET /openapi.json``."""
    add_routes(app, routes, {"title": title, "version": "1.0", "description": description},
               components)
