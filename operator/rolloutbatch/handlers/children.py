"""Watch events of the batches' Pods and Jobs, routed to the reconciler of their batch.

Both are watched by the operator's own lean list+watch (``kube.watch.Watcher``) instead of kopf's
``on.event``, which deep-copies, diffs and logs every event: episode pods produce 8-10 events
each and a Job one per finished pod, and that bookkeeping was the largest CPU cost in the
benchmark's profile. Facts are extracted in the watch threads and handed to the event loop
(``kube.watch.LoopInbox``: one loop wake-up per burst of events).
Nothing is stored on the children (no annotations, no finalizers: kopf issue #1104), and only
list/watch rights are needed.

The batches' pods of the pool namespaces also feed the pools' view of them (kube.pool_pods), with
a third watch, of the pools' own pods (warm, or claimed and not enrolled yet): the pools' rounds
read that view instead of listing their namespaces.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import kopf

from rolloutbatch.core.naming import LABEL_BATCH_UID, LABEL_POOL_UID
from rolloutbatch.core.job_facts import job_facts
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube import pool_pods
from rolloutbatch.kube.watch import LoopInbox, Watcher


def _routed(inbox: LoopInbox, extract: Callable[[dict], Any]) -> Callable[[str, dict], None]:
    """A watch callback (watch thread) that extracts facts and queues them for the loop."""
    def on_event(kind: str, obj: dict) -> None:
        batch_uid = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_BATCH_UID)
        if batch_uid:
            inbox.put(batch_uid, extract(obj), kind == "DELETED")
    return on_event


def _feeding_pools(memo: kopf.Memo, source: str, then: Callable[[str, dict], None]) -> tuple:
    """A pod watch's callbacks (on_event, on_listed, on_connected) that feed the pools' view as
    ``source`` (kube.pool_pods) and hand each event on to ``then``; in a namespaced install, only
    ``then`` (no pool, and the view is never whole)."""
    if not memo.ctx.settings.scope.clusterwide:
        return then, None, None
    view = memo.ctx.pool_pods

    def on_event(kind: str, obj: dict) -> None:
        view.on_event(source, kind, obj)
        then(kind, obj)
    return on_event, functools.partial(view.on_listed, source), functools.partial(view.on_connected, source)


@kopf.on.startup()
async def start_child_watches(memo: kopf.Memo, **_: Any) -> None:
    loop = asyncio.get_running_loop()
    registry, metrics = memo.registry, memo.metrics

    def deliver_pod(batch_uid: str, facts: Any, deleted: bool) -> None:
        with metrics.handler("pod_event"):
            registry.pod_event(batch_uid, facts, deleted)

    def deliver_job(batch_uid: str, facts: Any, deleted: bool) -> None:
        with metrics.handler("job_event"):
            registry.job_event(batch_uid, facts, deleted)

    # One watch per kind for the cluster, or per kind and watched namespace (core.scope).
    scope = memo.ctx.settings.scope
    pods, jobs = _routed(LoopInbox(loop, deliver_pod), pod_facts), _routed(LoopInbox(loop, deliver_job), job_facts)
    memo.watchers = [Watcher(memo.ctx.api, path, LABEL_BATCH_UID, *_feeding_pools(memo, pool_pods.BATCH, pods))
                     for path in scope.watch_paths("/api/v1", "pods")]
    if scope.clusterwide:   # a namespaced install has no pools (core.scope)
        memo.watchers += [Watcher(memo.ctx.api, "/api/v1/pods", LABEL_POOL_UID,
                                  *_feeding_pools(memo, pool_pods.POOL, lambda kind, obj: None))]
    memo.watchers += [Watcher(memo.ctx.api, path, LABEL_BATCH_UID, jobs)
                      for path in scope.watch_paths("/apis/batch/v1", "jobs")]
    for watcher in memo.watchers:
        watcher.start()


@kopf.on.cleanup()
async def stop_child_watches(memo: kopf.Memo, **_: Any) -> None:
    for watcher in getattr(memo, "watchers", ()):
        watcher.stop()
    for session in (memo.ctx.log_reader, memo.ctx.writer):
        if session is not None:
            await session.close()
