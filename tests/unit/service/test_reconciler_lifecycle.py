"""service.reconciler: a batch's whole lifecycle against an API server in memory, in milliseconds."""
import asyncio

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from tests.unit.service.memory_cluster import NAMESPACE, MemoryCluster, until

SPEC = {"episodes": 3, "parallelism": 3, "task": {"files": {"episode.py": "print('hi')"}}}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=20))


def test_a_batch_runs_to_succeeded_with_every_row():
    async def scenario():
        async with MemoryCluster() as cluster:
            cluster.submit(SPEC)
            rec = cluster.reconciler()
            task = asyncio.create_task(rec.run())
            await until(lambda: cluster.status().get("phase") == v.RUNNING)
            cluster.start_pods(range(3))
            for index in range(3):
                cluster.end_pod(index, reward=1.0)
            cluster.complete_job()
            await asyncio.wait_for(task, 10)
            return cluster
    cluster = run(scenario())
    status = cluster.status()
    assert status["phase"] == v.SUCCEEDED, status
    assert [row["outcome"] for row in cluster.rows()] == [v.OUTCOME_SUCCEEDED] * 3
