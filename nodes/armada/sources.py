"""Reading a Cargo's initial data set from a file or a URL: confined and bounded.

A Cargo pulls the data set an allocation names before it answers, so whoever may
allocate can make it read. Two rules keep that from reading what it should not or
exhausting its memory:

* **Files only below the data root** (the Cargo's ``--data-root``; without one, file
  sources are refused). A relative path is taken below the root; the path is checked
  lexically (``..``) and again after resolving symlinks, and the file actually opened is
  checked once more through ``/proc/self/fd`` (a symlink swapped in between the check and
  the open is caught). Only regular files are read (not ``/dev/zero``, FIFOs, sockets).
* **Every read is streamed with a size limit**: more bytes than the limit (the smaller
  of the application's quota, expressed in source bytes, and the Cargo's
  ``--max-source-mb``) stop the read at the first byte over it, so an endless source
  costs at most the limit in memory.

Failures are :class:`SourceError` with the HTTP status and a reason naming the field.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import aiohttp

CHUNK_BYTES = 64 * 1024


class SourceError(Exception):
    """A source that cannot be read: ``status`` (400, 413, 422, 502) and ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _too_large(what: str, limit: int) -> SourceError:
    return SourceError(413, f"source: {what} holds more than {limit} bytes, the limit of "
                            "this data set (its quota, or the Cargo's --max-source-mb)")


def confined_path(root: Path | None, path: str) -> Path:
    """``path`` (absolute, or relative to ``root``) resolved, if it lies below ``root``;
    :class:`SourceError` 400 naming ``source.path`` otherwise (422 if it does not exist)."""
    if root is None:
        raise SourceError(400, "source.path: file sources are refused by this Cargo (it "
                               "has no --data-root)")
    base = Path(os.path.realpath(root))
    outside = SourceError(400, f"source.path: expected a file below the data root {base}, "
                               f"found {path!r}")
    lexical = Path(os.path.normpath(base / path))  # base / absolute = absolute
    if not lexical.is_relative_to(base):
        raise outside
    try:
        resolved = lexical.resolve(strict=True)
    except OSError as exc:
        raise SourceError(422, f"source: cannot read {path}: {exc.strerror}") from None
    if not resolved.is_relative_to(base):
        raise outside
    return resolved


def _read_confined(root: Path | None, path: str, limit: int) -> bytes:
    resolved = confined_path(root, path)
    base = Path(os.path.realpath(root)) if root is not None else None
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(422, f"source: cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if base is None or not opened.is_relative_to(base):
            raise SourceError(400, f"source.path: expected a file below the data root "
                                   f"{base}, found {path!r}")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SourceError(400, f"source.path: expected a regular file, found {path!r}")
        chunks, size = [], 0
        while chunk := handle.read(CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                raise _too_large(path, limit)
            chunks.append(chunk)
    return b"".join(chunks)


async def read_file(root: Path | None, path: str, limit: int) -> bytes:
    """The bytes of a file source, at most ``limit`` of them (module docstring)."""
    return await asyncio.to_thread(_read_confined, root, path, limit)


async def read_url(session: aiohttp.ClientSession, url: str, limit: int, timeout_s: float
                   ) -> tuple[bytes, str]:
    """The bytes (at most ``limit``, streamed) and content type of a URL source."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise SourceError(502, f"source: {url} answered status {resp.status}")
            if resp.content_length is not None and resp.content_length > limit:
                raise _too_large(url, limit)
            body = bytearray()
            async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                body += chunk
                if len(body) > limit:
                    raise _too_large(url, limit)
            return bytes(body), resp.content_type
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SourceError(502, f"source: {url} unreachable: {type(exc).__name__}: {exc}"
                          ) from None
