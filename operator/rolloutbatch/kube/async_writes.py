"""A warm pool's writes, sent on the event loop over one aiohttp session (``kube.async_session``).

A pool's claims (``kube.pool_storage.PoolStorage.claim_pod``) go out twenty or more at once, and
each hand-over waits for its own claim. Through the API threads (``kube.client.Api``, one
``requests`` call per thread) a burst of them queued behind the GIL: on a 2-core node the threads
of 17 of 20 claims began their PATCH 0.10-0.12 s after the claims began, while the event loop
and the other threads held it (bench/README.md, "Warm pools with a Python and a shell agent").
On the loop a claim costs no thread, and its answer is read where its hand-over starts. The
other writes of the same bursts go the same way: the hand-overs' annotations (delivered-at and
the lowered deadline) and the refill's pod creations.

Its connections are kept open for the next burst (:meth:`AsyncWriter.warm`): opened at the
claims, twenty of them cost twenty TCP connects and TLS handshakes on the event loop, the API
server's side of each too, while the claims wait (bench/README.md, "Claims over connections kept
open").

The same credentials and refusals as the threads' calls: the kubeconfig's TLS and token
(``async_session``, the token file read again each call), ``fieldValidation=Strict``, a refusal
mapped as ``kube.client`` maps it (a lost claim's 409 is ``Conflict``), a failed connection
``Unavailable`` (``async_session.send_json``). One session per operator, on its loop;
:meth:`AsyncWriter.close` at shutdown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import pykube

from rolloutbatch.kube.async_session import LoopSession, send_json
from rolloutbatch.kube.client import STRICT, USER_AGENT
from rolloutbatch.kube.errors import ConfigError, Unavailable, check_path
from rolloutbatch.kube.transport import auth_headers


# An idle connection is closed by the client after this, before the API server's own 90 s
# (k8s.io/apiserver, pkg/server/secure_serving.go: IdleTimeout) can close one under a request.
KEEPALIVE_SECONDS = 60.0
PING_PATH, PING_TIMEOUT = "/version", 5.0   # readable by any client (system:public-info-viewer)


class AsyncWriter(LoopSession):
    """Creations and JSON merge patches by API path; made and used on the operator's event loop."""

    def __init__(self, config: pykube.KubeConfig, *, pool: int = 32, timeout: float = 30.0,
                 user_agent: str = USER_AGENT, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config, pool=pool, timeout=timeout, user_agent=user_agent, keepalive=KEEPALIVE_SECONDS)
        self._clock = clock
        self._warm = (0, 0.0)   # (connections, until when they are surely open)

    async def warm(self, connections: int) -> None:
        """Have ``connections`` connections (at most the session's pool) open for the next claims:
        as many GETs of /version at once, which open the missing ones and keep the idle ones
        (each use restarts its keepalive). Done again only once half the keepalive is gone, or
        for more connections. A refused or failed GET only leaves its connection unopened: the
        claims open it, as they would have."""
        wanted = min(connections, self.pool)
        now = self._clock()
        if wanted <= 0 or (wanted <= self._warm[0] and now < self._warm[1]):
            return
        session = await self._open()
        await asyncio.gather(*(self._ping(session) for _ in range(wanted)))
        self._warm = (wanted, now + KEEPALIVE_SECONDS / 2)

    async def _ping(self, session: aiohttp.ClientSession) -> None:
        try:
            async with session.get(self.base + PING_PATH, headers=auth_headers(self.config),
                                   timeout=aiohttp.ClientTimeout(total=PING_TIMEOUT)) as response:
                await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ConfigError):
            pass   # an unreadable token file: the claims that follow say so

    async def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        """The object as patched; raises the mapped KubeError (``async_session.send_json``)."""
        return await self._write("PATCH", path, patch, what, "application/merge-patch+json")

    async def create(self, path: str, obj: dict, what: str) -> dict:
        """``obj`` created in the collection at ``path``: the object as made; raises as
        :meth:`merge_patch` does."""
        return await self._write("POST", path, obj, what, "application/json")

    async def _write(self, method: str, path: str, body: dict, what: str, content_type: str) -> dict:
        headers = {"Content-Type": content_type, **auth_headers(self.config)}
        answer = await send_json(await self._open(), method, self.base + check_path(path, what), what, params=STRICT,
                                 body=body, headers=headers)
        if not isinstance(answer, dict) or not answer:
            raise Unavailable(f"{what}: the API server's answer is not the object: {str(answer)[:200]!r}")
        return answer
