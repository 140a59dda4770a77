"""The warm pools' services on the API in memory: the pool's daemon (service.pools) and a pooled
batch's claims and deliveries (service.pool_claims)."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch import GROUP, VERSION
from rolloutbatch.core import naming, pool_census, pool_children, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.scope import CLUSTERWIDE, Scope
from rolloutbatch.core.model import EpisodeResult
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube.errors import Conflict
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import episode_delivery, pool_claims, sandbox
from rolloutbatch.service import pools as service_pools
from tests.support.memory_api import MemoryApi
from tests.unit.service.memory_pool import (BATCH, LOG, NS, POOL_NS, triple, batch_spec, claimed_indexes,
                                            daemon_until_its_status, delivery, hand_over, delivery_round, drain, filled, live,
                                            make_pool, pod_names, reconciler, replaced_then_shrunk, run, set_status,
                                            refuse, warm)


def test_a_pool_fills_to_its_size_and_says_when_it_is_warm(api):
    make_pool(api, 3)
    rec = reconciler(api)
    run(rec.round())
    assert len(pod_names(api)) == 3
    assert api.get_object("Namespace", POOL_NS)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    task = pool_children.task_configmap_name(rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
    assert api.get_object("ConfigMap", task, POOL_NS)["data"] == {"episode.py": "x"}
    assert api.get_object("NetworkPolicy", naming.DEDICATED_POLICY, POOL_NS)["spec"]["policyTypes"] == ["Ingress", "Egress"]
    status = live(api)["status"]
    assert (status["readyPods"], status["startingPods"]) == (0, 3)
    for name in pod_names(api):
        warm(api, name)
    run(rec.round())
    status = live(api)["status"]
    assert status["readyPods"] == 3 and status["sandboxNamespace"] == POOL_NS
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True", "Stalled": "False",
                                                                         "Reconciling": "False"}
    run(rec.round())
    assert len(pod_names(api)) == 3     # full: nothing more


def test_each_round_keeps_a_connection_open_for_each_claim_the_pool_can_take(api):
    """The claims of a full pool go out at once: their connections are opened by the pool's
    rounds (kube.async_writes), not in the claims' hand-over time; as many as the pool keeps,
    from its first round (the writer itself opens them once per period)."""
    class Writer:
        def __init__(self):
            self.warmed = []

        async def warm(self, connections):
            self.warmed.append(connections)

        async def create(self, path, obj, what):   # the refill's pods go through the writer too
            return api.create(path, obj, what)

        async def merge_patch(self, path, patch, what):   # and the pool's status
            return api.merge_patch(path, patch, what)
    writer = Writer()
    make_pool(api, 3)
    rec = reconciler(api, writer=writer)
    run(rec.round())
    for name in pod_names(api)[:2]:
        warm(api, name)
    run(rec.round())
    warm(api, pod_names(api)[2])
    run(rec.round())
    assert writer.warmed == [3, 3, 3]
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 5}}, "scale")
    rec.body = live(api)   # scaled: as many more
    run(rec.round())
    assert writer.warmed[-1] == 5


@given(st.integers(min_value=0, max_value=100_000), st.integers(min_value=0, max_value=100_000))
def test_a_filling_pools_rounds_space_out_as_its_list_grows_within_bounds(a, b):
    small, large = sorted((a, b))
    period = service_pools.filling_period
    assert service_pools.FILLING_PERIOD <= period(small) <= period(large) <= service_pools.FULL_PERIOD


@pytest.mark.parametrize("size, period", [(20, service_pools.FILLING_PERIOD),
                                          (200, 200 / service_pools.PODS_PER_FILLING_SECOND)])
def test_a_large_pool_filling_lists_its_pods_less_often_than_a_small_one(api, size, period):
    make_pool(api, size, maxSize=size)
    rec = reconciler(api)
    run(rec.round())                           # the pods made, none started yet
    assert run(rec.round()) == period          # the next round lists them all


def test_a_name_the_server_drew_twice_is_made_again_without_a_back_off(api):
    """generateName's 5 characters can repeat: an API server before Kubernetes 1.31 (no
    RetryGenerateName) answers 409. No fault of the template's: the pod is made next round, and
    the pool neither stalls nor waits out the stuck back-off."""
    make_pool(api, 3)
    api.fail("POST", "Pod", Conflict('pods "warm-abcde" already exists', status=409), times=1)
    rec = reconciler(api)
    run(rec.round())
    assert len(pod_names(api)) == 2
    run(rec.round())
    assert len(pod_names(api)) == 3
    conditions = {c["type"]: c["status"] for c in live(api)["status"]["conditions"]}
    assert conditions.get("Stalled") != "True", live(api)["status"]


def test_a_dead_warm_pod_is_replaced_and_a_surplus_removed(api):
    make_pool(api, 2)
    replaced_then_shrunk(api, reconciler(api))


def test_a_template_that_cannot_run_is_said_once_and_not_churned(api):
    make_pool(api, 2, image="no-such-image:0")
    events: list = []
    rec = reconciler(api, events)
    run(rec.round())
    for name in pod_names(api):
        set_status(api, name, {"phase": "Pending", "containerStatuses": [
            {"name": "episode", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]})
    for _ in range(3):
        run(rec.round())
    assert pod_names(api) == []          # the broken pods went, none was made again
    stalled = {c["type"]: c for c in live(api)["status"]["conditions"]}["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == v.PoolReason.IMAGE
    assert [e[1] for e in events] == [v.PoolReason.IMAGE]
    # a fixed spec is tried at once
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"image": "python:3.12-alpine"}}, "fix")
    rec.body = live(api)
    run(rec.round())
    assert len(pod_names(api)) == 2


def _one_round_of_the_daemon(rec) -> None:
    """The daemon's loop (its error handling included) for its first round, then cancelled."""
    daemon_until_its_status(rec)


def test_a_pool_whose_spec_the_operator_refuses_is_never_ready(api):
    """The CRD leaves a task file's name to the operator: a full pool changed to a name it refuses
    is Stalled (InvalidSpec) and not Ready, its warm pods still counted (`kubectl wait
    --for=condition=Ready` must not pass on it)."""
    rec = filled(api, 3)
    run(rec.round())
    assert {c["type"]: c["status"] for c in live(api)["status"]["conditions"]}["Ready"] == "True"
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"task": {"files": {"my file.py": "x"}}}}, "break")
    rec.body = live(api)
    _one_round_of_the_daemon(rec)
    status = live(api)["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["Stalled"]["status"] == "True"
    assert conditions["Stalled"]["reason"] == v.PoolReason.INVALID_SPEC
    assert "invalid spec" in status["message"] and "0/0" not in status["message"]
    assert status["readyPods"] == 3 and len(pod_names(api)) == 3


def test_a_pool_stalled_on_its_spec_says_so_in_one_warning_event(api):
    """`kubectl describe rp` showed no Event for a stall that no pod caused (InvalidSpec here):
    one Warning when it begins, none for each round it goes on."""
    filled(api, 1)
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"task": {"files": {"my file.py": "x"}}}}, "break")
    events: list = []
    rec = reconciler(api, events)
    for _ in range(3):
        _one_round_of_the_daemon(rec)
        rec.body = live(api)
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", v.PoolReason.INVALID_SPEC)], events
    assert "invalid spec" in events[0][2]


def test_a_stuck_pool_is_not_ready_even_when_full():
    ref = pool_spec.PoolRef(namespace=NS, name="warm", uid="u")
    spec = pool_spec.parse_pool_spec({"size": 1, "task": {"files": {"e.py": "x"}}})
    found = pool_census.PoolCensus(("w",), (), (), (("p", v.PoolReason.IMAGE, "not found"),), ())
    conditions = {c["type"]: c["status"] for c in pool_census.pool_status(ref, spec, found, 1, 0, "t")["conditions"]}
    assert conditions == {"Ready": "False", "Stalled": "True", "Reconciling": "False"}


def test_a_pool_whose_runtime_class_is_missing_says_so_and_fills_once_it_exists(api):
    make_pool(api, 2, runtimeClassName="cube")
    events: list = []
    rec = reconciler(api, events)
    run(rec.round())
    assert pod_names(api) == []
    conditions = {c["type"]: c for c in live(api)["status"]["conditions"]}
    assert conditions["Stalled"]["status"] == "True" and conditions["Stalled"]["reason"] == v.PoolReason.RUNTIME_CLASS
    assert conditions["Ready"]["status"] == "False" and "cube" in conditions["Stalled"]["message"]
    assert [e[1] for e in events] == [v.PoolReason.RUNTIME_CLASS]
    run(rec.round())
    assert len(events) == 1   # said once while it is waited out
    api.put({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "cube"}, "handler": "runsc"})
    run(rec.round())   # at once: no pod failed, so no back-off is waited out
    assert len(pod_names(api)) == 2


def _team_bound(api, hard: dict) -> None:
    """The admin's bound on the pool's namespace: a ResourceQuota, none of it used."""
    api.put({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-bound", "namespace": NS},
             "spec": {"hard": hard}, "status": {"hard": hard, "used": {}}})


CPUS = {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}


def test_a_pool_whose_namespace_quota_cannot_hold_its_warm_pods_stalls_before_making_one(api):
    """Its warm pods run in its own namespace, which no quota of its namespace reaches: spec.size
    of them must fit what the quota leaves (docs/design.md §8.1), and a scale past it stalls too."""
    _team_bound(api, {"requests.cpu": "7"})
    make_pool(api, 4, resources=CPUS)
    events: list = []
    rec = reconciler(api, events)
    run(rec.round())
    assert pod_names(api) == []
    stalled = {c["type"]: c for c in live(api)["status"]["conditions"]}["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == v.PoolReason.QUOTA == "QuotaExceeded"
    assert "team-bound leaves 7 of requests.cpu" in stalled["message"] and "4 warm pods" in stalled["message"]
    assert [e[1] for e in events] == [v.PoolReason.QUOTA]
    run(rec.round())
    assert pod_names(api) == [] and len(events) == 1   # said once while it lasts
    # scaled to fit: it fills at once, without the back-off of a template that failed
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 3}}, "scale")
    rec.body = live(api)
    run(rec.round())
    assert len(pod_names(api)) == 3


def test_a_refill_is_held_to_a_quota_lowered_since_the_pool_filled(api):
    """The pool's namespace is outside every quota of the pool's own namespace: a quota lowered
    after the fill is read when pods are to be made again, not trusted from the fill."""
    _team_bound(api, {"requests.cpu": "100"})
    make_pool(api, 4, resources=CPUS)
    rec = reconciler(api)
    run(rec.round())
    assert len(pod_names(api)) == 4
    quota = f"/api/v1/namespaces/{NS}/resourcequotas/team-bound"
    api.merge_patch(quota, {"spec": {"hard": {"requests.cpu": "7"}}}, "lowered")
    api.merge_patch(quota + "/status", {"status": {"hard": {"requests.cpu": "7"}}}, "quota controller")
    for name in pod_names(api)[:2]:
        api.delete(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", "gone")
    run(rec.round())
    assert len(pod_names(api)) == 2
    stalled = {c["type"]: c for c in live(api)["status"]["conditions"]}["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == v.PoolReason.QUOTA


def test_a_pooled_batch_is_held_to_its_namespace_quota_before_anything_is_claimed(api):
    """Its cold pods run in the pool's namespace: everything it may hold at once (parallelism + 2
    pods of the pool's template) must fit its own namespace's quota, as a Dedicated batch's."""
    filled(api, 2, resources=CPUS)
    _team_bound(api, {"requests.cpu": "9"})   # the pool's 2 warm pods fit; the batch's 3 + 2 pods do not
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_QUOTA and "5 pods" in err.value.message
    assert claimed_indexes(api) == {} and api.get_object("Job", naming.job_name(BATCH), POOL_NS) is None
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(parallelism=2), lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE))
    assert api.get_object("Job", naming.job_name(BATCH), POOL_NS) is not None


# Two pools of two namespaces whose names map to one pool namespace (naming.pool_namespace keeps
# 40 bits of a digest: a birthday search found this pair; docs/design.md §11).
VICTIM, SQUATTER = ("team-b", "warm-998453"), ("team-a", "warm-1410639")


def _two_pools(api, pairs, emit) -> list:
    """A RolloutPool of each (namespace, name), in that order: their reconcilers."""
    recs = []
    for namespace, name in pairs:
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        api.create(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/rolloutpools",
                   {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutPool", "metadata": {"name": name},
                    "spec": {"size": 1, "task": {"files": {"episode.py": "x"}}}}, "create pool")
        body = api.get_object("RolloutPool", name, namespace)
        recs.append(service_pools.PoolReconciler(PoolStorage(api), body, emit, LOG))
    return recs


def test_two_pools_that_share_a_namespace_keep_the_second_ones_batches_out_of_it(api):
    """The second pool stalls Refused (the namespace is not its own); its batches stall before
    claiming from, or running a Job in, the first pool's namespace."""
    shared = naming.pool_namespace(*VICTIM)
    assert naming.pool_namespace(*SQUATTER) == shared
    for rec in _two_pools(api, (SQUATTER, VICTIM), lambda *e: None):
        _one_round_of_the_daemon(rec)
    victim = api.get_object("RolloutPool", VICTIM[1], VICTIM[0])
    stalled = {c["type"]: c for c in victim["status"]["conditions"]}["Stalled"]
    assert stalled["reason"] == v.PoolReason.REFUSED and shared in stalled["message"]
    ref = dataclasses.replace(BATCH, namespace=VICTIM[0])
    for when_empty in (v.POOL_COLD, v.POOL_WAIT):
        spec = parse_spec({"episodes": 2, "poolRef": {"name": VICTIM[1], "whenEmpty": when_empty}})
        if when_empty == v.POOL_WAIT:
            ready, message, _ = run(pool_claims.readiness(PoolStorage(api), ref, spec))
            assert not ready and f"{shared} of RolloutPool {VICTIM[1]} is not this pool's" in message
        with pytest.raises(Stalled) as err:
            run(pool_claims.provision(Storage(api), PoolStorage(api), ref, spec, lambda *e: None, None,
                                      lambda pods: None, CLUSTERWIDE))
        assert err.value.reason == v.STALL_POOL_CONFLICT and "is not this pool's" in err.value.message
    squatters = [p for p in api.list_objects("Pod", shared) if pool_children.claimed_by(p) == ref.uid]
    assert squatters == [] and api.list_objects("Job", shared) == []


def _squatted(api, events: list):
    """The victim pool made the shared namespace and one of its batches runs a Job there; the
    squatter pool (its name maps to the same namespace) was refused it. Returns the namespace and
    the squatter's reconciler."""
    shared = naming.pool_namespace(*VICTIM)
    recs = _two_pools(api, (VICTIM, SQUATTER), lambda *e: events.append(e))
    for rec in recs:
        _one_round_of_the_daemon(rec)
    victim, squatter = recs
    secret = dataclasses.replace(BATCH, namespace=VICTIM[0], name="team-b-secret-project")
    job = pools.pooled_job(secret, 2, 2, 0, 100, 50, victim.ref,
                           pool_spec.parse_pool_spec(api.get_object("RolloutPool", VICTIM[1], VICTIM[0])["spec"]))
    api.create(f"/apis/batch/v1/namespaces/{shared}/jobs", job, "job")
    return shared, squatter


def test_deleting_a_pool_whose_namespace_is_another_pools_neither_waits_for_nor_names_its_batches(api):
    """§11: the squatted pool is renamed, i.e. deleted. It made nothing in the namespace: its
    deletion ends at once, names none of the other pool's batches (another team's) in its status,
    and leaves the namespace, its pods and its Jobs to their owner, saying so once."""
    events: list = []
    shared, squatter = _squatted(api, events)
    pods_before = api.list_objects("Pod", shared)
    del events[:]
    assert run(squatter.delete()) is None
    assert api.get_object("Namespace", shared) is not None and api.list_objects("Pod", shared) == pods_before
    assert len(api.list_objects("Job", shared)) == 1
    status = api.get_object("RolloutPool", SQUATTER[1], SQUATTER[0]).get("status")
    assert "team-b-secret-project" not in str(status) and "Deleting" not in str(status)
    assert [e[:2] for e in events] == [("Warning", v.PoolReason.REFUSED)] and shared in events[0][2]
    assert "team-b-secret-project" not in events[0][2]


def test_deleting_a_pool_whose_namespace_is_another_pools_ends_even_once_nothing_runs_there(api):
    """With no batch on the shared namespace, the deletion must end (kopf retries a raised error
    for ever: the finalizer was never released), and the namespace stays its owner's."""
    shared, squatter = _squatted(api, [])
    for job in api.list_objects("Job", shared):
        api.delete(f"/apis/batch/v1/namespaces/{shared}/jobs/{job['metadata']['name']}", "delete job")
    assert run(squatter.delete()) is None
    assert api.get_object("Namespace", shared) is not None


@pytest.mark.parametrize("value, reason", [(None, v.PoolReason.PRIORITY_CLASS),
                                           (2_000_000_000, v.PoolReason.PRIORITY_CLASS_DENIED)])
def test_a_pool_may_not_lend_its_batches_a_priority_they_could_not_ask_for(api, value, reason):
    """A batch's PriorityClass must exist and be of the user range (core.admission); a pool's pods
    are its batches' episodes, so its class is held to the same rule: no pod is made."""
    if value is not None:
        api.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
                 "value": value})
    make_pool(api, 2, podTemplate={"priorityClassName": "urgent"})
    events: list = []
    rec = reconciler(api, events)
    run(rec.round())
    assert pod_names(api) == []
    stalled = {c["type"]: c for c in live(api)["status"]["conditions"]}["Stalled"]
    assert stalled["status"] == "True" and stalled["reason"] == reason and "urgent" in stalled["message"]
    assert [e[1] for e in events] == [reason]
    if value is None:   # created in the user range: the pool fills once the back-off passed
        api.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
                 "value": 1000})
        run(rec.round())
        assert len(pod_names(api)) == 2


def test_a_namespaced_install_creates_nothing_and_says_why(api):
    make_pool(api, 2)
    rec = reconciler(api, clusterwide=False)
    run(rec.round())
    assert api.get_object("Namespace", POOL_NS) is None
    stalled = {c["type"]: c for c in live(api)["status"]["conditions"]}["Stalled"]
    assert stalled["reason"] == v.PoolReason.CLUSTER_RIGHTS
    assert run(rec.delete()) is None


def test_deleting_a_pool_waits_for_the_batches_that_hold_its_pods(api):
    make_pool(api, 2)
    rec = reconciler(api)
    run(rec.round())
    job = pools.pooled_job(BATCH, 2, 2, 0, 100, 50, rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
    api.create(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs", job, "job")
    waiting = run(rec.delete())
    assert waiting and "b" in waiting and pod_names(api) == []
    assert api.get_object("Namespace", POOL_NS) is not None
    api.delete(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs/{naming.job_name(BATCH)}", "delete job")
    assert run(rec.delete()) is None
    assert api.get_object("Namespace", POOL_NS) is None


def test_a_batch_never_claims_a_warm_pod_whose_node_stopped_reporting(api):
    """A warm pod whose node went NotReady (its Ready condition turned False by the node lifecycle
    controller, its containers still reported running) was counted in readyPods and claimed
    first (the oldest), and its hand-over through the dead node's kubelet failed. It is now
    neither warm nor claimed: the batch gets the healthy pods."""
    rec = filled(api, 3)
    lost, *healthy = sorted(pod_names(api))
    set_status(api, lost, {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]})
    run(rec.round())
    assert live(api)["status"]["readyPods"] == 2
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=3), rec.ref, 60))
    assert sorted(claimed_indexes(api)) == healthy


@pytest.mark.parametrize("named_by", ["an enrolled pod", "its Job"])
def test_deleting_a_pool_counts_a_batch_once_whatever_holds_its_pods(api, named_by):
    """A batch with a claim not enrolled yet (only its claimed-by annotation: no labels) and an
    enrolled pod or its Job was counted twice, by its name and by its uid: "waiting for 2 batch(es)
    that run on its pods: b, uid b0000000-..." (status.message, the SDK's delete_pool error). Each
    batch is now counted once by its uid, and named by its name when anything of it says it."""
    rec = filled(api, 3)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=2), rec.ref, 60))
    claimed = [p for p in api.list_objects("Pod", POOL_NS) if pool_children.claimed_by(p)]
    assert len(claimed) == 2
    if named_by == "an enrolled pod":
        run(pool_claims.enrol(PoolStorage(api), POOL_NS, BATCH, claimed[:1]))   # the other's still to come
    else:
        job = pools.pooled_job(BATCH, 2, 2, 0, 100, 50, rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
        api.create(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs", job, "job")
    waiting = run(rec.delete())
    assert waiting == "waiting for 1 batch(es) that run on its pods: b", waiting


def test_deleting_a_pool_names_a_batch_by_its_uid_while_nothing_says_its_name(api):
    """Claims not enrolled yet carry only the batch's uid: that is what the message can say."""
    rec = filled(api, 3)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=2), rec.ref, 60))
    waiting = run(rec.delete())
    assert waiting == f"waiting for 1 batch(es) that run on its pods: uid {BATCH.uid}", waiting


def test_deleting_a_pool_lists_its_namespace_once_unless_a_pod_changed_since(api):
    """It listed the warm pods to delete, then the whole namespace again to count the held ones,
    on every try: each delete is of the pod as listed, so one list serves both unless a delete
    is refused (a claim since the list), which the second read is then for."""
    make_pool(api, 2)
    rec = reconciler(api)
    run(rec.round())
    job = pools.pooled_job(BATCH, 2, 2, 0, 100, 50, rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
    api.create(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs", job, "job")
    pod_lists = ("GET", f"/api/v1/namespaces/{POOL_NS}/pods")
    api.calls.clear()
    assert "b" in (run(rec.delete()) or "") and pod_names(api) == []
    assert api.calls.count(pod_lists) == 1, api.calls
    api.delete(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs/{naming.job_name(BATCH)}", "delete job")
    run(rec.round())
    (name, *_) = pod_names(api)
    api.meanwhile("DELETE", "Pod", lambda: api.merge_patch(
        f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
        pools.claim_patch(api.get_object("Pod", name, POOL_NS), BATCH, 0, time.time(), 60), "claim"))
    api.calls.clear()
    assert "b" in (run(rec.delete()) or "")   # the pod claimed since the list holds the namespace
    assert api.calls.count(pod_lists) == 2 and api.get_object("Namespace", POOL_NS) is not None


def test_a_stopped_batch_holds_no_pool_deletion(api):
    """A stop suspends the batch's Job, which then never finishes; with its pods gone it runs nothing
    on the pool, whose deletion must not wait for the batch to be deleted too."""
    make_pool(api, 2)
    rec = reconciler(api)
    run(rec.round())
    job = pools.pooled_job(BATCH, 2, 2, 0, 100, 50, rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
    live_job = api.create(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs", job, "job")
    path = f"/apis/batch/v1/namespaces/{POOL_NS}/jobs/{naming.job_name(BATCH)}"
    api.merge_patch(path, {"spec": {"suspend": True}}, "suspended by another (Kueue): it may run again")
    assert "b" in (run(rec.delete()) or "")
    assert run(Storage(api).suspend_job(naming.job_name(BATCH), POOL_NS, BATCH.uid, live_job["metadata"]["uid"]))
    api.merge_patch(f"{path}/status", {"status": {"terminating": 1}}, "a pod still stopping")
    assert "b" in (run(rec.delete()) or "")
    api.merge_patch(f"{path}/status", {"status": {"terminating": 0}}, "stopped")
    assert run(rec.delete()) is None and api.get_object("Namespace", POOL_NS) is None


# -- a pooled batch's claims ----------------------------------------------------------------------


def test_claims_take_warm_pods_for_the_first_indexes_once(api, monkeypatch):
    monkeypatch.setattr(pool_census, "refill_hold", lambda *a, **k: 0.0)   # refilled at once (the hold: below)
    rec = filled(api, 2)
    spec = batch_spec()
    hits, wanted, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60)))
    assert (hits, wanted, len(fresh)) == (2, 3, 2)
    assert sorted(claimed_indexes(api).values()) == ["0", "1"]
    for pod in fresh:   # claimed, its labels not changed yet (pool_claims.enrol)
        assert pool_children.claimed_by(pod) == BATCH.uid and pod["metadata"]["labels"][naming.LABEL_POOL_UID] == rec.ref.uid
        assert pod["spec"]["activeDeadlineSeconds"] > 60
    # repeated (a restart mid-provisioning): the claims stand, nothing is claimed twice
    run(rec.round())
    for name in pod_names(api):
        if name not in claimed_indexes(api):
            warm(api, name)
    again = run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60))
    assert again.hits == 3 and len(again.claimed) == 1
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"]
    # the batch's clock starts at its first claim: the earlier run's, not this one's
    first = {float(p["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_AT]) for p in fresh}
    assert len(first) == 1 and again.began == first.pop() < float(
        again.claimed[0]["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_AT])


def test_the_pool_refills_only_once_its_claimed_episodes_had_their_seconds(api):
    """A claim's refill waits REFILL_HOLD_SECONDS from the claim and its hand-over: the claimed
    episodes start first."""
    rec = filled(api, 2)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(episodes=1, parallelism=1), rec.ref, 60))
    before = set(pod_names(api))
    period = run(rec.round())
    assert set(pod_names(api)) == before and 0 < period <= pool_census.REFILL_HOLD_SECONDS
    status = live(api)["status"]   # the status is written all the same, and says why nothing starts
    assert status["readyPods"] == 1 and "the refill waits for the episodes just claimed to start" in status["message"]
    claimed = next(iter(claimed_indexes(api)))     # claimed and handed over REFILL_HOLD_SECONDS ago
    old = float(api.get_object("Pod", claimed, POOL_NS)["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_AT])
    earlier = f"{old - pool_census.REFILL_HOLD_SECONDS:.3f}"
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{claimed}", {"metadata": {"annotations": {
        naming.ANNOTATION_CLAIMED_AT: earlier, naming.ANNOTATION_DELIVERED_AT: earlier}}}, "earlier")
    run(rec.round())
    assert len(set(pod_names(api)) - before) == 1 and "refill waits" not in live(api)["status"]["message"]


def test_a_pod_claimed_by_someone_else_meanwhile_is_skipped(api):
    rec = filled(api, 3)
    first = sorted(pod_names(api))[0]

    def steal() -> None:
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{first}",
                        {"metadata": {"labels": {naming.LABEL_EPISODE_ROLE: "episode"}}}, "another claim")
    api.meanwhile("PATCH", "Pod", steal)
    hits, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=2), rec.ref, 60)))
    assert hits == 2 and first not in {p["metadata"]["name"] for p in fresh}


def test_a_predecessors_claim_before_the_list_is_never_claimed_twice_nor_its_index(api):
    """At a failover the operator before may still claim for the batch while this one lists: its
    pod, claimed but not enrolled (its labels still the pool's), must count as the batch's (its
    index taken). One list of the namespace sees it either warm or claimed, never neither."""
    rec = filled(api, 4)
    first = sorted(pod_names(api))[0]
    pod = api.get(f"/api/v1/namespaces/{POOL_NS}/pods/{first}", "get")

    def predecessor_claims() -> None:
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{first}",
                        pools.claim_patch(pod, BATCH, 0, 1796256000.0, 60), "the predecessor's claim")
    api.meanwhile("GET", "Pod", predecessor_claims)   # just before the claim's list
    claims = run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=3), rec.ref, 60))
    indexes = claimed_indexes(api)
    assert sorted(indexes.values()) == ["0", "1", "2"] and indexes[first] == "0"
    assert claims.hits == 3 and first not in {p["metadata"]["name"] for p in claims.claimed}


def test_a_pod_whose_status_changed_since_it_was_listed_is_listed_again_and_claimed(api):
    """A full pool of exactly the batch's size: a claim refused because the pod's own status moved
    (its resourceVersion) must not leave the index cold."""
    rec = filled(api, 2)
    first = sorted(pod_names(api))[0]
    api.meanwhile("PATCH", "Pod", lambda: api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{first}",
                                                          {"metadata": {"annotations": {"kubelet": "x"}}}, "status"))
    hits, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=2), rec.ref, 60)))
    assert hits == 2 and first in {p["metadata"]["name"] for p in fresh}
    assert sorted(claimed_indexes(api).values()) == ["0", "1"]


def test_a_pod_claimed_by_another_batch_meanwhile_is_not_listed_again_as_warm(api):
    rec = filled(api, 2)
    first = sorted(pod_names(api))[0]

    def steal() -> None:
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{first}",
                        {"metadata": {"labels": {naming.LABEL_EPISODE_ROLE: "episode"}}}, "another claim")
    api.meanwhile("PATCH", "Pod", steal)
    hits, wanted, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(parallelism=2), rec.ref, 60)))
    assert (hits, wanted) == (1, 2) and first not in {p["metadata"]["name"] for p in fresh}


@pytest.mark.parametrize("field, said", [
    ({"resources": {"limits": {"memory": "8Gi"}}}, "spec.resources"),
    ({"workspace": {"sizeLimit": "20Gi"}}, "spec.workspace.sizeLimit"),
    ({"workspace": {"mountPath": "/src"}}, "spec.workspace.mountPath"),
    ({"isolation": {"network": "AllowEgress"}}, "spec.isolation.network"),
    ({"isolation": {"namespace": "Shared"}}, "spec.isolation.namespace"),
    ({"isolation": {"resourceQuota": True}}, "spec.isolation.resourceQuota"),
])
def test_a_batchs_own_word_on_its_pods_that_the_pool_contradicts_stalls_before_any_claim(api, field, said):
    """The pool's pods run the episodes: a field the batch set would be ignored (an 8Gi limit the
    agents never got would fail them as their own), so it stalls PoolConflict, naming the field."""
    filled(api, 1)
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(**field), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_POOL_CONFLICT and said in err.value.message, err.value.message
    assert claimed_indexes(api) == {}


@pytest.mark.parametrize("isolation, runs", [({}, True), ({"network": "AllowEgress"}, True),
                                             ({"network": "DenyAll"}, False)])
def test_a_batch_that_asks_for_deny_all_never_runs_with_its_pools_egress(api, isolation, runs):
    """The CRD leaves isolation.network unset: a batch that wrote DenyAll (its episodes must reach
    nothing) on an AllowEgress pool stalls PoolConflict, naming the field; one that said nothing
    runs on the pool's network."""
    filled(api, 1, network="AllowEgress")
    provision = pool_claims.provision(Storage(api), PoolStorage(api), BATCH,
                                      batch_spec(episodes=1, parallelism=1, isolation=isolation), lambda *e: None,
                                      None, lambda pods: None, CLUSTERWIDE)
    if runs:
        run(provision)
        assert list(claimed_indexes(api).values()) == ["0"]
        return
    with pytest.raises(Stalled) as err:
        run(provision)
    assert err.value.reason == v.STALL_POOL_CONFLICT and "spec.isolation.network \"DenyAll\"" in err.value.message
    assert "AllowEgress" in err.value.message and claimed_indexes(api) == {}


def test_a_batch_that_repeats_its_pools_own_values_runs(api):
    """The same amounts however spelled (`cpu: 1`, "1000m"; "256Mi", 268435456)."""
    filled(api, 1, resources={"limits": {"memory": "256Mi", "cpu": "1000m"}}, network="AllowEgress")
    spec = batch_spec(episodes=1, parallelism=1, resources={"limits": {"memory": "268435456", "cpu": 1}},
                      isolation={"network": "AllowEgress"})
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE))
    assert list(claimed_indexes(api).values()) == ["0"]


def test_a_missing_pool_or_another_image_stalls_before_anything_is_claimed(api):
    storage, pool_storage = Storage(api), PoolStorage(api)
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(storage, pool_storage, BATCH, batch_spec(), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_POOL_NOT_FOUND
    filled(api, 1)
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(storage, pool_storage, BATCH, batch_spec(image="other:1"), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_POOL_CONFLICT
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(storage, pool_storage, BATCH, batch_spec(), lambda *e: None, None,
                                  lambda pods: None, Scope(namespaces=(NS,))))
    assert err.value.reason == v.STALL_CLUSTER_RIGHTS
    assert claimed_indexes(api) == {}


def test_waiting_for_the_pool_counts_its_warm_pods_and_says_when_it_is_too_small(api):
    make_pool(api, 2)
    rec = reconciler(api)
    run(rec.round())
    spec = parse_spec(
        {"episodes": 4, "parallelism": 3, "poolRef": {"name": "warm", "whenEmpty": "Wait"}})
    assert spec.pool_when_empty == v.POOL_WAIT
    ready, message, _ = run(pool_claims.readiness(PoolStorage(api), BATCH, spec))
    assert not ready and "0 of the 3" in message and "keeps only 2" in message
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 3}}, "scale")
    rec.body = live(api)
    run(rec.round())
    for name in pod_names(api):
        warm(api, name)
    ready, message, _ = run(pool_claims.readiness(PoolStorage(api), BATCH, spec))
    assert ready and "3 of the 3" in message


def test_a_batch_that_waits_for_its_pool_waits_for_one_not_made_yet_and_stalls_on_one_too_small(api):
    spec = parse_spec({"episodes": 4, "parallelism": 3, "poolRef": {"name": "warm", "whenEmpty": "Wait"}})
    # applied before its pool (a directory in file order): waited for, not a PoolNotFound
    ready, message, _ = run(pool_claims.readiness(PoolStorage(api), BATCH, spec))
    assert not ready and "to be created" in message
    # a pool whose pods cannot run: the wait says why, in the pool's own words
    make_pool(api, 1, maxSize=3, runtimeClassName="cube")
    run(reconciler(api).round())
    ready, message, _ = run(pool_claims.readiness(PoolStorage(api), BATCH, spec))
    assert not ready and f"stalled ({v.PoolReason.RUNTIME_CLASS})" in message
    api.delete(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", "delete pool")
    # a pool whose maxSize is below the first wave can never hold it: said, not waited for forever
    make_pool(api, 1, maxSize=2)
    with pytest.raises(Stalled) as err:
        run(pool_claims.readiness(PoolStorage(api), BATCH, spec))
    assert err.value.reason == v.STALL_POOL_CONFLICT and "at most 2" in str(err.value)
    # without Wait a missing pool stalls the batch before anything is claimed (a typo is not waited for)
    api.delete(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", "delete pool")
    with pytest.raises(Stalled) as err:
        run(pool_claims.read_pool(PoolStorage(api), BATCH, parse_spec({"episodes": 1, "poolRef": {"name": "warm"}})))
    assert err.value.reason == v.STALL_POOL_NOT_FOUND


def test_a_cold_start_on_a_pool_stalled_on_its_runtime_class_stalls_before_anything_is_claimed(api):
    """whenEmpty Cold: the Job's cold pods are the pool's template, which names the missing class:
    the batch says so now, not as PodsNotCreated a minute later."""
    make_pool(api, 2, runtimeClassName="cube")
    run(reconciler(api).round())
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_POOL_CONFLICT and "RuntimeClassNotFound" in str(err.value)
    assert "cube" in str(err.value) and claimed_indexes(api) == {}
    assert api.get_object("Job", naming.job_name(BATCH), POOL_NS) is None
    # the class created: the batch goes on at once, though the pool's status still says stalled
    api.put({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "cube"}, "handler": "runsc"})
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE))
    assert api.get_object("Job", naming.job_name(BATCH), POOL_NS) is not None


def test_provision_claims_then_creates_the_job_and_says_the_hits(api):
    filled(api, 2)
    events: list = []
    got: list = []
    job = run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: events.append(e),
                                    None, got.extend, CLUSTERWIDE))
    assert job["metadata"]["namespace"] == POOL_NS and job["spec"]["manualSelector"] is True
    assert len(got) == 2
    # the Job says when the claims began: the batch's clock starts there (core.job_facts.JobFacts.began_at)
    claimed_at = {p["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_AT] for p in got}
    assert job["metadata"]["annotations"][naming.ANNOTATION_CLAIMS_BEGAN_AT] == claimed_at.pop()
    assert events == [("Normal", v.EVENT_CLAIMED, "2 of the first 3 episodes got a warm pod of RolloutPool warm; "
                                                  "1 start cold; 1 later episode(s) claim a warm pod as each "
                                                  "starts, or start cold")]


def test_batches_that_claim_every_round_do_not_hold_the_refill_off_for_good(api, monkeypatch):
    start = time.time()   # the pods' creation times are the API's (real) clock
    clock = [start]
    monkeypatch.setattr(pool_claims.time, "time", lambda: clock[0])
    monkeypatch.setattr(service_pools.time, "time", lambda: clock[0])
    rec = filled(api, 6)
    made = set(pod_names(api))
    for round_ in range(6):   # a one-episode batch claims every few seconds (none handed over), then a round
        ref = dataclasses.replace(BATCH, uid=f"b{round_}", name=f"b{round_}")
        run(pool_claims.claim(PoolStorage(api), ref, batch_spec(episodes=1, parallelism=1), rec.ref, 60))
        run(rec.round())
        refilled = set(pod_names(api)) - made
        assert bool(refilled) == (clock[0] - start >= pool_census.REFILL_HOLD_MAX_SECONDS)
        clock[0] += pool_census.REFILL_HOLD_MAX_SECONDS / 4


@pytest.mark.parametrize("hidden", [0, 2, 99])
def test_the_job_waits_until_a_list_of_the_batchs_pods_shows_its_claims(api, hidden):
    """A Job made before the Job controller's informer has the claims gets cold pods for claimed
    indexes: provision lists the batch's pods (the API server's watch cache, as the informer's)
    until every claim shows, a few times at most (``hidden``: lists that do not show them yet),
    then makes the Job."""
    filled(api, 2)
    said: list[str] = []
    lists = min(hidden + 1, pool_claims.LISTED_TRIES)

    class Lagging(PoolStorage):
        async def list_pods(self, namespace: str, selector: str) -> list[dict]:
            nonlocal hidden
            pods = await super().list_pods(namespace, selector)
            if selector == naming.label_selector(BATCH) and pods:
                said.append("listed")
                if hidden:
                    hidden -= 1
                    return pods[:1]
            return pods

    class Recording(Storage):
        async def create_or_adopt(self, obj: dict, owner_uid: str) -> dict:
            said.append(obj["kind"])
            return await super().create_or_adopt(obj, owner_uid)

    run(pool_claims.provision(Recording(api), Lagging(api), BATCH, batch_spec(), lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE))
    assert said == ["listed"] * lists + ["Job"]


@pytest.mark.parametrize("warm_pods, waits", [(3, True), (2, False)])
def test_the_job_waits_for_the_first_waves_hand_overs_only_when_it_all_got_warm_pods(api, warm_pods, waits):
    """Every index of the first wave claimed: the Job (its creation, its adoption of each pod)
    comes once their hand-overs are done. Some start cold: the Job is made at once, their pods
    being the longer wait."""
    filled(api, warm_pods)
    said: list = []

    async def handed_over(within: float) -> None:
        said.append(("handed over", within))

    class Recording(Storage):
        async def create_or_adopt(self, obj: dict, owner_uid: str) -> dict:
            said.append(obj["kind"])
            return await super().create_or_adopt(obj, owner_uid)

    class Enrolling(PoolStorage):
        async def enrol_pod(self, namespace: str, name: str, patch: dict) -> dict | None:
            said.append("enrol")
            return await super().enrol_pod(namespace, name, patch)

    run(pool_claims.provision(Recording(api), Enrolling(api), BATCH, batch_spec(), lambda *e: None, None,
                              lambda pods: said.append(len(pods)), CLUSTERWIDE, handed_over))
    claims = [1] * min(warm_pods, 3)
    # the batch's labels (a recompute of every node's network policies) only after the hand-overs
    assert said == claims + [("handed over", pool_claims.HAND_OVER_FIRST if waits else 0.0)] \
        + ["enrol"] * len(claims) + ["Job"]
    for pod in api.list_objects("Pod", POOL_NS):
        labels = pod["metadata"]["labels"]
        if pool_children.claimed_by(pod) is not None:   # enrolled: the Job's selector and the watch find it
            assert labels[naming.LABEL_BATCH_UID] == BATCH.uid and naming.LABEL_POOL_UID not in labels
            assert labels[v.COMPLETION_INDEX_KEY] == pod["metadata"]["annotations"][v.COMPLETION_INDEX_KEY]
        else:
            assert labels[naming.LABEL_POOL_UID] and naming.LABEL_BATCH_UID not in labels


def test_records_held_for_an_enrolment_that_never_came_are_written_at_the_next_round(api):
    """The provisioning failed after its claims' hand-overs (no enrolment, no settled()): the
    batch's next round ends the hold and records each hand-over alone, and later hand-overs are
    recorded at once."""
    filled(api, 2)
    spec = batch_spec(episodes=2, parallelism=2)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    api.set_attach(POOL_NS, None, lambda container, stdin: None)
    d = delivery(api, spec, [], [])

    async def go() -> None:
        d.claimed(fresh, held=True)
        await drain(d)
        held = [api.get_object("Pod", p["metadata"]["name"], POOL_NS)["metadata"]["annotations"] for p in fresh]
        assert all(naming.ANNOTATION_DELIVERED_AT not in notes for notes in held)   # held for the enrolment
        await delivery_round(api, d, 2)
    run(go())
    for pod in fresh:
        notes = api.get_object("Pod", pod["metadata"]["name"], POOL_NS)["metadata"]["annotations"]
        assert float(notes[naming.ANNOTATION_DELIVERED_AT]) > 0
    assert not d._holding


@pytest.mark.parametrize("enrolled", [True, False], ids=["enrolled", "enrolment-lost"])
def test_the_first_waves_hand_overs_are_recorded_with_the_batchs_labels(api, enrolled):
    """provision with the batch's delivery: a warm pod is written twice, its claim and then the
    batch's labels with its hand-over's record (delivered-at, the lowered deadline), not three
    times in the seconds the hand-overs share the node. A record the enrolment did not write (its
    pod's write lost) is written alone at the delivery's next round."""
    filled(api, 2)
    spec = batch_spec(episodes=2, parallelism=2)
    api.set_attach(POOL_NS, None, lambda container, stdin: None)
    writes: dict[str, list[dict]] = {}
    api.subscribe("Pod", lambda event, obj: writes.setdefault(obj["metadata"]["name"], []).append(obj)
                  if event == "MODIFIED" else None)
    d = delivery(api, spec, [], [])

    class Losing(PoolStorage):
        async def enrol_pod(self, namespace: str, name: str, patch: dict) -> dict | None:
            return await super().enrol_pod(namespace, name, patch) if enrolled else None

    async def go() -> None:
        await pool_claims.provision(Storage(api), Losing(api), BATCH, spec, lambda *e: None, None,
                                    lambda pods: d.claimed(pods, held=True), CLUSTERWIDE, d.settled)
        await delivery_round(api, d, 2)
    run(go())
    claimed = claimed_indexes(api)
    assert len(claimed) == 2
    for name in claimed:
        claim, *later = writes[name]
        assert len(later) == 1, [w["metadata"].get("annotations") for w in later]
        pod = api.get_object("Pod", name, POOL_NS)
        assert float(pod["metadata"]["annotations"][naming.ANNOTATION_DELIVERED_AT]) > 0
        assert pod["spec"]["activeDeadlineSeconds"] < claim["spec"]["activeDeadlineSeconds"]
        assert (pod["metadata"]["labels"].get(naming.LABEL_BATCH_UID) == BATCH.uid) == enrolled


@pytest.mark.parametrize("made", [True, False], ids=["made-meanwhile", "never-made"])
def test_a_batch_applied_with_its_pool_waits_for_the_pools_namespace(api, monkeypatch, made):
    """`kubectl apply -f dir/` of a pool and a Cold batch: the batch may be read before the pool's
    first round made its namespace. It waits for it (bounded), then runs cold there; a namespace
    never made stalls it, saying so."""
    # long enough, when the namespace is made meanwhile, for a loaded machine's round to make it
    wait = 5.0 if made else 0.6
    monkeypatch.setattr(pool_claims, "POOL_NAMESPACE_WAIT", wait)
    monkeypatch.setattr(pool_claims, "POOL_NAMESPACE_PAUSE", 0.05)
    make_pool(api, 2)
    said: list[str] = []

    async def waiting(message: str) -> None:
        said.append(message)

    async def go():
        provision = asyncio.create_task(pool_claims.provision(
            Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None, lambda pods: None,
            CLUSTERWIDE, waiting=waiting))
        for _ in range(100):
            if said:
                break
            await asyncio.sleep(0.02)
        # the batch says what it waits for, once
        assert len(said) == 1, said
        assert f"waiting up to {math.ceil(wait)} s for RolloutPool warm to make its namespace" in said[0]
        if made:
            await reconciler(api).round()   # the pool's first round: its namespace (and pods, not warm)
        return await provision
    if made:
        run(go())
        assert api.get_object("Job", naming.job_name(BATCH), POOL_NS) is not None
    else:
        with pytest.raises(Stalled, match="does not exist yet"):
            run(go())
        assert api.list_objects("Job", POOL_NS) == []


def test_a_batch_that_claimed_nothing_new_does_not_wait_for_hand_overs(api):
    """provision repeated after a restart: the claims stand, and no hand-over of this run is waited
    for."""
    filled(api, 3)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(), reconciler(api).ref, 60))
    waited: list = []

    async def handed_over(within: float) -> None:
        waited.append(within)
    claimed = claimed_indexes(api)
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, batch_spec(), lambda *e: None, None,
                              lambda pods: None, CLUSTERWIDE, handed_over))
    assert waited == [0.0] and api.get_object("Job", naming.job_name(BATCH), POOL_NS) is not None
    # the earlier run's claims (it died before their labels) are enrolled now, nothing claimed anew
    assert claimed_indexes(api) == claimed and len(claimed) == 3
    for name in claimed:
        assert api.get_object("Pod", name, POOL_NS)["metadata"]["labels"][naming.LABEL_BATCH_UID] == BATCH.uid


def test_a_batch_deleted_before_its_claims_were_enrolled_has_them_evicted(api):
    """The finalizer ends what the batch claimed and no Job adopted, its labels written or not."""
    filled(api, 3)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(), reconciler(api).ref, 60))
    assert len(claimed_indexes(api)) == 3
    run(sandbox.evict_unowned_claims(Storage(api), BATCH, POOL_NS, logging.getLogger("test")))
    assert claimed_indexes(api) == {} and len(pod_names(api)) == 0


def test_a_claimed_pod_not_enrolled_yet_is_neither_warm_nor_the_pools_to_delete(api):
    """Between its claim and its batch's labels a pod still carries the pool's: the pool counts it
    as held, never as warm (a refill makes up for it), never deletes it as surplus or at its deletion."""
    rec = filled(api, 2)
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(episodes=1, parallelism=1), rec.ref, 60))
    (claimed,) = claimed_indexes(api)
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", {"spec": {"size": 0}}, "scale")
    rec.body = live(api)
    run(rec.round())
    assert pod_names(api) == [claimed]
    run(rec.round())
    assert live(api)["status"]["readyPods"] == 0
    assert "uid " + BATCH.uid in (run(rec.delete()) or "")
    assert api.get_object("Pod", claimed, POOL_NS) is not None
    # its episode ended before its batch enrolled it: still held (its end is the batch's to judge)
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{claimed}/status", {"status": {"phase": "Succeeded"}},
                    "kubelet")
    assert "uid " + BATCH.uid in (run(rec.delete()) or "")
    assert api.get_object("Namespace", POOL_NS) is not None
    # ... but not for ever: an ended claim still unenrolled long after its claim is an orphan, and
    # one whose claim time was edited far ahead is read as long past (it would hold for ever)
    ahead = f"{time.time() + 10 * 365 * 86400:.3f}"
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{claimed}",
                    {"metadata": {"annotations": {naming.ANNOTATION_CLAIMED_AT: ahead}}}, "edited")
    assert not pool_census.is_held(api.get_object("Pod", claimed, POOL_NS), time.time())
    late = f"{time.time() - pool_census.UNENROLLED_HOLD_SECONDS - 1:.3f}"
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{claimed}",
                    {"metadata": {"annotations": {naming.ANNOTATION_CLAIMED_AT: late}}}, "long ago")
    assert run(rec.delete()) is None and api.get_object("Namespace", POOL_NS) is None


def test_settled_waits_for_the_hand_overs_in_flight_and_no_longer_than_asked():
    d = episode_delivery.EpisodeDelivery.__new__(episode_delivery.EpisodeDelivery)

    async def main():
        d._tasks, d._holding, d._unrecorded = set(), True, {}
        assert await d.settled(5.0) == {} and not d._holding    # none in flight: at once
        quick = asyncio.create_task(asyncio.sleep(0.01))
        slow = asyncio.create_task(asyncio.sleep(30))
        d._tasks = {quick}
        await d.settled(5.0)
        assert quick.done()
        d._tasks = {slow}
        loop = asyncio.get_running_loop()
        began = loop.time()
        await d.settled(0.05)
        assert not slow.done() and loop.time() - began < 1
        d.cancel()   # a stalled batch hands nothing over from then on
        await asyncio.gather(slow, return_exceptions=True)
        assert slow.cancelled()
    run(main())


# -- deliveries ---------------------------------------------------------------------------------


def test_each_claimed_pod_is_handed_its_own_episode_once(api):
    filled(api, 2)
    spec = batch_spec(episodes=2, parallelism=2, inputs=[{"q": 1}, {"q": 2}], env=[{"name": "K", "value": "v"}])
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    scripts: dict[str, bytes] = {}
    for pod in fresh:
        name = pod["metadata"]["name"]
        api.set_attach(POOL_NS, name, lambda container, stdin, name=name: scripts.__setitem__(name, stdin))
    events, observed = [], []
    d = delivery(api, spec, events, observed)

    async def go() -> None:
        d.claimed(fresh)
        await drain(d)
        await delivery_round(api, d, 2)
    run(go())
    indexes = claimed_indexes(api)
    assert len(scripts) == 2 and not events
    for name, script in scripts.items():
        text = script.decode()
        assert f" EPISODE_INDEX={indexes[name]} " in text and " K=v " in text
        assert ('{"q":1}' if indexes[name] == "0" else '{"q":2}') in text
        delivered = api.get_object("Pod", name, POOL_NS)["metadata"]["annotations"][naming.ANNOTATION_DELIVERED_AT]
        assert float(delivered) > 0
    assert len(api.attaches) == 2                  # the round after found both delivered: no second hand-over
    for pod in fresh:   # the claim's slack for the hand-over is gone once it is made
        lowered = api.get_object("Pod", pod["metadata"]["name"], POOL_NS)["spec"]["activeDeadlineSeconds"]
        claimed = pod["spec"]["activeDeadlineSeconds"]
        assert claimed - pools.DELIVERY_SLACK_SECONDS + pools.HANDED_OVER_SLACK_SECONDS - 1 <= lowered < claimed
    assert [o[2] for o in observed] == [True, True]   # hits


def test_each_claimed_pod_is_told_as_its_own_claim_is_made(api):
    """The hand-over of a pod claimed first does not wait for the last claim: each is reported once,
    as the API returned it, when its patch is made (before claim() returns)."""
    filled(api, 3)
    spec = batch_spec(episodes=3, parallelism=3)
    heard: list[str] = []

    def on_claimed(pods: list[dict]) -> None:
        assert len(pods) == 1 and pool_children.claimed_by(pods[0]) == BATCH.uid
        heard.append(pods[0]["metadata"]["name"])

    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60,
                                               on_claimed=on_claimed)))
    assert sorted(heard) == sorted(p["metadata"]["name"] for p in fresh) and len(heard) == 3


def test_a_pod_of_an_index_already_final_is_handed_nothing(api):
    """The index's verdict is in (its claimed pod ended, and the Job controller has not yet deleted
    a cold pod it made for the index meanwhile): no second episode of it runs."""
    filled(api, 2)
    spec = batch_spec(episodes=2, parallelism=2)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    handed: list[str] = []
    for pod in fresh:
        api.set_attach(POOL_NS, pod["metadata"]["name"], lambda container, stdin, name=pod["metadata"]["name"]:
                       handed.append(name))
    d = delivery(api, spec, [], [])
    tracker = BatchTracker(2, 0, pooled=True)
    for pod in api.list_objects("Pod", POOL_NS):
        tracker._live[pod["metadata"]["uid"]] = pod_facts(pod)
    final = next(f for f in tracker.live_pods() if f.index == 0)
    tracker.results[0] = EpisodeResult(index=0, pod=final.name, node="n", image_id="i", outcome="succeeded", reason=None,
                                       message="", reward=1.0, pod_created=100.0, ready_at=101.0, reward_at=102.0,
                                       pod_to_ready_seconds=1.0)

    async def go() -> None:
        d.round(tracker)
        await drain(d)
    run(go())
    assert [api.get_object("Pod", n, POOL_NS)["metadata"]["annotations"][v.COMPLETION_INDEX_KEY] for n in handed] == ["1"]


def test_a_pod_that_cannot_be_handed_its_episode_is_evicted(api):
    filled(api, 1)
    spec = batch_spec(episodes=1, parallelism=1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    api.set_attach(POOL_NS, fresh[0]["metadata"]["name"], lambda container, stdin: refuse("no"))
    events = hand_over(api, spec, fresh)
    assert [e[1] for e in events] == [v.EVENT_DELIVERY_FAILED]
    assert api.get_object("Pod", fresh[0]["metadata"]["name"], POOL_NS) is None   # evicted (and gone here)


def test_delivery_failures_post_at_most_max_pod_events_events(api):
    """One EpisodeDeliveryFailed Event per pod and per attempt, without a cap: a pool image that
    cannot take episodes posted one for every pod of the batch, and again for every retry (tens of
    thousands for one large batch). They are capped as ForeignPodIgnored is (v.MAX_POD_EVENTS),
    the last one saying so; the log keeps each."""
    pods = v.MAX_POD_EVENTS + 5
    filled(api, pods)
    spec = batch_spec(episodes=pods, parallelism=pods)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    assert len(fresh) == pods
    for pod in fresh:
        # a long refusal (an admission webhook's, a proxy's): the Event's cut must keep the note
        api.set_attach(POOL_NS, pod["metadata"]["name"], lambda container, stdin: refuse("no " * 400))
    events = hand_over(api, spec, fresh)
    failed = [e for e in events if e[1] == v.EVENT_DELIVERY_FAILED]
    from rolloutbatch.handlers.batches import event_message
    assert len(failed) == v.MAX_POD_EVENTS and "operator's log only" in event_message(failed[-1][2])
    assert all(api.get_object("Pod", pod["metadata"]["name"], POOL_NS) is None for pod in fresh)   # all evicted


def _default_command_handed_over(api, mount_path: str, after_restart: bool = False) -> str:
    """The command line a pooled batch without spec.command hands its claimed pod, its pool's task
    mounted at ``mount_path``: handed over as claimed, or after a restart by a round over the Job's."""
    make_pool(api, 1, task={"files": {"episode.py": "x"}, "mountPath": mount_path})
    rec = reconciler(api)
    run(rec.round())
    for name in pod_names(api):
        warm(api, name)
    spec = parse_spec({"episodes": 1, "poolRef": {"name": "warm"}, "episodeTimeoutSeconds": 60})
    assert spec.command == ()
    seen: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: seen.append(stdin))
    if after_restart:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
        seen.clear()
        run(delivery_round(api, delivery(api, spec, [], []), 1))
    else:
        _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, rec.ref, 60)))
        hand_over(api, spec, fresh)
    assert seen
    return seen[0].decode().rstrip().splitlines()[-2]


def test_without_a_command_the_episode_runs_the_pools_task_script(api):
    assert _default_command_handed_over(api, "/t").endswith(" python -B /t/episode.py")


@pytest.mark.parametrize("after_restart", [False, True])
def test_the_default_command_names_the_task_as_the_runtime_mounts_it(api, after_restart):
    """A pool's task path written '/absent/../t': its pods mount it as written and the runtime
    cleans it to /t; the command must name /t, which the kernel finds (it resolves '/absent/..'
    only if /absent exists). Read from each pod's spec, as claimed or (after a restart) as watched."""
    handed = _default_command_handed_over(api, "/absent/../t", after_restart)
    assert handed.endswith(" python -B /t/episode.py")


def test_after_a_restart_the_default_command_is_where_the_batchs_pods_mount_the_task(api):
    """The pool's task.mountPath changed mid-batch (its new pods mount the task elsewhere): an
    operator that restarts reads the path from the batch's pods, not from the pool as it is now."""
    filled(api, 1, task={"files": {"episode.py": "x"}, "mountPath": "/t"})
    spec = parse_spec({"episodes": 2, "parallelism": 1, "poolRef": {"name": "warm"}, "episodeTimeoutSeconds": 60})
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None, lambda pods: None,
                              CLUSTERWIDE))
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"task": {"mountPath": "/moved"}}}, "edit")
    seen: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: seen.append(stdin))
    run(delivery_round(api, delivery(api, spec, [], []), 2))   # a new operator's delivery
    assert seen and seen[0].decode().rstrip().splitlines()[-2].endswith(" python -B /t/episode.py")


def test_claims_a_crashed_operator_made_get_the_default_command_where_their_pods_mount_the_task(api):
    """An operator claims warm pods (they mount the task at /t) and dies before their hand-overs
    and its Job; the pool's task.mountPath then moves (new pods mount it at /moved). The next
    operator keeps those claims and makes the Job from the pool as it is now, so neither that Job
    nor the pool says where these pods mount the task: each pod's own spec does."""
    filled(api, 2, task={"files": {"episode.py": "x"}, "mountPath": "/t"})
    spec = parse_spec({"episodes": 2, "parallelism": 2, "poolRef": {"name": "warm"}, "episodeTimeoutSeconds": 60})
    # the first operator's claims; it dies before any hand-over and before the Job
    claims = run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60))
    assert claims.hits == 2
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"task": {"mountPath": "/moved"}}}, "edit")
    # the next operator resumes the provisioning, then hands the claimed pods their episodes
    d = delivery(api, spec, [], [], since=None)
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None, d.claimed,
                              CLUSTERWIDE))
    seen: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: seen.append(stdin))
    run(delivery_round(api, d, 2))
    commands = [s.decode().rstrip().splitlines()[-2] for s in seen]
    assert len(commands) == 2, commands
    mounts = {m["mountPath"] for p in api.list_objects("Pod", POOL_NS)
              for m in p["spec"]["containers"][0]["volumeMounts"] if m["name"] == "task"}
    assert mounts == {"/t"}
    assert all(c.endswith(" python -B /t/episode.py") for c in commands), commands


# -- spec.inputsFrom on a pooled batch ------------------------------------------------------------
def _inputs_configmap(api: MemoryApi, name: str, data: dict, opted_in: bool = True) -> None:
    labels = {naming.LABEL_INPUTS: naming.INPUTS_OPT_IN} if opted_in else {}
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "labels": labels},
             "data": data})


def test_inputs_by_reference_are_copied_then_each_episode_is_handed_its_groups(api):
    filled(api, 2)
    _inputs_configmap(api, "tasks", {"input-0.json": '{"q":"zero"}', "input-1.json": '{"q":"one"}'})
    spec = batch_spec(episodes=4, parallelism=2, samplesPerInput=2, inputsFrom={"configMaps": ["tasks"], "count": 2})
    run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None, lambda pods: None,
                              CLUSTERWIDE))
    copy = api.get_object("ConfigMap", naming.inputs_shard_name(BATCH, 0), NS)
    assert copy["immutable"] is True and copy["metadata"]["ownerReferences"][0]["uid"] == BATCH.uid
    # the original may change mid-batch: the episodes read the copy
    api.merge_patch(f"/api/v1/namespaces/{NS}/configmaps/tasks", {"data": {"input-1.json": '{"q":"changed"}'}}, "user")
    scripts: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: scripts.append(stdin))
    d = delivery(api, spec, [], [])
    assert run(_delivered_script(api, d, index=3)).find(b'{"q":"one"}') > 0


async def _delivered_script(api: MemoryApi, d: episode_delivery.EpisodeDelivery, index: int) -> bytes:
    pod = next(p for p in api.list_objects("Pod", POOL_NS)
               if (p["metadata"].get("annotations") or {}).get(v.COMPLETION_INDEX_KEY))
    script, _ = await d._script(dataclasses.replace(pod_facts(pod), index=index), "agent")
    return script


def test_inputs_by_reference_that_are_not_opted_in_stall_before_any_claim(api):
    filled(api, 2)
    _inputs_configmap(api, "tasks", {"input-0.json": "{}"}, opted_in=False)
    spec = batch_spec(episodes=1, parallelism=1, inputsFrom={"configMaps": ["tasks"], "count": 1})
    with pytest.raises(Stalled) as err:
        run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                                  lambda pods: None, CLUSTERWIDE))
    assert err.value.reason == v.STALL_INPUTS_MISSING
    assert not any(p["metadata"]["labels"].get(naming.LABEL_BATCH_UID) for p in api.list_objects("Pod", POOL_NS))
    assert api.get_object("ConfigMap", naming.inputs_shard_name(BATCH, 0), NS) is None


def test_a_claim_the_job_has_not_adopted_yet_holds_its_index_against_a_cold_pod(api):
    """The tracker holds a claimed pod until the Job adopts it (it has no owner before): the
    delivery round must count it as its index's holder all the same."""
    filled(api, 2)
    spec = batch_spec(episodes=1, parallelism=1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    shadow = next(n for n in pod_names(api) if n != fresh[0]["metadata"]["name"])
    api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{shadow}", {"metadata": {
        "labels": {naming.LABEL_POOL_UID: None, naming.LABEL_POOL_NAME: None, **pool_children.batch_pod_labels(BATCH),
                   v.COMPLETION_INDEX_KEY: "0"},
        "annotations": {v.COMPLETION_INDEX_KEY: "0", naming.POOLED_ANNOTATION: "true"}}}, "as the Job's")
    handed: list[str] = []
    for name in pod_names(api):
        api.set_attach(POOL_NS, name, lambda container, stdin, name=name: handed.append(name))
    tracker = BatchTracker(1, 0, namespace=POOL_NS, pooled=True)
    tracker.expect_job("job-uid")
    for pod in api.list_objects("Pod", POOL_NS):
        facts = pod_facts(pod)
        tracker.observe_pod(dataclasses.replace(facts, owner_uid=None if facts.claimed_at else "job-uid"))
    assert [f.name for f in tracker.claimed_orphans()] == [fresh[0]["metadata"]["name"]]
    d = delivery(api, spec, [], [])

    async def go() -> None:
        d.round(tracker)
        await drain(d)
    run(go())
    assert handed == []


def test_a_cold_pod_the_job_made_for_a_claimed_index_is_handed_nothing(api):
    """The Job controller, its informer behind the claims, may make a cold pod for a claimed index
    (it deletes one of the two once it sees both): that pod gets no episode; a cold pod of an
    index nobody holds gets its own."""
    filled(api, 3)
    spec = batch_spec(episodes=2, parallelism=1)
    _, _, fresh = triple(run(pool_claims.claim(PoolStorage(api), BATCH, spec, pool_spec.pool_ref(live(api)), 60)))
    assert [p["metadata"]["annotations"][v.COMPLETION_INDEX_KEY] for p in fresh] == ["0"]
    shadow, cold = [n for n in pod_names(api) if n != fresh[0]["metadata"]["name"]]
    for name, index in ((shadow, "0"), (cold, "1")):   # as the Job makes them: the batch's labels, no claim
        api.merge_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}", {"metadata": {
            "labels": {naming.LABEL_POOL_UID: None, naming.LABEL_POOL_NAME: None, **pool_children.batch_pod_labels(BATCH),
                       v.COMPLETION_INDEX_KEY: index},
            "annotations": {v.COMPLETION_INDEX_KEY: index, naming.POOLED_ANNOTATION: "true"}}}, "as the Job's")
    handed: list[str] = []
    for name in pod_names(api):
        api.set_attach(POOL_NS, name, lambda container, stdin, name=name: handed.append(name))
    d = delivery(api, spec, [], [])

    async def go() -> None:
        await delivery_round(api, d, 2)   # the claimed pod not yet handed over: it holds index 0 all the same
        d.claimed(fresh)
        await drain(d)
        await delivery_round(api, d, 2)
    run(go())
    assert sorted(handed) == sorted([fresh[0]["metadata"]["name"], cold])
    annotations = api.get_object("Pod", shadow, POOL_NS)["metadata"].get("annotations") or {}
    assert naming.ANNOTATION_DELIVERED_AT not in annotations


def test_a_job_for_claims_an_earlier_operator_made_is_made_suspended_and_only_for_them(api):
    """A batch stopped before its Job: the Job comes suspended (it adopts the claimed pods, runs
    nothing), with the earliest claim as the batch's clock; none without claims, nor without the pool."""
    filled(api, 3)
    spec = batch_spec()
    assert run(pool_claims.job_for_claims(Storage(api), PoolStorage(api), BATCH, spec)) is None   # nothing claimed
    run(pool_claims.claim(PoolStorage(api), BATCH, spec, reconciler(api).ref, 60))
    job = run(pool_claims.job_for_claims(Storage(api), PoolStorage(api), BATCH, spec))
    assert job["spec"]["suspend"] is True and job["spec"]["manualSelector"] is True
    began = min(float(api.get_object("Pod", n, POOL_NS)["metadata"]["annotations"][naming.ANNOTATION_CLAIMED_AT])
                for n in claimed_indexes(api))
    assert job["metadata"]["annotations"][naming.ANNOTATION_CLAIMS_BEGAN_AT] == f"{began:.3f}"
    for name in claimed_indexes(api):   # enrolled: the Job's selector finds them
        assert api.get_object("Pod", name, POOL_NS)["metadata"]["labels"][naming.LABEL_BATCH_UID] == BATCH.uid
    other = dataclasses.replace(BATCH, uid="other", name="other")
    api.delete(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm", "the pool deleted")
    assert run(pool_claims.job_for_claims(Storage(api), PoolStorage(api), other, spec)) is None


def test_a_job_for_claims_is_made_even_when_the_batch_now_contradicts_its_pool(api):
    """The claims were made: a field the batch says of its sandbox that its pool now refuses (a
    batch stored before the CRD stopped defaulting isolation.network, on an AllowEgress pool) does
    not turn the stop's adoption of the claimed pods into their eviction."""
    filled(api, 2, network="AllowEgress")
    run(pool_claims.claim(PoolStorage(api), BATCH, batch_spec(), reconciler(api).ref, 60))
    stored = batch_spec(isolation={"network": "DenyAll"})
    job = run(pool_claims.job_for_claims(Storage(api), PoolStorage(api), BATCH, stored))
    assert job is not None and job["spec"]["suspend"] is True


def test_old_task_configmaps_go_once_unmounted_and_a_steady_pool_lists_them_no_more(api):
    """A task change makes a new task ConfigMap; the old one goes once no pod mounts it. Once a
    round found the current one alone, rounds list them no more until the task changes again."""
    rec = filled(api, 1)
    first = pool_children.task_configmap_name(rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))

    def listed() -> int:
        return sum(1 for method, path in api.calls if method == "GET" and path.endswith(f"/{POOL_NS}/configmaps"))
    before = listed()
    run(rec.round())
    run(rec.round())
    assert listed() == before   # the first fill's rounds found it alone
    api.merge_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/rolloutpools/warm",
                    {"spec": {"task": {"files": {"e.py": "y"}}}}, "new task")
    rec.body = live(api)
    run(rec.round())   # the old pod is stale: replaced; its ConfigMap waits until it is gone
    second = pool_children.task_configmap_name(rec.ref, pool_spec.parse_pool_spec(live(api)["spec"]))
    assert second != first and api.get_object("ConfigMap", second, POOL_NS) is not None
    for _ in range(3):
        api.collect_garbage()
        for name in pod_names(api):
            warm(api, name)
        run(rec.round())
    assert api.get_object("ConfigMap", first, POOL_NS) is None
    settled = listed()
    run(rec.round())
    assert listed() == settled
