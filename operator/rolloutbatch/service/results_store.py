"""The results ConfigMap of one batch: restored after a restart, checkpointed while it runs.

The document is the operator's memory across restarts (docs/design.md §5): rows already written
are final. A ConfigMap of the batch's results name that is not the batch's own (by label or
ownerReference) stalls the batch with ``ResultsConfigMapConflict``, before any episode runs
when it is there from the start (issue 10 item 4).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rolloutbatch.core import manifests, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.results import decode_results, results_from_document, retried_from_document
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import NotOurs

Call = Callable[..., Awaitable[Any]]


def conflict_message(ref: BatchRef) -> str:
    name = naming.results_configmap_name(ref)
    return (f"ConfigMap {ref.namespace}/{name} exists and does not belong to this RolloutBatch; "
            f"rename or delete it (the batch's results go there), then recreate the batch")


class ResultsStore:
    def __init__(self, call: Call, ref: BatchRef, owner: dict, log: logging.Logger) -> None:
        self.call, self.ref, self.owner, self.log = call, ref, owner, log
        self.resource_version: str | None = None   # of our last write: the next is one PUT
        self.written_version = -1                    # tracker.version the last write held
        self.written_at = 0.0

    async def restore(self, tracker: BatchTracker) -> None:
        """Adopt the rows an earlier operator process wrote; malformed rows are judged again."""
        cm = await self.call(resources.get_or_none, "ConfigMap", naming.results_configmap_name(self.ref),
                             self.ref.namespace)
        if not cm:
            return
        if not resources.owned_by(cm, self.ref.uid):
            raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref))
        self.resource_version = (cm.get("metadata") or {}).get("resourceVersion")
        document = decode_results(cm)
        if document:
            restored = results_from_document(document)
            tracker.restore(restored, retried=retried_from_document(document))
            self.written_version = tracker.version
            self.log.info("Restored %d episode results from the results ConfigMap", len(restored))

    async def write(self, document: dict, version: int, *, final: bool) -> None:
        cm = manifests.results_configmap(self.ref, document, self.owner)
        try:
            live = await self.call(resources.put_configmap, cm, self.ref.uid, self.resource_version)
        except NotOurs:
            raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref)) from None
        self.resource_version = (live.get("metadata") or {}).get("resourceVersion")
        crash_point("results:final" if final else "results:partial")
        self.written_version, self.written_at = version, time.time()
