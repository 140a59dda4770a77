"""A stall whose full Failed status the API refuses ends with the bare verdict
(StatusWriter.write_bare_failure), which drops the pending digest the stall's final results
write left (recorded or not written: it must not outlive the end); the cleanup policy then runs,
in this process and in a restarted one (a lingering pending map made _after_finish send the
refused status again, which aborted the cleanup for ever)."""
import asyncio

from rolloutbatch.core import vocabulary as v
from rolloutbatch.service import policy
from tests.unit.service.memory_cluster import run, sandboxes, until
from tests.unit.service.test_reconciler_faults import SPEC, refuse_full_statuses, running


def test_a_bare_stall_verdict_leaves_no_pending_digest_and_still_cleans_up(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))

    async def scenario(cluster):
        spec = {**SPEC, "cleanup": {"sandbox": v.CLEANUP_ALWAYS}}
        task = await running(cluster, spec)
        pods = cluster.start_pods(range(3))
        for pod in pods[1:]:   # the kubelet: two episodes are running
            cluster.api.merge_patch(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"
                                    "/status", {"status": {"phase": "Running"}}, "kubelet")
        cluster.end_pod(0)
        await until(lambda: cluster.status().get("progress") == "1/3" and cluster.status().get("resultsDigests")
                    and cluster.status().get("runningEpisodes") == 2)
        assert sandboxes(cluster), "no sandbox namespace to clean up"
        refuse_full_statuses(cluster)
        job = cluster.job()
        cluster.api.delete(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/{job['metadata']['name']}",
                           "kubectl")
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_SANDBOX_DELETED)   # the bare verdict
        assert status.get("runningEpisodes") == 0   # a finished batch's status: none runs
        cluster.api.collect_garbage()
        problems = []
        if "pendingResultsDigests" in status:
            problems.append(f"pendingResultsDigests lingers in the Failed status: {status['pendingResultsDigests']}")
        if sandboxes(cluster):
            problems.append(f"cleanup.sandbox Always never ran: {sandboxes(cluster)} still there")
        # a new operator process does no better
        cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        cluster.api.collect_garbage()
        if sandboxes(cluster):
            problems.append(f"nor after a restart: {sandboxes(cluster)}")
        assert not problems, problems
    run(scenario)
