"""A restarted operator that restores a stall's final document re-stalls, nothing created, but
lists the batch's pods first: rows it could not adopt (a shard a neighbour changed since: its
digest no longer vouched for) are judged again from their pods (still there: the Job is deleted
only after the Failed status), not given up as lost (reconciler._resume_stall)."""
import asyncio
import json

from rolloutbatch.core import vocabulary as v
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster
from tests.unit.service.test_reconciler_crash_points import resumed
from tests.unit.service.test_stall_crash_points import stalled_on_an_image_then_crashed


def test_a_restored_stall_judges_again_the_rows_it_could_not_adopt(monkeypatch):
    async def main():
        async with MemoryCluster(results_shard_rows=1) as cluster:
            await stalled_on_an_image_then_crashed(monkeypatch, cluster)   # final rows written, Failed status not
            assert cluster.job() is not None and len(cluster.api.list_objects("Pod")) == 3
            # a neighbour touches shard 0 (episode 0's row): its digest is no longer the vouched one
            shard = cluster.api.get_object("ConfigMap", "batch-results-0", NAMESPACE)
            doc = json.loads(shard["data"]["results.json"])
            doc["touched"] = True
            cluster.api.merge_patch(f"/api/v1/namespaces/{NAMESPACE}/configmaps/batch-results-0",
                                    {"data": {"results.json": json.dumps(doc)}}, "neighbour")
            monkeypatch.undo()
            await resumed(cluster)
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_IMAGE)
            rows = {r["index"]: r for r in cluster.rows()}
            assert rows[0]["outcome"] == v.OUTCOME_SUCCEEDED, (rows[0]["outcome"], rows[0].get("reason"),
                                                               rows[0].get("message"))
    asyncio.run(asyncio.wait_for(main(), 30))
