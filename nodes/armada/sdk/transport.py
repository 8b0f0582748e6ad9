"""The transport the Armada SDKs share: the compute SDK
(:mod:`nodes.armada.sdk.client`) and the storage SDK (:mod:`nodes.armada.sdk.storage`)
each come as an asyncio client on aiohttp (:class:`AsyncClient`) and a synchronous one on
``requests`` (:class:`SyncClient`). What they decide and log (failover, events, error
descriptions) is in :mod:`nodes.armada.sdk.failover`, apart from the transport, so that a
simulator reuses it.
"""

from __future__ import annotations

from typing import Self

import aiohttp
import requests


class AsyncClient:
    """``async with`` (``start``, then ``close``) and the bound of every request of an
    asyncio client (``request_timeout_s``)."""

    request_timeout_s: float

    async def start(self) -> None:
        """Get ready to send (each client says what that takes)."""

    async def close(self) -> None:
        """Release every connection."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def timeout(self) -> aiohttp.ClientTimeout:
        """The bound of every request."""
        return aiohttp.ClientTimeout(total=self.request_timeout_s)


class SyncClient:
    """The ``requests`` session of a synchronous client, and ``with`` to close it."""

    _http: requests.Session | None = None

    @property
    def http(self) -> requests.Session:
        """The keep-alive pool every request of the client goes through."""
        if self._http is None:
            self._http = requests.Session()
        return self._http

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection."""
        if self._http is not None:
            self._http.close()
