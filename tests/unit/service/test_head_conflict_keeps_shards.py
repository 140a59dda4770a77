"""A neighbour with ConfigMap rights replaces a sharded batch's head ConfigMap with one of their
own while the operator is down. The restarted operator stalls (ResultsConfigMapConflict), but
only once it restored the shards the status vouches for: the stall's final rows are written with
them, and the episodes that succeeded keep their rows (they were given up as lost and written
over the batch's own shards)."""
import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import decode_results
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import EPISODES, SPEC


def test_a_foreign_head_does_not_erase_the_shards_rows(monkeypatch):
    async def main():
        async with MemoryCluster(results_shard_rows=1) as cluster:
            cluster.submit(SPEC)
            task = asyncio.create_task(cluster.reconciler().run())
            await until(lambda: cluster.job() is not None)
            cluster.start_pods(range(EPISODES))
            cluster.end_pod(0)
            cluster.end_pod(1)
            await until(lambda: len((cluster.status().get("resultsDigests") or {})) >= 3
                        and cluster.status().get("succeededEpisodes") == 2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            shard0 = cluster.api.get_object("ConfigMap", "batch-results-0", NAMESPACE)
            assert [r["outcome"] for r in decode_results(shard0)["pods"]] == [v.OUTCOME_SUCCEEDED]
            # the neighbour: the head replaced by a ConfigMap of their own
            cluster.api.delete(f"/api/v1/namespaces/{NAMESPACE}/configmaps/batch-results", "neighbour")
            cluster.api.put({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "batch-results", "namespace": NAMESPACE},
                             "data": {"results.json": "{}"}})
            cluster.restart_operator()
            await asyncio.wait_for(cluster.reconciler().run(), 10)
            status = cluster.status()
            assert status["reason"] == v.STALL_RESULTS_CONFLICT, status["reason"]
            outcomes = {}
            for n in range(EPISODES):
                cm = cluster.api.get_object("ConfigMap", f"batch-results-{n}", NAMESPACE)
                for row in (decode_results(cm) or {}).get("pods", []) if cm else []:
                    outcomes[row["index"]] = row["outcome"]
            assert outcomes.get(0) == outcomes.get(1) == v.OUTCOME_SUCCEEDED, (
                f"the batch's shards now say {outcomes}; status succeededEpisodes={status.get('succeededEpisodes')}")
    asyncio.run(asyncio.wait_for(main(), 30))
