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
async def delete_batch(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    """Remove the sandbox (Job, then the Dedicated namespace) before releasing the object.

    Waits in place (bounded) rather than raising TemporaryError: kopf logs each retry as an
    error, which would read as a failure while a namespace is simply terminating.
    """
    with memo.metrics.handler("delete_batch"):
        reconciler = memo.registry.reconciler(body, _emitter(body), logger)
        deadline = asyncio.get_running_loop().time() + memo.ctx.settings.namespace_delete_timeout
        gone = await reconciler.delete_sandbox(wait=True)
        while not gone and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(1.0)
            gone = await reconciler.delete_sandbox(wait=True)
        if not gone:
            logger.warning("The sandbox was not gone after %ss; releasing the RolloutBatch",
                           memo.ctx.settings.namespace_delete_timeout)
        memo.registry.forget(body["metadata"]["uid"])
        memo.metrics.batch_deleted(body["metadata"]["namespace"], body["metadata"]["name"])
