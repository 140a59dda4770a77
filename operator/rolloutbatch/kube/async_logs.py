"""Pod log reads on the event loop: one pooled aiohttp session, no thread per read.

After a batch ends, reading each episode's log was the operator's largest CPU cost (as profiled):
one synchronous HTTPS request per pod through ``requests`` in a worker thread. This reader keeps
a bounded pool of keep-alive connections (aiohttp ships with kopf) and streams each log with the
same bounds as the synchronous reader (``limitBytes`` on the server, and a hard stop at the
limit here: an episode's output is hostile input).

Credentials come from the same kubeconfig (client certificate, bearer token or token file,
cluster CA), turned into a session by ``kube.async_session`` as for pods/exec. Other kinds of
credentials (exec plugins, auth providers) are not handled here: :func:`supported` says so and
the caller keeps the synchronous reader.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pykube

from rolloutbatch.kube import resources
from rolloutbatch.kube.async_session import LoopSession, api_message
from rolloutbatch.kube.async_session import supported as supported  # the runner asks here
from rolloutbatch.kube.errors import Unavailable, classify
from rolloutbatch.kube.transport import auth_headers

CHUNK = 64 * 1024


class AsyncLogReader(LoopSession):
    """Bounded log reads over one session; create and use it on the operator's event loop."""

    def __init__(self, config: pykube.KubeConfig, *, pool: int = 16, timeout: float = 30.0,
                 user_agent: str = "rolloutbatch-operator") -> None:
        super().__init__(config, pool=pool, timeout=timeout, user_agent=user_agent)

    async def read(self, namespace: str, pod: str, container: str, limit_bytes: int) -> tuple[bytes, bool]:
        """At most ``limit_bytes`` of the log; (data, truncated). Raises the mapped KubeError."""
        path = resources.object_path("Pod", pod, namespace) + "/log"
        headers: dict[str, Any] = auth_headers(self.config)
        what = f"read log of pod {namespace}/{pod}"
        params = {"container": container, "limitBytes": str(limit_bytes + 1)}
        try:
            async with (await self._open()).get(self.base + path, params=params, headers=headers) as response:
                if response.status >= 400:
                    text = (await response.content.read(2000)).decode("utf-8", "replace")
                    raise classify(response.status, api_message(text), what=what)
                chunks, size = [], 0
                async for chunk in response.content.iter_chunked(CHUNK):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit_bytes:
                        break
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{what}: {exc!r}") from exc
        data = b"".join(chunks)
        return data[:limit_bytes], size > limit_bytes
