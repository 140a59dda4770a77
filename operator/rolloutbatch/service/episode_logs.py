"""Reading one finished episode's log: bounded, retried on transient failures, never hanging.

A read that keeps failing is recorded (``LogUnavailable`` in the verdict) instead of retried
forever; the bytes are bounded by ``log_limit_bytes`` (the episode's output is hostile input).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.errors import NotFound

LOG_READ_ATTEMPTS = 3  # transient failures (apiserver restart, broken stream) are retried



async def read(storage: Storage, namespace: str, pod: str, limit_bytes: int, metrics: Any,
               reader: Any = None, container: str = naming.CONTAINER_NAME) -> tuple[bytes, bool, str | None]:
    """(data, truncated, error): ``error`` says why there is no log, None when it was read.

    ``reader``: a ``kube.async_logs.AsyncLogReader`` (no thread per read); without one the
    synchronous reader runs in a worker thread. ``container``: episode, agent or verifier.
    """
    started = time.monotonic()
    data, truncated, error = b"", False, None
    for attempt in range(LOG_READ_ATTEMPTS):
        try:
            if reader is not None:
                data, truncated = await reader.read(namespace, pod, container, limit_bytes)
            else:
                data, truncated = await storage.read_log(namespace, pod, container, limit_bytes)
            error = None
            break
        except NotFound:
            error = v.LOG_POD_GONE
            break
        except Exception as exc:  # noqa: BLE001 - a stream can break in many ways; retry, then record
            error = f"log read failed: {exc}"
            await asyncio.sleep(0.5 * 2 ** attempt)
    metrics.log_read(time.monotonic() - started, len(data))
    return data, truncated, error
