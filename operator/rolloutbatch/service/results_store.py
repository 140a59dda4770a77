"""The results of one batch in ConfigMaps: restored after a restart, checkpointed while it runs.

The documents are the operator's memory across restarts (docs/design.md §5): rows already
written are final. A batch bigger than one shard keeps its rows in append-only shards
(``core.result_shards``): each checkpoint writes the open shard (and a shard that just filled,
once) plus the small head document, so its cost is bounded per row.

Trust: label, ownerReference and content can all be written by anyone with ConfigMap rights in
the namespace. What the operator wrote is told apart by its digest, recorded in the batch's
status (``resultsDigests``, which only the operator can write): on restore only documents whose
digest the status vouches for are adopted (``core.results.vouched_digests``: each write's digest
is recorded as pending before the write, so a crash right after it keeps it trusted); any other
rows are judged again from their pods. A
ConfigMap not ours holding the head's name stalls the batch with ``ResultsConfigMapConflict``
(before any episode runs when it is there from the start); one holding a shard's name costs only
that name (``core.result_shards``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping

from rolloutbatch.core import manifests, naming, strictjson
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.cadence import Cadence
from rolloutbatch.core.groups import group_entry, group_members, groups_completed_by
from rolloutbatch.core.model import BatchRef, BatchSpec, EpisodeResult
from rolloutbatch.core.result_shards import (ShardBook, assemble, is_results_configmap_name, rows_per_shard_for,
                                             shard_configmap_name, shard_document)
from rolloutbatch.core.results import (DIGESTS, DROPPED, PENDING_DIGESTS, SHARD_DIGESTS, configmap_digest,
                                       decode_results, dropped_fields, recorded_by_operator, results_document,
                                       results_from_document, retried_from_document, stall_of, union_fields,
                                       vouched_digests)
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.errors import KubeError, NotOurs, OwnerGone
from rolloutbatch.service import policy
from rolloutbatch.service.context import Emit



def conflict_message(ref: BatchRef, name: str | None = None, found: Mapping | None = None) -> str:
    name = name or naming.results_configmap_name(ref)
    labels = ((found or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(naming.LABEL_RESULTS_RETAINED) == naming.RESULTS_RETAINED:
        # the retained results of an earlier batch of this name (spec.cleanup.results: Retain)
        # named by uid: while this batch exists, its name reads this batch, not them
        uid = labels.get(naming.LABEL_BATCH_UID, "?")
        return (f"ConfigMap {ref.namespace}/{name} holds the retained results of an earlier RolloutBatch "
                f"{ref.name} (uid {uid}): read them with rolloutbatch results {ref.name} --retained-uid {uid} "
                f"--output DIR; rolloutbatch cleanup {ref.name} deletes this batch and them; then create the "
                "batch again")
    return (f"ConfigMap {ref.namespace}/{name} exists and does not belong to this RolloutBatch; "
            f"rename or delete it (the batch's results go there), then recreate the batch")


class ResultsStore:
    def __init__(self, storage: Storage, ref: BatchRef, owner: dict, log: logging.Logger, rows_per_shard: int,
                 emit: Emit | None = None, vouch: Callable[[str, str, str | None], Awaitable[None]] | None = None,
                 ) -> None:
        self.storage, self.ref, self.owner, self.log = storage, ref, owner, log
        self.emit = emit or (lambda *_: None)
        # records (name, digest, current digest) in the batch's status before each write (StatusWriter.vouch)
        self.vouch = vouch
        self.digests: dict[str, str] = {}            # ConfigMap name -> digest of our last write (the status's)
        self.book = ShardBook(rows_per_shard)
        self.sharded = False
        self.retained = False                        # spec.cleanup.results: Retain (unowned ConfigMaps)
        self.episodes = 0
        self.k = 1
        self.versions: dict[int | None, str] = {}    # resourceVersion of our last write, by shard (None: head)
        self.written_version = -1                    # tracker.version the last write held
        self.written_at = -math.inf                  # time.monotonic() of the last write
        self.written_finals = 0                      # results the last write held
        self.written_final = False                   # the last write was the final one
        self.restored_stall: tuple[str, str] | None = None   # the stall a restored final head was written for
        # index -> (result, origin, strict-JSON row, its compact text): a final result never
        # changes, so its row is made and encoded once, not at every checkpoint (each rewrote up
        # to a shard of rows)
        self._rows: dict[int, tuple[EpisodeResult, float | None, dict, str]] = {}
        self._groups: dict[int, tuple[float | None, dict]] = {}   # group -> (origin, entry), likewise
        self._consumed = 0                            # results (in the order they became final) placed so far
        # index -> the fields a restored row may lack: the document it came from had shed them
        # (dropped_row_fields). Every later document holding the row says so again: written anew
        # it may fit unshed, and the row's fields are gone all the same.
        self._shed: dict[int, list[str]] = {}

    def configure(self, spec: BatchSpec) -> None:
        self.episodes = spec.episodes
        self.k = spec.samples_per_input
        self.book.rows_per_shard = rows_per_shard_for(spec.episodes, self.book.rows_per_shard)
        self.book.episodes = spec.episodes
        self.sharded = spec.episodes > self.book.rows_per_shard
        self.retained = spec.retains_results

    def _selector(self) -> str:
        return f"{naming.LABEL_BATCH_UID}={self.ref.uid},{naming.LABEL_EPISODE_ROLE}={naming.ROLE_RESULTS_SHARD}"

    async def restore(self, tracker: BatchTracker, status: Mapping | None = None, retried: int = 0) -> None:
        """Adopt the rows an earlier operator process wrote; malformed rows are judged again.

        ``status``: the batch's. Only a ConfigMap whose digest it vouches for (recorded, or
        pending: a write a crash kept from reaching the status) is adopted: anything else under
        our names (a neighbour's forgery) has its rows judged again from the pods, and is written
        over. What was adopted decides the layout, not this process's settings:
        shards adopted or named by the head make the batch sharded, a head with rows makes it
        whole, so a changed --results-shard-rows loses nothing. Shard names held by ConfigMaps
        not ours, or listed skipped by the adopted head, are skipped (before the shard book is
        rebuilt, which keeps them so).
        """
        recorded = vouched_digests(status)
        name = naming.results_configmap_name(self.ref)
        cm = await self.storage.get("ConfigMap", name, self.ref.namespace)
        # ours by its labels, or by its content (someone stripped labels and ownerReference); a
        # foreign head stalls the batch, but only once the shards the status vouches for are
        # restored: the stall's final rows must not be written over the rows they hold
        foreign = cm if cm and not resources.owned_by(cm, self.ref.uid) and not recorded_by_operator(cm, recorded) \
            else None
        head = None
        if cm and foreign is None:
            self.versions[None] = (cm.get("metadata") or {}).get("resourceVersion")
            head = self._adopt(cm, recorded)
        shard_docs = []
        labelled = [c for c in await self.storage.list_configmaps(self.ref.namespace, self._selector())
                    if resources.owned_by(c, self.ref.uid)]
        seen = {(c.get("metadata") or {}).get("name") for c in labelled}
        # A shard stripped of its labels (a neighbour with ConfigMap rights) is ours by its content,
        # as the head is: looked up by each shard name the status vouches for.
        stripped = [c for shard in sorted(n for n in recorded if n != name and n not in seen
                                          and is_results_configmap_name(name, n))
                    if (c := await self.storage.get("ConfigMap", shard, self.ref.namespace)) is not None
                    and recorded_by_operator(c, recorded)]
        for shard_cm in labelled + stripped:
            doc = self._adopt(shard_cm, recorded)
            if doc is not None and type(doc.get("shard")) is int and doc.get("uid") == self.ref.uid:
                shard_docs.append(doc)
                self.versions[doc["shard"]] = (shard_cm.get("metadata") or {}).get("resourceVersion")
        if shard_docs or (head is not None and "shards" in head):
            self.sharded = True
        elif head is not None and "pods" in head:
            self.sharded = False
        if self.sharded:
            ours = {d["shard"] for d in shard_docs}
            # A name the adopted head lists skipped stays skipped though its holder left since: as
            # an ordinary shard it would be listed, never read, until the final write.
            listed = (head or {}).get("shards")
            for number, entry in enumerate(listed if isinstance(listed, list) else ()):
                if (isinstance(entry, Mapping) and entry.get("skipped") is True and number not in ours
                        and entry.get("name") == shard_configmap_name(name, number)):
                    self.book.give_up_name(number)
            await self._skip_taken_names(ours, recorded)
        if head is None and not shard_docs:
            tracker.restore({}, retried=retried)
            if foreign is not None:
                raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref, found=foreign))
            return
        whole = assemble(head or {"uid": self.ref.uid, "shards": []}, shard_docs)
        restored = results_from_document(whole)
        for doc in shard_docs + ([head] if head is not None and "pods" in head else []):
            if fields := dropped_fields(doc):
                for row in doc["pods"] if isinstance(doc.get("pods"), list) else ():
                    index = row.get("index") if isinstance(row, Mapping) else None
                    if type(index) is int and index in restored:
                        self._shed[index] = union_fields(self._shed.get(index, ()), fields)
        tracker.restore(restored, retried=max(retried, retried_from_document(head or {})))
        if self.sharded:
            self.book.restore(shard_docs, set(tracker.results), self.k)
        self.written_version, self.written_finals = tracker.version, len(tracker.results)
        self.written_final = (head or {}).get("final") is True
        self.restored_stall = stall_of(head)
        self.log.info("Restored %d episode results from the results ConfigMaps", len(restored))
        if foreign is not None:
            raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref, found=foreign))

    def _adopt(self, cm: dict, recorded: Mapping[str, frozenset[str]]) -> dict | None:
        """The document of a ConfigMap of ours, if it is what the operator last wrote there."""
        name = (cm.get("metadata") or {}).get("name")
        if not recorded_by_operator(cm, recorded):
            self.log.warning("ConfigMap %s/%s is not what the operator last wrote (its digest is not one the "
                             "status vouches for): its rows are judged again", self.ref.namespace, name)
            return None
        self.digests[name] = configmap_digest(cm)
        return decode_results(cm)

    async def confirm_pending(self, status: Mapping) -> None:
        """A batch that ended before this process: the digests its status records, and each
        pending one whose ConfigMap holds it (an operator died between that write and the status
        that records it); the next status write records them and drops the pending ones."""
        recorded, pending = status.get(DIGESTS), status.get(PENDING_DIGESTS)
        self.digests = {name: digest for name, digest in (recorded.items() if isinstance(recorded, Mapping) else ())
                        if isinstance(name, str) and isinstance(digest, str)}
        for name, digest in (pending.items() if isinstance(pending, Mapping) else ()):
            if not isinstance(name, str) or not isinstance(digest, str):
                continue
            cm = await self.storage.get("ConfigMap", name, self.ref.namespace)
            if cm is not None and configmap_digest(cm) == digest:
                self.digests[name] = digest

    async def _skip_taken_names(self, ours: set[int], recorded: Mapping[str, frozenset[str]]) -> None:
        """Shard names the batch will write that ConfigMaps not ours hold are never used (ours by
        their labels and owner, or by their content: ``recorded``, the status' digests)."""
        head = naming.results_configmap_name(self.ref)
        planned = -(-self.episodes // self.book.rows_per_shard)
        for number in range(planned):
            if number in ours:
                continue
            name = shard_configmap_name(head, number)
            cm = await self.storage.get("ConfigMap", name, self.ref.namespace)
            # ours but not adopted (a user broke it, a crash): judged again and written over
            if cm is not None and not resources.owned_by(cm, self.ref.uid) and not recorded_by_operator(cm, recorded):
                self._name_taken(number)

    def _name_taken(self, number: int) -> None:
        name = shard_configmap_name(naming.results_configmap_name(self.ref), number)
        self.book.give_up_name(number)
        message = (f"ConfigMap {self.ref.namespace}/{name} exists and does not belong to this RolloutBatch: "
                   "that results shard name is skipped, its rows go to the next shard")
        self.log.warning("%s", message)
        self.emit("Warning", v.EVENT_RESULTS_NAME_TAKEN, message)

    def _cached(self, result: EpisodeResult, origin: float | None, k: int) -> tuple[dict, str]:
        hit = self._rows.get(result.index)
        if hit is not None and hit[0] is result and hit[1] == origin:
            return hit[2], hit[3]
        row = strictjson.sanitize(result.to_row(origin, k))
        text = strictjson.dumps(row, separators=(",", ":"))
        self._rows[result.index] = (result, origin, row, text)
        return row, text

    def _group(self, group: int, k: int, results: dict[int, EpisodeResult], origin: float | None) -> dict:
        """A complete group's strict-JSON entry, made once: its rows are final."""
        hit = self._groups.get(group)
        if hit is None or hit[0] != origin:
            rows = {i: self._row(results[i], origin, k, cache=False) for i in group_members(group, k)}
            hit = (origin, strictjson.sanitize(group_entry(group, k, rows)))
            self._groups[group] = hit
        return hit[1]

    def _row(self, result: EpisodeResult, origin: float | None, k: int, cache: bool = True) -> dict:
        hit = self._rows.get(result.index)
        if not cache and (hit is None or hit[0] is not result or hit[1] != origin):
            return strictjson.sanitize(result.to_row(origin, k))   # a row of a shard written full
        return self._cached(result, origin, k)[0]

    def _text(self, result: EpisodeResult, origin: float | None, k: int) -> str:
        return self._cached(result, origin, k)[1]

    async def write(self, tracker: BatchTracker, spec: BatchSpec, origin: float | None, extra: dict, *,
                    final: bool) -> None:
        """Write what changed (the head, and every dirty shard). Nothing is created once the batch
        is gone or being deleted (``kube.resources.put_configmap``): its results go with it."""
        try:
            await self._write(tracker, spec, origin, extra, final=final)
        except OwnerGone as exc:   # any other NotFound is the error policy's
            self.log.info("Results not written: %s", exc)

    async def _write(self, tracker: BatchTracker, spec: BatchSpec, origin: float | None, extra: dict, *,
                     final: bool) -> None:
        version, count = tracker.version, len(tracker.results)
        summary = tracker.summary(origin)
        results = tracker.results
        k = spec.samples_per_input
        shards_index = rows = None
        if self.sharded:
            # dict order is the order they became final, and it only grows: look at the tail only
            new = [i for i in itertools.islice(results, self._consumed, None) if i not in self.book.placed]
            self._consumed = len(results)
            for index in new:
                self.book.add_row(index, len(self._text(results[index], origin, k)))
            for group in groups_completed_by(new, k, results):
                self.book.add_group(group)
            if final:
                # A shard deleted or changed by someone since we wrote it is written again, once,
                # at the end (its name and resourceVersion tell; its content is not read).
                live = await self.storage.configmap_versions(self.ref.namespace, self._selector())
                head = naming.results_configmap_name(self.ref)
                for shard in self.book.shards:
                    if shard.skipped:
                        continue
                    live_version = live.get(shard_configmap_name(head, shard.number))
                    if live_version is None:
                        self.versions.pop(shard.number, None)
                    if live_version is None or live_version != self.versions.get(shard.number):
                        shard.dirty = True
            while dirty := self.book.dirty():
                shard = dirty[0]
                shard_rows = [self._row(results[i], origin, k) for i in shard.indexes]
                groups = [self._group(g, k, results, origin) for g in shard.groups]
                document = shard_document(self.ref, shard, shard_rows, groups)
                if shed := self._shed_of(shard.indexes):
                    document[DROPPED] = shed
                try:
                    await self._put(document, shard.number, [self._text(results[i], origin, k) for i in shard.indexes])
                except NotOurs:
                    self._name_taken(shard.number)   # its rows move to a new dirty shard
                    continue
                self.book.written(shard.number)
                if shard.full:
                    # Written full: its rows are not needed again but for a rare rewrite (a
                    # group completed into it, the shard deleted by someone), which makes them
                    # again. Keeping them cost ~1.4 KB per row for the batch's whole life.
                    for i in shard.indexes:
                        self._rows.pop(i, None)
                    for g in shard.groups:
                        self._groups.pop(g, None)
            shards_index = self.book.index(naming.results_configmap_name(self.ref))
            if self.retained:
                # Without the batch, no status vouches for the shards: the head names their digests
                # (docs/design.md §8.3 says what that is worth).
                extra = {**extra, SHARD_DIGESTS: {e["name"]: self.digests[e["name"]] for e in shards_index
                                                  if e["name"] in self.digests}}
        else:
            rows = {i: self._row(r, origin, k) for i, r in results.items()}
            if shed := self._shed_of(rows):
                extra = {**extra, DROPPED: shed}
        document = results_document(ref=self.ref, spec=spec, summary=summary,
                                    results=(), origin=origin,   # the rows (or shards) are given
                                    extra=extra, shards=shards_index, rows=rows)
        pods = document.pop("pods", None)      # sanitized when made: not walked again
        document = strictjson.sanitize(document)
        texts = None
        if pods is not None:
            document["pods"] = pods
            texts = [self._text(results[i], origin, k) for i in sorted(rows)]
        try:
            await self._put(document, None, texts)
        except NotOurs:
            raise Stalled(v.STALL_RESULTS_CONFLICT, conflict_message(self.ref)) from None
        crash_point("results:final" if final else "results:partial")
        self.written_version, self.written_at, self.written_finals = version, time.monotonic(), count
        self.written_final = final

    def _shed_of(self, indexes) -> list[str]:
        """The fields restored rows among ``indexes`` may lack (``_shed``)."""
        return union_fields(*(self._shed[i] for i in indexes if i in self._shed)) if self._shed else []

    def unwritten(self, tracker: BatchTracker, final: bool) -> bool:
        """Whether a write would hold anything new: a change since the last write, or the final
        document after checkpoints only (a checkpoint may already hold every row: its document
        still says final false, and the end-of-batch check of the shards has not run)."""
        return tracker.version != self.written_version or (final and not self.written_final)

    def checkpoint_due(self, tracker: BatchTracker, cadence: Cadence) -> bool:
        """Whether a progress checkpoint (not the final write) is due for what the tracker holds.

        Timed by the monotonic clock: a wall clock stepped back must not hold checkpoints."""
        return (tracker.version != self.written_version and bool(tracker.results)
                and cadence.due(elapsed=time.monotonic() - self.written_at, changed=True,
                                finished_since=len(tracker.results) - self.written_finals,
                                episodes=tracker.episodes))

    async def _put(self, document: dict, shard: int | None, row_texts: list[str] | None) -> None:
        """Write one document (strict JSON already), its rows from their cached texts."""
        # Encoding and gzip take seconds for a large document: off the event loop, which keeps
        # taking watch events and answering /healthz meanwhile. The document and the row texts
        # were made for this write alone; nothing changes them while it runs.
        cm = await asyncio.to_thread(manifests.results_configmap, self.ref, document, self.owner, shard=shard,
                                     sanitized=True, row_texts=row_texts, retained=self.retained)
        name = cm["metadata"]["name"]
        digest = configmap_digest(cm)
        if self.vouch is not None and digest != self.digests.get(name):
            # vouched for before it exists: a crash between the write and the status that
            # records it leaves a document the next operator and every reader still trust
            try:
                await self.vouch(name, digest, self.digests.get(name))
            except OwnerGone:
                raise
            except KubeError as exc:
                if policy.is_transient(exc):
                    raise   # retried from the top (service.policy), the write with it
                # refused: the write is still worth more than its crash insurance
                self.log.warning("Could not record the digest of %s before writing it (%s): a crash right after "
                                 "the write would leave it untrusted", name, exc)
        # Stripping our labels and ownerReference does not make a ConfigMap foreign: its content
        # is still what we wrote last (the write puts the labels back).
        live = await self.storage.put_configmap(cm, self.ref.uid, self.versions.get(shard),
                                                lambda existing: configmap_digest(existing) == self.digests.get(name),
                                                batch=(self.ref.namespace, self.ref.name))
        self.versions[shard] = (live.get("metadata") or {}).get("resourceVersion")
        # The digest of what the API stored: the status records it (the reconciler's next patch).
        self.digests[cm["metadata"]["name"]] = configmap_digest(live)
