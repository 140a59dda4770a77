"""The pods of the pools' namespaces as the operator's pod watch last saw them (handlers.children).

A pool's round (service.pools) read its namespace with a list, twice a second while it filled:
decoding every pod of the namespace each time was most of the operator's CPU in a pooled batch's
time (bench/README.md). The pod watch decodes each change once anyway; :class:`PoolPods` keeps
what it saw of the namespaces a pool may own (naming.looks_like_pool_namespace) for the rounds.

What a round may see that a list would not: a change the watch has not brought yet (it is
milliseconds behind the API). The writes a round makes are guarded as they were with a list (a
deletion carries the uid and resourceVersion seen: a pod claimed since is not deleted), and the
pods a round creates are kept here until the watch brings them (the next round would otherwise
create them again). A relist (the watch's start, a 410 Gone) replaces the whole view: a pod
deleted while the watch was down does not stay in it.

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

DELETED_KEPT = 4096   # uids of deleted pods remembered, so a creation answer seen after it is not kept
CREATED_KEPT_SECONDS = 30.0   # a pod created here and never brought by the watch (it went while the watch was down)
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


class PoolPods:
    """A thread-safe view of the pool namespaces' pods: fed by the pod watch's thread
    (:meth:`on_event`, :meth:`on_listed`), read by the pools' rounds (:meth:`pods`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, dict[str, dict]] = {}                  # namespace -> uid -> pod
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._created: dict[str, tuple[str, float, dict]] = {}      # uid -> (namespace, when, pod)
        self._synced = False      # listed whole once
        self._connected = False   # its watch is open: what changes now comes (else a round lists)

    def on_event(self, kind: str, pod: dict) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) of any pod the watch sees."""
        meta = pod.get("metadata") or {}
        namespace, uid = meta.get("namespace"), meta.get("uid")
        if not naming.looks_like_pool_namespace(namespace) or not isinstance(uid, str):
            return
        with self._lock:
            if kind == "DELETED":
                self._forget(namespace, uid)
            elif uid not in self._deleted:
                self._pods.setdefault(namespace, {})[uid] = _kept(pod)
                self._created.pop(uid, None)

    def on_listed(self, uids: set[str], began: float) -> None:
        """The watch listed every pod it sees (at its start, and after a 410 Gone), a list that
        ``began`` then (time.monotonic): what it did not list is gone, whatever event was missed,
        also a pod made here before the list began (one made since may be newer than the list)."""
        with self._lock:
            for namespace, pods in list(self._pods.items()):
                for uid in [uid for uid in pods if uid not in uids]:
                    self._forget(namespace, uid)
            for uid, (namespace, when, _) in list(self._created.items()):
                if when < began and uid not in uids:
                    self._forget(namespace, uid)
            self._synced = True

    def on_connected(self, connected: bool) -> None:
        """The watch opened, or broke (it resumes from its last version, then catches up)."""
        with self._lock:
            self._connected = connected

    def remember(self, pod: dict) -> None:
        """A pod this process just created, seen until the watch brings it (a relist does not drop
        it: it may be newer than the list), for CREATED_KEPT_SECONDS at most."""
        meta = pod.get("metadata") or {}
        namespace, uid = meta.get("namespace"), meta.get("uid")
        if not naming.looks_like_pool_namespace(namespace) or not isinstance(uid, str):
            return
        with self._lock:
            if uid not in self._deleted and uid not in (self._pods.get(namespace) or {}):
                self._created[uid] = (namespace, time.monotonic(), _kept(pod))

    def pods(self, namespace: str) -> list[dict] | None:
        """The namespace's pods, or None unless the watch has listed them and is open (a round
        lists them then: a view left behind by a broken watch would make it create pods again)."""
        now = time.monotonic()
        with self._lock:
            if not (self._synced and self._connected):
                return None
            for uid in [uid for uid, (_, when, _) in self._created.items() if now - when > CREATED_KEPT_SECONDS]:
                del self._created[uid]
            return [*(self._pods.get(namespace) or {}).values(),
                    *(pod for where, _, pod in self._created.values() if where == namespace)]

    def _forget(self, namespace: str, uid: str) -> None:
        pods = self._pods.get(namespace)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self._pods[namespace]
        self._created.pop(uid, None)
        self._deleted[uid] = None
        if len(self._deleted) > DELETED_KEPT:
            self._deleted.popitem(last=False)
