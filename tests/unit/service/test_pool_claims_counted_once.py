"""A pooled batch's claims are counted once (the pool_claims metric, the ClaimedFromPool Event),
however often its provisioning runs: a Running status that fails transiently after the Job was
made runs the provisioning again, which adopts the Job and the claims it already made, and so does
an operator that takes the batch over after its predecessor made the Job and died (a failover, a
rolling upgrade). The operator run that made the Job counts (naming.ANNOTATION_MADE_BY), even when
the answer to its create was lost and its retry adopted the Job."""
from __future__ import annotations

import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube import storage as kube_storage
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.service import policy
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster
from tests.unit.service.test_pooled_crash_points import EPISODES, POOLED_SITES, PoolCrash, job_of, run_pooled


def _claims(cluster: MemoryCluster, result: str) -> float:
    return cluster.prometheus.get_sample_value("rolloutbatch_pool_claims_total",
                                               {"namespace": NAMESPACE, "pool": "warm", "result": result}) or 0.0


def test_a_retried_provisioning_counts_the_claims_once(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            cluster.api.fail("PATCH", "RolloutBatch", Unavailable("etcd leader changed", status=503), times=2,
                             when=lambda path: path.endswith("/status") and job_of(cluster) is not None)
            await run_pooled(cluster, None)
            assert cluster.status()["phase"] == v.SUCCEEDED, cluster.status()
            assert cluster.reasons().count(v.EVENT_CLAIMED) == 1, cluster.reasons()
            assert (_claims(cluster, "hit"), _claims(cluster, "miss")) == (EPISODES, 0)
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_pooled_batch_taken_over_after_its_job_was_made_counts_its_claims_once(monkeypatch):
    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            crash = PoolCrash(monkeypatch, POOLED_SITES["status-Running"], after=False)
            await run_pooled(cluster, crash)
            assert crash.fired
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), status
            claimed = [m for _, reason, m in cluster.events if reason == v.EVENT_CLAIMED]
            assert len(claimed) == 1, f"{len(claimed)} ClaimedFromPool Events for {EPISODES} claims: {claimed}"
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_job_whose_creation_answer_was_lost_still_counts_its_claims_once(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))
    real = kube_storage.Storage.create_or_adopt
    lost: list[str] = []

    async def answer_lost_once(self, obj, batch_uid, same=None):
        live = await real(self, obj, batch_uid, same)
        if obj.get("kind") == "Job" and not lost:
            lost.append(obj["metadata"]["name"])     # stored; its answer never reached the operator
            raise Unavailable("the connection was reset before the answer", status=503)
        return live
    monkeypatch.setattr(kube_storage.Storage, "create_or_adopt", answer_lost_once)

    async def main():
        async with MemoryCluster(pod_create_grace=5.0) as cluster:
            await run_pooled(cluster, None)
            assert lost, "the Job's creation never ran"
            assert cluster.status()["phase"] == v.SUCCEEDED, cluster.status()
            claimed = [m for _, reason, m in cluster.events if reason == v.EVENT_CLAIMED]
            assert len(claimed) == 1, f"{len(claimed)} ClaimedFromPool Events for {EPISODES} claims: {claimed}"
            assert (_claims(cluster, "hit"), _claims(cluster, "miss")) == (EPISODES, 0)
    asyncio.run(asyncio.wait_for(main(), 30))
