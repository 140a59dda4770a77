"""whenEmpty Wait in a pooled batch's later waves (service.later_claims): a later index with no
warm pod stays gated while its pool can still give it one, looked at again every
WAIT_RECHECK_SECONDS, and the batch's status says so (reason WaitingForPool) for as long as it
waits, not a moment longer; else it starts cold. First LaterClaims alone, then through the
reconciler on the in-memory cluster (its status as written)."""

from __future__ import annotations

import asyncio
import time

import pytest

from rolloutbatch import GROUP, VERSION
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import later_claims, pool_claims
from rolloutbatch.service import pools as pools_service
from rolloutbatch.service.later_claims import LaterClaims
from tests.support.memory_api import MemoryApi
from tests.unit.service.memory_cluster import MemoryCluster, until
from tests.unit.service.memory_pool import BATCH, LOG, NS, POOL_NS, batch_spec, filled, pod_names, reconciler, run, warm
from tests.unit.service.test_later_claims import _answer, _cold_pod, _no_event, _provisioned, _tracker, claimed_indexes
from tests.unit.service.test_pooled_crash_points import adopt, end_claimed, fill_pool, job_of

POOL_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm"


def _waiting(api: MemoryApi):
    """A batch of 3 at parallelism 2 with whenEmpty Wait, from a pool of 2 (both taken by the first
    wave), and the Job's gated pod of index 2, answered once with no warm pod left."""
    spec = batch_spec(episodes=3, parallelism=2, poolRef={"name": "warm", "whenEmpty": v.POOL_WAIT})
    job = _provisioned(api, 2, spec)
    cold = _cold_pod(api, job, 2)
    counted = []
    later = LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)),
                        _no_event, LOG)
    return spec, job, cold, later, counted


def test_with_when_empty_wait_a_later_index_waits_gated_for_the_refill_and_says_so(api, monkeypatch) -> None:
    spec, job, cold, later, counted = _waiting(api)
    _answer(api, later, _tracker(api, job, spec))
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"], "kept gated"
    assert counted == [] and sorted(claimed_indexes(api).values()) == ["0", "1"]
    assert later.waiting_message() == ("1 later episode(s) wait for a warm pod of RolloutPool warm "
                                       "(spec.poolRef.whenEmpty: Wait; indexes 2)")
    before = set(pod_names(api))
    _refill(api, monkeypatch)
    assert set(pod_names(api)) - before, "the pool made no pod"
    _recheck_due(monkeypatch)   # looked at again within WAIT_RECHECK_SECONDS, not the 15 s an answered pod settles
    _answer(api, later, _tracker(api, job, spec))
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"] and counted == [(1, 0)]
    assert later.waiting_message() is None


@pytest.mark.parametrize("change", ["deleted", "stalled", "resized to 0", "template changed"])
def test_with_when_empty_wait_a_later_index_starts_cold_when_its_pool_can_give_it_nothing(api, change) -> None:
    spec, job, cold, later, counted = _waiting(api)
    if change == "deleted":
        api.delete(POOL_PATH, "delete pool")
    elif change == "stalled":
        api.merge_patch(f"{POOL_PATH}/status", {"status": {"conditions": [
            {"type": v.CONDITION_STALLED, "status": v.CONDITION_TRUE, "reason": "PoolImagePullFailed"}]}}, "stall")
    elif change == "resized to 0":
        api.merge_patch(POOL_PATH, {"spec": {"size": 0}}, "scale")
    else:
        api.merge_patch(POOL_PATH, {"spec": {"env": [{"name": "NEW", "value": "1"}]}}, "edit")
    _answer(api, later, _tracker(api, job, spec))
    assert "schedulingGates" not in api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"], change
    assert counted == [(0, 1)] and later.waiting_message() is None


def _refill(api: MemoryApi, monkeypatch) -> None:
    """The pool's round past its refill hold (core.pool_census.refill_hold), its new pods warm."""
    before = set(pod_names(api))
    later_on = time.time() + 120
    with monkeypatch.context() as m:
        m.setattr(pools_service.time, "time", lambda: later_on)
        run(reconciler(api).round())
    for name in set(pod_names(api)) - before:
        warm(api, name)


def _recheck_due(monkeypatch) -> None:
    soon = time.monotonic() + later_claims.WAIT_RECHECK_SECONDS + 0.5
    monkeypatch.setattr(later_claims.time, "monotonic", lambda: soon)


def test_a_waiting_index_still_waits_while_its_recheck_is_in_flight(api, monkeypatch) -> None:
    """The status is read between the recheck's API calls: the index is still said to wait (it
    said Running for that moment, then WaitingForPool again: the reason flapped every 2 s)."""
    spec, job, cold, later, counted = _waiting(api)
    _answer(api, later, _tracker(api, job, spec))
    said = later.waiting_message()
    assert said is not None
    seen = []
    listed = later.pool_storage.list_pods

    async def list_pods(namespace, selector):
        seen.append((later.waiting_message(), later.answering()))
        return await listed(namespace, selector)
    monkeypatch.setattr(later.pool_storage, "list_pods", list_pods)
    _recheck_due(monkeypatch)
    _answer(api, later, _tracker(api, job, spec))   # still no warm pod
    assert seen == [(said, True)]
    assert later.waiting_message() == said and not later.answering()
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"]


def test_the_waiting_message_names_each_index_once() -> None:
    later = LaterClaims(None, BATCH, batch_spec(episodes=30, parallelism=2, poolRef={"name": "warm", "whenEmpty": v.POOL_WAIT}),
                        lambda pods: None, lambda h, m: None, _no_event, LOG)
    later._kept = {"a": 2, "b": 2, **{f"p{i}": i for i in range(3, 15)}}
    assert later.waiting_message() == ("13 later episode(s) wait for a warm pod of RolloutPool warm "
                                       "(spec.poolRef.whenEmpty: Wait; indexes 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...)")


class Counts:
    def __init__(self) -> None:
        self.hits = self.misses = 0

    def pool_claims(self, namespace, pool, hits, misses) -> None:
        self.hits += hits
        self.misses += misses


def test_a_first_wave_miss_that_waited_and_ran_warm_is_counted_a_hit(api, monkeypatch) -> None:
    """Another batch took one of the 2 warm pods: the first wave gets 1; its miss waits gated and
    claims a pod of the refill. pool_claims_total says 2 hits, no miss (it said 1 and 1)."""
    filled(api, 1)
    api.merge_patch(POOL_PATH, {"spec": {"size": 2}}, "scale")
    spec = batch_spec(episodes=3, parallelism=2, poolRef={"name": "warm", "whenEmpty": v.POOL_WAIT})
    counts = Counts()
    later = LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: counts.pool_claims("", "", h, m),
                        _no_event, LOG)
    job = run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, counts,
                                    later.first_wave_claimed, CLUSTERWIDE))
    assert (counts.hits, counts.misses) == (1, 0)
    _cold_pod(api, job, 1)   # the first wave's miss, gated
    _answer(api, later, _tracker(api, job, spec))
    assert later.waiting_message() is not None
    _refill(api, monkeypatch)
    _recheck_due(monkeypatch)
    _answer(api, later, _tracker(api, job, spec))
    assert sorted(claimed_indexes(api).values()) == ["0", "1"]
    assert (counts.hits, counts.misses) == (2, 0)


def test_a_retry_of_a_first_wave_hit_is_not_counted_again(api) -> None:
    """Index 0's warm pod is lost; the Job's replacement, gated, starts cold (no warm pod left):
    index 0 was counted a hit when the Job was made, and is not counted again."""
    spec = batch_spec(episodes=3, parallelism=2)
    counted = []
    later = LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)),
                        _no_event, LOG)
    filled(api, 2)
    job = run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                                    later.first_wave_claimed, CLUSTERWIDE))
    first = next(name for name, index in claimed_indexes(api).items() if index == "0")
    api.delete(f"/api/v1/namespaces/{POOL_NS}/pods/{first}", "lost")
    retry = _cold_pod(api, job, 0)
    _answer(api, later, _tracker(api, job, spec))
    assert "schedulingGates" not in api.get_object("Pod", retry["metadata"]["name"], POOL_NS)["spec"]
    assert counted == []


# -- through the reconciler: the status and Events as written -------------------------------------------
SPEC = {"episodes": 4, "parallelism": 2, "episodeTimeoutSeconds": 60, "poolRef": {"name": "warm", "whenEmpty": "Wait"}}


async def _index_2_waits(cluster: MemoryCluster, written: list[tuple]):
    """A pool of 2 that never refills (no pool daemon runs after the fill); index 0 ends and the
    Job makes index 2's pod, gated: it waits, and the status says so."""
    cluster.api.subscribe("RolloutBatch", lambda _, obj: written.append(
        tuple((obj.get("status") or {}).get(k) for k in ("phase", "reason", "message"))))
    await fill_pool(cluster, 2)
    cluster.submit(SPEC)
    rec = cluster.reconciler()
    task = asyncio.create_task(rec.run())
    await until(lambda: job_of(cluster) is not None and cluster.status().get("phase") == v.RUNNING)
    adopt(cluster)
    end_claimed(cluster, 0)
    cluster.start_pods([2])
    await until(lambda: cluster.status().get("reason") == v.REASON_WAITING_FOR_POOL)
    assert [(kind, message) for kind, reason, message in cluster.events if reason == v.REASON_WAITING_FOR_POOL] \
        == [("Normal", cluster.status()["message"])]
    return rec, task


async def _stopped(rec, task) -> None:
    task.cancel()
    if rec.later is not None:
        rec.later.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_the_status_follows_the_indexes_that_wait():
    async def main():
        async with MemoryCluster(pod_create_grace=30.0) as cluster:
            rec, task = await _index_2_waits(cluster, [])
            try:
                assert cluster.status()["message"].endswith("indexes 2)"), cluster.status()
                end_claimed(cluster, 1)
                await until(lambda: 1 in rec.tracker.results)
                cluster.start_pods([3])
                await until(lambda: cluster.status()["message"].endswith("indexes 2, 3)"), timeout=10)
                assert cluster.status()["message"].startswith("2 later episode(s)")
            finally:
                await _stopped(rec, task)
    asyncio.run(asyncio.wait_for(main(), 30))


def test_an_operator_restart_mid_wait_keeps_saying_it_waits():
    async def main():
        async with MemoryCluster(pod_create_grace=30.0) as cluster:
            written: list[tuple] = []
            rec, task = await _index_2_waits(cluster, written)
            await _stopped(rec, task)
            cluster.restart_operator()
            mark = len(written)
            rec = cluster.reconciler()
            task = asyncio.create_task(rec.run())
            try:
                await until(lambda: rec.later is not None and rec.later.waiting_message() is not None)
                await asyncio.sleep(0.5)
                assert {reason for _, reason, _ in written[mark:]} <= {v.REASON_WAITING_FOR_POOL}, written[mark:]
                assert cluster.status()["reason"] == v.REASON_WAITING_FOR_POOL
            finally:
                await _stopped(rec, task)
    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_wait_is_not_said_once_the_job_has_ended():
    """The Job's activeDeadlineSeconds ends the wait: it fails and deletes its gated pod; the
    batch collects, and its status no longer says an index waits."""
    async def main():
        async with MemoryCluster(pod_create_grace=30.0, collect_grace=3.0) as cluster:
            rec, task = await _index_2_waits(cluster, [])
            try:
                for pod in cluster.api.list_objects("Pod"):
                    if pod["spec"].get("schedulingGates"):
                        cluster.api.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/"
                                           f"{pod['metadata']['name']}", "job controller")
                cluster.complete_job(failed=True, reason="DeadlineExceeded")
                await until(lambda: cluster.status().get("phase") == v.COLLECTING
                            and cluster.status().get("reason") != v.REASON_WAITING_FOR_POOL)
                assert cluster.status()["reason"] == v.REASON_COLLECTING, cluster.status()
            finally:
                await _stopped(rec, task)
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_batch_waiting_for_its_first_wave_says_so_in_one_event():
    """A pool of 1 for a first wave of 2: the batch waits in Provisioning; `kubectl describe`
    shows why (one Event for the wait, not one per look at the pool)."""
    async def main():
        async with MemoryCluster(pod_create_grace=30.0) as cluster:
            await fill_pool(cluster, 1)
            cluster.submit(SPEC)
            rec = cluster.reconciler()
            task = asyncio.create_task(rec.run())
            try:
                await until(lambda: cluster.status().get("reason") == v.REASON_WAITING_FOR_POOL)
                await asyncio.sleep(2.5)   # two more looks at the pool (POOL_WAIT_PERIOD)
                said = [(kind, message) for kind, reason, message in cluster.events if reason == v.REASON_WAITING_FOR_POOL]
                assert len(said) == 1 and said[0][0] == "Normal" and "RolloutPool" in said[0][1], said
                assert cluster.status()["phase"] == v.PROVISIONING
            finally:
                await _stopped(rec, task)
    asyncio.run(asyncio.wait_for(main(), 30))
