"""service.stop: the Job is suspended before the tracker stops, done is bounded, and a late stop
only acknowledges its generation."""
import asyncio
import logging

import pytest

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import stop
from rolloutbatch.service.stop import StopControl
from tests.support.memory_api import MemoryApi
from tests.unit.core.factories import MINIMAL, REF
from tests.unit.core.test_tracker import JOB_UID, pod, tracker

LOG = logging.getLogger("t")


SPEC = parse_spec(MINIMAL)
SANDBOX = naming.child_namespace(REF, SPEC)


def cluster(job_uid: str | None = JOB_UID) -> MemoryApi:
    """The sandbox namespace and, unless ``job_uid`` is None, the batch's Job with that uid."""
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SANDBOX}})
    if job_uid is not None:
        api.put({"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": naming.job_name(REF), "namespace": SANDBOX, "uid": job_uid,
                              "labels": {naming.LABEL_BATCH_UID: REF.uid}},
                 "spec": {"suspend": False}})
    return api


def suspended(api: MemoryApi) -> bool:
    return api.get_object("Job", naming.job_name(REF), SANDBOX)["spec"].get("suspend") is True


def test_the_tracker_stops_only_once_the_job_is_suspended():
    api, events = cluster(), []
    api.fail("GET", "Job", Unavailable("the API is restarting", status=503))
    t = tracker(2, 0)
    control = StopControl(Storage(api), REF, lambda *e: events.append(e), LOG, grace=60)
    with pytest.raises(Unavailable):
        asyncio.run(control.begin(SPEC, t, JOB_UID))
    assert not suspended(api)
    assert not t.stopping and not events     # retried from the top, which asks again

    asyncio.run(control.begin(SPEC, t, JOB_UID))
    assert suspended(api)
    assert t.stopping and events[0][:2] == ("Normal", v.REASON_STOPPING)


def test_a_namesake_job_is_never_suspended():
    # the Job the batch recorded is gone and another of its name (and label) stands there now
    api, events = cluster(job_uid="a-namesake"), []
    t = tracker(2, 0)
    asyncio.run(StopControl(Storage(api), REF, lambda *e: events.append(e), LOG, grace=60).begin(SPEC, t, JOB_UID))
    assert not suspended(api) and not [c for c in api.calls if c[0] == "PATCH"]
    assert t.stopping and events[0][1] == v.REASON_STOPPING     # nothing of ours to suspend


def test_a_job_replaced_between_the_read_and_the_patch_is_not_suspended():
    # the uid in the patch is a precondition: a namesake that took the name meanwhile stays as it is
    api = cluster()
    job = api.get_object("Job", naming.job_name(REF), SANDBOX)

    def replace_the_job():
        api.delete(f"/apis/batch/v1/namespaces/{SANDBOX}/jobs/{naming.job_name(REF)}", "someone")
        api.put({**job, "metadata": {**job["metadata"], "uid": "a-namesake"}})
    api.meanwhile("PATCH", "Job", replace_the_job)
    t = tracker(2, 0)
    asyncio.run(StopControl(Storage(api), REF, lambda *e: None, LOG, grace=60).begin(SPEC, t, None))
    live = api.get_object("Job", naming.job_name(REF), SANDBOX)
    assert live["metadata"]["uid"] == "a-namesake" and live["spec"]["suspend"] is False
    assert t.stopping


def test_done_waits_for_the_pods_but_not_for_ever():
    api = cluster(job_uid=None)      # no Job: nothing to suspend, the stop still counts
    t = tracker(2, 0)
    t.observe_pod(pod(0))            # a pod the stop has not ended yet
    control = StopControl(Storage(api), REF, lambda *e: None, LOG, grace=0)
    assert not control.done(t, job_gone=False)      # not stopping yet
    asyncio.run(control.begin(SPEC, t, None))
    assert control.done(t, job_gone=False)          # grace 0: the bound passed
    patient = StopControl(Storage(api), REF, lambda *e: None, LOG, grace=60)
    asyncio.run(patient.begin(SPEC, t, None))
    assert not patient.done(t, job_gone=True)       # the watch still shows it alive
    t.pod_deleted(pod(0, deleting=True))
    assert patient.done(t, job_gone=True)


def ended_batch(api: MemoryApi) -> dict:
    """A batch that succeeded at generation 1, then was asked to stop (generation 2)."""
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    api.put({"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
             "metadata": {"name": "b", "namespace": "ns"}, "spec": dict(MINIMAL)})
    path = "/apis/rl.agentruntime.io/v1alpha1/namespaces/ns/rolloutbatches/b"
    api.merge_patch(path + "/status", {"status": {
        "phase": v.SUCCEEDED, "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}]}}, "operator")
    return api.merge_patch(path, {"spec": {"stop": True}}, "kubectl")


def test_a_late_stop_acknowledges_the_generation_of_an_ended_batch_only():
    api = MemoryApi()
    ended = ended_batch(api)
    assert ended["metadata"]["generation"] == 2
    asyncio.run(stop.acknowledge_generation(Storage(api), ended, LOG))
    status = api.get_object("RolloutBatch", "b", "ns")["status"]
    assert status == {"phase": v.SUCCEEDED, "observedGeneration": 2,
                      "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}
    api.calls.clear()
    for body in ({**ended, "status": {**ended["status"], "phase": v.RUNNING}},
                 {**ended, "metadata": {**ended["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}},
                 api.get_object("RolloutBatch", "b", "ns")):
        asyncio.run(stop.acknowledge_generation(Storage(api), body, LOG))
    assert api.calls == []


def test_a_batch_gone_before_its_acknowledgement_is_only_logged(caplog):
    api = MemoryApi()
    ended = ended_batch(api)
    api.delete("/apis/rl.agentruntime.io/v1alpha1/namespaces/ns/rolloutbatches/b", "kubectl")
    asyncio.run(stop.acknowledge_generation(Storage(api), ended, LOG))
    assert "Could not record generation 2" in caplog.text


def test_kopf_calls_the_handler_only_for_an_ended_batch_that_lags_its_generation():
    ended = {"metadata": {"generation": 2}, "status": {"phase": v.STOPPED, "observedGeneration": 1}}
    assert stop.needs_acknowledging(body=ended, spec={}, meta={})
    assert not stop.needs_acknowledging(body={**ended, "status": {"phase": v.RUNNING, "observedGeneration": 1}})
    assert not stop.needs_acknowledging(body={**ended, "status": {"phase": v.STOPPED, "observedGeneration": 2}})
