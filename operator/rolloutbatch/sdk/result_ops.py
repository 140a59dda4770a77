"""The SDK's reading of a batch's results as sans-IO generators (sdk.ops' way): the results
ConfigMap the status names and its shards, each checked against the digests the status vouches
for, the status read again until it names what was written, and the rows whole or an error that
says which shards are missing (docs/design.md §5.9). For both clients, the CLI and the follower.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.result_shards import assemble
from rolloutbatch.core.results import configmap_digest, decode_results, vouched_digests
from rolloutbatch.core.vocabulary import TERMINAL_PHASES
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import NotFound
from rolloutbatch.sdk.ops import Call, Op, ResultsIncomplete, ResultsNotReady, Sleep, is_finished


def results_name(batch: Mapping) -> str:
    meta = batch["metadata"]
    return (batch.get("status") or {}).get("resultsConfigMap") or \
        naming.results_configmap_name(BatchRef(meta["namespace"], meta["name"], meta.get("uid", "")))


def shard_selector(uid: str) -> str:
    return f"{naming.LABEL_BATCH_UID}={uid},{naming.LABEL_EPISODE_ROLE}={naming.ROLE_RESULTS_SHARD}"


def list_configmaps(namespace: str, selector: str) -> Op:
    items: list[dict] = []
    params: dict[str, Any] = {"labelSelector": selector, "limit": 100}
    while True:
        page = yield Call("get", (resources.collection_path("ConfigMap", namespace), "list ConfigMaps"), params)
        items.extend(page.get("items") or [])
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return items
        params = dict(params, **{"continue": cont})


# Pauses between the reads of a batch's status while a results ConfigMap is not (yet) recorded:
# the operator patches the status right after each results write.
STATUS_REREADS = (0.0, 0.2, 0.5, 1.0, 2.0)


def _fresh_status(batch: Mapping) -> Op:
    """The batch's status read again (the results digests lag a results write by one call), or
    None when it is gone or was replaced by a namesake (whose digests say nothing of ours)."""
    meta = batch["metadata"]
    try:
        live = yield Call("get", (resources.object_path("RolloutBatch", meta["name"], meta["namespace"]),
                                  f"get RolloutBatch {meta['namespace']}/{meta['name']}"))
    except NotFound:
        return None
    if (live.get("metadata") or {}).get("uid") != meta.get("uid"):
        return None
    return live.get("status") or {}


@dataclass
class ResultsRead:
    """The results ConfigMaps of a batch as :func:`read_results` found them, by name, and the
    status they were checked against."""
    head: str                                   # the head ConfigMap's name
    status: dict                                # the newest status read (or the held terminal one)
    confirmed: bool                             # False: the held status was not terminal and no fresh read came
    fresh: bool = False                         # status was read from the API
    got: dict[str, dict | None] = field(default_factory=dict)    # name -> last read (None: NotFound)
    docs: dict[str, dict | None] = field(default_factory=dict)   # name -> its decoded document
    sums: dict[str, str] = field(default_factory=dict)           # name -> its digest (hashed once per read)
    # the digests ``status`` vouches for, and that status: worked out once per status, not per shard
    _vouched: tuple[dict, dict[str, frozenset[str]]] | None = None

    def recorded(self, name: str) -> bool:
        cm = self.got.get(name)
        if cm is None:
            return False
        if name not in self.sums:
            self.sums[name] = configmap_digest(cm)
        if self._vouched is None or self._vouched[0] is not self.status:
            self._vouched = (self.status, vouched_digests(self.status))
        return self.sums[name] in self._vouched[1].get(name, ())

    def listed(self) -> list[str]:
        """The shards the head indexes (skipped names aside), once the head is the operator's:
        its index is then trustworthy, whatever labels the shards carry now."""
        head = self.docs.get(self.head) if self.recorded(self.head) else None
        index = head.get("shards") if head is not None else None
        return [e["name"] for e in index if isinstance(e, Mapping) and isinstance(e.get("name"), str)
                and e.get("skipped") is not True] if isinstance(index, list) else []

    def pending(self) -> list[str]:
        """The head and listed shards not (yet) what the newest status records."""
        return [name for name in [self.head, *self.listed()] if not self.recorded(name)]


def read_results(batch: Mapping) -> Op:
    """The head ConfigMap and every shard its index lists, each by name (a neighbour can strip
    the labels of any of them), checked against the batch's newest status.

    Only the newest status counts: an older one records older genuine versions, which anyone can
    write back. A held status that is not terminal is therefore read again before anything is
    accepted. The operator writes a ConfigMap, then patches the status: a ConfigMap read before
    that patch is newer than the status, one read before a later write and patch older; either
    way, what does not match is read again with the status, a few times over about 4 s
    (``STATUS_REREADS``)."""
    meta = batch["metadata"]
    held = dict(batch.get("status") or {})
    read = ResultsRead(head=results_name(batch), status=held, confirmed=held.get("phase") in TERMINAL_PHASES)

    def fetch(names: list[str]) -> Op:
        done: set[str] = set()
        while names:
            for name in names:
                try:
                    cm = yield Call("get", (resources.object_path("ConfigMap", name, meta["namespace"]),
                                            f"get ConfigMap {name}"))
                except NotFound:
                    cm = None
                read.got[name], read.docs[name] = cm, decode_results(cm) if cm else None
                read.sums.pop(name, None)
                done.add(name)
            # a head read just now may list shards not read yet, or not matching: each once per round
            names = [n for n in read.pending() if n not in done]

    yield from fetch([read.head])
    if read.docs[read.head] is None:
        return read
    force = not read.confirmed
    for delay in STATUS_REREADS:
        if not force and not read.pending():
            break
        force = False
        if delay:
            yield Sleep(delay)
        fresh = yield from _fresh_status(batch)
        if fresh is None:
            break
        read.status, read.confirmed, read.fresh = fresh, True, True
        yield from fetch(read.pending())
    return read


def results_document(batch: Mapping) -> Op:
    """The whole results document: the head ConfigMap and, for a sharded batch, every shard its
    index lists (read by name, :func:`read_results`), through ``core.result_shards.assemble``.
    Each ConfigMap is decoded by ``core.results.decode_results`` (gzip bombs, garbage).

    Anyone with ConfigMap rights in the namespace can write, relabel or delete these ConfigMaps:
    one counts only if its digest is the one the batch's newest status records
    (``resultsDigests``, written by the operator alone). A head that is not raises
    ResultsNotReady. Listed shards whose rows are left out are named in ``missing_shards``; of
    them, ``unverified_shards`` are not what the operator wrote, ``unreadable_shards`` not
    results of this batch, the others are gone (:func:`incomplete` says so as an error)."""
    meta = batch["metadata"]
    read = yield from read_results(batch)
    status, name = read.status, read.head
    head = read.docs.get(name)
    if head is None:
        raise ResultsNotReady(f"RolloutBatch {meta['namespace']}/{meta['name']} has no results yet "
                              f"(ConfigMap {name}; phase {status.get('phase') or v.PENDING})")
    where = f"RolloutBatch {meta['namespace']}/{meta['name']}: results ConfigMap {name}"
    if not read.confirmed:
        raise ResultsNotReady(f"{where} cannot be confirmed: the batch is gone or was replaced by a namesake, "
                              "and the status held is not final")
    if not read.recorded(name):
        if is_finished(status):
            raise ResultsNotReady(f"{where} changed since the operator wrote it: its content is not what the "
                                  "batch's status records (status.resultsDigests); do not trust it")
        raise ResultsNotReady(f"{where} is not yet confirmed by the batch's status "
                              f"(phase {status.get('phase') or v.PENDING}), try again")
    if "shards" not in head:
        return head
    return with_shards(head, read.listed(), read.got, read.docs, meta["uid"], read.recorded)


def with_shards(head: Mapping, listed: list[str], got: Mapping[str, dict | None], docs: Mapping[str, dict | None],
                 uid: str, recorded: Any) -> dict:
    """``head`` assembled with the listed shards that are results of ``uid`` and that
    ``recorded(name)`` vouches for; the others named (gone: ``missing_shards``; not ours:
    ``unreadable_shards``; not what the operator wrote: ``unverified_shards``)."""
    kept, unreadable, unverified = [], [], []
    for shard in listed:
        doc = docs.get(shard)
        if got.get(shard) is None:
            continue                      # gone: assemble names it in missing_shards
        if doc is None or doc.get("uid") != uid:
            unreadable.append(shard)
        elif not recorded(shard):
            unverified.append(shard)
        else:
            kept.append(doc)
    document = assemble(head, kept)
    if unreadable:
        document["unreadable_shards"] = sorted(unreadable)
    if unverified:
        document["unverified_shards"] = sorted(unverified)
    return document


def incomplete(document: Mapping, batch: Mapping) -> ResultsIncomplete | None:
    """The error for a results document that lacks rows of shards its head lists, or None."""
    missing = [n for n in document.get("missing_shards") or [] if isinstance(n, str)]
    if not missing:
        return None
    meta = batch["metadata"]
    unverified, unreadable = document.get("unverified_shards") or [], document.get("unreadable_shards") or []
    gone = [n for n in missing if n not in unverified and n not in unreadable]
    why = [f"{', '.join(names)} {text}" for names, text in (
        (gone, "deleted"), (unverified, "not what the operator wrote (status.resultsDigests)"),
        (unreadable, "not results of this batch")) if names]
    return ResultsIncomplete(
        f"RolloutBatch {meta['namespace']}/{meta['name']}: results incomplete, the rows of "
        f"{len(missing)} listed shard(s) are left out: {'; '.join(why)}", shards=missing)


def rows(document: Mapping, batch: Mapping) -> list:
    """Every row of the document; ResultsIncomplete rather than a silently partial list."""
    error = incomplete(document, batch)
    if error is not None:
        raise error
    return list(document.get("pods") or [])
