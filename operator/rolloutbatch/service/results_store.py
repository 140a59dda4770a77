"""The results of one batch in ConfigMaps: restored after a restart, checkpointed while it runs.

The documents are the operator's memory across restarts (docs/design.md §5): rows already
written are final. A batch bigger than one shard keeps its rows in append-only shards
(``core.result_shards``): each checkpoint writes the open shard (and a shard that just filled,
once) plus the small head document, so its cost is bounded per row. A ConfigMap of one of the
batch's results names that is not the batch's own (by label or ownerReference) stalls the batch
with ``ResultsConfigMapConflict``, before any episode runs when it is there from the start
(issue 10 item 4).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rolloutbatch.core import manifests, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.groups import group_entry, groups_completed_by
from rolloutbatch.core.model import BatchRef, BatchSpec
from rolloutbatch.core.result_shards import ShardBook, assemble, shard_document
from rolloutbatch.core.results import decode_results, results_document, results_from_document, retried_from_document
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import NotOurs

Call = Callable[..., Awaitable[Any]]


def conflict_message(ref: BatchRef, name: str | None = None) -> str:
    name = name or naming.results_configmap_name(ref)
    return (f"ConfigMap {ref.namespace}/{name} exists and does not belong to this RolloutBatch; "
            f"rename or delete it (the batch's results go there), then recreate the batch")


class ResultsStore:
    def __init__(self, call: Call, ref: BatchRef, owner: dict, log: logging.Logger, rows_per_shard: int) -> None:
        self.call, self.ref, self.owner, self.log = call, ref, owner, log
        self.book = ShardBook(rows_per_shard)
        self.sharded = False
        self.versions: dict[int | None, str] = {}    # resourceVersion of our last write, by shard (None: head)
        self.written_version = -1                    # tracker.version the last write held
        self.written_at = 0.0

    def configure(self, spec: BatchSpec) -> None:
        self.sharded = spec.episodes > self.book.rows_per_shard

    async def restore(self, tracker: BatchTracker) -> None:
        """Adopt the rows an earlier operator process wrote; malformed rows are judged again."""
        name = naming.results_configmap_name(self.ref)
        cm = await self.call(resources.get_or_none, "ConfigMap", name, self.ref.namespace)
        if not cm:
            return
        if not resources.owned_by(cm, self.ref.uid):
            raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref))
        self.versions[None] = (cm.get("metadata") or {}).get("resourceVersion")
        head = decode_results(cm)
        if not head:
            return
        shard_docs = []
        if self.sharded:
            for shard_cm in await self.call(resources.list_configmaps, self.ref.namespace,
                                            f"{naming.LABEL_BATCH_UID}={self.ref.uid},"
                                            f"{naming.LABEL_EPISODE_ROLE}={naming.ROLE_RESULTS_SHARD}"):
                doc = decode_results(shard_cm)
                if doc is not None and type(doc.get("shard")) is int:
                    shard_docs.append(doc)
                    self.versions[doc["shard"]] = (shard_cm.get("metadata") or {}).get("resourceVersion")
        restored = results_from_document(assemble(head, shard_docs))
        tracker.restore(restored, retried=retried_from_document(head))
        if self.sharded:
            self.book.restore(shard_docs, set(restored))
        self.written_version = tracker.version
        self.log.info("Restored %d episode results from the results ConfigMaps", len(restored))

    async def write(self, tracker: BatchTracker, spec: BatchSpec, origin: float | None, extra: dict, *,
                    final: bool) -> None:
        version = tracker.version
        summary = tracker.summary(origin)
        results = tracker.results
        shards_index = None
        if self.sharded:
            k = spec.samples_per_input
            new = [i for i in results if i not in self.book.placed]   # dict order: the order they became final
            for index in new:
                self.book.add_row(index, len(json.dumps(results[index].to_row(origin, k), default=str)))
            for group in groups_completed_by(new, k, results):
                self.book.add_group(group)
            for shard in self.book.dirty():
                rows = [results[i].to_row(origin, k) for i in shard.indexes]
                groups = [group_entry(g, k, {i: results[i].to_row(origin, k) for i in range(g * k, (g + 1) * k)})
                          for g in shard.groups]
                await self._put(shard_document(self.ref, shard, rows, groups), shard.number, final)
                self.book.written(shard.number)
            shards_index = self.book.index(naming.results_configmap_name(self.ref))
        document = results_document(ref=self.ref, spec=spec, summary=summary,
                                    results=sorted(results.values(), key=lambda r: r.index), origin=origin,
                                    extra=extra, shards=shards_index)
        await self._put(document, None, final)
        crash_point("results:final" if final else "results:partial")
        self.written_version, self.written_at = version, time.time()

    async def _put(self, document: dict, shard: int | None, final: bool) -> None:
        cm = manifests.results_configmap(self.ref, document, self.owner, shard=shard)
        try:
            live = await self.call(resources.put_configmap, cm, self.ref.uid, self.versions.get(shard))
        except NotOurs:
            raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref, cm["metadata"]["name"])) from None
        self.versions[shard] = (live.get("metadata") or {}).get("resourceVersion")
