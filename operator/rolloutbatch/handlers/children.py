"""Watch events of the batches' Pods and Jobs, routed to the reconciler of their batch.

Pods: the operator's own lean watch (``kube.watch.PodWatcher``) instead of kopf's ``on.event``,
which deep-copies, diffs and logs every one of the 8-10 events of each episode pod (the largest
CPU cost in the benchmark's profile). Facts are extracted in the watch thread and handed to the
event loop. Jobs are few: kopf's ``on.event`` is fine there. Neither stores anything on the
children (no annotations, no finalizers: kopf issue #1104) and both need only list/watch rights.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from rolloutbatch.core.naming import LABEL_BATCH_UID
from rolloutbatch.core.tracker import job_facts
from rolloutbatch.core.verdict import pod_facts
from rolloutbatch.kube.watch import PodWatcher


@kopf.on.startup()
async def start_pod_watch(memo: kopf.Memo, **_: Any) -> None:
    loop = asyncio.get_running_loop()
    registry, metrics = memo.registry, memo.metrics

    def deliver(batch_uid: str, facts: Any, deleted: bool) -> None:
        with metrics.handler("pod_event"):
            registry.pod_event(batch_uid, facts, deleted)

    def on_pod(kind: str, pod: dict) -> None:  # runs in the watch thread
        batch_uid = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_BATCH_UID)
        if batch_uid:
            loop.call_soon_threadsafe(deliver, batch_uid, pod_facts(pod), kind == "DELETED")

    memo.pod_watcher = PodWatcher(memo.ctx.api, LABEL_BATCH_UID, on_pod)
    memo.pod_watcher.start()


@kopf.on.cleanup()
async def stop_pod_watch(memo: kopf.Memo, **_: Any) -> None:
    watcher = getattr(memo, "pod_watcher", None)
    if watcher is not None:
        watcher.stop()


@kopf.on.event("batch", "v1", "jobs", labels={LABEL_BATCH_UID: kopf.PRESENT})
async def job_event(event: dict, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if event.get("type") == "DELETED":
        return
    with memo.metrics.handler("job_event"):
        memo.registry.job_event(body["metadata"]["labels"][LABEL_BATCH_UID], job_facts(body))
