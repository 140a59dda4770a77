"""The reconciler under faults and races (refused or failing status patches, a stop during the
restore, no grace, crashes between a results write and its status), over the API server in memory.

Each test says what an undisturbed batch would do. A results write's digest is recorded in the
status as pending before the write (core.results.PENDING_DIGESTS), so a crash between the write
and the status that records it leaves a document the next operator and every reader trust.
"""
import asyncio
import copy

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.results import configmap_digest
from rolloutbatch.kube.errors import Gone, Invalid, Unavailable
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import policy
from rolloutbatch.service.context import batch_ref
from tests.unit.service.memory_cluster import BATCH_PATH, NAMESPACE, run, sandboxes, until

SPEC = {"episodes": 3, "parallelism": 3, "task": {"files": {"episode.py": "print('hi')"}},
        "cleanup": {"sandbox": v.CLEANUP_NEVER}}


async def running(cluster, spec=SPEC):
    cluster.submit(spec)
    task = asyncio.create_task(cluster.reconciler().run())
    await until(lambda: cluster.status().get("phase") == v.RUNNING)
    return task


def pod_path(pod):
    return f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"


def unschedulable(cluster, pods):
    for pod in pods:
        cluster.api.merge_patch(pod_path(pod) + "/status", {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available: 1 Insufficient cpu."}]}}, "scheduler")


def test_a_list_continuation_that_expires_once_is_listed_again_not_the_batch_failed():
    """The first list of any collection answered 410 (its continue token expired, as a paged
    list's does past etcd's compaction): the batch ended Failed with ApiRequestRefused instead of
    listing again from the start in the retried round."""
    collections = {"pods", "configmaps", "jobs", "events", "namespaces", "resourcequotas", "nodes", "workloads",
                   "networkpolicies", "serviceaccounts", "secrets", "rolloutbatches", "runtimeclasses"}

    async def scenario(cluster):
        cluster.api.fail("GET", None, Gone("list: the provided continue parameter is too old", status=410,
                                           reason="Expired"),
                         when=lambda path: path.rsplit("/", 1)[-1] in collections)
        cluster.submit(SPEC)
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.status().get("phase") in (v.RUNNING, v.FAILED))
        assert cluster.status().get("phase") == v.RUNNING, cluster.status()
        task.cancel()
    run(scenario)


# --- CHECK_ROOM asked twice ---------------------------------------------------------------------
def test_a_busy_cluster_with_no_unschedulable_grace_only_waits():
    async def scenario(cluster):
        # a node that could hold an episode pod when empty: the cluster is only busy
        cluster.api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                         "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
        task = await running(cluster)
        unschedulable(cluster, cluster.start_pods(range(3)))
        # said as soon as the pods are seen (a while on a loaded machine); then rounds that only wait
        await until(lambda: cluster.status().get("reason") == v.EVENT_UNSCHEDULABLE or task.done())
        await asyncio.sleep(0.4)
        status = cluster.status()
        assert not task.done(), status
        assert status["phase"] == v.RUNNING and status["reason"] == v.EVENT_UNSCHEDULABLE
        for index in range(3):
            cluster.end_pod(index)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        assert cluster.status()["phase"] == v.SUCCEEDED
    run(scenario, unschedulable_grace=0)


# --- the end: cleanup, then the TTL -------------------------------------------------------------
def test_a_status_patch_refused_after_the_cleanup_still_lets_the_ttl_delete_the_batch():
    async def scenario(cluster):
        spec = {**SPEC, "cleanup": {"sandbox": v.CLEANUP_ALWAYS, "ttlSecondsAfterFinished": 0}}
        task = await running(cluster, spec)
        # once the sandbox namespace is being deleted, the next status patch is refused (an
        # admission policy, a webhook, RBAC changed)
        cluster.api.meanwhile("DELETE", "Namespace", lambda: cluster.api.fail(
            "PATCH", "RolloutBatch", Invalid("status: denied by policy", status=422)))
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        assert cluster.batch() is None, cluster.status()
    run(scenario, namespace_delete_timeout=0.3)


def test_an_api_outage_past_the_give_up_when_the_ttl_expires_still_lets_the_ttl_delete_the_batch(monkeypatch):
    """A finished batch's verdict stands and its TTL is kept: an outage longer than
    transient_give_up (1 s here) ended the daemon, and the batch was never deleted while this
    operator ran."""
    monkeypatch.setattr(policy, "BACKOFF", (0.05, 0.1))

    async def scenario(cluster):
        task = await running(cluster, {**SPEC, "cleanup": {"ttlSecondsAfterFinished": 1}})
        # the TTL's DELETE refused for about 3 s, three times transient_give_up (refused from before
        # the end: the TTL, 1 s from a completionTime in whole seconds, may pass before this test
        # sees the batch Succeeded)
        cluster.api.fail("DELETE", "RolloutBatch", Unavailable("apiserver restarting", status=503), times=30)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index)
        cluster.complete_job()
        await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
        await asyncio.wait_for(task, 20)
        assert cluster.batch() is None, cluster.status()
    run(scenario, timeout=40)


# --- where a run enters -------------------------------------------------------------------------
def _stop(cluster):
    cluster.api.merge_patch(BATCH_PATH, {"spec": {"stop": True}}, "kubectl")
    cluster.reconciler()   # kopf replaces the daemon's body on the watch event


def test_a_stop_that_lands_while_the_results_are_restored_creates_nothing():
    async def scenario(cluster):
        cluster.submit(SPEC)
        cluster.api.meanwhile("GET", "ConfigMap", lambda: _stop(cluster))   # the restore's read
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert status["phase"] == v.STOPPED
        assert cluster.job() is None and sandboxes(cluster) == []
    run(scenario)


# --- Events once --------------------------------------------------------------------------------
def test_a_transient_failure_of_the_running_status_posts_provisioned_once(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))

    async def scenario(cluster):
        cluster.api.fail("PATCH", "RolloutBatch", Unavailable("etcd leader changed", status=503),
                         when=lambda path: path.endswith("/status") and cluster.job() is not None)
        task = await running(cluster)
        task.cancel()
        assert len(cluster.api.list_objects("Job")) == 1
        assert cluster.reasons().count(v.EVENT_PROVISIONED) == 1, cluster.reasons()
    run(scenario)


# --- the late jobCompleteSeconds ----------------------------------------------------------------
def assert_results_trusted(cluster):
    """What the SDK checks before it trusts the results (sdk.result_ops.results_document): the head's
    digest is the one the batch's status records. (Read through the SDK the failure costs its
    retries, seconds: the digests are compared here directly.)"""
    name = naming.results_configmap_name(batch_ref(cluster.batch()))
    head = cluster.api.get_object("ConfigMap", name, NAMESPACE)
    assert (cluster.status().get("resultsDigests") or {}).get(name) == configmap_digest(head)
    assert len(cluster.rows()) == 3


def test_a_transient_failure_of_the_late_job_complete_patch_is_written_again(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))

    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index)
        await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
        assert "jobCompleteSeconds" not in cluster.status()
        cluster.api.fail("PATCH", "RolloutBatch", Unavailable("etcd leader changed", status=503),
                         when=lambda path: path.endswith("/status"))
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        assert_results_trusted(cluster)
        assert "jobCompleteSeconds" in cluster.status()
    run(scenario)


def test_a_crash_between_the_late_results_write_and_its_status_leaves_trusted_results(monkeypatch):
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index)
        await until(lambda: cluster.status().get("phase") == v.SUCCEEDED)
        original = Storage._run

        async def crash_at_the_late_patch(storage, operation, *args, **kwargs):
            if operation.__name__ == "patch_batch_status" and "jobCompleteSeconds" in args[2]:
                task.cancel()
                raise asyncio.CancelledError()
            return await original(storage, operation, *args, **kwargs)
        monkeypatch.setattr(Storage, "_run", crash_at_the_late_patch)
        cluster.complete_job()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        monkeypatch.setattr(Storage, "_run", original)
        cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        assert_results_trusted(cluster)
    run(scenario)


# --- a crash between a results write and the status that records its digest --------------------
def _crash_after_results_write(monkeypatch, task, when):
    """The operator dies right after a results write ``when(data)`` selects, before its status."""
    original = Storage._run

    async def run(storage, operation, *args, **kwargs):
        answer = await original(storage, operation, *args, **kwargs)
        if operation.__name__ == "put_configmap" and when("".join(args[0].get("data", {}).values())):
            monkeypatch.setattr(Storage, "_run", original)
            task.cancel()
            raise asyncio.CancelledError()
        return answer
    monkeypatch.setattr(Storage, "_run", run)


def test_a_crash_after_a_checkpoint_keeps_the_rows_an_earlier_status_recorded(monkeypatch):
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0, reward=1.0)
        await until(lambda: cluster.status().get("progress") == "1/3" and cluster.status().get("resultsDigests"))
        _crash_after_results_write(monkeypatch, task, lambda data: '"index":1' in data)
        cluster.end_pod(1, reward=1.0)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        for pod in cluster.api.list_objects("Pod")[:2]:   # PodGC: the two ended pods are gone
            cluster.api.delete(pod_path(pod), "podgc")
        cluster.restart_operator()
        task = asyncio.create_task(cluster.reconciler().run())
        await asyncio.sleep(0.1)
        cluster.end_pod(2, reward=1.0)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        # episode 0's row was written and its digest recorded by a status before the crash
        assert cluster.rows()[0]["outcome"] == v.OUTCOME_SUCCEEDED, cluster.rows()[0]
    run(scenario)


def test_a_crash_between_the_stall_results_and_the_stall_status_keeps_what_succeeded(monkeypatch):
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0, reward=1.0)
        await until(lambda: cluster.status().get("progress") == "1/3" and cluster.status().get("resultsDigests"))
        _crash_after_results_write(monkeypatch, task, lambda data: '"final":true' in data)
        job = cluster.job()
        cluster.api.delete(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/{job['metadata']['name']}",
                           "kubectl")
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_SANDBOX_DELETED)
        assert cluster.rows()[0]["outcome"] == v.OUTCOME_SUCCEEDED, cluster.rows()[0]
    run(scenario)


def refuse_full_statuses(cluster) -> list[dict]:
    """From now on the API refuses every status patch that carries the summary (a value it will
    not take: what the bare verdict is for); the bare verdict and the pending-digest patches carry
    none. Returns the patches it let through."""
    original, passed = cluster.api.merge_patch, []

    def merge_patch(path, patch, what):
        if path.endswith("/status") and "rolloutbatches" in path:
            if "progress" in (patch.get("status") or {}):
                raise Invalid("status.progress: Invalid value", status=422)
            passed.append(patch.get("status") or {})
        return original(path, patch, what)
    cluster.api.merge_patch = merge_patch
    return passed


def test_the_bare_stall_verdict_leaves_the_final_results_trusted(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))

    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        await until(lambda: cluster.status().get("progress") == "1/3" and cluster.status().get("resultsDigests"))
        passed = refuse_full_statuses(cluster)
        job = cluster.job()
        cluster.api.delete(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/{job['metadata']['name']}",
                           "kubectl")
        await asyncio.wait_for(task, 10)
        assert cluster.status()["reason"] == v.STALL_SANDBOX_DELETED
        assert any(p.get("phase") == v.FAILED for p in passed), "the bare verdict was never written"
        assert "pendingResultsDigests" not in cluster.status()
        assert_results_trusted(cluster)
    run(scenario)


# --- held ---------------------------------------------------------------------------------------
def test_a_stop_once_the_job_ended_keeps_the_verdict_and_acknowledges_its_generation():
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        cluster.end_pod(1)
        cluster.complete_job(failed=True, reason="BackoffLimitExceeded")
        await until(lambda: cluster.status().get("phase") == v.COLLECTING)
        _stop(cluster)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert status["phase"] in (v.SUCCEEDED, v.FAILED)   # the batch's own verdict, not Stopped
        assert status["observedGeneration"] == cluster.batch()["metadata"]["generation"] == 2
        assert not cluster.job()["spec"].get("suspend")
    run(scenario)


def test_every_episode_final_ends_the_batch_though_a_retried_pod_waits_for_its_image():
    """The one intended change: the verdict stands, no ImagePullFailed stall."""
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index)
        # a second pod of index 2 (the Job controller's retry), whose image the node cannot pull
        retry = copy.deepcopy(cluster.api.list_objects("Pod")[2])
        retry["metadata"] = {k: val for k, val in retry["metadata"].items()
                             if k not in ("uid", "resourceVersion", "creationTimestamp")}
        retry["metadata"]["name"] = retry["metadata"]["name"].replace("abcde", "fghij")
        retry["status"] = {"phase": "Pending", "containerStatuses": [{
            "name": naming.CONTAINER_NAME, "state": {"waiting": {"reason": "ErrImagePull", "message": "gone"}}}]}
        cluster.api.put(retry)
        await until(lambda: cluster.status().get("phase") in v.TERMINAL_PHASES)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.SUCCEEDED, v.REASON_SUCCEEDED)
        task.cancel()   # it now waits (core.lifecycle.JOB_END_WAIT_SECONDS, 30 s) for a Job that will not end
    run(scenario)

