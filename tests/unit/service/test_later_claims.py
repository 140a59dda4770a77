"""The indexes past a pooled batch's first wave claim warm pods as their pods come
(service.later_claims): the Job's cold pods carry a scheduling gate, and each is answered by a
claim of a warm pod for its index (enrolled, so the Job adopts it and deletes the gated pod) or,
with no warm pod left, by lifting its gate (it starts cold)."""

from __future__ import annotations

import asyncio
import copy
import time

import jsonpatch
import pytest

from rolloutbatch.core import naming, pool_children, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.job_facts import job_facts
from rolloutbatch.core.model import PodFacts
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.core.scope import CLUSTERWIDE
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.verdict import never_ran
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import pool_claims
from rolloutbatch.service import later_claims
from rolloutbatch.service.later_claims import LaterClaims
from tests.support.memory_api import MemoryApi
from tests.unit.service.memory_pool import BATCH, LOG, POOL_NS, batch_spec, filled, run


def _no_event(*event) -> None:
    pass


def claimed_indexes(api: MemoryApi) -> dict[str, str]:
    """The pods claimed for the batch (enrolled or not) and their indexes; not its Job's cold pods."""
    return {p["metadata"]["name"]: p["metadata"]["annotations"][v.COMPLETION_INDEX_KEY]
            for p in api.list_objects("Pod", POOL_NS) if pool_children.claimed_by(p) == BATCH.uid}


def _provisioned(api: MemoryApi, pool_size: int, spec):
    """A pool of ``pool_size`` warm pods, the batch's first wave claimed and its Job made."""
    filled(api, pool_size)
    job = run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, None,
                                    lambda pods: None, CLUSTERWIDE))
    return job


def _cold_pod_body(job: dict, index: int) -> dict:
    """The pod the Job controller makes for ``index``: its template, owned by the Job."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = template["metadata"]
    meta["annotations"] = {**meta.get("annotations", {}), v.COMPLETION_INDEX_KEY: str(index)}
    meta.update(name=f"{job['metadata']['name']}-{index}-cold", namespace=POOL_NS,
                ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                  "uid": job["metadata"]["uid"], "controller": True}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"], "status": {"phase": "Pending"}}


def _cold_pod(api: MemoryApi, job: dict, index: int) -> dict:
    return api.put(_cold_pod_body(job, index))


def _tracker(api: MemoryApi, job: dict, spec) -> BatchTracker:
    tracker = BatchTracker(spec.episodes, spec.infrastructure_retries, namespace=POOL_NS,
                           job_name=job["metadata"]["name"], pooled=True)
    tracker.expect_job(job["metadata"]["uid"])
    tracker.observe_job(job_facts(api.get_object("Job", job["metadata"]["name"], POOL_NS)), time.time())
    for pod in api.list_objects("Pod", POOL_NS):
        if pod["metadata"].get("labels", {}).get(naming.LABEL_BATCH_UID) == BATCH.uid:
            tracker.observe_pod(pod_facts(pod))
    return tracker


def _gated_index_2(api: MemoryApi, episodes: int, pool_size: int):
    """A batch of ``episodes`` at parallelism 2 from a pool of ``pool_size``, its first wave
    claimed, and the Job's gated pod of index 2: (spec, job, that pod, the batch's tracker)."""
    spec = batch_spec(episodes=episodes, parallelism=2)
    job = _provisioned(api, pool_size, spec)
    cold = _cold_pod(api, job, 2)
    return spec, job, cold, _tracker(api, job, spec)


def _answer(api: MemoryApi, later: LaterClaims, tracker: BatchTracker) -> None:
    async def go() -> None:
        later.round(tracker)
        if later._task is not None:
            await later._task
    asyncio.run(go())


def test_a_later_index_claims_a_warm_pod_and_its_gated_pod_is_left_to_the_job(api) -> None:
    spec = batch_spec(episodes=4, parallelism=2)
    job = _provisioned(api, 4, spec)
    gated = job["spec"]["template"]["spec"]["schedulingGates"]
    assert gated == [{"name": naming.CLAIM_GATE}], "a batch with later waves gates its Job's cold pods"
    assert job["metadata"]["annotations"][naming.ANNOTATION_POOL_TEMPLATE]
    assert sorted(claimed_indexes(api).values()) == ["0", "1"]
    cold = _cold_pod(api, job, 2)
    tracker = _tracker(api, job, spec)
    handed, counted = [], []
    later = LaterClaims(PoolStorage(api), BATCH, spec, handed.extend, lambda h, m: counted.append((h, m)), _no_event, LOG)
    _answer(api, later, tracker)
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"]
    third = next(p for p, i in claimed_indexes(api).items() if i == "2")
    assert api.get_object("Pod", third, POOL_NS)["metadata"]["labels"][naming.LABEL_BATCH_UID] == BATCH.uid
    assert [p["metadata"]["name"] for p in handed] == [third], "handed its episode at its claim"
    assert counted == [(1, 0)]
    # the gated pod is the Job's to delete (its index's duplicate): still gated, never ungated
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"] == gated
    # answered: not again while it settles, whatever the rounds
    _answer(api, later, tracker)
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"] and counted == [(1, 0)]


def test_with_no_warm_pod_left_a_later_index_starts_cold(api) -> None:
    spec = batch_spec(episodes=3, parallelism=2)
    job = _provisioned(api, 2, spec)
    cold = _cold_pod(api, job, 2)
    tracker = _tracker(api, job, spec)
    counted = []
    later = LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)), _no_event, LOG)
    _answer(api, later, tracker)
    assert "schedulingGates" not in api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]
    assert sorted(claimed_indexes(api).values()) == ["0", "1"] and counted == [(0, 1)]


def test_a_stalled_batch_answers_nothing_more(api) -> None:
    """Once the batch stalls (service.batch_ending cancels the answers), a gated pod is neither
    claimed for nor ungated: the Job goes with it."""
    spec = batch_spec(episodes=3, parallelism=2)
    job = _provisioned(api, 3, spec)
    cold = _cold_pod(api, job, 2)
    counted = []
    later = LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)), _no_event, LOG)
    later.cancel()
    _answer(api, later, _tracker(api, job, spec))
    assert sorted(claimed_indexes(api).values()) == ["0", "1"] and counted == []
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"]


def test_a_batch_without_later_waves_has_no_gate(api) -> None:
    job = _provisioned(api, 1, batch_spec(episodes=2, parallelism=2))
    assert "schedulingGates" not in job["spec"]["template"]["spec"]
    assert naming.ANNOTATION_POOL_TEMPLATE not in job["metadata"].get("annotations", {})


def test_a_claim_an_earlier_operator_never_enrolled_keeps_its_index(api) -> None:
    """A crash between a later index's claim and its enrolment: the pod claimed for index 2 is
    enrolled by the next answer, and no second warm pod is claimed for it."""
    spec, job, cold, tracker = _gated_index_2(api, episodes=4, pool_size=4)
    storage = PoolStorage(api)
    enrol = pool_claims.enrol

    async def crash(*args, **kwargs):
        raise RuntimeError("the operator died here")
    pool_claims.enrol = crash
    try:
        _answer(api, LaterClaims(storage, BATCH, spec, lambda pods: None, lambda h, m: None, _no_event, LOG), tracker)
    finally:
        pool_claims.enrol = enrol
    unenrolled = [p for p, i in claimed_indexes(api).items() if i == "2"]
    assert len(unenrolled) == 1
    assert naming.LABEL_BATCH_UID not in api.get_object("Pod", unenrolled[0], POOL_NS)["metadata"]["labels"]
    counted = []
    _answer(api, LaterClaims(storage, BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)), _no_event, LOG),
            _tracker(api, job, spec))
    assert [p for p, i in claimed_indexes(api).items() if i == "2"] == unenrolled
    assert api.get_object("Pod", unenrolled[0], POOL_NS)["metadata"]["labels"][naming.LABEL_BATCH_UID] == BATCH.uid
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"], \
        "the gated pod of an index its claim holds stays gated"


# -- the rules (core.pools) ------------------------------------------------------------------------------
def _gated(gates: tuple[str, ...], **kw):
    base = dict(name="p", namespace=POOL_NS, uid="u", index=2, created=1.0, phase="Pending", node=None,
                image_id=None, exit_code=None, restart_count=0, terminated_reason=None, pod_reason=None,
                pod_message=None, disrupted=False, deleting=False, ready=False, started_at=None, finished_at=None,
                waiting_reason=None, waiting_message=None, scheduling_gates=gates, pooled=True)
    return PodFacts(**{**base, **kw})


def test_only_a_gated_unclaimed_pod_of_an_index_awaits_its_answer() -> None:
    assert pools.awaits_claim(_gated((naming.CLAIM_GATE,)))
    for facts in (_gated(()), _gated(("other.example/gate",)), _gated((naming.CLAIM_GATE,), index=None),
                  _gated((naming.CLAIM_GATE,), deleting=True), _gated((naming.CLAIM_GATE,), claimed_at=5.0)):
        assert not pools.awaits_claim(facts), facts


def test_ungating_lifts_only_the_claim_gate_and_fails_on_gates_changed_since() -> None:
    for gates in ((naming.CLAIM_GATE,), ("a.example/x", naming.CLAIM_GATE), (naming.CLAIM_GATE, "b.example/y")):
        pod = {"metadata": {"uid": "u"}, "spec": {"schedulingGates": [{"name": g} for g in gates]}}
        patched = jsonpatch.apply_patch(pod, pools.ungate_patch(_gated(gates)))
        rest = [{"name": g} for g in gates if g != naming.CLAIM_GATE]
        assert patched["spec"].get("schedulingGates", []) == rest
        assert rest or "schedulingGates" not in patched["spec"]
    changed = {"metadata": {"uid": "u"}, "spec": {"schedulingGates": [{"name": "a.example/x"}]}}
    with pytest.raises(jsonpatch.JsonPatchException):
        jsonpatch.apply_patch(changed, pools.ungate_patch(_gated((naming.CLAIM_GATE,))))
    with pytest.raises(jsonpatch.JsonPatchException):
        jsonpatch.apply_patch({"metadata": {"uid": "other"}, "spec": {"schedulingGates": [{"name": naming.CLAIM_GATE}]}},
                              pools.ungate_patch(_gated((naming.CLAIM_GATE,))))


def test_two_gated_pods_of_one_index_get_one_claim(api) -> None:
    """The Job controller may make two pods for an index (an informer behind): one claim answers
    the index, and the Job deletes the rest; two claims would run its episode twice."""
    spec = batch_spec(episodes=4, parallelism=2)
    job = _provisioned(api, 4, spec)
    _cold_pod(api, job, 2)
    twin = copy.deepcopy(_cold_pod_body(job, 2))
    twin["metadata"]["name"] += "-twin"
    api.put(twin)
    _answer(api, LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: None, _no_event, LOG),
            _tracker(api, job, spec))
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"]


def test_a_refused_ungate_is_no_miss(api) -> None:
    """The pod's gates changed between the answer's list and its patch: the patch's test fails
    (422), nothing is counted, and the pod waits for its next answer."""
    spec, job, cold, tracker = _gated_index_2(api, episodes=3, pool_size=2)
    storage = PoolStorage(api)
    ungate = storage.ungate_pod

    async def changed_first(namespace, name, ops):
        api.json_patch(f"/api/v1/namespaces/{POOL_NS}/pods/{name}",
                       [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x.example/other"}}],
                       "someone")
        return await ungate(namespace, name, ops)
    storage.ungate_pod = changed_first
    counted = []
    _answer(api, LaterClaims(storage, BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)), _no_event,
                             LOG), tracker)
    assert counted == [] and len(api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"]) == 2


# -- what a hostile review found -------------------------------------------------------------------------
def test_a_first_wave_miss_is_counted_once_when_its_gate_is_answered(api) -> None:
    """provision counts the first wave's hit; its miss's gated pod, ungated, is the one miss."""
    spec = batch_spec(episodes=3, parallelism=2)
    filled(api, 1)
    calls = []

    class Metrics:
        def pool_claims(self, namespace, pool, hits, misses):
            calls.append((hits, misses))
    job = run(pool_claims.provision(Storage(api), PoolStorage(api), BATCH, spec, lambda *e: None, Metrics(),
                                    lambda pods: None, CLUSTERWIDE))
    cold = _cold_pod(api, job, 1)
    _answer(api, LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: calls.append((h, m)),
                             _no_event, LOG), _tracker(api, job, spec))
    assert "schedulingGates" not in api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]
    assert calls == [(1, 0), (0, 1)]


def test_a_lagging_tracker_never_gets_an_index_claimed_twice(api, monkeypatch) -> None:
    """The watch has not brought the claim of index 2 (nor the Job's deletion of its gated pod)
    when the gated pod is answered again: the answer's own list shows the index held."""
    spec = batch_spec(episodes=4, parallelism=2)
    job = _provisioned(api, 4, spec)
    _cold_pod(api, job, 2)
    stale = _tracker(api, job, spec)
    later = LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: None, _no_event, LOG)
    _answer(api, later, stale)
    settled = time.monotonic() + later_claims.ANSWER_SETTLE_SECONDS + 1
    monkeypatch.setattr(later_claims.time, "monotonic", lambda: settled)
    _answer(api, later, stale)
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"]


def test_a_gated_retry_of_an_index_already_final_is_ungated_not_claimed_for(api) -> None:
    """The Job retries an index this batch judged (its pod ended NOT_DELIVERED_EXIT after its hand-over):
    the retry's gated pod would hold one of the Job's parallelism for good; it is ungated, uncounted."""
    spec = batch_spec(episodes=4, parallelism=2)
    job = _provisioned(api, 4, spec)
    tracker = _tracker(api, job, spec)
    tracker.restore({1: never_ran(1, v.EP_INFRASTRUCTURE, "judged", attempts=1)})
    retry = _cold_pod(api, job, 1)
    tracker.observe_pod(pod_facts(api.get_object("Pod", retry["metadata"]["name"], POOL_NS)))
    assert [f.name for f in tracker.gated_after_the_end()] == [retry["metadata"]["name"]]
    counted = []
    _answer(api, LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)),
                             _no_event, LOG), tracker)
    assert "schedulingGates" not in api.get_object("Pod", retry["metadata"]["name"], POOL_NS)["spec"]
    assert sorted(claimed_indexes(api).values()) == ["0", "1"] and counted == []
    tracker.pod_deleted(pod_facts(api.get_object("Pod", retry["metadata"]["name"], POOL_NS)))
    assert tracker.gated_after_the_end() == []


def test_answers_that_keep_failing_start_their_pods_cold_and_say_so_once(api, monkeypatch) -> None:
    spec, job, cold, tracker = _gated_index_2(api, episodes=3, pool_size=3)
    storage = PoolStorage(api)

    async def refused(*args, **kwargs):
        raise RuntimeError("admission webhook refused the claim")
    storage.claim_pod = refused
    events, counted = [], []
    later = LaterClaims(storage, BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)),
                        lambda *event: events.append(event), LOG)
    clock = [time.monotonic()]
    monkeypatch.setattr(later_claims.time, "monotonic", lambda: clock[0])
    for answer in range(later_claims.GIVE_UP_AFTER):
        assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"].get("schedulingGates"), answer
        _answer(api, later, tracker)
        clock[0] += later_claims.ANSWER_SETTLE_SECONDS + 1
    assert "schedulingGates" not in api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", v.EVENT_LATER_CLAIMS_FAILED)]
    assert "admission webhook refused the claim" in events[0][2] and "1 start cold" in events[0][2]
    assert counted == [(0, 1)]   # a miss, as any cold start of a later index


def test_a_claim_lost_to_a_race_tries_the_next_warm_pod(api) -> None:
    spec = batch_spec(episodes=3, parallelism=2)
    job = _provisioned(api, 4, spec)
    cold = _cold_pod(api, job, 2)
    storage = PoolStorage(api)
    claim, tried = storage.claim_pod, []

    async def first_lost(namespace, name, patch):
        tried.append(name)
        return None if len(tried) == 1 else await claim(namespace, name, patch)
    storage.claim_pod = first_lost
    counted = []
    _answer(api, LaterClaims(storage, BATCH, spec, lambda pods: None, lambda h, m: counted.append((h, m)),
                             _no_event, LOG), _tracker(api, job, spec))
    assert len(tried) == 2 and tried[0] != tried[1]
    assert sorted(claimed_indexes(api).values()) == ["0", "1", "2"] and counted == [(1, 0)]
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"]


def test_a_job_being_suspended_gets_no_answer(api) -> None:
    """spec.suspend set (a stop, or Kueue) before the Suspended condition: no claim goes out."""
    spec = batch_spec(episodes=3, parallelism=2)
    job = _provisioned(api, 3, spec)
    cold = _cold_pod(api, job, 2)
    api.json_patch(f"/apis/batch/v1/namespaces/{POOL_NS}/jobs/{job['metadata']['name']}",
                   [{"op": "add", "path": "/spec/suspend", "value": True}], "stop")
    _answer(api, LaterClaims(PoolStorage(api), BATCH, spec, lambda pods: None, lambda h, m: None, _no_event, LOG),
            _tracker(api, job, spec))
    assert sorted(claimed_indexes(api).values()) == ["0", "1"]
    assert api.get_object("Pod", cold["metadata"]["name"], POOL_NS)["spec"]["schedulingGates"]
