"""Watch events of the batches' Pods and Jobs, routed to the reconciler of their batch.

Both are watched by the operator's own lean list+watch (``kube.watch.Watcher``) instead of kopf's
``on.event``, which deep-copies, diffs and logs every event: episode pods produce 8-10 events
each and a Job one per finished pod, and that bookkeeping was the largest CPU cost in the
benchmark's profile. Facts are extracted in the watch threads and handed to the event loop
(``kube.watch.LoopInbox``: one loop wake-up per burst of events).
Nothing is stored on the children (no annotations, no finalizers: kopf issue #1104), and only
list/watch rights are needed.

The pod watch selects every pod the operator made (naming.MANAGED_SELECTOR): the batches' pods
go to their reconcilers, and the pods of the pool namespaces, warm or claimed, also feed the pools'
view of them (kube.pool_pods), which their rounds read instead of listing their namespaces.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import kopf

from rolloutbatch.core.naming import LABEL_BATCH_UID, MANAGED_SELECTOR
from rolloutbatch.core.job_facts import job_facts
from rolloutbatch.core.verdict import pod_facts
from rolloutbatch.kube.watch import LoopInbox, Watcher


def _routed(inbox: LoopInbox, extract: Callable[[dict], Any]) -> Callable[[str, dict], None]:
    """A watch callback (watch thread) that extracts facts and queues them for the loop."""
    def on_event(kind: str, obj: dict) -> None:
        batch_uid = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_BATCH_UID)
        if batch_uid:
            inbox.put(batch_uid, extract(obj), kind == "DELETED")
    return on_event


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
    pool_pods = memo.ctx.pool_pods

    def on_pod(kind: str, obj: dict) -> None:
        pool_pods.on_event(kind, obj)
        pods(kind, obj)

    # the pools' view is whole only with the cluster's pods (a namespaced install has no pools)
    whole = scope.clusterwide
    memo.watchers = [Watcher(memo.ctx.api, path, MANAGED_SELECTOR, on_pod,
                             on_listed=pool_pods.on_listed if whole else None,
                             on_connected=pool_pods.on_connected if whole else None)
                     for path in scope.watch_paths("/api/v1", "pods")]
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
