"""A batch deleted at each phase (kopf cancels its daemon, then its deletion handler
runs the finalizer's ``delete_sandbox``), and hostile pods that carry the batch's label.

A worker thread outlives its cancelled task (``kube.storage`` runs each call in one): whatever it
was creating lands after the cancel. The results ConfigMaps are guarded against it
(``put_configmap(batch=...)``, OwnerGone); these tests ask the same of the sandbox.
"""
import asyncio
import time

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.service.context import batch_ref
from tests.unit.service.memory_cluster import BATCH_PATH, NAMESPACE, events_text, run, sandboxes, until

SPEC = {"episodes": 3, "parallelism": 3, "task": {"files": {"episode.py": "print('hi')"}},
        "cleanup": {"sandbox": v.CLEANUP_NEVER}}


def mark_deleted(cluster):
    """kubectl delete: the finalizer holds the object, deletionTimestamp set."""
    cluster.api.merge_patch(BATCH_PATH, {"metadata": {"finalizers": [naming.FINALIZER]}}, "kopf")
    cluster.api.delete(BATCH_PATH, "kubectl")


@pytest.mark.parametrize("kind", ["Namespace", "Job", "ConfigMap"])
def test_a_batch_deleted_while_its_sandbox_is_created_leaves_no_sandbox(kind):
    """The create is on its way (its worker thread runs on after the daemon's cancel) while the
    finalizer starts: the finalizer waits for it (kube.storage.Storage.settled), then removes
    what it made. Without that wait, the sandbox namespace (owned by nothing) was left behind."""
    async def scenario(cluster):
        cluster.submit(SPEC)
        rec = cluster.reconciler()
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(rec.run())
        finalizer = []

        def deleted_meanwhile():
            mark_deleted(cluster)
            loop.call_soon_threadsafe(task.cancel)
            finalizer.append(asyncio.run_coroutine_threadsafe(rec.delete_sandbox(timeout=2.0), loop))
            time.sleep(0.2)   # the finalizer has started when this create is served
        cluster.api.meanwhile("POST", kind, deleted_meanwhile)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        await until(lambda: bool(finalizer))
        assert await asyncio.wrap_future(finalizer[0])
        await asyncio.sleep(0.3)   # whatever was on its way has landed by now
        cluster.api.merge_patch(BATCH_PATH, {"metadata": {"finalizers": []}}, "kopf")   # released
        assert cluster.batch() is None
        cluster.api.collect_garbage()
        assert sandboxes(cluster) == [] and cluster.api.list_objects("Job") == []
        assert [cm["metadata"]["name"] for cm in cluster.api.list_objects("ConfigMap", NAMESPACE)] == []
    run(scenario)


@pytest.mark.parametrize("phase", [v.RUNNING, v.COLLECTING, v.SUCCEEDED])
def test_a_batch_deleted_at_each_phase_leaves_nothing_behind(phase):
    async def scenario(cluster):
        cluster.submit({**SPEC, "cleanup": {"sandbox": v.CLEANUP_NEVER, "results": v.RESULTS_DELETE}})
        rec = cluster.reconciler()
        task = asyncio.create_task(rec.run())
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        cluster.start_pods(range(3))
        cluster.end_pod(0)
        if phase in (v.COLLECTING, v.SUCCEEDED):
            cluster.end_pod(1)
            cluster.complete_job(failed=phase == v.COLLECTING)
            if phase == v.SUCCEEDED:
                cluster.end_pod(2)
        await until(lambda: cluster.status().get("phase") == phase)
        mark_deleted(cluster)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert await cluster.reconciler().delete_sandbox(timeout=1.0)
        cluster.api.merge_patch(BATCH_PATH, {"metadata": {"finalizers": []}}, "kopf")
        cluster.api.collect_garbage()
        assert cluster.batch() is None
        assert sandboxes(cluster) == [] and cluster.api.list_objects("Job") == []
        assert cluster.api.list_objects("Pod") == []
        assert [cm["metadata"]["name"] for cm in cluster.api.list_objects("ConfigMap", NAMESPACE)] == []
    run(scenario)


# --- hostile pods -------------------------------------------------------------------------------
def _succeeded_pod(name, namespace, labels, index, owner_uid, reward):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": {v.COMPLETION_INDEX_KEY: str(index)},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name.rsplit("-", 2)[0],
                                              "uid": owner_uid, "controller": True}]},
            "spec": {"containers": [{"name": naming.CONTAINER_NAME, "image": "x"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{
                "name": naming.CONTAINER_NAME, "state": {"terminated": {
                    "exitCode": 0, "reason": "Completed", "message": events_text(name, reward)}}}]}}


def test_pods_that_only_carry_the_batch_label_never_count():
    """A neighbour's pod in the batch's own namespace, and one in the sandbox named like an episode
    but owned by a namesake Job (another uid), each claiming reward 0 for index 0: ignored, said once."""
    async def scenario(cluster):
        batch = cluster.submit(SPEC)
        ref = batch_ref(batch)
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        job = cluster.job()
        labels = dict(job["spec"]["template"]["metadata"]["labels"])
        sandbox = job["metadata"]["namespace"]
        cluster.api.put(_succeeded_pod(f"{naming.job_name(ref)}-0-forge1", NAMESPACE, labels, 0,
                                       job["metadata"]["uid"], 0.0))
        cluster.api.put(_succeeded_pod(f"{naming.job_name(ref)}-0-forge2", sandbox, labels, 0,
                                       "a-namesake-job-uid", 0.0))
        await asyncio.sleep(0.1)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index, reward=1.0)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        rows = cluster.rows()
        assert [row["reward"] for row in rows] == [1.0, 1.0, 1.0]
        assert all("forge" not in row["pod"] for row in rows)
        assert cluster.reasons().count(v.EVENT_FOREIGN_POD) == 2
    run(scenario)


# --- the finalizer and the results --------------------------------------------------------------
def test_a_users_copy_of_the_results_outlives_the_batch():
    async def scenario(cluster):
        cluster.submit(SPEC)
        task = asyncio.create_task(cluster.reconciler().run())
        await until(lambda: cluster.status().get("phase") == v.RUNNING)
        cluster.start_pods(range(3))
        for index in range(3):
            cluster.end_pod(index)
        cluster.complete_job()
        await asyncio.wait_for(task, 10)
        head = cluster.api.get_object("ConfigMap", naming.results_configmap_name(batch_ref(cluster.batch())), NAMESPACE)
        copy_ = {"apiVersion": "v1", "kind": "ConfigMap", "data": head["data"],
                 "metadata": {"name": "my-results-backup", "namespace": NAMESPACE,
                              "labels": dict(head["metadata"]["labels"])}}
        cluster.api.put(copy_)
        mark_deleted(cluster)
        assert await cluster.reconciler().delete_sandbox(timeout=1.0)
        cluster.api.merge_patch(BATCH_PATH, {"metadata": {"finalizers": []}}, "kopf")
        cluster.api.collect_garbage()
        assert cluster.api.get_object("ConfigMap", "my-results-backup", NAMESPACE) is not None
    run(scenario)
