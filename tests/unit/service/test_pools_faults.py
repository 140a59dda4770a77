"""The warm pools' services against races, refusals and transient errors, on the API in memory
(service.pools, service.pool_claims). Each test is a defect an attack review found (each
docstring says what it did before it was fixed)."""
from __future__ import annotations

import asyncio
import time

import pytest

from rolloutbatch import GROUP, VERSION
from rolloutbatch.core import naming, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.kube.errors import Invalid, Unavailable
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import pool_claims
from rolloutbatch.service import pools as pool_service
from tests.unit.service.memory_pool import (BATCH, NS, POOL_NS, claimed_indexes, triple, drain, batch_spec, delivery, filled, live, make_pool,
                                            pod_names, reconciler, run, set_status)


POOL_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm"


def _claim_now(api, name: str, index: int = 0) -> None:
    """Another coroutine of the operator (a batch's provisioning) claims the pod now."""
    pod = api.get_object("Pod", name, POOL_NS)
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                    pools.claim_patch(pod, BATCH, index, time.time(), 60), "claim")


# -- the pool deletes a pod a batch claimed since the pool listed it ------------------------------------
@pytest.mark.parametrize("how", ["scale to 0", "pool deleted"])
def test_the_pool_never_deletes_a_pod_claimed_since_its_list(api, how):
    """The round (stale, surplus) and the deletion list warm pods, then delete each with a uid
    precondition only. A claim landing in between (another coroutine; the list->delete window grows
    with the pod count) is deleted anyway: a plain DELETE sets no DisruptionTarget, sh as PID 1
    ignores SIGTERM, exit 137 is FailIndex and the verdict NonZeroExit: the agent's failure."""
    rec = filled(api, 1)
    (name,) = pod_names(api)
    if how == "scale to 0":
        api.merge_patch(POOL_PATH, {"spec": {"size": 0}}, "scale")
        rec.body = live(api)
    api.meanwhile("DELETE", "Pod", lambda: _claim_now(api, name))
    run(rec.round() if how == "scale to 0" else rec.delete())
    pod = api.get_object("Pod", name, POOL_NS)
    assert pod is not None and pools.claimed_by(pod) == BATCH.uid


# -- a pool's network tightened later ---------------------------------------------------------------------
def test_changing_the_network_to_deny_all_closes_egress(api):
    """spec.network is mutable ("Every field may change"), and _ensure_children re-runs on the change,
    but kube.pool_storage._ensure returns an existing NetworkPolicy unchanged: a pool moved from
    AllowEgress to DenyAll keeps egress open for every pod, warm or claimed, with no sign of it
    (the pods are not even stale: the network is not in template_digest)."""
    make_pool(api, 1, network=v.NETWORK_ALLOW_EGRESS)
    rec = reconciler(api)
    run(rec.round())
    api.merge_patch(POOL_PATH, {"spec": {"network": v.NETWORK_DENY_ALL}}, "tighten")
    rec.body = live(api)
    run(rec.round())
    policy = api.get_object("NetworkPolicy", naming.DEDICATED_POLICY, POOL_NS)
    assert "Egress" in policy["spec"]["policyTypes"]


# -- the task files under a running episode -----------------------------------------------------------------
def test_a_task_change_does_not_rewrite_the_files_of_claimed_pods(api):
    """task_configmap says "pods mount the files as they were at start", but the one ConfigMap is
    replaced in place, and the kubelet syncs configMap volumes into running pods: an episode
    (and a running batch's later cold pods) see the new task mid-batch, unrecorded."""
    rec = filled(api, 1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(episodes=1, parallelism=1), rec.ref, 60)))
    (pod,) = fresh
    volume = next(vol for vol in pod["spec"]["volumes"] if vol["name"] == "task")
    api.merge_patch(POOL_PATH, {"spec": {"task": {"files": {"e.py": "y"}}}}, "new task")
    rec.body = live(api)
    run(rec.round())
    assert api.get_object("ConfigMap", volume["configMap"]["name"], POOL_NS)["data"] == {"episode.py": "x"}


# -- status -------------------------------------------------------------------------------------------------
def test_claimed_pods_are_counted(api):
    """status.claimedPods ("Pods handed to batches since the pool was created, a counter that only
    grows", the CLAIMED column) is only ever copied from the previous status: always 0."""
    rec = filled(api, 2)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(episodes=2, parallelism=2), rec.ref, 60))
    rec.body = live(api)
    run(rec.round())
    assert live(api)["status"]["claimedPods"] == 2


def test_a_task_the_api_refuses_is_said_in_the_status(api):
    """parse_pool_spec does not check task file names or their total size (the CRD leaves key syntax to
    the operator); the API refuses the ConfigMap (422) and run() only logs and retries every 2 s,
    forever: the pool has no status at all, no Stalled, no Event."""
    make_pool(api, 1, task={"files": {"a/b": "x"}})
    api.fail("POST", "ConfigMap", Invalid('ConfigMap "rp-x-task" is invalid: data[a/b]: a valid config key '
                                          "must consist of alphanumeric characters, '-', '_' or '.'", status=422),
             times=1000)
    rec = reconciler(api)

    async def go() -> None:
        try:
            await asyncio.wait_for(rec.run(), 0.5)
        except asyncio.TimeoutError:
            pass
    run(go())
    status = live(api).get("status") or {}
    assert status.get("message") or any(c.get("status") == "True" for c in status.get("conditions") or []
                                        if c.get("type") == "Stalled")


def test_a_pool_whose_namespace_was_deleted_recovers(api, monkeypatch):
    """The children are ensured only when (generation, task digest) changes: once the pool's namespace
    is deleted (by hand, or a cleanup), every later round's creates fail (PodsNotCreated, retried each
    STUCK_BACKOFF) and the namespace, its default-deny NetworkPolicy and task ConfigMap are never made
    again until someone edits the pool's spec."""
    monkeypatch.setattr(pool_service, "STUCK_BACKOFF", 0.0)
    rec = filled(api, 2)
    run(rec.round())
    api.delete(f"/api/v1/namespaces/{POOL_NS}", "delete namespace")
    for _ in range(3):
        run(rec.round())
    assert api.get_object("Namespace", POOL_NS) is not None
    assert api.get_object("NetworkPolicy", naming.DEDICATED_POLICY, POOL_NS) is not None
    assert len(pod_names(api)) == 2


# -- a pooled batch's side --------------------------------------------------------------------------------
def test_a_failed_annotation_does_not_evict_a_pod_running_its_episode(api):
    """_deliver evicts on any exception, including the delivered-at PATCH after a successful hand-over: a
    transient 503 there throws away an episode that is already running (an infrastructure retry of
    the index: the first attempt's outcome is discarded, a re-sample the agent did not earn or lose)."""
    filled(api, 1)
    spec = batch_spec(episodes=1, parallelism=1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    name = fresh[0]["metadata"]["name"]
    api.set_attach(POOL_NS, name, lambda container, stdin: None)
    api.fail("PATCH", "Pod", Unavailable("the server is currently unable to handle the request", status=503))
    events: list = []
    d = delivery(api, spec, events, [])

    async def go() -> None:
        d.claimed(fresh)
        await drain(d)
    run(go())
    assert api.get_object("Pod", name, POOL_NS) is not None, "the running episode was evicted"
    assert [e[1] for e in events if e[1] == v.EVENT_DELIVERY_FAILED] == []


def test_a_transient_error_creating_the_job_does_not_stall_the_batch(api):
    """provision() turns every KubeError of the Job's creation into Stalled(ProvisioningRefused), a
    terminal Failed batch, where service.provisioning re-raises transient ones (the one error
    policy, design §5.10). Its warm pods are claimed (and handed their episodes) already: they run
    on as orphans until their deadline."""
    filled(api, 2)
    api.fail("POST", "Job", Unavailable("etcdserver: request timed out", status=503))
    try:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    except Stalled as exc:
        pytest.fail(f"a transient 503 stalled the batch: {exc}")
    except Unavailable:
        pass   # retried by the reconciler: fine


@pytest.mark.parametrize("edited", ["\u00b2", "\u0663", " 1", "1\n"])   # "²" and "٣" pass str.isdigit()
def test_a_claims_index_edited_by_hand_is_left_out_not_a_crash(api, edited):
    """As enrol says: a claim whose index annotation was edited to anything but decimal digits
    is left out, by the enrolment and by a claim run again (a restart mid-provisioning); int("²")
    raised, and the provisioning stalled as a bug ("٣" was read as index 3)."""
    rec = filled(api, 2)
    spec = batch_spec(episodes=1, parallelism=1)
    claims = run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60))
    (name,) = claimed_indexes(api)
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                    {"metadata": {"annotations": {v.COMPLETION_INDEX_KEY: edited}}}, "edited by hand")
    pods = [api.get_object("Pod", p["metadata"]["name"], POOL_NS) for p in claims.unenrolled]
    assert run(pool_claims.enrol(PoolStorage(api), POOL_NS, BATCH, pods)) == []
    run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60))


def _conditions(api):
    return {c["type"]: c["status"] for c in live(api)["status"]["conditions"]}


def test_a_scale_down_writes_the_pods_left_not_those_it_deleted(api):
    """`kubectl scale rp/warm --replicas=1` of a full pool of 3: the round deletes 2 warm pods, and
    its status said readyPods 3 ("3/1 warm", Ready) until the next round, 5 s later; readyPods is
    what /scale reads."""
    rec = filled(api, 3)
    run(rec.round())
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 1}}, "scale")
    rec.body = live(api)
    run(rec.round())
    assert len(pod_names(api)) == 1 and live(api)["status"]["readyPods"] == 1, live(api)["status"]["message"]


def test_a_prepare_killed_for_its_memory_stalls_the_pool_not_churns_it(api):
    """OOMKilled (exit 137: the kernel's KILL, no launcher traps it) every time: the template cannot
    run, so the pool says Stalled with the reason and waits out the back-off, as for a prepare that
    fails; it made a new pod every round, Filling for ever."""
    make_pool(api, 1)
    rec = reconciler(api)
    run(rec.round())
    made = set(pod_names(api))
    for _ in range(4):
        for name in pod_names(api):
            set_status(api, name, {"phase": "Failed", "containerStatuses": [
                {"name": "episode", "started": False, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
        run(rec.round())
        made |= set(pod_names(api))
    assert len(made) <= 2 and _conditions(api)["Stalled"] == "True"
    assert "OOMKilled" in live(api)["status"]["message"]


def test_a_namespace_deleted_from_under_the_pool_is_made_again_and_refilled_at_once(api):
    """The creations meeting the missing namespace (404) stalled the pool PodsNotCreated for the
    60 s back-off, saying its template cannot run: the namespace came back, its pods a minute later."""
    rec = filled(api, 2)
    run(rec.round())
    api.delete(f"/api/v1/namespaces/{POOL_NS}", "kubectl delete ns")
    for _ in range(3):
        run(rec.round())
    assert api.get_object("Namespace", POOL_NS) is not None and len(pod_names(api)) == 2
    assert _conditions(api)["Stalled"] == "False", live(api)["status"]["message"]
