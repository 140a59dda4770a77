"""spec.queueName against an API server in memory: the test plays Kueue's part (the Workload's
conditions, the Job suspended and resumed) and the Job controller's; the rest is the operator's."""
import asyncio
import time
from types import SimpleNamespace

import pytest

from rolloutbatch.core import queueing
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.model import BatchRef
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.service import policy
from rolloutbatch.service import queue_watch
from rolloutbatch.service.queue_watch import QueueWatch
from tests.unit.service.memory_cluster import NAMESPACE, _iso, events_text, run, sandboxes, until

SPEC = {"episodes": 3, "parallelism": 3, "queueName": "team", "task": {"files": {"episode.py": "print('hi')"}}}
WAITING = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"


def local_queue(cluster, name="team", cluster_queue="cq"):
    cluster.api.put({"apiVersion": queueing.API_VERSION, "kind": "LocalQueue",
                     "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"clusterQueue": cluster_queue}})


def kueue_workload(cluster, *conditions):
    """Kueue's Workload for the batch's Job (labelled and owned by it), with ``conditions``."""
    job = cluster.job()
    meta = job["metadata"]
    name = f"job-{meta['name']}-1a2b3"
    existing = cluster.api.get_object("Workload", name, meta["namespace"])
    status = {"conditions": [{"type": t, "status": s, "reason": r, "message": m,
                              "lastTransitionTime": _iso(time.time())} for t, s, r, m in conditions]}
    if existing is None:
        cluster.api.put({"apiVersion": queueing.API_VERSION, "kind": "Workload",
                         "metadata": {"name": name, "namespace": meta["namespace"],
                                      "labels": {queueing.JOB_UID_LABEL: meta["uid"]},
                                      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                           "name": meta["name"], "uid": meta["uid"],
                                                           "controller": True}]},
                         "spec": {"queueName": "team", "active": True}})
    path = f"/apis/{queueing.API_VERSION}/namespaces/{meta['namespace']}/workloads/{name}"
    cluster.api.merge_patch(f"{path}/status", {"status": status}, "kueue")
    return cluster.api.get_object("Workload", name, meta["namespace"])


def set_suspended(cluster, suspended: bool):
    """Kueue suspends or resumes the Job; the Job controller records it in the Suspended condition."""
    job = cluster.job()
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    cluster.api.merge_patch(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}", {"spec": {"suspend": suspended}}, "kueue")
    condition = {"type": "Suspended", "status": "True" if suspended else "False",
                 "reason": "JobSuspended" if suspended else "JobResumed", "lastTransitionTime": _iso(time.time())}
    cluster.api.merge_patch(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status",
                            {"status": {"conditions": [condition]}}, "job controller")


def evict_pod(cluster, index: int, message: str = ""):
    """The Job controller deletes a running pod of a suspended Job; the kubelet kills it (143)."""
    pod = next(p for p in cluster.api.list_objects("Pod")
               if p["metadata"]["annotations"][v.COMPLETION_INDEX_KEY] == str(index))
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    cluster.api.merge_patch(f"/api/v1/namespaces/{ns}/pods/{name}",
                            {"metadata": {"finalizers": ["batch.kubernetes.io/job-tracking"]}}, "job controller")
    cluster.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", "job controller")
    cluster.end_pod(index, reward=None, exit_code=143, message=message)


def ask_suspend(cluster, suspend: bool):
    """Kueue sets the Job's spec.suspend; the Job controller has not written Suspended yet."""
    job = cluster.job()
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    cluster.api.merge_patch(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}", {"spec": {"suspend": suspend}}, "kueue")


async def queued(cluster, spec=SPEC):
    local_queue(cluster)
    cluster.submit(spec)
    task = asyncio.create_task(cluster.reconciler().run())
    await until(lambda: cluster.status().get("phase") == v.QUEUED)
    return task


async def admitted(cluster, message: str = "admitted") -> None:
    """Kueue admits the Workload and unsuspends the Job; the batch is seen Running."""
    kueue_workload(cluster, ("Admitted", "True", "Admitted", message))
    set_suspended(cluster, False)
    await until(lambda: cluster.status().get("phase") == v.RUNNING)


async def rows_once_the_job_failed_indexes(cluster, task) -> dict:
    """The Job ends Failed (FailedIndexes), the batch with it; its rows by index."""
    cluster.complete_job(failed=True, reason="FailedIndexes")
    await asyncio.wait_for(task, 10)
    return {row["index"]: row for row in cluster.rows()}


def test_a_queued_batch_waits_with_kueues_words_then_runs_once_admitted():
    async def scenario(cluster):
        task = await queued(cluster)
        job = cluster.job()
        assert job["spec"]["suspend"] is True and job["metadata"]["labels"][queueing.QUEUE_LABEL] == "team"
        # the Dedicated sandbox got its own LocalQueue, feeding the batch's ClusterQueue
        sandbox_queue = cluster.api.get_object("LocalQueue", "team", cluster.status()["sandboxNamespace"])
        assert sandbox_queue["spec"] == {"clusterQueue": "cq"}
        kueue_workload(cluster, ("QuotaReserved", "False", "Pending", WAITING))
        await until(lambda: WAITING in cluster.status().get("message", ""), timeout=10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.QUEUED, v.REASON_QUEUED)
        await asyncio.sleep(1.0)          # past the pods' creation grace: a queue wait is no stall
        assert cluster.status()["phase"] == v.QUEUED
        kueue_workload(cluster, ("QuotaReserved", "True", "QuotaReserved", "reserved"),
                       ("Admitted", "True", "Admitted", "admitted"))
        set_suspended(cluster, False)
        cluster.start_pods(range(3))      # the Job controller at once, not within the grace of when
        await until(lambda: cluster.status().get("phase") == v.RUNNING)   # this test sees Running
        assert cluster.status()["reason"] == v.REASON_RUNNING
        assert v.EVENT_ADMITTED in cluster.reasons()
        for index in range(3):
            cluster.end_pod(index)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        status = cluster.status()
        assert status["phase"] == v.SUCCEEDED and status["succeededEpisodes"] == 3
        assert status["queueWaitSeconds"] >= 0
        assert cluster.counted("rolloutbatch_queue_wait_seconds_count") == 1
    run(scenario, pod_create_grace=0.5)   # the 1 s of queue wait is past it


def test_a_queue_that_does_not_exist_stalls_before_anything_is_created():
    async def scenario(cluster):
        cluster.submit({**SPEC, "queueName": "nope"})
        await asyncio.wait_for(cluster.reconciler().run(), 10)
        status = cluster.status()
        assert (status["phase"], status["reason"]) == (v.FAILED, v.STALL_QUEUE_NOT_FOUND)
        assert "nope" in status["message"] and cluster.job() is None and sandboxes(cluster) == []
    run(scenario)


def test_the_namespaces_default_queue_is_used_when_the_spec_names_none():
    async def scenario(cluster):
        local_queue(cluster, name=queueing.DEFAULT_QUEUE)
        spec = {k: val for k, val in SPEC.items() if k != "queueName"}
        cluster.submit(spec)
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.status().get("phase") == v.QUEUED)
        assert cluster.job()["metadata"]["labels"][queueing.QUEUE_LABEL] == queueing.DEFAULT_QUEUE
        task.cancel()
    run(scenario)


def test_no_queue_and_no_default_starts_at_once():
    async def scenario(cluster):
        spec = {k: val for k, val in SPEC.items() if k != "queueName"}
        cluster.submit(spec)
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        assert "suspend" not in cluster.job()["spec"]
        task.cancel()
    run(scenario)


def test_an_eviction_cuts_off_running_episodes_as_lost_and_the_rest_run_after_readmission():
    async def scenario(cluster):
        task = await queued(cluster)
        await admitted(cluster)
        cluster.start_pods(range(2))
        cluster.end_pod(0)
        await until(lambda: cluster.status().get("progress") == "1/3")
        # Kueue preempts: the Workload says why, the Job is suspended, its running pod deleted
        kueue_workload(cluster, ("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority"))
        set_suspended(cluster, True)
        evict_pod(cluster, 1)
        await until(lambda: cluster.status().get("phase") == v.QUEUED)
        await until(lambda: cluster.status().get("progress") == "2/3")
        assert v.EVENT_EVICTED in cluster.reasons() and "Preempted" in cluster.status()["message"]
        assert cluster.counted("rolloutbatch_queue_evictions_total") == 1
        # admitted again: the index not yet run runs; the cut-off one is not run twice
        await admitted(cluster, "admitted again")
        cluster.start_pods([2])
        cluster.end_pod(2)
        rows = await rows_once_the_job_failed_indexes(cluster, task)
        assert [rows[i]["outcome"] for i in range(3)] == [v.OUTCOME_SUCCEEDED, v.OUTCOME_LOST, v.OUTCOME_SUCCEEDED]
        assert rows[1]["reason"] == v.EP_EVICTED
        status = cluster.status()
        assert (status["succeededEpisodes"], status["lostEpisodes"], status["failedEpisodes"]) == (2, 1, 0)
        assert cluster.counted("rolloutbatch_queue_wait_seconds_count") == 1   # the first admission only
    run(scenario)


def test_an_episode_cut_off_before_the_suspended_condition_is_written_is_evicted_not_the_agents_failure():
    """Kueue suspends the Job (spec.suspend); the Job controller deletes the running pods first
    and writes the Suspended condition afterwards. The pod, killed by SIGTERM (143), ends while
    the condition still reads False since the admission two seconds earlier. It was judged
    failed/NonZeroExit before the fix: a valid 0 in its group, blamed on the agent."""
    async def scenario(cluster):
        task = await queued(cluster)
        await admitted(cluster)
        cluster.start_pods(range(2))
        cluster.end_pod(0)
        await until(lambda: cluster.status().get("progress") == "1/3")
        await asyncio.sleep(2.1)            # more than the 1 s a deletion may follow the resume
        kueue_workload(cluster, ("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority"))
        ask_suspend(cluster, True)
        pod = next(p for p in cluster.api.list_objects("Pod")
                   if p["metadata"]["annotations"][v.COMPLETION_INDEX_KEY] == "1")
        evict_pod(cluster, 1, message=events_text(pod["metadata"]["name"], None, start=time.time() - 1))
        await until(lambda: cluster.status().get("progress") == "2/3")
        set_suspended(cluster, True)        # ... and only then the Suspended condition
        await admitted(cluster, "admitted again")
        cluster.start_pods([2])
        cluster.end_pod(2)
        rows = await rows_once_the_job_failed_indexes(cluster, task)
        assert (rows[1]["outcome"], rows[1]["reason"]) == (v.OUTCOME_LOST, v.EP_EVICTED), rows[1]
    run(scenario)


@pytest.mark.parametrize("suspending", [False, True])
def test_an_agents_own_failure_in_a_queued_job_stays_the_agents(suspending):
    """A pod that ended on its own (exit 1, never deleted) is the agent's NonZeroExit, whether or
    not Kueue is suspending the Job at that moment: only a pod the Job controller deleted is
    cut off by an eviction."""
    async def scenario(cluster):
        task = await queued(cluster)
        await admitted(cluster)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        await until(lambda: cluster.status().get("progress") == "1/3")
        if suspending:
            ask_suspend(cluster, True)
            await until(lambda: cluster.reconciler().tracker.job.suspend)
        cluster.end_pod(1, reward=None, exit_code=1)
        await until(lambda: cluster.status().get("progress") == "2/3")
        if suspending:
            ask_suspend(cluster, False)
        cluster.end_pod(2)
        rows = await rows_once_the_job_failed_indexes(cluster, task)
        assert (rows[1]["outcome"], rows[1]["reason"]) == (v.OUTCOME_FAILED, v.EP_NON_ZERO_EXIT), rows[1]
    run(scenario)


@pytest.mark.parametrize("default_queue", [False, True])
def test_a_stop_of_a_queued_batch_deactivates_its_workload(default_queue):
    """Named by spec.queueName, or the namespace's default LocalQueue (on the Job's label only)."""
    async def scenario(cluster):
        if default_queue:
            local_queue(cluster, name=queueing.DEFAULT_QUEUE)
        task = await queued(cluster, {k: val for k, val in SPEC.items() if k != "queueName"} if default_queue
                            else SPEC)
        wl = kueue_workload(cluster, ("QuotaReserved", "False", "Pending", WAITING))
        batch = cluster.batch()
        cluster.api.merge_patch(f"/apis/{batch['apiVersion']}/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                {"spec": {"stop": True}}, "kubectl")
        cluster.reconciler()   # kopf hands the daemon's reconciler the new body
        await asyncio.wait_for(task, 10)
        assert cluster.status()["phase"] == v.STOPPED
        assert cluster.api.get_object("Workload", wl["metadata"]["name"],
                                      cluster.job()["metadata"]["namespace"])["spec"]["active"] is False
        assert {row["outcome"] for row in cluster.rows()} == {v.OUTCOME_STOPPED}
    run(scenario)



def test_a_stop_before_kueue_made_the_workload_leaves_no_job_kueue_could_run():
    """Kueue makes the Workload after the Job, and may not have yet (slow, restarting): the stop
    found none to deactivate. Kueue would make an active one for the suspended Job, admit it and
    unsuspend the Job, and every episode would run after the batch said Stopped. The Job goes
    instead; the batch ends Stopped with its rows."""
    async def scenario(cluster):
        task = await queued(cluster)
        assert "create the Workload" in cluster.status()["message"]
        batch = cluster.batch()
        cluster.api.merge_patch(f"/apis/{batch['apiVersion']}/namespaces/{NAMESPACE}/rolloutbatches/batch",
                                {"spec": {"stop": True}}, "kubectl")
        cluster.reconciler()
        await asyncio.wait_for(task, 10)
        assert cluster.status()["phase"] == v.STOPPED
        assert cluster.job() is None or cluster.job()["metadata"].get("deletionTimestamp")
        assert {row["outcome"] for row in cluster.rows()} == {v.OUTCOME_STOPPED}
    run(scenario)


def test_the_phase_follows_the_job_as_the_round_saw_it():
    """A Job Kueue resumes between QueueWatch.round and the status's phase is still Queued for
    that round: Running comes with the round that says Admitted, never before it."""
    class Storage:
        async def job_workload(self, namespace, uid):
            return None

    events: list = []
    metrics = SimpleNamespace(batch_admitted=lambda *a: None, batch_evicted=lambda *a: None)
    watch = QueueWatch(Storage(), BatchRef(NAMESPACE, "b", "u"), lambda *e: events.append(e[1]), metrics, None, None)
    held_job = JobFacts(uid="j", created=time.time(), queue="team", suspend=True, suspended=True)
    tracker = SimpleNamespace(job=held_job, stopping=False)

    async def rounds():
        assert await watch.round(tracker) is False and watch.held_at_round
        tracker.job = JobFacts(uid="j", created=held_job.created, queue="team", resumed_at=time.time())
        assert not watch.queued(tracker)      # the Job now ...
        assert watch.held_at_round            # ... but the phase of this round stays Queued
        assert events == []
        assert await watch.round(tracker) is True and not watch.held_at_round
        assert events == [v.EVENT_ADMITTED]
    asyncio.run(rounds())


def test_two_api_blips_far_apart_do_not_end_a_batch_kueue_holds(monkeypatch):
    """Only transient errors without a break for transient_give_up (1 s here, 10 minutes for
    real) end a batch ApiUnavailable (docs/design.md §5.10). A batch Kueue holds writes no status
    while nothing changes: a blip retried at once, rounds that went through, then another blip
    long after, is no outage. An unbroken one still ends it."""
    monkeypatch.setattr(policy, "BACKOFF", (0.01,))

    async def scenario(cluster):
        task = await queued(cluster)
        kueue_workload(cluster, ("QuotaReserved", "False", "Pending", WAITING))
        await asyncio.sleep(0.5)
        cluster.api.fail("GET", "Job", Unavailable("etcd leader changed", status=503))
        await asyncio.sleep(1.5)   # longer than transient_give_up, every call going through
        cluster.api.fail("GET", "Job", Unavailable("etcd leader changed", status=503))
        await asyncio.sleep(0.5)
        assert cluster.status()["phase"] == v.QUEUED, cluster.status()
        cluster.api.fail("GET", None, Unavailable("the API server is down", status=503), times=10_000)
        await until(lambda: cluster.status().get("phase") == v.FAILED, timeout=10)
        assert cluster.status()["reason"] == v.STALL_API_UNAVAILABLE
        task.cancel()
    run(scenario)


@pytest.mark.parametrize("kind", ["Workload", "Job"])
def test_a_read_failing_every_time_still_ends_the_batch_api_unavailable(monkeypatch, kind):
    """The reads a round makes only now and then (the held Job's Workload, the Job's poll) are
    made again at once by the retried round: rounds in between go through and restart the error
    count, so a read failing every time would otherwise be retried for ever, the status frozen."""
    monkeypatch.setattr(queue_watch, "READ_INTERVAL", 0.6)   # 5 s for real; transient_give_up is 1 s here

    async def scenario(cluster):
        task = await queued(cluster)
        kueue_workload(cluster, ("QuotaReserved", "False", "Pending", WAITING))
        await until(lambda: WAITING in cluster.status().get("message", ""), timeout=10)
        cluster.api.fail("GET", kind, Unavailable("the API server is unavailable", status=503), times=10_000)
        try:
            await until(lambda: cluster.status().get("phase") == v.FAILED, timeout=8)
        finally:
            task.cancel()
        assert cluster.status()["reason"] == v.STALL_API_UNAVAILABLE
    run(scenario)
