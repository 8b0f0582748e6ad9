"""The run secret of the service tests, and how a test presents it.

Services refuse every change without the run secret (:mod:`nodes.secret`), so a test
that builds an app in process gives it one (:func:`secured`) and sends its header
(:data:`AUTH`) on its requests; a process started by a test gets the file
(:func:`secret_file`) in ``TESTBED_SECRET_FILE``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from nodes.secret import SECRET_ENV, SECRET_KEY, RunSecret, make_secret, write_secret_file

#: One secret for the test session.
SECRET: RunSecret = make_secret()
#: The header that presents it.
AUTH: dict[str, str] = SECRET.header()


def secured(app: web.Application) -> web.Application:
    """``app`` holding the test session's run secret."""
    app[SECRET_KEY] = SECRET
    return app


async def bare_call(method: str, url: str, body: Any = None,
                    headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One JSON request from a client that holds no credential (unless ``headers``
    give one); ``(status, decoded body)``."""
    async with aiohttp.ClientSession() as http, \
            http.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def secret_file(folder: Path) -> Path:
    """The test session's secret written to a 0600 file in ``folder``."""
    return write_secret_file(folder / "run.secret", SECRET)


def secret_env(folder: Path) -> dict[str, str]:
    """The environment entry handing a started service the secret (file in ``folder``)."""
    return {SECRET_ENV: str(secret_file(folder))}
