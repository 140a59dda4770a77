"""spec.queueName on the devcluster with Kueue's own controller (devcluster/kueue.py): two batches
over one quota run one after the other; a higher priority preempts a lower one and both end with
every episode accounted for; a queue that does not exist stalls the batch before anything runs.

Each test makes its own ClusterQueue (a quota it can fill) and a LocalQueue in its namespace.
Episodes request 100m CPU (the spec's default), so a quota of N x 100m runs N episodes at once.
"""
from __future__ import annotations

import json

import pytest

from rolloutbatch.core import queueing
from tests.support.batches import apply, condition, episode_batch, results, unique, wait_finished, wait_status
from tests.support.operator import kubectl

pytestmark = [pytest.mark.cluster]

SLEEPER = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); time.sleep(float(os.environ.get("SLEEP", "6"))); emit("reward", reward=1)
'''


def create(obj: dict) -> None:
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))


@pytest.fixture
def queue(namespace):
    """A ClusterQueue of 2 x 100m CPU (two episodes at once) that may preempt lower priorities
    within itself, and the namespace's LocalQueue `team` on it; removed after the test."""
    name = unique("e2e-cq")
    create({"apiVersion": queueing.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                         "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "200m"},
                                                                  {"name": "memory", "nominalQuota": "4Gi"}]}]}]}})
    create({"apiVersion": queueing.API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": namespace}, "spec": {"clusterQueue": name}})
    yield "team"
    kubectl("delete", "localqueue", "team", "-n", namespace, "--ignore-not-found", "--wait=false", check=False)
    kubectl("delete", "clusterqueue", name, "--ignore-not-found", "--wait=false", check=False)


def first_pod_created(obj: dict) -> float:
    rows = results(obj["metadata"]["name"], obj["metadata"]["namespace"])["pods"]
    return min(row["pod_created"] for row in rows if row.get("pod_created"))


def test_two_batches_over_one_quota_run_one_after_the_other(operator_process, namespace, queue):
    first, second = unique("first"), unique("second")
    # the first holds the quota 30 s past its start: the second's Queued must be seen meanwhile
    apply(episode_batch(first, SLEEPER, episodes=2, queueName=queue, env=[{"name": "SLEEP", "value": "30"}]),
          namespace)
    wait_status(first, namespace, lambda st: st.get("phase") == "Running", timeout=120)
    apply(episode_batch(second, SLEEPER, episodes=2, queueName=queue, env=[{"name": "SLEEP", "value": "8"}]),
          namespace)
    queued = wait_status(second, namespace, lambda st: st.get("phase") == "Queued" and "Kueue" in st.get("message", ""),
                         timeout=60)
    assert queued["status"]["reason"] == "WaitingForAdmission"
    done_first = wait_finished(first, namespace, timeout=180, operator=operator_process)
    done_second = wait_finished(second, namespace, timeout=240, operator=operator_process)
    for obj in (done_first, done_second):
        assert obj["status"]["phase"] == "Succeeded" and obj["status"]["succeededEpisodes"] == 2, obj["status"]
        assert obj["status"]["queueWaitSeconds"] >= 0
    # the second waited for the first: none of its pods existed before the first's episodes ended
    last_of_first = max(row["reward_at"] for row in results(first, namespace)["pods"])
    assert first_pod_created(done_second) >= int(last_of_first) - 1
    assert done_second["status"]["queueWaitSeconds"] > done_first["status"]["queueWaitSeconds"]
    events = kubectl("get", "events", "-n", namespace, "--field-selector", "reason=Admitted", "-o", "json").stdout
    assert len(json.loads(events)["items"]) >= 2


@pytest.mark.exclusive   # its priorities would preempt other tests' pods
def test_a_higher_priority_batch_preempts_a_lower_one_and_every_episode_is_accounted_for(
        operator_process, namespace, queue):
    low_class, high_class = unique("e2e-low"), unique("e2e-high")
    for name, value in ((low_class, 100), (high_class, 1000)):
        create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "globalDefault": False})
    try:
        low, high = unique("low"), unique("high")
        apply(episode_batch(low, SLEEPER, episodes=4, parallelism=2, queueName=queue, minSuccessfulEpisodes=1,
                            env=[{"name": "SLEEP", "value": "25"}],
                            podTemplate={"priorityClassName": low_class}), namespace)
        wait_status(low, namespace, lambda st: (st.get("runningEpisodes") or 0) >= 2, timeout=120)
        apply(episode_batch(high, SLEEPER, episodes=2, queueName=queue, env=[{"name": "SLEEP", "value": "2"}],
                            podTemplate={"priorityClassName": high_class}), namespace)
        done_high = wait_finished(high, namespace, timeout=180, operator=operator_process)
        assert done_high["status"]["phase"] == "Succeeded", done_high["status"]
        done_low = wait_finished(low, namespace, timeout=300, operator=operator_process)
        status = done_low["status"]
        rows = results(low, namespace)["pods"]
        assert sorted(row["index"] for row in rows) == [0, 1, 2, 3]      # each index once
        evicted = [row for row in rows if row["reason"] == "EvictedByQueue"]
        assert evicted and all(row["outcome"] == "lost" for row in evicted)
        assert status["lostEpisodes"] == len([r for r in rows if r["outcome"] == "lost"])
        assert status["succeededEpisodes"] + status["failedEpisodes"] + status["lostEpisodes"] == 4
        assert status["progress"] == "4/4"
        evictions = kubectl("get", "events", "-n", namespace, "--field-selector", "reason=EvictedByQueue",
                            "-o", "json").stdout
        assert json.loads(evictions)["items"], "no EvictedByQueue Event"
    finally:
        kubectl("delete", "priorityclass", low_class, high_class, "--ignore-not-found", check=False)


def test_a_batch_naming_a_missing_queue_stalls_before_anything_is_created(operator_process, namespace):
    name = unique("noqueue")
    apply(episode_batch(name, SLEEPER, episodes=1, queueName="nope"), namespace)
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    assert condition(obj, "Stalled")["reason"] == "LocalQueueNotFound"
    assert "nope" in obj["status"]["message"] and not obj["status"].get("sandboxNamespace")


def test_the_devcluster_queue_admits_a_batch_from_default(operator_process):
    """The LocalQueue `make cluster` creates (default/devcluster) admits a batch at once."""
    name = unique("devq")
    apply(episode_batch(name, SLEEPER, episodes=1, queueName="devcluster", env=[{"name": "SLEEP", "value": "0"}]),
          "default")
    try:
        obj = wait_finished(name, "default", timeout=120, operator=operator_process)
        assert obj["status"]["phase"] == "Succeeded" and obj["status"]["queueWaitSeconds"] < 60
    finally:
        kubectl("delete", "rolloutbatch", name, "-n", "default", "--ignore-not-found", "--timeout=60s", check=False)
