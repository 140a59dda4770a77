"""service.sandbox: the deletion plan carried out against the API server; the namespace outlives
the Job's pods; at the timeout nothing is left undeleted; what is not the batch's is left alone."""
import asyncio
import logging

import pytest

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.kube.errors import Forbidden
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import sandbox
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import REF

LOG = logging.getLogger("t")
SANDBOX = naming.sandbox_namespace(REF)
JOB = naming.job_name(REF)
POLICY = naming.shared_network_policy_name(REF)
JOB_TRACKING = "batch.kubernetes.io/job-tracking"   # the Job controller's finalizer on its pods


def _child(kind: str, name: str, namespace: str | None, owner: dict | None, **extra) -> dict:
    meta = {"name": name, "labels": {naming.LABEL_BATCH_UID: REF.uid}}
    if namespace:
        meta["namespace"] = namespace
    if owner:
        meta["ownerReferences"] = [owner]
    api_version = {"Job": "batch/v1", "NetworkPolicy": "networking.k8s.io/v1"}.get(kind, "v1")
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


def cluster(*, shared: bool = False, stuck_pod: bool = False) -> MemoryApi:
    """A provisioned batch: its Job and a running pod of it, in a sandbox namespace (Dedicated)
    or the batch's own with the batch's NetworkPolicy (Shared). ``stuck_pod``: the pod keeps its
    Job controller's finalizer, so the Job (deleted in the foreground) is not gone yet."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REF.namespace}})
    batch = api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                     "metadata": {"name": REF.name, "namespace": REF.namespace, "uid": REF.uid}, "spec": {}})
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": REF.name, "uid": batch["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    where = REF.namespace if shared else SANDBOX
    if shared:
        api.put(_child("NetworkPolicy", POLICY, where, owner, spec={}))
    else:
        api.put(_child("Namespace", SANDBOX, None, None))
    job = api.put(_child("Job", JOB, where, None if not shared else owner, spec={}))
    pod = _child("Pod", f"{JOB}-0-abcde", where, {"apiVersion": "batch/v1", "kind": "Job", "name": JOB,
                                                  "uid": job["metadata"]["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}, status={"phase": "Running"})
    if stuck_pod:
        pod["metadata"]["finalizers"] = [JOB_TRACKING]
    api.put(pod)
    api.calls.clear()
    return api


def deleted(api: MemoryApi) -> list[str]:
    """The kinds (their plural) DELETE was sent for, in order."""
    return [path.split("/")[-2] for method, path in api.calls if method == "DELETE"]


def remove(api: MemoryApi, timeout: float = 5, interval: float = 0) -> bool:
    return asyncio.run(sandbox.remove(Storage(api), REF, LOG, timeout=timeout, interval=interval))


def release_the_pod(api: MemoryApi, namespace: str) -> None:
    """The Job controller, done with the pod: its finalizer goes."""
    api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{JOB}-0-abcde", {"metadata": {"finalizers": None}},
                    "job controller")


def test_the_namespace_waits_for_the_job_and_then_goes():
    api = cluster()
    assert remove(api)
    assert deleted(api) == ["jobs", "namespaces"]
    assert api.get_object("Namespace", SANDBOX) is None and api.list_objects("Pod") == []


def test_a_job_still_deleting_at_the_timeout_does_not_leave_the_namespace_behind(caplog):
    api = cluster(stuck_pod=True)
    assert not remove(api, timeout=0.05, interval=0.01)
    assert deleted(api)[-1] == "namespaces" and deleted(api).count("jobs") == 1   # issued at the end
    assert api.get_object("Job", JOB, SANDBOX)["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert api.get_object("Namespace", SANDBOX)["status"]["phase"] == "Terminating"
    assert "without waiting" in caplog.text
    release_the_pod(api, SANDBOX)               # once the pod goes, so do its Job and the namespace
    assert api.get_object("Job", JOB, SANDBOX) is None and api.get_object("Namespace", SANDBOX) is None


def test_a_shared_batchs_network_policy_stays_while_its_job_still_has_pods(caplog):
    caplog.set_level(logging.INFO)
    api = cluster(shared=True, stuck_pod=True)
    assert not remove(api, timeout=0.05, interval=0.01)
    assert "networkpolicies" not in deleted(api)
    assert api.get_object("NetworkPolicy", POLICY, REF.namespace) is not None   # the garbage collector's, with the batch
    assert "Leaving NetworkPolicy" in caplog.text


def test_a_shared_batchs_network_policy_goes_once_its_job_is_gone():
    api = cluster(shared=True)
    assert remove(api)
    assert deleted(api) == ["jobs", "networkpolicies"]
    assert api.list_objects("Job") == [] and api.list_objects("NetworkPolicy") == []
    assert api.list_objects("Pod") == []


def test_a_namesake_not_the_batchs_is_left_alone(caplog):
    api = cluster()
    api.merge_patch(f"/api/v1/namespaces/{SANDBOX}", {"metadata": {"labels": {naming.LABEL_BATCH_UID: "other"}}},
                    "a user")
    assert remove(api)
    assert deleted(api) == ["jobs"] and api.get_object("Namespace", SANDBOX) is not None
    assert "Leaving alone what is not ours" in caplog.text


def test_a_secret_the_operator_may_not_touch_is_left_to_the_garbage_collector(caplog):
    # Without manifests/rbac/secrets_role.yaml the operator has no rights on Secrets: removing a
    # sandbox (which then never had a copy) must not fail on that step.
    caplog.set_level(logging.INFO)
    api = cluster(shared=True)
    api.fail("GET", "Secret", Forbidden('secrets "rb-x-env" is forbidden', status=403), times=100)
    assert remove(api)
    assert "garbage collector removes it" in caplog.text

    api = cluster(shared=True)
    api.fail("GET", "Job", Forbidden("jobs is forbidden", status=403), times=100)
    with pytest.raises(Forbidden):   # only the optional step is skipped
        remove(api)
    assert api.get_object("NetworkPolicy", POLICY, REF.namespace) is not None


def test_a_pooled_batchs_claims_no_job_adopted_are_evicted_with_its_sandbox():
    """Its Job refused (or the batch deleted between the claims and the Job): the claimed warm
    pods were handed their episodes and would run on, uncounted, and the pool no longer counts
    them. The sandbox's removal evicts them; the pool's other pods are not the batch's."""
    pool_ns = "rp-0123456789"
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": pool_ns}})
    claimed = _child("Pod", "warm-abcde", pool_ns, None, status={"phase": "Running"})
    claimed["metadata"]["labels"][naming.LABEL_MANAGED_BY] = naming.MANAGED_BY   # as every pod of a pool
    orphan = api.put(claimed)
    other = _child("Pod", "warm-fghij", pool_ns, None, status={"phase": "Running"})
    other["metadata"]["labels"] = {naming.LABEL_BATCH_UID: "someone-else", naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
    api.put(other)
    assert asyncio.run(sandbox.remove_once(Storage(api), REF, LOG, pool_namespace=pool_ns))
    assert api.get_object("Pod", "warm-abcde", pool_ns) is None and orphan["metadata"]["name"] == "warm-abcde"
    assert api.get_object("Pod", "warm-fghij", pool_ns) is not None


def test_a_resync_list_does_not_undo_what_the_watch_brought_while_it_was_read():
    """resync_pods awaits its list while watch events are applied: the list's snapshot of a pod the
    watch brought meanwhile (deleted, ended, or running now) is older and must not win."""
    from rolloutbatch.core.spec import parse_spec
    from rolloutbatch.core.tracker import BatchTracker
    from rolloutbatch.core.pod_reading import pod_facts
    from rolloutbatch.service.context import Settings
    from rolloutbatch.service.sandbox_lifecycle import SandboxLifecycle

    spec = parse_spec({"episodes": 3, "task": {"files": {"episode.py": "x"}}})
    where = naming.child_namespace(REF, spec)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": "job-uid", "controller": True}
    pending = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                   "reason": "Unschedulable", "message": "0/2 nodes are available"}]}
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": where}})
    pods = []
    for i in range(3):
        obj = _child("Pod", f"{JOB}-{i}-abcde", where, owner, status=dict(pending))
        obj["metadata"]["annotations"] = {v.COMPLETION_INDEX_KEY: str(i)}
        pods.append(api.put(obj))
    tracker = BatchTracker(3, 0, namespace=where, job_name=JOB)
    tracker.expect_job("job-uid")

    class SlowList(Storage):
        async def list_pods(self, namespace, selector):
            listed = await super().list_pods(namespace, selector)
            # the watch, meanwhile: pod 0 deleted, pod 1 ended, pod 2 running
            tracker.pod_deleted(pod_facts(pods[0]))
            tracker.observe_pod(pod_facts({**pods[1], "status": {"phase": "Succeeded"}}))
            tracker.observe_pod(pod_facts({**pods[2], "status": {"phase": "Running"}}))
            return listed

    life = SandboxLifecycle(SlowList(api), REF, Settings(), {}, lambda *event: None, LOG)
    asyncio.run(life.resync_pods(spec, tracker))
    assert [f.name for f in tracker.live_pods()] == [f"{JOB}-2-abcde"]
    assert (tracker.running, tracker.unschedulable()) == (1, [])
    assert [f.name for f in tracker.take_reads()] == [f"{JOB}-1-abcde"]
