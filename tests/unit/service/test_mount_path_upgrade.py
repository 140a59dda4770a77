"""A mount path in a spelling the runtime cleans ("/mnt//work", the usual result of joining "/mnt/"
and "/work") is read cleaned, not refused: the CRD's pattern admits it and an earlier operator ran
such batches, so one running across an upgrade goes on, and a finished one is still cleaned up."""
import asyncio

from rolloutbatch.core import spec as spec_module
from rolloutbatch.core import vocabulary as v
from tests.unit.service.memory_cluster import MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import EPISODES, SPEC

JOINED = "/mnt//work"   # "/mnt/" + "/work"


def _old_checked_path(value, field_name):   # a0ffc91's
    if not isinstance(value, str) or not value.startswith("/") or ":" in value or len(value) > 1024:
        raise spec_module.SpecError(field_name, f"must be an absolute path without ':', got {value!r}")
    return value.rstrip("/") or "/"


def test_a_batch_running_across_the_operator_upgrade_is_not_stalled_for_its_mount_path(monkeypatch):
    async def main():
        async with MemoryCluster() as cluster:
            with monkeypatch.context() as old:   # the previous operator
                old.setattr(spec_module, "checked_path", _old_checked_path)
                cluster.submit({**SPEC, "workspace": {"mountPath": JOINED}})
                task = asyncio.create_task(cluster.reconciler().run())
                await until(lambda: cluster.job() is not None and cluster.status().get("phase") == v.RUNNING)
                cluster.start_pods(range(EPISODES))
                cluster.end_pod(0)
                await until(lambda: cluster.status().get("progress") == f"1/{EPISODES}")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            # the upgraded operator takes over
            cluster.restart_operator()
            task = asyncio.create_task(cluster.reconciler().run())
            await asyncio.sleep(0.5)
            if not task.done():
                for i in range(1, EPISODES):
                    cluster.end_pod(i)
                cluster.complete_job()
            await asyncio.wait_for(task, 10)
            status = cluster.status()
            assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), \
                (status["phase"], status["reason"], status.get("message"))
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_finished_batch_of_the_previous_operator_is_still_deleted_by_its_ttl(monkeypatch):
    async def main():
        async with MemoryCluster() as cluster:
            with monkeypatch.context() as old:
                old.setattr(spec_module, "checked_path", _old_checked_path)
                cluster.submit({**SPEC, "workspace": {"mountPath": JOINED},
                                "cleanup": {**SPEC["cleanup"], "ttlSecondsAfterFinished": 1}})
                task = asyncio.create_task(cluster.reconciler().run())
                await until(lambda: cluster.job() is not None and cluster.status().get("phase") == v.RUNNING)
                cluster.start_pods(range(EPISODES))
                for i in range(EPISODES):
                    cluster.end_pod(i)
                await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
                # it dies while it waits for its Job's end, before its TTL's wait: its TTL (1 s
                # from a completionTime in whole seconds) may pass before this test looks again
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                cluster.complete_job()
            assert cluster.batch() is not None
            await asyncio.sleep(1.2)   # the upgraded operator, after the TTL passed
            cluster.restart_operator()
            await asyncio.wait_for(cluster.reconciler().run(), 10)
            batch = cluster.batch()
            assert batch is None or batch["metadata"].get("deletionTimestamp"), \
                "the finished batch outlived its ttlSecondsAfterFinished"
    asyncio.run(asyncio.wait_for(main(), 30))
