"""Repeated restarts with a document vouched for only by its pending digest. Operator 1 writes
episode 0's row and dies before the status records it (pending digest only). While it is down the
Job is deleted. Operator 2 adopts the row (the pending digest vouches for it), stalls
(SandboxDeleted), vouches for the stall's final document and dies right after that patch, before
its write. The new pending digest must not take the only voucher of the document operator 2
adopted: that patch records it (StatusWriter.vouch's ``current``), so operator 3 adopts it and the
succeeded episode (its pod gone with the Job) keeps its row."""
import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import PENDING_DIGESTS
from tests.unit.service.memory_cluster import MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import SPEC, Crash, resumed


def test_a_row_adopted_through_a_pending_digest_survives_a_second_crash(monkeypatch):
    async def main():
        async with MemoryCluster() as cluster:
            first = Crash(monkeypatch, lambda op, args: op == "put_configmap", after=True)
            cluster.submit(SPEC)
            first.start(cluster.reconciler())
            await until(lambda: cluster.job() is not None)
            cluster.start_pods(range(3))
            cluster.end_pod(0)
            await first.ran()
            assert first.fired
            status = cluster.status()
            assert PENDING_DIGESTS in status and not status.get("resultsDigests"), status
            assert [r["outcome"] for r in cluster.rows()] == [v.OUTCOME_SUCCEEDED]
            # while no operator runs, the Job (and its pods) are deleted
            job = cluster.job()
            cluster.api.delete(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/"
                               f"{job['metadata']['name']}", "kubectl")
            cluster.api.collect_garbage()
            monkeypatch.undo()
            second = Crash(monkeypatch, lambda op, args: op == "patch_batch_status" and args[2].get(PENDING_DIGESTS),
                           after=True)
            cluster.restart_operator()
            second.start(cluster.reconciler())
            await second.ran()
            assert second.fired, "operator 2 never vouched for a write"
            from rolloutbatch.core.results import configmap_digest
            from tests.unit.service.memory_cluster import NAMESPACE
            head = cluster.api.get_object("ConfigMap", "batch-results", NAMESPACE)
            status = cluster.status()
            # the head still holds operator 1's row, which the patch that vouched for the next write recorded
            assert (status.get("resultsDigests") or {}).get("batch-results") == configmap_digest(head)
            monkeypatch.undo()
            await resumed(cluster)
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_SANDBOX_DELETED)
            rows = cluster.rows()
            assert rows[0]["outcome"] == v.OUTCOME_SUCCEEDED and status["succeededEpisodes"] == 1, \
                (rows[0]["outcome"], rows[0].get("reason"), status.get("succeededEpisodes"))
    asyncio.run(asyncio.wait_for(main(), 30))
