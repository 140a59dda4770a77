"""Merge patches sent on the event loop over one aiohttp session (``kube.async_session``).

A warm pool's claims (``kube.pool_storage.PoolStorage.claim_pod``) go out twenty or more at once,
and each hand-over waits for its own claim. Through the API threads (``kube.client.Api``, one
``requests`` call per thread) a burst of them queued behind the GIL: on a 2-core node the threads
of 17 of 20 claims began their PATCH 0.10-0.12 s after the claims began, while the event loop
and the other threads held it (bench/README.md, "Warm pools with a Python and a shell agent").
On the loop a claim costs no thread, and its answer is read where its hand-over starts.

The same credentials and refusals as the threads' calls: the kubeconfig's TLS and token
(``async_session``, the token file read again each call), ``fieldValidation=Strict``, a refusal
mapped as ``kube.client`` maps it (a lost claim's 409 is ``Conflict``), a failed connection
``Unavailable`` (``async_session.send_json``). One session per operator, on its loop;
:meth:`AsyncPatcher.close` at shutdown.
"""

from __future__ import annotations

import pykube

from rolloutbatch.kube.async_session import LoopSession, auth_headers, send_json
from rolloutbatch.kube.client import STRICT, USER_AGENT
from rolloutbatch.kube.errors import Unavailable


class AsyncPatcher(LoopSession):
    """JSON merge patches by API path; create and use it on the operator's event loop."""

    def __init__(self, config: pykube.KubeConfig, *, pool: int = 32, timeout: float = 30.0,
                 user_agent: str = USER_AGENT) -> None:
        super().__init__(config, pool=pool, timeout=timeout, user_agent=user_agent)

    async def merge_patch(self, path: str, patch: dict, what: str) -> dict:
        """The object as patched; raises the mapped KubeError (``async_session.send_json``)."""
        headers = {"Content-Type": "application/merge-patch+json", **auth_headers(self.config)}
        answer = await send_json(self._open(), "PATCH", self.base + path, what, params=STRICT, body=patch,
                                 headers=headers)
        if not isinstance(answer, dict) or not answer:
            raise Unavailable(f"{what}: the API server's answer is not the object: {str(answer)[:200]!r}")
        return answer
