"""What both person-search services share beyond ``nodes.common``.

Bodies larger than the usual 64 KiB on the endpoints that carry a whole world or a
whole run, a listen backlog large enough for a thousand searches connecting at once,
and an open-file limit raised to match.
"""

from __future__ import annotations

import json
import logging
import resource
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from nodes.common import Field, read_json_object
from nodes.common import serve as common_serve

#: Listen backlog of both services. At the start of a run every search sends its first
#: analysis at once, each on a fresh connection; aiohttp's default backlog (128) could
#: overflow, and a dropped SYN is retried only after a second, which would show up as a
#: one-second analysis.
BACKLOG = 4096

#: Open files the services ask for (soft limit, capped by the hard limit): one socket per
#: search in flight, plus the usual.
WANTED_FILES = 65536


async def read_large_json_object(request: web.Request, fields: Mapping[str, Field],
                                 limit: int) -> dict[str, Any]:
    """:func:`nodes.common.read_json_object` with a body limit of ``limit`` bytes.

    The application keeps the common 64 KiB limit; only the endpoint that calls this
    accepts more. A larger body gets 413 naming this limit.
    """
    try:
        return await read_json_object(request.clone(client_max_size=limit), fields)
    except web.HTTPRequestEntityTooLarge:
        reason = f"body: expected at most {limit} bytes, found more"
        raise web.HTTPRequestEntityTooLarge(limit, text=json.dumps({"error": reason}),
                                            content_type="application/json") from None


def raise_file_limit(wanted: int = WANTED_FILES) -> None:
    """Raise the soft open-file limit towards ``wanted`` (never above the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def serve(app: web.Application, host: str, port: int, logger: logging.Logger) -> None:
    """:func:`nodes.common.serve` with a listen backlog of :data:`BACKLOG`, after raising
    the open-file limit."""
    raise_file_limit()
    common_serve(app, host, port, logger=logger, backlog=BACKLOG)
