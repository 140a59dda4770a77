"""Hostile neighbours: what a user with only namespace rights can forge counts for nothing.

Each forgery is made by ``Tenant`` (a ServiceAccount with the built-in ``edit`` role in one
namespace, kubectl ``--as``), never by the operator's account or the admin: pods and Jobs that
carry a victim batch's uid label, in another namespace and inside a Shared batch's own, and
results ConfigMaps written by hand under the batch's names. The victim's episodes, rows and sums
must be its own; a forgery costs the forger, not the victim.
"""
from __future__ import annotations

import json
import time

import pytest

from tests.support import kube
from tests.support.batches import apply, episode_batch, get, results, unique, wait_finished
from tests.support.operator import QUICK_LEASE, OperatorProcess, kubectl
from tests.support.tenant import Tenant

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

UID_LABEL = "rl.agentruntime.io/batch-uid"
SLOW = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); time.sleep(float(os.environ.get("HOLD", "8"))); emit("reward", reward=1)
'''
FORGED = '''
import json, time
for e in ("ready", "reward"):
    print(json.dumps(dict(event=e, at=time.time(), episode_id="forged", reward=1000000)), flush=True)
'''


def forged_pod(name: str, batch_uid: str, index: int, **meta) -> dict:
    pod = kube.simple_pod(name, FORGED)
    pod["metadata"].update(labels={UID_LABEL: batch_uid, "batch.kubernetes.io/job-completion-index": str(index)},
                           annotations={"batch.kubernetes.io/job-completion-index": str(index)}, **meta)
    return pod


def wait_running(name: str, namespace: str, timeout: float = 120) -> dict:
    def running():
        obj = get(name, namespace)
        return obj if (obj.get("status") or {}).get("phase") == "Running" else None
    return kube.wait_for(running, timeout=timeout, what=f"batch {namespace}/{name} running")


def assert_own_results(name: str, namespace: str, episodes: int) -> None:
    st = wait_finished(name, namespace, timeout=300)["status"]
    assert st["phase"] == "Succeeded", st
    assert (st["succeededEpisodes"], st["rewardSum"]) == (episodes, float(episodes)), st
    job = st["jobName"]
    doc = results(name, namespace)
    assert sorted(r["index"] for r in doc["pods"]) == list(range(episodes))
    assert all(r["pod"].startswith(f"{job}-") and r["reward"] == 1 for r in doc["pods"]), doc["pods"]


@pytest.fixture
def neighbour(kube_api):
    name = kube.create_namespace(kube_api, "neighbour")
    yield Tenant(name)
    kube.delete_namespace(kube_api, name)


def test_pods_and_jobs_elsewhere_with_the_batchs_label_are_not_its_own(operator_process, namespace, neighbour):
    assert not neighbour.can("create", "pods", namespace)   # rights in its own namespace only
    name = unique("victim")
    created = apply(episode_batch(name, SLOW, episodes=2), namespace)
    uid = created["metadata"]["uid"]
    wait_running(name, namespace)
    job = get(name, namespace)["status"]["jobName"]
    neighbour.create(forged_pod(f"{job}-0-forge", uid, 0))
    neighbour.create(forged_pod("plain-forge", uid, 1))
    forged_job = {"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {"name": job, "labels": {UID_LABEL: uid}},
                  "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                      {"name": "x", "image": "python:3.12-alpine", "command": ["python", "-c", "pass"]}]}}}}
    neighbour.create(forged_job)
    time.sleep(3)
    neighbour.kubectl("delete", "job", job, "-n", neighbour.namespace, "--wait=false")
    assert_own_results(name, namespace, 2)
    events = kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "ForeignPodIgnored" in events


def test_a_forged_pod_inside_a_shared_namespace_is_not_an_episode(operator_process, kube_api):
    shared = kube.create_namespace(kube_api, "shared")
    try:
        tenant = Tenant(shared)
        name = unique("victim")
        created = apply(episode_batch(name, SLOW, episodes=2, isolation={"namespace": "Shared"}), shared)
        uid = created["metadata"]["uid"]
        wait_running(name, shared)
        job = get(name, shared)["status"]["jobName"]
        for index in (0, 1):   # named like the Job's pods, labelled like them, made by the tenant
            tenant.create(forged_pod(f"{job}-{index}-forge", uid, index,
                                     ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                       "uid": "00000000-0000-0000-0000-000000000000",
                                                       "controller": True}]))
        assert_own_results(name, shared, 2)
    finally:
        kube.delete_namespace(kube_api, shared)


def _shard(name: str, batch_uid: str, number: int, rows: list[dict], labelled: bool) -> dict:
    doc = {"batch": name, "namespace": "", "uid": batch_uid, "shard": number, "full": False, "pods": rows,
           "groups": []}
    meta: dict = {"name": f"{name}-results-{number}"}
    if labelled:
        meta["labels"] = {UID_LABEL: batch_uid, "rl.agentruntime.io/role": "results-shard"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"results.json": json.dumps(doc)}}


def test_hand_made_results_configmaps_are_not_adopted_after_a_restart(solo_operator, namespace):
    """A sharded batch (2 rows a shard): a forged shard with the batch's labels and a row of
    reward 1e6, and a foreign ConfigMap on a future shard's name; then the operator restarts.
    The forged row is not adopted, the taken name is skipped, every episode has its own row."""
    tenant = Tenant(namespace)
    operator = OperatorProcess("operator-neighbours", extra_args=("--results-shard-rows", "2", *QUICK_LEASE))
    operator.start()
    try:
        name = unique("victim")
        batch = episode_batch(name, SLOW, episodes=7, parallelism=7)
        batch["spec"]["env"] = [{"name": "HOLD", "value": "10"}]
        created = apply(batch, namespace)
        uid = created["metadata"]["uid"]
        wait_running(name, namespace)
        row = {"pod": "forged", "index": 6, "group": 6, "sample": 0, "valid": True, "outcome": "succeeded",
               "reward": 1e6, "reason": None, "message": "", "node": "n", "image_id": "i", "attempts": 1}
        tenant.create(_shard(name, uid, 3, [row], labelled=True))
        tenant.create(_shard(name, uid, 2, [], labelled=False))
        operator.kill()
        time.sleep(2)
        operator.start()
        st = wait_finished(name, namespace, timeout=300, operator=operator)["status"]
        assert st["phase"] == "Succeeded", st
        assert (st["succeededEpisodes"], st["rewardSum"], st["lostEpisodes"]) == (7, 7.0, 0), st
        doc = results(name, namespace)
        assert sorted(r["index"] for r in doc["pods"] if r["reward"] == 1) == list(range(7)), doc["pods"]
        assert not [r for r in doc["pods"] if r["reward"] == 1e6]
        assert f"{name}-results-2" in [s["name"] for s in doc["shards"] if s.get("skipped")]
        foreign = json.loads(kubectl("get", "configmap", f"{name}-results-2", "-n", namespace, "-o", "json").stdout)
        assert UID_LABEL not in (foreign["metadata"].get("labels") or {})   # never touched
    finally:
        operator.stop()


def test_an_unschedulable_batch_says_so_and_stalls_with_the_schedulers_reason(solo_operator, namespace):
    operator = OperatorProcess("operator-unschedulable", extra_args=("--unschedulable-grace", "20"))
    operator.start()
    try:
        name = unique("huge")
        batch = episode_batch(name, SLOW, episodes=2)
        batch["spec"]["resources"] = {"requests": {"memory": "1Ei"}, "limits": {"memory": "1Ei"}}
        apply(batch, namespace)

        def said():
            st = (get(name, namespace) or {}).get("status") or {}
            return st if st.get("reason") in ("EpisodesUnschedulable", "Unschedulable") else None
        st = kube.wait_for(said, timeout=120, what="the unschedulable pods in the status")
        assert "Insufficient memory" in st["message"] or "nodes are available" in st["message"], st
        st = wait_finished(name, namespace, timeout=180, operator=operator)["status"]
        assert (st["phase"], st["reason"]) == ("Failed", "Unschedulable"), st
        assert "nodes are available" in st["message"], st
        assert st["lostEpisodes"] == 2 and st["progress"] == "2/2", st
    finally:
        operator.stop()


def _memory_gi(quantity: str) -> int:
    """Whole GiB of a memory quantity (a kubelet says e.g. "24563844Ki")."""
    from kubernetes.utils import parse_quantity
    return int(parse_quantity(quantity) // 2 ** 30)


def test_a_busy_cluster_delays_a_batch_and_never_stalls_it(solo_operator, namespace, neighbour, core):
    """A neighbour holding every node's memory for a while: the batch says it waits for room,
    does not stall past --unschedulable-grace, and runs once the room is back."""
    operator = OperatorProcess("operator-busy", extra_args=("--unschedulable-grace", "8"))
    nodes = core.list_node().items
    hog_gi = min(_memory_gi(n.status.allocatable["memory"]) for n in nodes) - 4
    for i, _ in enumerate(nodes):
        hog = kube.simple_pod(f"hog-{i}", "import time; time.sleep(600)")   # deleted once the batch waits
        hog["spec"]["containers"][0]["resources"] = {"requests": {"memory": f"{hog_gi}Gi"}}
        neighbour.create(hog)
    kube.wait_for(lambda: all(kube.pod_phase(core, f"hog-{i}", neighbour.namespace) == "Running"
                              for i in range(len(nodes))), timeout=90, what="the hogs running")
    operator.start()
    try:
        name = unique("patient")
        batch = episode_batch(name, SLOW, episodes=2)
        batch["spec"]["env"] = [{"name": "HOLD", "value": "1"}]
        batch["spec"]["resources"] = {"requests": {"memory": "8Gi"}, "limits": {"memory": "8Gi"}}
        apply(batch, namespace)

        def waiting():
            st = (get(name, namespace) or {}).get("status") or {}
            return st if st.get("reason") == "EpisodesUnschedulable" else None
        st = kube.wait_for(waiting, timeout=120, what="the batch saying it waits for room")
        assert st["phase"] == "Running" and "Insufficient memory" in st["message"], st
        time.sleep(12)    # past the grace: still waiting, not stalled
        st = get(name, namespace)["status"]
        assert (st["phase"], st.get("reason")) == ("Running", "EpisodesUnschedulable"), st
        for i, _ in enumerate(nodes):
            core.delete_namespaced_pod(f"hog-{i}", neighbour.namespace, grace_period_seconds=0)
        st = wait_finished(name, namespace, timeout=240, operator=operator)["status"]
        assert (st["phase"], st["succeededEpisodes"]) == ("Succeeded", 2), st
    finally:
        operator.stop()


@pytest.mark.parametrize("child", ["Job", "task ConfigMap"])
def test_children_a_neighbour_made_under_a_shared_batchs_names_are_not_adopted(solo_operator, kube_api, child):
    """While the operator is down, a neighbour with edit rights in a Shared batch's namespace
    makes the batch's Job (or its task ConfigMap) itself, labelled as the batch's, running its
    own episode code. The operator does not adopt it: the batch stalls (NameConflict), and
    nothing the forgery printed is counted."""
    shared = kube.create_namespace(kube_api, "shared")
    operator = OperatorProcess("operator-adopt")
    try:
        tenant = Tenant(shared)
        name = unique("victim")
        created = apply(episode_batch(name, SLOW, episodes=2, isolation={"namespace": "Shared"}), shared)
        uid = created["metadata"]["uid"]
        short = uid.replace("-", "")[:10]
        labels = {UID_LABEL: uid}
        if child == "Job":
            forged = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"rb-{short}", "labels": labels},
                      "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed",
                               "template": {"metadata": {"labels": labels}, "spec": {
                                   "restartPolicy": "Never", "containers": [{
                                       "name": "episode", "image": "python:3.12-alpine",
                                       "command": ["python", "-c", FORGED]}]}}}}
        else:
            forged = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"rb-{short}-task", "labels": labels},
                      "data": {"episode.py": FORGED}}
        tenant.create(forged)
        operator.start()
        st = wait_finished(name, shared, timeout=180, operator=operator)["status"]
        assert (st["phase"], st["reason"]) == ("Failed", "NameConflict"), st
        assert not st.get("rewardSum") and not st.get("succeededEpisodes"), st
    finally:
        operator.stop()
        kube.delete_namespace(kube_api, shared)
