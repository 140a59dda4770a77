"""The operator dies while it ends a stalled batch (its final rows, its Failed status, its Job's
deletion, in that order), and a new operator takes the batch over: the stall keeps its reason,
no earned result is lost, and the Job is stopped all the same."""
import asyncio

import pytest

from rolloutbatch.core import vocabulary as v
from tests.unit.service.memory_cluster import MemoryCluster, until
from tests.unit.service.test_reconciler_crash_points import SPEC, Crash, resumed


def _failed_status(op, args):
    return op == "patch_batch_status" and (args[2] or {}).get("phase") == v.FAILED


@pytest.mark.parametrize("site", ["status-Failed", "results-final"])
def test_a_crash_while_recording_a_stall_keeps_the_stalls_reason(monkeypatch, site):
    """A batch whose Job makes no pod stalls (PodsNotCreated). An operator that dies before the
    Failed status is written leaves phase Running; the next one adopts, finds the Job (deleted only
    after the status) and stalls with the same reason, not SandboxDeleted."""
    sites = {"status-Failed": _failed_status,
             "results-final": lambda op, args: op == "put_configmap"
             and '"final":true' in "".join(args[0].get("data", {}).values())}

    async def main():
        async with MemoryCluster(pod_create_grace=0.3) as cluster:
            crash = Crash(monkeypatch, sites[site])
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            await crash.ran()
            assert crash.fired
            assert cluster.status()["phase"] == v.RUNNING
            await resumed(cluster)
            status = cluster.status()
            assert status["phase"] == v.FAILED
            assert status["reason"] == v.STALL_PODS_NOT_CREATED, (status["reason"], status["message"])
    asyncio.run(asyncio.wait_for(main(), 30))


async def stalled_on_an_image_then_crashed(monkeypatch, cluster, spec=SPEC) -> None:
    """Episode 0 succeeds, episode 1's image cannot be pulled: the batch stalls (ImagePullFailed),
    writes its final rows, and its operator dies before the Failed status."""
    crash = Crash(monkeypatch, _failed_status)
    cluster.submit(spec)
    crash.start(cluster.reconciler())
    await until(lambda: cluster.job() is not None)
    pods = cluster.start_pods(range(3))
    cluster.end_pod(0)
    await until(lambda: cluster.status().get("succeededEpisodes") == 1)
    name = pods[1]["metadata"]["name"]
    cluster.api.merge_patch(f"/api/v1/namespaces/{pods[1]['metadata']['namespace']}/pods/{name}/status",
                            {"status": {"phase": "Pending", "containerStatuses": [{
                                "name": "episode", "restartCount": 0,
                                "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}},
                            "kubelet")
    await crash.ran()
    assert crash.fired, "the stall's Failed status was never attempted"


@pytest.mark.parametrize("site", ["status-Failed"])
def test_a_crash_while_recording_a_stall_loses_no_result(monkeypatch, site):
    """Episode 0 succeeded and its row was checkpointed; then episode 1's image cannot be pulled and
    the batch stalls (ImagePullFailed). The operator writes the final document over the checkpoint
    and dies before the Failed status records its digest: the next one adopts no document, so
    episode 0 must still be there to judge again (the Job, and its pods, go only after the status)."""
    async def main():
        async with MemoryCluster() as cluster:
            await stalled_on_an_image_then_crashed(monkeypatch, cluster)
            written = cluster.rows()   # the first operator's final document: the stall was ImagePullFailed
            assert [r["outcome"] for r in written] == [v.OUTCOME_SUCCEEDED, v.OUTCOME_LOST, v.OUTCOME_LOST]
            assert written[1]["reason"] == v.EP_IMAGE_PULL
            cluster.api.collect_garbage()   # the Job's foreground deletion ends with its pods gone
            await resumed(cluster)
            status = cluster.status()
            rows = cluster.rows()
            assert status["phase"] == v.FAILED
            assert rows[0]["outcome"] == v.OUTCOME_SUCCEEDED, (status["reason"], rows[0])
            assert status["succeededEpisodes"] == 1
    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_crash_after_the_stall_was_recorded_stops_the_job_at_the_restart(monkeypatch):
    """The Failed status written, the operator dies before it deletes the Job: the next one, which
    resumes a finished batch, deletes it (its pods would run on for a batch that ended)."""
    async def main():
        async with MemoryCluster(pod_create_grace=0.3) as cluster:
            crash = Crash(monkeypatch, _failed_status, after=True)
            cluster.submit(SPEC)
            crash.start(cluster.reconciler())
            await crash.ran()
            assert crash.fired and cluster.status()["reason"] == v.STALL_PODS_NOT_CREATED
            assert cluster.job() is not None and not cluster.job()["metadata"].get("deletionTimestamp")
            await resumed(cluster)
            job = cluster.job()
            assert job is None or job["metadata"].get("deletionTimestamp")
            assert (cluster.status()["phase"], cluster.status()["reason"]) == (v.FAILED, v.STALL_PODS_NOT_CREATED)
    asyncio.run(asyncio.wait_for(main(), 30))
