"""Retained results (``spec.cleanup.results: Retain``) read and removed by the batch's name,
once the batch is gone: the sans-IO verbs both clients run (as ``sdk.ops``).

While the batch exists its status vouches for its results (``result_ops.results_document``); a
handle that saw the final status still checks them against the digests it holds. Read by name
without the batch, only the head vouches for its shards, and nothing for the head: whoever may
write ConfigMaps in the namespace could have rewritten the whole set (docs/design.md §8.3).

A name is not an identity: a new batch may take the name of one whose results stay, so a set
is the batch uid its labels carry. Reading or removing one may name that uid; either way the set
of a batch that exists now is its own, not a retained one yet (a Retain batch labels its results
retained from its first write): it is neither read by its head alone nor removed. A new batch
stalls while an earlier set holds ``<name>-results``; its message names the earlier uid, which is
how that set is read while the new batch exists.
"""

from __future__ import annotations

from collections.abc import Mapping

from rolloutbatch.core import naming
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.results import SHARD_DIGESTS, configmap_digest, decode_results
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Conflict, NotFound
from rolloutbatch.sdk.ops import Call, Op, ResultsNotReady
from rolloutbatch.sdk.result_ops import list_configmaps, with_shards


def retained_head_name(name: str, namespace: str) -> str:
    return naming.results_configmap_name(BatchRef(namespace, name, ""))


def _get_configmap(name: str, namespace: str) -> Op:
    try:
        return (yield Call("get", (resources.object_path("ConfigMap", name, namespace), f"get ConfigMap {name}")))
    except NotFound:
        return None


def retained_document(name: str, namespace: str, uid: str | None = None) -> Op:
    """The retained results (``spec.cleanup.results: Retain``) of a batch named ``name`` that is
    gone, read without it: the head ConfigMap, labelled retained and naming the uid its label
    carries, and each shard it lists whose digest is the one the head records
    (``core.results.SHARD_DIGESTS``). No status vouches for the head any more: anyone who may
    write ConfigMaps in the namespace could have rewritten the whole set (docs/design.md §8.3),
    so the document says how it was checked (``retained``). ``uid``: only the set of the batch
    that had it (the head's uid label and content agree on it). ResultsNotReady when there is
    none, or when the batch that had it still exists (its status vouches for its results)."""
    wanted = uid
    head_name = retained_head_name(name, namespace)
    cm = yield from _get_configmap(head_name, namespace)
    labels = ((cm or {}).get("metadata") or {}).get("labels") or {}
    uid = labels.get(naming.LABEL_BATCH_UID)
    head = decode_results(cm) if cm is not None else None
    if head is None or labels.get(naming.LABEL_RESULTS_RETAINED) != naming.RESULTS_RETAINED or not uid \
            or head.get("uid") != uid or head.get("batch") != name:
        raise ResultsNotReady(f"no retained results of RolloutBatch {namespace}/{name} (ConfigMap {head_name}: "
                              f"{'none' if cm is None else 'not retained results of that batch'})")
    if wanted is not None and uid != wanted:
        raise ResultsNotReady(f"no retained results of RolloutBatch {namespace}/{name} with uid {wanted} "
                              f"(ConfigMap {head_name} holds those of uid {uid})")
    if (yield from _live_uid(name, namespace)) == uid:
        raise ResultsNotReady(f"RolloutBatch {namespace}/{name} (uid {uid}) still exists: its results are read "
                              "through it (its status vouches for them), not as retained results")
    document = dict(head)
    if "shards" in head:
        recorded = head.get(SHARD_DIGESTS) if isinstance(head.get(SHARD_DIGESTS), Mapping) else {}
        index = head.get("shards") if isinstance(head.get("shards"), list) else []
        listed = [e["name"] for e in index if isinstance(e, Mapping) and isinstance(e.get("name"), str)
                  and e.get("skipped") is not True]
        got: dict[str, dict | None] = {}
        for shard in listed:
            got[shard] = yield from _get_configmap(shard, namespace)
        docs = {n: decode_results(c) if c is not None else None for n, c in got.items()}
        document = with_shards(head, listed, got, docs, uid,
                                lambda n: recorded.get(n) == configmap_digest(got[n]))
    document["retained"] = {"uid": uid, "verified_by": RETAINED_VERIFIED_BY}
    return document


# How a retained set read without its batch was checked (the document's ``retained``).
RETAINED_VERIFIED_BY = "head"


def retained_batch(document: Mapping, name: str, namespace: str) -> dict:
    """A stand-in for the gone batch (its metadata), for the messages of :func:`rows`."""
    return {"metadata": {"name": name, "namespace": namespace, "uid": (document.get("retained") or {}).get("uid")}}


def retained_configmaps(name: str, namespace: str, uid: str | None = None) -> Op:
    """The retained results ConfigMaps of batches named ``name`` (head and shards, by label);
    with ``uid``, of the batch that had it only."""
    selector = naming.retained_results_selector(name)
    if uid is not None:
        selector += f",{naming.LABEL_BATCH_UID}={uid}"
    return (yield from list_configmaps(namespace, selector))


def _uid_of(cm: Mapping) -> str | None:
    return ((cm.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_BATCH_UID)


def retained_uids(name: str, namespace: str) -> Op:
    """The batch uids of the retained results sets of batches named ``name``, sorted."""
    found = yield from retained_configmaps(name, namespace)
    return sorted({uid for uid in map(_uid_of, found) if uid})


def _live_uid(name: str, namespace: str) -> Op:
    """The uid of the batch named ``name`` that exists now, if one does."""
    try:
        batch = yield Call("get", (resources.object_path("RolloutBatch", name, namespace),
                                   f"get RolloutBatch {namespace}/{name}"))
    except NotFound:
        return None
    return ((batch or {}).get("metadata") or {}).get("uid")


def delete_retained(name: str, namespace: str, uid: str | None = None) -> Op:
    """Delete the retained results of batches named ``name`` that are gone (UID preconditions);
    their names. ``uid``: only the set of the batch that had it. The set of a batch of that name
    that exists now stays, with or without ``uid``: it is that batch's, whose operator may still
    write it (e.g. a batch created after its namesake was deleted, before this call)."""
    found = yield from retained_configmaps(name, namespace, uid)
    if found:
        # listed first: a batch whose set is in the list was created before the list was read
        live = yield from _live_uid(name, namespace)
        found = [cm for cm in found if live is None or _uid_of(cm) != live]
    deleted = []
    for cm in found:
        meta = cm["metadata"]
        try:
            yield Call("delete", (resources.object_path("ConfigMap", meta["name"], namespace),
                                  f"delete ConfigMap {namespace}/{meta['name']}",
                                  {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}}))
        except (NotFound, Conflict):
            continue   # gone meanwhile, or replaced by a namesake that must not be touched
        deleted.append(meta["name"])
    return sorted(deleted)
