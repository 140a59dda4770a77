"""``spec.poolRef.whenEmpty: Wait`` when another batch claims between the wait and the claims.

The reconciler waits until the pool holds the batch's first wave (pool_claims.readiness), then
claims: another batch on the same pool (two trainers waiting for one refill, or any Cold batch)
may take warm pods in between. A Wait batch left with fewer warm pods than its first wave makes
no Job, whose pods would start the rest cold, which is what Wait was asked to prevent: it keeps
its claims and waits again, and makes its Job once it holds the whole wave.
"""
from __future__ import annotations

import asyncio
import time

from rolloutbatch.core import naming, pool_census
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import pool_claims, reconciler
from rolloutbatch.service.pools import PoolReconciler
from tests.unit.service import memory_pool
from tests.unit.service.memory_cluster import _iso, until
from tests.unit.service.test_pooled_crash_points import (EPISODES, LOG, POOL_NS, batch_pods, controllers, fill_pool,
                                                         job_of)
from tests.unit.service.memory_cluster import MemoryCluster, NAMESPACE

OTHER = BatchRef(namespace=memory_pool.BATCH.namespace, name="other", uid="c0000000-0000-0000-0000-0000000000ff",
                 generation=1)


def _spec(when_empty: str):
    return parse_spec({"episodes": 2, "parallelism": 2, "episodeTimeoutSeconds": 60,
                       "poolRef": {"name": "warm", "whenEmpty": when_empty}})


def test_a_wait_batch_whose_warm_pods_another_batch_took_makes_no_job(api):
    memory_pool.filled(api, 2)
    storage, pool_storage = Storage(api), PoolStorage(api)
    ready, message = memory_pool.run(pool_claims.readiness(pool_storage, memory_pool.BATCH, _spec(v.POOL_WAIT)))
    assert ready, message
    memory_pool.run(pool_claims.provision(storage, pool_storage, OTHER, _spec(v.POOL_COLD), lambda *e: None, None,
                                          lambda pods: None, CLUSTERWIDE))   # another batch claims meanwhile
    job = memory_pool.run(pool_claims.provision(storage, pool_storage, memory_pool.BATCH, _spec(v.POOL_WAIT),
                                                lambda *e: None, None, lambda pods: None, CLUSTERWIDE))
    assert job is None and api.get_object("Job", naming.job_name(memory_pool.BATCH), POOL_NS) is None


def _warm_up(cluster: MemoryCluster) -> None:
    """The kubelet: every pool pod not started yet runs (and is warm)."""
    for pod in cluster.api.list_objects("Pod", POOL_NS):
        if pod["spec"].get("nodeName"):
            continue
        name = pod["metadata"]["name"]
        cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"spec": {"nodeName": "node-1"}}, "bind")
        cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}/status", {"status": {
            "phase": "Running", "startTime": _iso(time.time()), "containerStatuses": [
                {"name": c["name"], "started": True, "state": {"running": {}}} for c in pod["spec"]["containers"]]}},
            "kubelet")


def test_a_wait_batch_robbed_of_a_pod_waits_again_then_runs_every_episode_warm(monkeypatch):
    monkeypatch.setattr(reconciler, "POOL_WAIT_PERIOD", 0.05)
    monkeypatch.setattr(pool_census, "REFILL_HOLD_SECONDS", 0.0)   # the refill at once, not after the claims

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await fill_pool(cluster)
            stolen: list[str] = []

            def steal() -> None:   # another batch's claim lands first on one warm pod
                if not stolen:
                    name = sorted(p["metadata"]["name"] for p in cluster.api.list_objects("Pod", POOL_NS))[0]
                    cluster.api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"metadata": {
                        "labels": {naming.LABEL_EPISODE_ROLE: "episode"}}}, "another batch")
                    stolen.append(name)
            cluster.api.meanwhile("PATCH", "Pod", steal)
            cluster.submit({"episodes": EPISODES, "parallelism": EPISODES, "episodeTimeoutSeconds": 60,
                            "poolRef": {"name": "warm", "whenEmpty": v.POOL_WAIT}})
            stop = asyncio.Event()
            driver = asyncio.create_task(controllers(cluster, stop))
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: stolen and len(batch_pods(cluster)) == EPISODES - 1)
            await until(lambda: cluster.status().get("reason") == v.REASON_WAITING_FOR_POOL)
            await asyncio.sleep(0.2)
            assert job_of(cluster) is None, "a Job made with a first-wave index that has no warm pod"
            pool = cluster.api.get_object("RolloutPool", "warm", NAMESPACE)
            await PoolReconciler(PoolStorage(cluster.api), pool, lambda *e: None, LOG).round()   # the refill
            _warm_up(cluster)
            await asyncio.wait_for(task, 10)
            stop.set()
            await driver
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), status
            assert [r["outcome"] for r in cluster.rows()] == [v.OUTCOME_SUCCEEDED] * EPISODES
            assert stolen[0] not in {row["pod"] for row in cluster.rows()}
            assert cluster.reasons().count(v.EVENT_CLAIMED) == 1
    asyncio.run(asyncio.wait_for(main(), 30))
