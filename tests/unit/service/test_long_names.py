"""Names the operator writes for a batch whose own name is long (a valid
RolloutBatch name is a DNS subdomain of up to 253 characters)."""
import asyncio

from rolloutbatch.core import vocabulary as v
from tests.unit.service.memory_cluster import MemoryCluster, until

EPISODES = 3


def test_every_results_configmap_name_of_a_sharded_batch_with_a_long_name_is_valid():
    """A batch named with 245 characters whose results are sharded (more episodes than
    --results-shard-rows) writes a head and shards ``<head>-<n>`` the API server accepts (a name
    past 253 characters is refused with 422; the memory API does not check lengths, so the names
    are asserted)."""
    name = "a" * 245

    async def main():
        async with MemoryCluster(results_shard_rows=1) as cluster:
            made: list[str] = []
            cluster.api.subscribe("ConfigMap", lambda event, obj: made.append(obj["metadata"]["name"])
                                  if event == "ADDED" else None)
            cluster.submit({"episodes": EPISODES, "parallelism": EPISODES,
                            "task": {"files": {"episode.py": "print('hi')"}},
                            "cleanup": {"sandbox": v.CLEANUP_NEVER}}, name=name)
            rec = cluster.reconciler(name)
            run = asyncio.create_task(rec.run())
            await until(lambda: cluster.job(name) is not None)
            cluster.start_pods(range(EPISODES), name=name)
            for i in range(EPISODES):
                cluster.end_pod(i, name=name)
            cluster.complete_job(name)
            await asyncio.wait_for(run, 10)
            assert cluster.status(name)["phase"] == v.SUCCEEDED
            too_long = [n for n in made if len(n) > 253]
            assert too_long == [], f"ConfigMap names past 253 characters: {[len(n) for n in too_long]}"
    asyncio.run(asyncio.wait_for(main(), 30))
