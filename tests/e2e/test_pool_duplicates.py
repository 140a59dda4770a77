"""A cold pod the Job controller makes for an index a claimed pod holds costs the index nothing.

The Job controller makes a pod for every index it sees none for, from its informer; one that has
not seen a claim yet makes a cold pod for the claimed index too, then deletes it as the index's
duplicate (docs/design.md §5.17). Were that pod's end counted, under ``retries.infrastructure: 0``
it would fail the index (upstream ``isIndexFailed``) and the Job would delete the claimed pod. It
is not: the controller takes its tracking finalizer off a pod before it deletes it (upstream
``deleteJobPods``), and the operator hands it nothing and judges nothing of it (core.pools
``shadowed_by_claim``). The test plays the late informer: once the Job adopted the claimed pod,
it adds a pod of the Job's template for the same index, owned by the Job, with the tracking
finalizer, held unscheduled (a scheduling gate).
"""

from __future__ import annotations

import json

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from tests.e2e.test_pools import pool, pooled_batch, wait_pool
from tests.support.batches import apply, unique, wait_finished
from tests.support.kube import wait_for
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

# The Job controller's finalizer on each pod it has not counted yet (upstream "Job tracking with
# finalizers"); the operator never reads or writes it.
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
SLOW_EPISODE = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready")
time.sleep(30)
emit("reward", reward=1.0)
'''


def _get(kind: str, name: str, namespace: str) -> dict | None:
    done = kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_a_cold_duplicate_of_a_claimed_index_does_not_fail_it(operator_process, namespace):
    pool_name = unique("dup")
    body = pool(pool_name, 1)
    body["spec"]["task"]["files"]["episode.py"] = SLOW_EPISODE
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    full = wait_pool(pool_name, namespace, lambda st: st.get("readyPods") == 1, timeout=180)
    sandbox = full["status"]["sandboxNamespace"]

    name = unique("dup")
    apply(pooled_batch(name, pool_name, 1, retries={"infrastructure": 0}), namespace)
    batch = wait_for(what="the batch's uid", timeout=120, predicate=lambda: (_get("rolloutbatch", name, namespace) or {}).get("metadata"))
    job = wait_for(what="the batch's Job", timeout=120, predicate=lambda: next(
        (j for j in json.loads(kubectl("get", "jobs", "-n", sandbox, "-o", "json").stdout)["items"]
         if j["metadata"].get("labels", {}).get(naming.LABEL_BATCH_UID) == batch["uid"]), None))
    job_uid = job["metadata"]["uid"]

    def adopted():
        pods = json.loads(kubectl("get", "pods", "-n", sandbox, "-o", "json").stdout)["items"]
        return [p for p in pods if any(o.get("uid") == job_uid for o in p["metadata"].get("ownerReferences") or [])
                and (p.get("status") or {}).get("phase") == "Running"]
    claimed = wait_for(what="the claimed pod adopted by the Job and running", timeout=120, predicate=adopted)[0]
    assert claimed["metadata"]["annotations"].get(naming.ANNOTATION_CLAIMED_BY) == batch["uid"]

    template = job["spec"]["template"]
    duplicate = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job['metadata']['name']}-late-0", "namespace": sandbox,
                     "labels": template["metadata"]["labels"],
                     "annotations": {**template["metadata"].get("annotations", {}), v.COMPLETION_INDEX_KEY: "0"},
                     "finalizers": [JOB_TRACKING_FINALIZER],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                          "uid": job_uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {**template["spec"], "schedulingGates": [{"name": "rolloutbatch.test/late-informer"}]},
    }
    kubectl("create", "-f", "-", input=json.dumps(duplicate))

    done = wait_finished(name, namespace, timeout=180, operator=operator_process)
    status = done["status"]
    assert status["phase"] == "Succeeded" and status["succeededEpisodes"] == 1, status
    assert not status.get("retriedEpisodes"), status   # the duplicate's end is no attempt of the index
    job = _get("job", job["metadata"]["name"], sandbox)
    if job is not None:   # deleted with its batch's end, or not yet
        assert not (job.get("status") or {}).get("failedIndexes"), job["status"]
    left = _get("pod", duplicate["metadata"]["name"], sandbox)
    assert left is None or JOB_TRACKING_FINALIZER not in (left["metadata"].get("finalizers") or []), left["metadata"]
