"""service.stop: the Job is suspended before the tracker stops, done is bounded, and a late stop
only acknowledges its generation."""
import asyncio
import logging

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.service import stop
from rolloutbatch.service.stop import StopControl
from tests.unit.core.factories import MINIMAL, REF
from tests.unit.core.test_tracker import pod, tracker

LOG = logging.getLogger("t")


def test_the_tracker_stops_only_once_the_job_is_suspended():
    calls, events = [], []

    async def failing(fn, *args):
        calls.append((fn, args))
        raise Unavailable("the API is restarting")

    t = tracker(2, 0)
    control = StopControl(failing, REF, lambda *e: events.append(e), LOG, grace=60)
    try:
        asyncio.run(control.begin(parse_spec(MINIMAL), t, "job-uid"))
    except Unavailable:
        pass
    assert calls[0][0] is resources.suspend_job and calls[0][1][2:] == (REF.uid, "job-uid")
    assert not t.stopping and not events     # retried from the top, which asks again

    async def ok(fn, *args):
        return True

    control = StopControl(ok, REF, lambda *e: events.append(e), LOG, grace=60)
    asyncio.run(control.begin(parse_spec(MINIMAL), t, "job-uid"))
    assert t.stopping and events[0][:2] == ("Normal", v.REASON_STOPPING)


def test_done_waits_for_the_pods_but_not_for_ever():
    async def ok(fn, *args):
        return True

    t = tracker(2, 0)
    t.observe_pod(pod(0))            # a pod the stop has not ended yet
    control = StopControl(ok, REF, lambda *e: None, LOG, grace=0)
    assert not control.done(t, job_gone=False)      # not stopping yet
    asyncio.run(control.begin(parse_spec(MINIMAL), t, None))
    assert control.done(t, job_gone=False)          # grace 0: the bound passed
    patient = StopControl(ok, REF, lambda *e: None, LOG, grace=60)
    asyncio.run(patient.begin(parse_spec(MINIMAL), t, None))
    assert not patient.done(t, job_gone=True)       # the watch still shows it alive
    t.pod_deleted(pod(0, deleting=True))
    assert patient.done(t, job_gone=True)


def test_a_late_stop_acknowledges_the_generation_of_an_ended_batch_only():
    patches = []

    async def call(fn, *args):
        assert fn is resources.patch_batch_status
        patches.append(args)

    ended = {"metadata": {"namespace": "ns", "name": "b", "generation": 2},
             "status": {"phase": v.SUCCEEDED, "observedGeneration": 1,
                        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}]}}
    asyncio.run(stop.acknowledge_generation(call, ended, LOG))
    assert patches == [("ns", "b", {"observedGeneration": 2,
                                    "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]})]
    for body in ({**ended, "status": {**ended["status"], "phase": v.RUNNING}},
                 {**ended, "metadata": {**ended["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}},
                 {**ended, "status": {**ended["status"], "observedGeneration": 2}}):
        asyncio.run(stop.acknowledge_generation(call, body, LOG))
    assert len(patches) == 1


def test_kopf_calls_the_handler_only_for_an_ended_batch_that_lags_its_generation():
    ended = {"metadata": {"generation": 2}, "status": {"phase": v.STOPPED, "observedGeneration": 1}}
    assert stop.needs_acknowledging(body=ended, spec={}, meta={})
    assert not stop.needs_acknowledging(body={**ended, "status": {"phase": v.RUNNING, "observedGeneration": 1}})
    assert not stop.needs_acknowledging(body={**ended, "status": {"phase": v.STOPPED, "observedGeneration": 2}})
