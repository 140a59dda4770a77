"""The RolloutBatch's own handlers: a daemon for its whole life, and the deletion finalizer."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from rolloutbatch import GROUP, PLURAL, VERSION
from rolloutbatch.kube.errors import KubeError

RETRY_DELAYS = (0.5, 1, 2, 5, 10)


def _emitter(body: kopf.Body):
    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])
    return emit


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def run_batch(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    """Provision, track and finish the batch; API failures are retried from a safe point."""
    reconciler = memo.registry.reconciler(body, _emitter(body), logger)
    attempt = 0
    while True:
        try:
            with memo.metrics.handler("run_batch"):
                await reconciler.run()
            return
        except KubeError as exc:
            delay = RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)]
            attempt += 1
            logger.warning("API call failed (%s); retrying in %ss", exc, delay)
            await asyncio.sleep(delay)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete_batch(body: kopf.Body, memo: kopf.Memo, logger: Any, runtime: Any, **_: Any) -> None:
    """Remove the sandbox (Job, then the Dedicated namespace) before releasing the object."""
    with memo.metrics.handler("delete_batch"):
        reconciler = memo.registry.reconciler(body, _emitter(body), logger)
        gone = await reconciler.delete_sandbox(wait=True)
        timeout = memo.ctx.settings.namespace_delete_timeout
        waited = runtime.total_seconds()
        if not gone and waited < timeout:
            raise kopf.TemporaryError("waiting for the sandbox to be deleted", delay=1)
        if not gone:
            logger.warning("The sandbox was not gone after %ss; releasing the RolloutBatch", timeout)
        memo.registry.forget(body["metadata"]["uid"])
        memo.metrics.batch_deleted(body["metadata"]["namespace"], body["metadata"]["name"])
