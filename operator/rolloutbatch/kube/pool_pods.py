"""The pods of the pools' namespaces as the operator's pod watches last saw them (handlers.children).

A pool's round (service.pools) read its namespace with a list, twice a second while it filled:
decoding every pod of the namespace each time was most of the operator's CPU in a pooled batch's
time (bench/README.md). The watches decode each change once anyway; :class:`PoolPods` keeps what
they saw of the namespaces a pool may own (naming.looks_like_pool_namespace) for the rounds.

Two watches feed it, each a source of its own: the pools' pods (``POOL``: the label
``rl.agentruntime.io/pool-uid``, warm pods and claims not enrolled yet) and the batches' pods
(``BATCH``: ``rl.agentruntime.io/batch-uid``, the watch the batches are tracked by, which keeps
its selector so that a pod forged with a batch's label anywhere is still seen and reported). A
claim's enrolment moves a pod from one to the other (the first watch says DELETED, the second
ADDED, in either order): each source keeps its own, and the batches' copy is read first.

What a round may see that a list would not: a change a watch has not brought yet (milliseconds
behind the API). The writes a round makes are guarded as they were with a list (a deletion carries
the uid and resourceVersion seen: a pod claimed since is not deleted), and the pods a round
creates are kept here until a watch brings them (the next round would otherwise create them
again). A relist (a watch's start, a 410 Gone) replaces its source whole: a pod deleted while the
watch was down does not stay. Nothing is read while either watch is down, has not listed, or,
resumed from its last version, has brought no line yet (its backlog's first, or
kube.watch.RESUME_SETTLE_SECONDS with none).

A pod a batch ran that has ended is kept as a stub of what the rounds read of it (its name, uid,
labels, annotations, phase: core.pool_census.is_held, refill_hold): a pooled batch of 30,000 keeps
its ended pods until its Job goes, and whole pods would be a gigabyte of dicts.
"""

from __future__ import annotations

import collections
import threading
import time

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v

POOL, BATCH = "pool", "batch"   # the two sources (see the module docstring)
DELETED_KEPT = 4096   # uids of deleted pods remembered, so a creation answer seen after it is not kept
CREATED_KEPT_SECONDS = 30.0   # a pod created here and never brought by a watch (it went while the watch was down)
_STUB_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp",
                  "creationTimestamp")


def _kept(pod: dict) -> dict:
    """``pod`` whole, or the stub of an ended pod that is no pool's any more (see the docstring)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if status.get("phase") not in (v.PodPhase.SUCCEEDED, v.PodPhase.FAILED) \
            or (meta.get("labels") or {}).get(naming.LABEL_POOL_UID):
        return pod
    return {"metadata": {k: meta[k] for k in _STUB_METADATA if k in meta}, "status": {"phase": status["phase"]}}


def _where(pod: dict) -> tuple[str, str] | None:
    meta = pod.get("metadata") or {}
    namespace, uid = meta.get("namespace"), meta.get("uid")
    if not naming.looks_like_pool_namespace(namespace) or not isinstance(uid, str):
        return None
    return namespace, uid


class PoolPods:
    """A thread-safe view of the pool namespaces' pods: fed by the watches' threads
    (:meth:`on_event`, :meth:`on_listed`, :meth:`on_connected`, each of a source), read by the
    pools' rounds (:meth:`pods`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # source -> namespace -> uid -> pod
        self._pods: dict[str, dict[str, dict[str, dict]]] = {POOL: {}, BATCH: {}}
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._created: dict[str, tuple[str, float, dict]] = {}      # uid -> (namespace, when, pod)
        self._synced: set[str] = set()      # sources listed whole once
        self._connected: set[str] = set()   # sources whose watch is open: what changes now comes

    def on_event(self, source: str, kind: str, pod: dict) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) of any pod the ``source``'s watch sees."""
        where = _where(pod)
        if where is None:
            return
        namespace, uid = where
        with self._lock:
            if kind == "DELETED":   # gone, or no longer this source's (an enrolment)
                self._drop(source, namespace, uid)
            else:
                self._pods[source].setdefault(namespace, {})[uid] = _kept(pod)
                self._created.pop(uid, None)

    def on_listed(self, source: str, uids: set[str], began: float) -> None:
        """The ``source``'s watch listed every pod it sees (at its start, and after a 410 Gone), a
        list that ``began`` then (time.monotonic): what it did not list is no longer its, whatever
        event was missed; so is a pod made here before the list began (the pools' own source)."""
        with self._lock:
            for namespace, pods in list(self._pods[source].items()):
                for uid in [uid for uid in pods if uid not in uids]:
                    self._drop(source, namespace, uid)
            if source == POOL:
                for uid, (_, when, _) in list(self._created.items()):
                    if when < began and uid not in uids:
                        self._forget_created(uid)
            self._synced.add(source)

    def on_connected(self, source: str, connected: bool) -> None:
        """The ``source``'s watch opened (its backlog begun), or broke (it resumes from its last version)."""
        with self._lock:
            (self._connected.add if connected else self._connected.discard)(source)

    def remember(self, pod: dict) -> None:
        """A pod this process just created, seen until a watch brings it (a relist does not drop
        it unless it began after it), for CREATED_KEPT_SECONDS at most."""
        where = _where(pod)
        if where is None:
            return
        namespace, uid = where
        with self._lock:
            if uid not in self._deleted and not any(uid in (by.get(namespace) or {}) for by in self._pods.values()):
                self._created[uid] = (namespace, time.monotonic(), _kept(pod))

    def pods(self, namespace: str) -> list[dict] | None:
        """The namespace's pods, or None unless both watches have listed them and are open (a round
        lists them then: a view left behind by a broken watch would make it create pods again)."""
        now = time.monotonic()
        with self._lock:
            if self._synced != {POOL, BATCH} or self._connected != {POOL, BATCH}:
                return None
            for uid in [uid for uid, (_, when, _) in self._created.items() if now - when > CREATED_KEPT_SECONDS]:
                del self._created[uid]
            seen = dict(self._pods[BATCH].get(namespace) or {})   # an enrolled claim: the batches' copy
            for uid, pod in (self._pods[POOL].get(namespace) or {}).items():
                seen.setdefault(uid, pod)
            for uid, (where, _, pod) in self._created.items():
                if where == namespace:
                    seen.setdefault(uid, pod)
            return list(seen.values())

    def _drop(self, source: str, namespace: str, uid: str) -> None:
        pods = self._pods[source].get(namespace)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self._pods[source][namespace]
        self._forget_created(uid)

    def _forget_created(self, uid: str) -> None:
        """Gone (or brought by a watch): never kept again as this process's own creation."""
        self._created.pop(uid, None)
        self._deleted[uid] = None
        if len(self._deleted) > DELETED_KEPT:
            self._deleted.popitem(last=False)
