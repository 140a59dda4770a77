"""A RolloutPool's status while its deletion waits for a batch on its pods.

Deleting a pool deletes its warm pods at once; the finalizer then waits (possibly for hours: the
batch's whole run) while a batch holds a pod of the pool's namespace, and says so in
``status.message`` only (handlers.pools.delete_pool patches the message and nothing else; the
pool's daemon, which writes the counts and conditions, is stopped by kopf on deletion).
Had the handler written the message alone, for all that time ``kubectl get rp`` would show the last
round's READY count and STATUS ``PoolWarm``, ``status.readyPods`` (the scale subresource's
replicas) would count deleted pods, and ``kubectl wait --for=condition=Ready rp/NAME`` would pass
on a pool with no warm pod that will never make one again: the deletion's status says Deleting.
"""
from __future__ import annotations

import contextlib
import logging
import types

import kopf
from prometheus_client import CollectorRegistry

from rolloutbatch.core import vocabulary as v
from rolloutbatch.handlers import pools as pool_handlers
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service import pool_claims
from rolloutbatch.service.context import Settings
from rolloutbatch.core import pool_spec
from rolloutbatch.metrics import Metrics
from tests.unit.service.memory_pool import BATCH, NS, POOL_NS, batch_spec, filled, live, run
from rolloutbatch import GROUP, VERSION


def _memo(api) -> types.SimpleNamespace:
    ctx = types.SimpleNamespace(api=api, writer=None, settings=Settings(), channels=None,
                                pool_pods=None)
    metrics = types.SimpleNamespace(handler=lambda name: contextlib.nullcontext(), pool_deleted=lambda *_: None)
    return types.SimpleNamespace(ctx=ctx, metrics=metrics)


def test_a_pool_whose_deletion_waits_does_not_say_it_is_warm(api) -> None:
    """A full pool of 3 (Ready=True, readyPods 3); a batch claims one pod; the pool is deleted: its 2
    warm pods are deleted and the deletion waits for the batch, Ready=False (Deleting), readyPods 0."""
    rec = filled(api, 3)
    run(rec.round())
    status = live(api)["status"]
    assert status["readyPods"] == 3 and status["conditions"][0]["status"] == v.CONDITION_TRUE
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=1, episodes=1),
                          pool_spec.pool_ref(live(api)), 60))
    # the deletion, as kopf runs it: the object marked deleted, the delete handler called
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm"
    api.merge_patch(path, {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}, "finalizer")
    api.delete(path, "delete pool")
    body = live(api)
    patch = kopf.Patch()
    try:
        run(pool_handlers.delete_pool(body=body, memo=_memo(api), logger=logging.getLogger("t"), patch=patch))
    except kopf.TemporaryError:
        pass   # the deletion waits for the batch, as documented
    if patch.get("status"):
        api.merge_patch(path + "/status", {"status": dict(patch["status"])}, "kopf's patch")
    status = live(api)["status"]
    warm_left = [p for p in api.list_objects("Pod", POOL_NS) if not p["metadata"].get("deletionTimestamp")
                 and p["metadata"].get("annotations", {}).get("rl.agentruntime.io/claimed-by") is None]
    ready = next(c for c in status["conditions"] if c["type"] == v.CONDITION_READY)
    assert warm_left == []
    assert status["message"].startswith("Deleting: ")
    assert status["readyPods"] == len(warm_left) and ready["status"] != v.CONDITION_TRUE, (
        f"a pool being deleted, with {len(warm_left)} warm pods, says readyPods={status['readyPods']}, "
        f"Ready={ready['status']} ({ready['reason']})")
    assert ready["reason"] == v.PoolReason.DELETING and status["claimedPods"] == 1   # the batch's pod


def test_a_deleted_pool_leaves_no_metric_series(api) -> None:
    """Its claims' series carry its name (the pool label is always on): they go with it, or every
    pool ever made would stay exported until the operator restarts."""
    filled(api, 1)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.pool_started(NS, "warm")          # what run_pool does first
    metrics.pool_claims(NS, "warm", 1, 0)
    labels = {"namespace": NS, "pool": "warm", "result": "hit"}
    assert registry.get_sample_value("rolloutbatch_pool_claims_total", labels) == 1

    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm"
    api.merge_patch(path, {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}, "finalizer")
    api.delete(path, "delete pool")
    ctx = types.SimpleNamespace(api=api, writer=None, settings=Settings(),
                                channels=None, pool_pods=None)
    memo = types.SimpleNamespace(ctx=ctx, metrics=metrics)
    run(pool_handlers.delete_pool(body=live(api), memo=memo, logger=logging.getLogger("t"), patch=kopf.Patch()))

    left = sorted({s.name for fam in registry.collect() for s in fam.samples if s.labels.get("pool") == "warm"})
    assert left == [], f"series of the deleted pool still exported: {left}"
