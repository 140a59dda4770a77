"""A batch's status written by someone other than the operator (``kubectl edit
--subresource=status``, a backup restored with its status), then an operator restart.

The status is what a restarted operator resumes from (docs/design.md §5.9); a figure read back
from it counts only within what the batch itself allows (``core.recorded_status``, §8.2): an
edit may not turn a finished batch's verdict, nor rewrite its rows' timings or its counts.
"""
import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import decode_results
from tests.unit.service.memory_cluster import BATCH_PATH, NAMESPACE, run, until

SPEC = {"episodes": 2, "parallelism": 2, "task": {"files": {"episode.py": "print('hi')"}},
        "cleanup": {"sandbox": v.CLEANUP_NEVER}}


def test_a_finished_batchs_phase_edited_back_to_running_keeps_its_verdict():
    """A Succeeded batch (cleanup Always: its sandbox and Job are gone) has its phase set back to
    Running. Its results hold every row final, yet the restarted operator adopted it, found no Job
    and ended it Failed/SandboxDeleted: a finished batch's verdict flipped from Succeeded to Failed."""
    async def scenario(cluster):
        cluster.submit({**SPEC, "cleanup": {"sandbox": v.CLEANUP_ALWAYS}})
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.job() is not None)
        cluster.start_pods([0, 1])
        cluster.end_pod(0)
        cluster.end_pod(1)
        await until(lambda: cluster.status().get("progress") == "2/2")
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        cluster.api.collect_garbage()
        assert cluster.status()["phase"] == v.SUCCEEDED and cluster.job() is None
        cluster.api.merge_patch(BATCH_PATH + "/status", {"status": {"phase": v.RUNNING}}, "kubectl")
        cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED), status["message"]
        assert [r["outcome"] for r in cluster.rows()] == [v.OUTCOME_SUCCEEDED] * 2
    run(scenario)


def _head(cluster) -> dict:
    """The batch's results document (its head ConfigMap)."""
    return decode_results(cluster.api.get_object("ConfigMap", cluster.status()["resultsConfigMap"], NAMESPACE))


async def _edited_mid_batch(cluster, edit: dict, spec: dict = SPEC) -> float:
    """Episode 0 ends and is written; the operator dies; ``edit`` is merged into the status; a new
    operator carries the batch to its end. Returns row 0's batch_to_ready_seconds before the edit."""
    cluster.submit(spec)
    task = asyncio.create_task(cluster.reconciler().run())
    await until(lambda: cluster.job() is not None)
    cluster.start_pods([0, 1])
    await asyncio.sleep(0.1)
    cluster.end_pod(0)
    await until(lambda: cluster.status().get("progress") == "1/2")
    await until(lambda: len(cluster.rows()) == 1)
    before = cluster.rows()[0]["batch_to_ready_seconds"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    cluster.api.merge_patch(BATCH_PATH + "/status", {"status": edit}, "kubectl")
    cluster.restart_operator()
    resumed = asyncio.create_task(cluster.reconciler().run())
    await asyncio.sleep(0.2)
    cluster.end_pod(1)
    await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
    cluster.complete_job()   # after the batch's end: its figure is measured by the wait for the Job
    await asyncio.wait_for(resumed, 10)
    return before


def test_a_queue_wait_written_into_the_status_does_not_shift_the_rows_timings():
    """status.queueWaitSeconds is absent for a batch that names no queue (CRD), yet the queue
    watch took any number the status held as the batch's wait, and the batch's origin moved by
    it: 100000 written into the status of a batch with no queue rewrote the already-final row 0's
    batch_to_ready_seconds (0.1 s) to 0.0, and the status kept the forged wait."""
    async def scenario(cluster):
        before = await _edited_mid_batch(cluster, {"queueWaitSeconds": 100000})
        assert before is not None and before > 0
        rows = {r["index"]: r for r in cluster.rows()}
        assert rows[0]["batch_to_ready_seconds"] == before
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED
        assert status["batchToAllReadySeconds"] >= before
        assert "queueWaitSeconds" not in status
    run(scenario)


def test_a_negative_job_complete_seconds_written_into_the_status_is_measured_again():
    """status.jobCompleteSeconds written by hand (-5) on a running batch became the batch's
    figure: the reconciler fell back to the recorded value, and skipped measuring the Job's end
    because a figure was recorded. The final status and the results said the Job completed in -5 s."""
    async def scenario(cluster):
        await _edited_mid_batch(cluster, {"jobCompleteSeconds": -5})
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED
        assert status.get("jobCompleteSeconds") is not None and status["jobCompleteSeconds"] >= 0, status
        assert _head(cluster)["client_job_complete_seconds"] >= 0
    run(scenario)


def test_a_retried_count_written_into_the_status_is_bounded_by_the_spec():
    """status.retriedEpisodes written by hand (1000000) on a running batch of 2 episodes that
    never retried (every row attempts 1, spec.retries.infrastructure 0) became the batch's
    count: the restore took it as a floor, and the final status and results document said 1000000
    re-runs. The count restored is at most episodes x spec.retries.infrastructure (or what the rows'
    attempts say, if more)."""
    async def scenario(cluster):
        await _edited_mid_batch(cluster, {"retriedEpisodes": 1000000}, {**SPEC, "retries": {"infrastructure": 0}})
        assert [r["attempts"] for r in cluster.rows()] == [1, 1]
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED
        assert status["retriedEpisodes"] == 0
        assert _head(cluster)["retried_episodes"] == 0
    run(scenario)


def test_a_completion_time_written_into_the_future_does_not_hold_the_ttl_back():
    """status.completionTime of a finished batch set by hand to 2100: the restarted operator
    waited for ttlSecondsAfterFinished from then, sleeping for 75 years, and nothing said why.
    A completionTime later than now counts as now."""
    async def scenario(cluster):
        cluster.submit({**SPEC, "cleanup": {**SPEC["cleanup"], "ttlSecondsAfterFinished": 1}})
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.job() is not None)
        cluster.start_pods([0, 1])
        cluster.end_pod(0)
        cluster.end_pod(1)
        await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
        # The operator dies while it waits for its Job's end, before its TTL's wait: once it saw
        # the Job end it would delete the batch as soon as it wrote jobCompleteSeconds, its TTL
        # (1 s from a completionTime in whole seconds) already past on a loaded machine.
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cluster.complete_job()
        cluster.api.merge_patch(BATCH_PATH + "/status", {"status": {"completionTime": "2100-01-01T00:00:00Z"}},
                                "kubectl")
        cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 5)
        batch = cluster.batch()
        assert batch is None or batch["metadata"].get("deletionTimestamp"), "the TTL never ran"
    run(scenario)
