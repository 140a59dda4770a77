"""service.reconciler: every transition of a batch's lifecycle, against an API server in memory.

Each test plays the controllers' part (pods made, ended, the Job completed or deleted) and reads
back what the operator did: the status (checked against the CRD's schema at every write), the
results rows, the children that exist, the Events. A lifecycle runs in well under a second.
"""
import asyncio

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import Invalid, Unavailable
from rolloutbatch.service import policy
from rolloutbatch.service.context import batch_ref
from tests.unit.service.memory_cluster import BATCH_PATH, NAMESPACE, run, until

SPEC = {"episodes": 3, "parallelism": 3, "task": {"files": {"episode.py": "print('hi')"}}}
async def start(cluster, spec=SPEC, name="batch"):
    cluster.submit(spec, name)
    task = asyncio.create_task(cluster.reconciler(name).run())
    return task


async def running(cluster, spec=SPEC, name="batch"):
    """The batch submitted, its reconciler started, and its status Running: the reconciler's task."""
    task = await start(cluster, spec, name)
    await until(lambda: cluster.status(name).get("phase") == v.RUNNING)
    return task


def every_episode_ends(cluster, rewards=(1.0, 1.0, 1.0)):
    """The controllers' part of an uneventful batch: a pod per episode, each rewarded, the Job complete."""
    cluster.start_pods(range(len(rewards)))
    for index, reward in enumerate(rewards):
        cluster.end_pod(index, reward=reward)
    cluster.complete_job()


def delete_job(cluster):
    job = cluster.job()
    cluster.api.delete(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/{job['metadata']['name']}",
                       "kubectl")


def namespaces(cluster):
    return {ns["metadata"]["name"] for ns in cluster.api.list_objects("Namespace")}


# --- the happy path and the verdicts ------------------------------------------------------------
def test_pending_to_succeeded_with_every_row_and_the_sandbox_removed():
    async def scenario(cluster):
        task = await running(cluster)
        sandbox = cluster.status()["sandboxNamespace"]
        assert sandbox in namespaces(cluster)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index, reward=0.5)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED and status["reason"] == v.REASON_SUCCEEDED
        assert status["succeededEpisodes"] == 3
        assert [row["outcome"] for row in cluster.rows()] == [v.OUTCOME_SUCCEEDED] * 3
        assert [row["reward"] for row in cluster.rows()] == [0.5] * 3
        # DeleteOnSuccess: the sandbox is gone, and the status no longer names it
        assert sandbox not in namespaces(cluster) and "sandboxNamespace" not in status
        assert status.get("jobCompleteSeconds") is not None
        assert [v.EVENT_PROVISIONED, v.REASON_SUCCEEDED] == [r for r in cluster.reasons() if r in
                                                       (v.EVENT_PROVISIONED, v.REASON_SUCCEEDED)]
    run(scenario)


def test_too_few_successes_fail_the_batch_and_keep_its_sandbox():
    async def scenario(cluster):
        task = await running(cluster, {**SPEC, "minSuccessfulEpisodes": 2})
        cluster.start_pods(range(3))
        cluster.end_pod(0, reward=1.0)
        cluster.end_pod(1, reward=None, exit_code=1)
        cluster.end_pod(2, reward=None, exit_code=1)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.REASON_TOO_FEW)
        assert [row["outcome"] for row in cluster.rows()] == [v.OUTCOME_SUCCEEDED, v.OUTCOME_FAILED,
                                                             v.OUTCOME_FAILED]
        assert status["sandboxNamespace"] in namespaces(cluster)   # kept for a look at the failure
    run(scenario)


# --- refused before anything is created ---------------------------------------------------------
@pytest.mark.parametrize("spec, reason", [
    ({"episodes": 0, "task": {"files": {"episode.py": "x"}}}, v.STALL_INVALID_SPEC),
    ({**SPEC, "runtimeClassName": "absent"}, v.STALL_RUNTIME_CLASS),
])
def test_a_spec_refused_stalls_before_anything_is_created(spec, reason):
    async def scenario(cluster):
        before = namespaces(cluster)
        task = await start(cluster, spec)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, reason)
        assert namespaces(cluster) == before and cluster.api.list_objects("Job") == []
        assert "sandboxNamespace" not in status
        assert reason in cluster.reasons()
    run(scenario)


# --- a restart mid-way --------------------------------------------------------------------------
def test_a_restart_mid_batch_adopts_the_job_and_restores_rows_without_counting_twice():
    async def scenario(cluster):
        task = await running(cluster)
        job_uid = cluster.job()["metadata"]["uid"]
        cluster.start_pods(range(3))
        cluster.end_pod(0, reward=1.0)
        cluster.end_pod(1, reward=0.0)
        await until(lambda: cluster.status().get("progress") == "2/3")
        task.cancel()   # the operator dies
        with pytest.raises(asyncio.CancelledError):
            await task
        for pod in cluster.api.list_objects("Pod")[:2]:   # PodGC: the two ended pods are gone
            cluster.api.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}",
                               "podgc")
        # A new operator process: a new registry; the batch's status is all it knows.
        cluster.restart_operator()
        task = asyncio.create_task(cluster.reconciler().run())
        await asyncio.sleep(0.1)
        cluster.end_pod(2, reward=1.0)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED and status["jobUID"] == job_uid
        assert [row["reward"] for row in cluster.rows()] == [1.0, 0.0, 1.0]
        assert status["progress"] == "3/3" and status["succeededEpisodes"] == 3
        assert cluster.reasons().count(v.EVENT_PROVISIONED) == 1   # adopted, never provisioned again
        assert cluster.counted("rolloutbatch_episodes_total") == 3   # restored rows are not counted again
    run(scenario)


def test_a_batch_an_earlier_operator_made_runs_on_though_a_later_check_refuses_its_spec():
    """Checks of what the pods would run came after some batches were accepted: one that runs (its
    image's shell keeps MY-VAR; its command is given by a script the image has) must not stall
    mid-run after an operator upgrade. A new batch of the same spec is refused."""
    old = {"episodes": 2, "parallelism": 2, "samplesPerInput": 2, "task": {"files": {"main.py": "x"}},
           "env": [{"name": "MY-VAR", "value": "1"}]}

    async def scenario(cluster):
        task = await running(cluster, {**old, "command": ["python", "/task/main.py"],
                                       "env": [{"name": "MY_VAR", "value": "1"}]})
        task.cancel()   # the operator dies; the stored spec is one the old operator took
        with pytest.raises(asyncio.CancelledError):
            await task
        body = cluster.api.get_object("RolloutBatch", "batch", NAMESPACE)
        cluster.api.replace(BATCH_PATH, {**body, "spec": old}, "as an earlier operator stored it")
        cluster.restart_operator()
        task = asyncio.create_task(cluster.reconciler().run())
        await asyncio.sleep(0.1)
        every_episode_ends(cluster, rewards=(1.0, 1.0))
        await asyncio.wait_for(task, 10)
        assert cluster.status()["phase"] == v.SUCCEEDED, cluster.status()
        cluster.submit(old, "new")
        await asyncio.wait_for(cluster.reconciler("new").run(), 10)
        assert cluster.status("new")["reason"] == v.STALL_INVALID_SPEC
    run(scenario)


def test_a_retry_counted_before_a_restart_is_not_counted_again():
    """The Job keeps its evicted pod, so the next operator's watch and resync bring it back: its
    retry is in the restored retriedEpisodes already, and neither the status nor the metric
    counts it twice."""
    async def scenario(cluster):
        task = await running(cluster, {**SPEC, "episodes": 2, "parallelism": 2})
        (evicted, _) = cluster.start_pods(range(2))
        meta = evicted["metadata"]
        cluster.api.merge_patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": {
            "phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                               "reason": "EvictionByEvictionAPI", "message": "evicting"}]}}, "kubelet")
        await until(lambda: cluster.status().get("retriedEpisodes") == 1)
        task.cancel()   # the operator dies
        with pytest.raises(asyncio.CancelledError):
            await task
        cluster.restart_operator()
        task = asyncio.create_task(cluster.reconciler().run())
        await asyncio.sleep(0.2)
        cluster.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", "podgc")
        cluster.start_pods([0])   # the Job's replacement (the same name: the evicted pod is gone now)
        cluster.end_pod(0, reward=1.0)
        cluster.end_pod(1, reward=1.0)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["retriedEpisodes"]) == (v.SUCCEEDED, 1), status
        assert cluster.counted("rolloutbatch_episodes_retried_total") == 1
    run(scenario)


# --- stalls while running -----------------------------------------------------------------------
def test_a_job_deleted_mid_batch_stalls_never_recreates_it_and_keeps_what_ended():
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0, reward=1.0)
        await until(lambda: cluster.status().get("progress") == "1/3")
        delete_job(cluster)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_SANDBOX_DELETED)
        assert cluster.job() is None   # never recreated: it would run every episode again
        rows = cluster.rows()
        assert [row["outcome"] for row in rows] == [v.OUTCOME_SUCCEEDED, v.OUTCOME_LOST, v.OUTCOME_LOST]
        assert {row["reason"] for row in rows[1:]} == {v.EP_BATCH_STALLED}
    run(scenario)


def test_a_job_that_makes_no_pod_stalls_with_the_controllers_words():
    async def scenario(cluster):
        task = await running(cluster)
        job = cluster.job()
        cluster.api.put({"apiVersion": "v1", "kind": "Event", "metadata": {
            "name": "job.1", "namespace": job["metadata"]["namespace"]}, "reason": "FailedCreate",
            "message": "pods is forbidden: exceeded quota", "involvedObject": {"uid": job["metadata"]["uid"]}})
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_PODS_NOT_CREATED)
        assert "exceeded quota" in status["message"]
    run(scenario, pod_create_grace=0.5)


def test_an_image_the_node_cannot_run_stalls_the_batch():
    async def scenario(cluster):
        task = await running(cluster)
        for pod in cluster.start_pods(range(3)):
            cluster.api.merge_patch(
                f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/status",
                {"status": {"containerStatuses": [{"name": naming.CONTAINER_NAME, "state": {"waiting": {
                    "reason": "ErrImagePull", "message": "not found"}}}]}}, "kubelet")
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_IMAGE)
        assert {row["reason"] for row in cluster.rows()} == {v.EP_IMAGE_PULL}
    run(scenario)


def test_pods_no_node_can_hold_stall_while_a_busy_cluster_only_waits():
    async def scenario(cluster):
        cluster.api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                         "status": {"allocatable": {"cpu": "50m", "memory": "1Gi", "pods": "10"}}})
        task = await running(cluster)
        for pod in cluster.start_pods(range(3)):
            cluster.api.merge_patch(
                f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/status",
                {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/1 nodes are available: 1 Insufficient cpu."}]}},
                "scheduler")
        await until(lambda: cluster.status().get("reason") == v.EVENT_UNSCHEDULABLE)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_UNSCHEDULABLE)
        assert "Insufficient cpu" in status["message"] and "cpu 100m" in status["message"]
    run(scenario)


def test_the_room_check_asks_for_the_pod_the_job_makes_a_pooled_batchs_its_pools():
    """A pooled batch's pods are its pool's: agent and verifier side by side, their requests
    summed; the batch's own spec (here the defaults) is not what the scheduler is asked for."""
    import logging

    from rolloutbatch.core import pool_spec, pools
    from rolloutbatch.core.spec import parse_spec
    from rolloutbatch.core.tracker import BatchTracker
    from rolloutbatch.service.sandbox_lifecycle import SandboxLifecycle
    from tests.unit.core.factories import MINIMAL, REF

    class Nodes:
        async def node_allocatables(self):
            return [{"cpu": "3", "memory": "8Gi"}]

    pool = pool_spec.PoolRef("warm", REF.namespace, "u" * 36)
    template = pool_spec.parse_pool_spec({"size": 2, "task": {"files": {"episode.py": "x"}}, "verifier": {},
                                          "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
    job = pools.pooled_job(REF, 3, 3, 1, 600, 300, pool, template)
    job["metadata"]["uid"] = "j" * 36
    sandbox = SandboxLifecycle(Nodes(), REF, None, {}, lambda *event: None, logging.getLogger("t"))
    spec = parse_spec(MINIMAL)

    async def scenario():
        assert not await sandbox.never_fits(spec)          # its Job not known yet: no guess
        sandbox.took_pooled_job(job, BatchTracker(3, 1, pooled=True))
        assert await sandbox.never_fits(spec)              # 2 + 2 cpu: no node of 3 holds it
        # with the verifier's files writer's (core.pool_children.files_writer_resources: a Guaranteed pod's)
        assert "cpu 4100m" in sandbox.requests_text(spec) and "memory 2112Mi" in sandbox.requests_text(spec)
    asyncio.run(scenario())


def test_episodes_the_job_ended_without_are_given_up_after_the_collect_grace():
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        cluster.end_pod(1)
        cluster.complete_job(failed=True, reason="BackoffLimitExceeded")   # index 2 never reported
        await asyncio.wait_for(task, 10)
        rows = cluster.rows()
        assert [row["outcome"] for row in rows][:2] == [v.OUTCOME_SUCCEEDED] * 2
        assert rows[2]["outcome"] in (v.OUTCOME_LOST, v.OUTCOME_FAILED)
        assert cluster.status()["progress"] == "3/3"
    run(scenario)


# --- spec.stop ----------------------------------------------------------------------------------
def _stop(cluster, name="batch"):
    cluster.api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NAMESPACE}/rolloutbatches/{name}",
                            {"spec": {"stop": True}}, "kubectl")
    cluster.reconciler(name)   # kopf hands the daemon's reconciler the new body


def test_a_stop_mid_batch_suspends_the_job_and_keeps_what_finished():
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        await until(lambda: cluster.status().get("progress") == "1/3")
        _stop(cluster)
        await until(lambda: (cluster.job()["spec"] or {}).get("suspend") is True)
        for pod in cluster.api.list_objects("Pod")[1:]:   # the Job controller deletes the active pods
            cluster.api.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}",
                               "job controller")
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.STOPPED, v.REASON_STOPPED)
        assert [row["outcome"] for row in cluster.rows()] == [v.OUTCOME_SUCCEEDED, v.OUTCOME_STOPPED,
                                                             v.OUTCOME_STOPPED]
        assert status["observedGeneration"] == cluster.batch()["metadata"]["generation"]
    run(scenario)


def test_a_stop_before_the_batch_ran_creates_nothing():
    async def scenario(cluster):
        cluster.submit({**SPEC, "stop": True})
        before = namespaces(cluster)
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert status["phase"] == v.STOPPED
        assert namespaces(cluster) == before and cluster.job() is None
        assert {row["outcome"] for row in cluster.rows()} == {v.OUTCOME_STOPPED}
    run(scenario)


# --- the API failing ----------------------------------------------------------------------------
def test_transient_api_errors_are_retried_and_the_batch_still_succeeds():
    async def scenario(cluster):
        cluster.api.fail("PATCH", "RolloutBatch", Unavailable("etcd leader changed", status=503), times=2)
        cluster.api.fail("POST", "Job", Unavailable("timeout", status=504))
        task = await running(cluster)
        every_episode_ends(cluster)
        await asyncio.wait_for(task, 15)
        assert cluster.status()["phase"] == v.SUCCEEDED
        assert len(cluster.api.list_objects("Job")) <= 1 and len(cluster.rows()) == 3
    # the second refusal comes after the first's 0.5 s backoff: within the memory cluster's 1 s
    # give-up only if the loop did not stall for half a second meanwhile (a loaded machine's did)
    run(scenario, transient_give_up=10.0)


def test_a_status_the_api_refuses_ends_the_batch_with_the_bare_verdict(monkeypatch):
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))
    reconcilers = []

    async def scenario(cluster):
        task = await running(cluster)
        reconcilers.append(cluster.reconciler())
        # the full Failed status is refused each time it is tried; the bare verdict passes (the
        # first refusal is of the final results' pending digest, which the write goes on without)
        cluster.api.fail("PATCH", "RolloutBatch", Invalid("status.rewardSum: Invalid value", status=422),
                         times=policy.FULL_STALL_TRIES + 1, when=lambda path: path.endswith("/status"))
        delete_job(cluster)
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_SANDBOX_DELETED)
        assert status["progress"] == "0/3"   # the bare verdict carries no summary
        # what the reconciler believes it wrote is what the API holds
        assert reconcilers[0].last_status["reason"] == v.STALL_SANDBOX_DELETED
        assert {c["type"]: c["status"] for c in status["conditions"]}[v.CONDITION_STALLED] == v.CONDITION_TRUE
    run(scenario)


# --- deletion -----------------------------------------------------------------------------------
def test_deleting_a_running_batch_removes_its_sandbox():
    async def scenario(cluster):
        task = await running(cluster)
        sandbox = cluster.status()["sandboxNamespace"]
        cluster.start_pods(range(3))
        task.cancel()   # kopf stops the daemon, then runs the deletion handler
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await cluster.reconciler().delete_sandbox(timeout=2.0)
        assert sandbox not in namespaces(cluster)
        assert cluster.api.list_objects("Pod") == [] and cluster.job() is None
    run(scenario)


def test_ttl_seconds_after_finished_deletes_the_batch():
    async def scenario(cluster):
        task = await running(cluster, {**SPEC, "cleanup": {"ttlSecondsAfterFinished": 0}})
        every_episode_ends(cluster)
        await asyncio.wait_for(task, 10)
        assert cluster.batch() is None
    run(scenario)


@pytest.mark.parametrize("restarted", [False, True], ids=["at-once", "after-a-restart"])
def test_ttl_seconds_after_finished_deletes_a_batch_refused_as_invalid_too(restarted):
    """Design §5.11: the TTL applies to stalled batches too; one whose spec the operator refused
    (admitted by the CRD: a protected taint tolerated) ended InvalidSpec and was kept for ever,
    also after a restart (the work after the end read the spec first and gave up)."""
    from tests.support import crd_schema
    spec = {**SPEC, "cleanup": {"ttlSecondsAfterFinished": 0},
            "podTemplate": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                             "effect": "NoSchedule"}]}}
    assert crd_schema.errors(spec, crd_schema.openapi_schema()["properties"]["spec"]) == []

    async def scenario(cluster):
        cluster.submit(spec)
        if restarted:   # an earlier operator recorded the stall and died before its TTL's wait
            cluster.api.merge_patch(f"{BATCH_PATH}/status", {"status": {
                "phase": v.FAILED, "reason": v.STALL_INVALID_SPEC, "message": "refused",
                "completionTime": "2026-01-01T00:00:00Z"}}, "an earlier operator")
            cluster.restart_operator()
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        assert cluster.batch() is None
    run(scenario)


def _results_configmaps(cluster):
    return sorted(cm["metadata"]["name"] for cm in cluster.api.list_objects("ConfigMap", NAMESPACE)
                  if "results" in cm["metadata"]["name"])


@pytest.mark.parametrize("policy, kept", [(v.RESULTS_DELETE, False), (v.RESULTS_RETAIN, True)])
def test_the_finalizer_removes_the_results_unless_retained(policy, kept):
    async def scenario(cluster):
        task = await running(cluster, {**SPEC, "cleanup": {"results": policy}})
        every_episode_ends(cluster)
        await asyncio.wait_for(task, 10)
        assert _results_configmaps(cluster)
        assert await cluster.reconciler().delete_sandbox(timeout=2.0)
        assert bool(_results_configmaps(cluster)) is kept
    run(scenario)


def test_a_results_write_in_flight_when_the_batch_is_deleted_does_not_make_it_again():
    async def scenario(cluster):
        task = await running(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        await until(lambda: bool(_results_configmaps(cluster)))
        rec = cluster.reconciler()
        # The batch is deleted (its finalizer holds it) and the finalizer removes the results
        # while the reconciler still runs: its next write finds its ConfigMap gone.
        batch = cluster.batch()
        cluster.api.merge_patch(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                {"metadata": {"finalizers": [naming.FINALIZER]}}, "kopf")
        cluster.api.delete(f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NAMESPACE}/rolloutbatches/batch",
                           "kubectl", {"preconditions": {"uid": batch["metadata"]["uid"]}})
        for name in _results_configmaps(cluster):
            cluster.api.delete(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}", "finalizer")
        cluster.end_pod(1)
        cluster.end_pod(2)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        assert _results_configmaps(cluster) == []   # nothing made again for a batch being deleted
        assert rec.results.digests   # it did write while the batch lived
    run(scenario)


# --- names taken, crashes mid-provisioning ------------------------------------------------------
def test_a_sandbox_namespace_squatted_by_someone_else_stalls_and_is_left_alone():
    async def scenario(cluster):
        batch = cluster.submit(SPEC)
        squatter = cluster.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": naming.sandbox_namespace(batch_ref(batch))}})
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert status["phase"] == v.FAILED
        assert status["reason"] in (v.STALL_NAMESPACE_CONFLICT, v.STALL_NAME_CONFLICT)
        assert cluster.job() is None
        assert cluster.api.get_object("Namespace", squatter["metadata"]["name"])["metadata"]["uid"] == \
            squatter["metadata"]["uid"]
    run(scenario)


def test_a_foreign_configmap_in_the_results_place_stalls_before_anything_is_created():
    async def scenario(cluster):
        cluster.submit(SPEC)
        foreign = cluster.api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "batch-results", "namespace": NAMESPACE}, "data": {"mine": "yes"}})
        before = namespaces(cluster)
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_RESULTS_CONFLICT)
        assert namespaces(cluster) == before and cluster.job() is None
        kept = cluster.api.get_object("ConfigMap", "batch-results", NAMESPACE)
        assert kept["data"] == {"mine": "yes"} and kept["metadata"]["uid"] == foreign["metadata"]["uid"]
    run(scenario)


def test_a_crash_mid_provisioning_is_resumed_by_the_next_operator_with_one_job():
    async def scenario(cluster):
        cluster.submit(SPEC)
        # the first operator dies as it creates the Job (after the namespace and ConfigMaps exist)
        cluster.api.fail("POST", "Job", asyncio.CancelledError())
        task = asyncio.create_task(cluster.reconciler().run())
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert cluster.status()["phase"] == v.PROVISIONING and cluster.job() is None
        cluster.restart_operator()
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        assert len(cluster.api.list_objects("Job")) == 1
        assert len([ns for ns in namespaces(cluster) if ns.startswith("rb-")]) == 1
        every_episode_ends(cluster)
        await asyncio.wait_for(task, 10)
        assert cluster.status()["phase"] == v.SUCCEEDED
    run(scenario)
