"""The pool namespaces' pods as the operator's pod watch sees them (kube.pool_pods): what the pools'
rounds read instead of a list, and when they must list after all."""
from __future__ import annotations

import functools
import time

from rolloutbatch.core import naming
from rolloutbatch.kube import pool_pods
from rolloutbatch.kube.pool_pods import BATCH, POOL, PoolPods
from rolloutbatch.kube.watch import Watcher
from tests.unit.fake_watch import FakeApi, event, gone

NS = naming.pool_namespace("team", "warm")


def pod(uid: str, namespace: str = NS, phase: str = "Running", labels: dict | None = None, **status) -> dict:
    return {"metadata": {"name": f"p-{uid}", "namespace": namespace, "uid": uid, "resourceVersion": "1",
                         "labels": labels if labels is not None else {naming.LABEL_POOL_UID: "pool-uid"},
                         "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "agent"}], "volumes": [{"name": "t", "configMap": {"name": "cm"}}]},
            "status": {"phase": phase, **status}}


def live(view: PoolPods) -> PoolPods:
    for source in (POOL, BATCH):
        view.on_listed(source, set(), 0.0)
        view.on_connected(source, True)
    return view


def uids(view: PoolPods, namespace: str = NS) -> set[str]:
    return {p["metadata"]["uid"] for p in view.pods(namespace) or ()}


def test_nothing_is_read_from_it_until_both_watches_listed_everything_and_are_open():
    view = PoolPods()
    view.on_event(POOL, "ADDED", pod("a"))
    assert view.pods(NS) is None
    view.on_listed(POOL, {"a"}, 0.0)
    view.on_connected(POOL, True)
    assert view.pods(NS) is None            # the batches' watch has not listed
    view.on_listed(BATCH, set(), 0.0)
    assert view.pods(NS) is None            # listed, its watch not open yet
    view.on_connected(BATCH, True)
    assert uids(view) == {"a"}
    view.on_connected(POOL, False)          # broken: a view left behind would make a round create pods again
    assert view.pods(NS) is None


def test_an_enrolment_moves_a_pod_between_the_watches_in_either_order():
    """The pools' watch says DELETED (its label went), the batches' ADDED: in either order the
    pod stays, the batches' copy read."""
    for order in ((POOL, "DELETED"), (BATCH, "ADDED")), ((BATCH, "ADDED"), (POOL, "DELETED")):
        view = live(PoolPods())
        view.on_event(POOL, "ADDED", pod("a"))
        enrolled = pod("a", labels={naming.LABEL_BATCH_UID: "batch-uid"})
        for source, kind in order:
            view.on_event(source, kind, enrolled if source == BATCH else pod("a"))
        assert [p["metadata"]["labels"] for p in view.pods(NS)] == [{naming.LABEL_BATCH_UID: "batch-uid"}], order


def test_events_add_change_and_remove_pods_of_pool_namespaces_only():
    view = live(PoolPods())
    view.on_event(POOL, "ADDED", pod("a"))
    view.on_event(POOL, "ADDED", pod("b", namespace="team"))          # not a pool's namespace
    view.on_event(POOL, "MODIFIED", pod("a", phase="Pending"))
    assert uids(view) == {"a"} and view.pods(NS)[0]["status"]["phase"] == "Pending"
    assert view.pods("team") == []
    view.on_event(POOL, "DELETED", pod("a"))
    assert view.pods(NS) == []


def test_a_relist_drops_what_it_did_not_list():
    """A pod deleted while the watch was down (its 410 Gone) brings no DELETED event."""
    view = live(PoolPods())
    view.on_event(POOL, "ADDED", pod("a"))
    view.on_event(POOL, "ADDED", pod("b"))
    view.on_listed(POOL, {"b"}, 0.0)
    assert uids(view) == {"b"}


def test_a_pod_created_here_is_seen_until_the_watch_brings_it_and_never_over_it():
    view = live(PoolPods())
    view.remember(pod("a", phase="Pending"))
    assert uids(view) == {"a"}
    view.on_listed(POOL, set(), 0.0)        # a list begun before the creation does not drop it
    assert uids(view) == {"a"}
    view.on_event(POOL, "ADDED", pod("a", phase="Running"))
    view.remember(pod("a", phase="Pending"))   # an answer read after the watch's newer view
    assert [p["status"]["phase"] for p in view.pods(NS)] == ["Running"]


def test_a_relist_begun_after_a_creation_drops_it_when_it_did_not_list_it():
    view = live(PoolPods())
    view.remember(pod("a"))
    view.on_listed(POOL, set(), time.monotonic())
    assert view.pods(NS) == []


def test_a_pod_created_and_deleted_before_its_answer_is_read_is_not_kept():
    view = live(PoolPods())
    view.on_event(POOL, "ADDED", pod("a"))
    view.on_event(POOL, "DELETED", pod("a"))
    view.remember(pod("a"))
    assert view.pods(NS) == []


def test_a_creation_the_watch_never_brings_is_forgotten(monkeypatch):
    view = live(PoolPods())
    view.remember(pod("a"))
    later = time.monotonic() + pool_pods.CREATED_KEPT_SECONDS + 1
    monkeypatch.setattr(pool_pods.time, "monotonic", lambda: later)
    assert view.pods(NS) == []


def test_an_ended_batch_pod_is_kept_as_what_the_rounds_read_of_it():
    view = live(PoolPods())
    batch = {naming.LABEL_BATCH_UID: "batch-uid"}
    view.on_event(BATCH, "ADDED", pod("done", phase="Succeeded", labels=batch, containerStatuses=[{"name": "agent"}]))
    view.on_event(POOL, "ADDED", pod("warm", phase="Failed", containerStatuses=[{"name": "agent"}]))
    kept = {p["metadata"]["uid"]: p for p in view.pods(NS)}
    assert kept["done"] == {"metadata": {"name": "p-done", "namespace": NS, "uid": "done", "resourceVersion": "1",
                                         "labels": batch, "annotations": {"a": "b"}},
                            "status": {"phase": "Succeeded"}}
    assert kept["warm"]["status"]["containerStatuses"]   # a pool's own dead pod: its reason is read


def test_pool_namespace_names_are_told_apart():
    assert naming.looks_like_pool_namespace(NS)
    for name in ("team", "rp-", "rp-0123456789a", "rp-012345678g", "RP-0123456789", None, 3):
        assert not naming.looks_like_pool_namespace(name), name


def _watched(api: FakeApi, view: PoolPods, until) -> Watcher:
    watcher = Watcher(api, "/api/v1/pods", naming.LABEL_POOL_UID, functools.partial(view.on_event, POOL),
                      on_listed=functools.partial(view.on_listed, POOL),
                      on_connected=functools.partial(view.on_connected, POOL))
    watcher.start()
    end = time.monotonic() + 10
    try:
        while not until():
            assert time.monotonic() < end, "the view never got there"
            time.sleep(0.01)
    finally:
        watcher.stop()
    return watcher


def test_the_watch_feeds_the_view_and_its_relist_after_gone_drops_the_pods_it_missed():
    listing = lambda *pods: {"items": list(pods), "metadata": {"resourceVersion": "5"}}  # noqa: E731
    api = FakeApi(lists={"/api/v1/pods": [listing(pod("a"), pod("b")), listing(pod("b"))]},
                  watches={"/api/v1/pods": [[event("ADDED", pod("c")), gone()], [1.0]]})
    view = PoolPods()
    view.on_listed(BATCH, set(), 0.0)
    view.on_connected(BATCH, True)
    _watched(api, view, lambda: view.pods(NS) is not None and uids(view) == {"b"})
