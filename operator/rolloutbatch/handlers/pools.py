"""The RolloutPool's handlers: a daemon for its whole life (service.pools) and its deletion."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from rolloutbatch import GROUP, POOL_PLURAL, VERSION
from rolloutbatch.core.leadership import DAEMON_CANCELLATION
from rolloutbatch.handlers.batches import _emitter
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service.pools import PoolReconciler

DELETE_RETRY_SECONDS = 5
DELETE_POOL_HANDLER = "delete_pool"   # the deletion handler's kopf id (its function's name, as kopf's default)


class DeletionWaitIsNoError(logging.Filter):
    """kopf logs every ``TemporaryError`` at ERROR, with no level of the handler's choosing
    (nolar/kopf#981). A pool's deletion waiting for the batches that run on its pods is no error:
    its retries are logged at INFO (and posted as no Event: ``settings.posting.loggers`` is off;
    the pool's status says whom it waits for). Any other failure of the handler keeps its level."""

    PREFIX = f"Handler {DELETE_POOL_HANDLER!r} failed temporarily: "

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and isinstance(record.msg, str) and record.msg.startswith(self.PREFIX):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


# the logger of kopf's per-object messages (kopf._core.actions.loggers)
logging.getLogger("kopf.objects").addFilter(DeletionWaitIsNoError())


def _reconciler(body: kopf.Body, memo: kopf.Memo, logger: Any) -> PoolReconciler:
    return PoolReconciler(PoolStorage(memo.ctx.api, memo.ctx.writer), body, _emitter(body, logger), logger,
                          clusterwide=memo.ctx.settings.scope.clusterwide, channels=memo.ctx.channels,
                          pods=memo.ctx.pool_pods, api_give_up=memo.ctx.settings.transient_give_up)


@kopf.daemon(GROUP, VERSION, POOL_PLURAL, cancellation_timeout=DAEMON_CANCELLATION)
async def run_pool(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    """Keep the pool's warm pods (service.pools)."""
    memo.metrics.pool_started(body["metadata"]["namespace"], body["metadata"]["name"])
    with memo.metrics.handler("run_pool"):
        await _reconciler(body, memo, logger).run()


@kopf.on.delete(GROUP, VERSION, POOL_PLURAL, id=DELETE_POOL_HANDLER)
async def delete_pool(body: kopf.Body, memo: kopf.Memo, logger: Any, patch: kopf.Patch, **_: Any) -> None:
    """Warm pods go at once; the namespace once no batch that claimed from the pool still runs
    there. Until then the deletion waits, saying for whom in the pool's message."""
    with memo.metrics.handler("delete_pool"):
        reconciler = _reconciler(body, memo, logger)
        waiting = await reconciler.delete()
    if waiting is not None:
        # no warm pod is left and none will be made: not Ready, whatever the last round wrote
        for key, value in reconciler.deleting_status(waiting).items():
            patch.status[key] = value
        raise kopf.TemporaryError(waiting, delay=DELETE_RETRY_SECONDS)
    memo.metrics.pool_deleted(body["metadata"]["namespace"], body["metadata"]["name"])
