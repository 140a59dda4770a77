"""Watch events of the batches' Pods and Jobs. ``on.event`` stores nothing on the children
(no annotations, no finalizers: kopf issue #1104), and needs only list/watch rights."""

from __future__ import annotations

from typing import Any

import kopf

from rolloutbatch.core.naming import LABEL_BATCH_UID
from rolloutbatch.core.tracker import job_facts
from rolloutbatch.core.verdict import pod_facts


@kopf.on.event("v1", "pods", labels={LABEL_BATCH_UID: kopf.PRESENT})
async def pod_event(event: dict, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    with memo.metrics.handler("pod_event"):
        memo.registry.pod_event(body["metadata"]["labels"][LABEL_BATCH_UID], pod_facts(body),
                                deleted=event.get("type") == "DELETED")


@kopf.on.event("batch", "v1", "jobs", labels={LABEL_BATCH_UID: kopf.PRESENT})
async def job_event(event: dict, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if event.get("type") == "DELETED":
        return
    with memo.metrics.handler("job_event"):
        memo.registry.job_event(body["metadata"]["labels"][LABEL_BATCH_UID], job_facts(body))
