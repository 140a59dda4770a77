"""A pool's rounds read its namespace from the pod watch's view (kube.pool_pods), not a list: the
same decisions, and a list only while the view is not whole."""
from __future__ import annotations

import time

from rolloutbatch.core import naming
from rolloutbatch.kube.pool_pods import BATCH, POOL, PoolPods
from tests.support.memory_api import MemoryApi
from tests.unit.service.memory_pool import POOL_NS, make_pool, pod_names, reconciler, replaced_then_shrunk, run

PODS = f"/api/v1/namespaces/{POOL_NS}/pods"


def _fed(view: PoolPods, kind: str, pod: dict) -> None:
    """What the two watches bring of a pod event (each selects by its label; a label gone is DELETED)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for source, label in ((POOL, naming.LABEL_POOL_UID), (BATCH, naming.LABEL_BATCH_UID)):
        view.on_event(source, kind if labels.get(label) else "DELETED", pod)


def _listed_and_open(view: PoolPods, connected: bool = True) -> PoolPods:
    for source in (POOL, BATCH):
        view.on_listed(source, set(), 0.0)
        view.on_connected(source, connected)
    return view


def _watched(api: MemoryApi) -> PoolPods:
    view = PoolPods()
    api.subscribe("Pod", lambda kind, pod: _fed(view, kind, pod))
    return _listed_and_open(view)


def _lists(api: MemoryApi) -> int:
    return sum(1 for method, path in api.calls if method == "GET" and path == PODS)


def _with_view(api: MemoryApi, view: PoolPods):
    rec = reconciler(api)
    rec.pods = view
    return rec


def test_a_pool_fills_replaces_and_shrinks_from_the_watchs_view_without_listing(api):
    make_pool(api, 2)
    replaced_then_shrunk(api, _with_view(api, _watched(api)))
    assert _lists(api) == 0


def test_pods_the_watch_has_not_brought_yet_are_not_made_twice(api):
    """The watch is behind the round's own creations: the next round must count them."""
    make_pool(api, 3)
    view = _listed_and_open(PoolPods())   # fed by nothing: the watch brings no event
    rec = _with_view(api, view)
    run(rec.round())
    run(rec.round())
    assert len(pod_names(api)) == 3 and _lists(api) == 0


def test_a_round_lists_while_the_view_is_not_whole(api):
    make_pool(api, 2)
    view = _watched(api)
    view.on_connected(POOL, False)   # its watch broke: what changes now may not come
    rec = _with_view(api, view)
    run(rec.round())
    assert _lists(api) == 1 and len(pod_names(api)) == 2
    view.on_connected(POOL, True)
    run(rec.round())
    assert _lists(api) == 1 and len(pod_names(api)) == 2


def test_a_pod_made_while_the_watch_was_down_and_gone_before_its_relist_is_replaced(api):
    """A relist begun after a round made a pod, and without it: the pod is gone (evicted, deleted,
    its node gone), not still starting; the pool replaces it at once, as a list would have."""
    make_pool(api, 1)
    view = _watched(api)
    view.on_connected(POOL, False)        # the pools' pod watch broke (it will relist: 410 Gone)
    rec = _with_view(api, view)
    run(rec.round())                      # lists, and makes the pool's pod
    [made] = pod_names(api)
    api.delete(f"{PODS}/{made}", "delete pod")
    view.on_listed(POOL, {p["metadata"]["uid"] for p in api.list_objects("Pod", POOL_NS)}, time.monotonic())
    view.on_connected(POOL, True)
    run(rec.round())
    assert len(pod_names(api)) == 1
