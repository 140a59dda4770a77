"""core.queueing and what it changes elsewhere in core: Kueue's words, evictions, the queue wait."""
import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import lifecycle, manifests, queueing
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.children import adoptable, provisioning_plan
from rolloutbatch.core.model import BatchRef, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.job_facts import job_facts
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.pod_reading import parse_time, pod_facts

REF = BatchRef(namespace="team-a", name="b", uid="0123456789abcdef", generation=1)
SPEC = {"episodes": 2, "task": {"files": {"episode.py": "print(1)"}}}


def workload(*conditions):
    return {"status": {"conditions": [dict(zip(("type", "status", "reason", "message"), c)) for c in conditions]}}


@pytest.mark.parametrize("wl, expected", [
    (None, (False, "WorkloadNotCreated", False)),
    ({}, (False, "Pending", False)),
    (workload(("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set main: insufficient quota")),
     (False, "Pending", False)),
    (workload(("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
              ("Admitted", "True", "Admitted", "The workload is admitted")), (True, "Admitted", False)),
    (workload(("Admitted", "True", "Admitted", "ok"), ("Evicted", "True", "Preempted", "Preempted to accommodate a "
                                                       "workload (UID: x) due to prioritization in the ClusterQueue")),
     (False, "Preempted", True)),
    ({"status": {"conditions": "garbage"}}, (False, "Pending", False)),
    ({"status": {"conditions": [None, 3, {"type": "Evicted", "status": "True", "reason": 7}]}},
     (False, "Evicted", True)),
])
def test_admission_reads_kueues_conditions_in_its_words(wl, expected):
    a = queueing.admission_of(wl)
    assert (a.admitted, a.reason, a.evicted) == expected
    assert isinstance(a.message, str) and a.message and len(a.message) <= 520


def test_the_queued_message_names_the_queue_and_kueues_reason():
    a = queueing.admission_of(workload(("QuotaReserved", "False", "Pending", "insufficient quota for cpu")))
    assert queueing.queued_message("team", a) == ("waiting in LocalQueue team for Kueue to admit the Job: "
                                                  "insufficient quota for cpu")


@pytest.mark.parametrize("kwargs, cut", [
    (dict(deleted_at=100.0, suspending=True, resumed_at=None), True),      # deleted while suspended
    (dict(deleted_at=100.0, suspending=False, resumed_at=130.0), True),    # ... and the Job resumed since
    (dict(deleted_at=140.0, suspending=False, resumed_at=130.0), False),   # deleted after the last resume
    (dict(deleted_at=None, suspending=True, resumed_at=None), False),      # never deleted: it ended itself
    (dict(deleted_at=None, suspending=True, resumed_at=50.0), False),
])
def test_a_pod_is_cut_off_by_an_eviction_only_when_deleted_in_one(kwargs, cut):
    assert queueing.cut_off_by_eviction(queue_managed=True, stopping=False, **kwargs) is cut
    # a Job not under Kueue, or one a stop suspended: never an eviction
    assert not queueing.cut_off_by_eviction(queue_managed=False, stopping=False, **kwargs)
    assert not queueing.cut_off_by_eviction(queue_managed=True, stopping=True, **kwargs)


@pytest.mark.parametrize("resumed_at", [50.0, None])
def test_a_pod_deleted_while_suspending_is_cut_off_whatever_the_conditions_time(resumed_at):
    """Kueue sets spec.suspend; the Job controller deletes the active pods (rate limited: ~20 a
    second, so many pods take seconds) and writes Suspended=True, stamped with its clock, only
    afterwards. A pod deleted at 100 under a condition of 103 (resumed_at None: the condition
    reads True and keeps no resume time), or before the condition exists at all (spec.suspend
    only, the condition still False since the resume at 50), was the suspension's. Before the fix
    only a deletion within 1 s of the condition's time counted: both were the agent's
    NonZeroExit."""
    assert queueing.cut_off_by_eviction(deleted_at=100.0, queue_managed=True, stopping=False,
                                        suspending=True, resumed_at=resumed_at) is True
    assert queueing.cut_off_by_eviction(deleted_at=100.0, queue_managed=True, stopping=False,
                                        suspending=True, resumed_at=resumed_at, suspended_at=140.0) is True


def test_a_pod_deleted_long_before_the_suspension_is_not_the_queues():
    """A pod a user deleted (or a drain) at 30, judged late (a restart, a slow log read) while the
    Job is suspended since 100: the rule 'deleted while suspending' made it EvictedByQueue, its
    index never run again by the operator's count. The Job controller deletes a suspension's pods
    within DELETION_SPREAD_SECONDS before the condition's time."""
    early = 100.0 - queueing.DELETION_SPREAD_SECONDS - 1
    assert not queueing.cut_off_by_eviction(deleted_at=early, queue_managed=True, stopping=False,
                                            suspending=True, resumed_at=None, suspended_at=100.0)


@given(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_the_queue_wait_is_never_negative_and_none_until_known(created, admitted):
    wait = queueing.queue_wait_seconds(created, admitted)
    if created is None or admitted is None:
        assert wait is None
    else:
        assert wait is None or (math.isfinite(wait) and wait >= 0)


def test_cluster_queue_of_a_local_queue():
    assert queueing.cluster_queue_of({"spec": {"clusterQueue": "cq"}}) == "cq"
    for odd in (None, {}, {"spec": None}, {"spec": {"clusterQueue": ""}}, {"spec": {"clusterQueue": 3}}):
        assert queueing.cluster_queue_of(odd) is None


# --- the spec, the Job, the sandbox ---------------------------------------------------------------
def test_queue_name_is_a_dns_label_or_refused():
    assert parse_spec({**SPEC, "queueName": "team-a"}).queue_name == "team-a"
    assert parse_spec(SPEC).queue_name is None
    for bad in ("Team", "a_b", "x" * 64, 3, "-a"):
        with pytest.raises(SpecError, match="spec.queueName"):
            parse_spec({**SPEC, "queueName": bad})


def test_a_queued_batchs_job_is_created_suspended_under_kueues_label():
    spec = parse_spec({**SPEC, "queueName": "team"})
    job = manifests.job(REF, spec, None)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][queueing.QUEUE_LABEL] == "team"
    plain = manifests.job(REF, parse_spec(SPEC), None)
    assert "suspend" not in plain["spec"] and queueing.QUEUE_LABEL not in plain["metadata"]["labels"]


def test_a_dedicated_sandbox_gets_its_own_local_queue_before_the_job():
    spec = parse_spec({**SPEC, "queueName": "team"})
    kinds = [o["kind"] for o in provisioning_plan(REF, spec, {}, None, cluster_queue="cq")]
    assert kinds.index("LocalQueue") < kinds.index("Job")
    (lq,) = [o for o in provisioning_plan(REF, spec, {}, None, cluster_queue="cq") if o["kind"] == "LocalQueue"]
    assert (lq["metadata"]["name"], lq["metadata"]["namespace"], lq["spec"]) == (
        "team", f"rb-{REF.uid[:10]}", {"clusterQueue": "cq"})
    shared = parse_spec({**SPEC, "queueName": "team", "isolation": {"namespace": "Shared"}})
    assert "LocalQueue" not in [o["kind"] for o in provisioning_plan(REF, shared, {}, None, cluster_queue="cq")]
    assert "LocalQueue" not in [o["kind"] for o in provisioning_plan(REF, parse_spec(SPEC), {}, None)]
    # adopted after a crash only when it feeds the same ClusterQueue
    assert adoptable({"spec": {"clusterQueue": "cq"}}, lq, shared=False, job_uid=None)
    assert not adoptable({"spec": {"clusterQueue": "other"}}, lq, shared=False, job_uid=None)


# --- the Job's facts, the verdict, the lifecycle ---------------------------------------------------
def test_job_facts_read_the_queue_and_the_suspension_times():
    job = {"metadata": {"uid": "j", "labels": {queueing.QUEUE_LABEL: "team"}}, "spec": {"suspend": True},
           "status": {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime":
                                      "2026-12-03T00:00:10Z"}]}}
    facts = job_facts(job)
    assert (facts.queue, facts.suspend, facts.suspended, facts.resumed_at) == ("team", True, True, None)
    assert facts.suspended_at == parse_time("2026-12-03T00:00:10Z")
    job["spec"]["suspend"] = False
    job["status"]["conditions"][0].update(status="False", reason="JobResumed")
    facts = job_facts(job)
    assert (facts.suspend, facts.suspended, facts.suspended_at) == (False, False, None)
    assert facts.resumed_at == parse_time("2026-12-03T00:00:10Z")
    assert job_facts({"metadata": {"labels": {queueing.QUEUE_LABEL: 5}}}).queue is None


def killed_pod():
    return {"metadata": {"name": "p", "creationTimestamp": "2026-12-03T00:00:00Z",
                         "annotations": {v.COMPLETION_INDEX_KEY: "1"}},
            "spec": {}, "status": {"phase": "Failed", "containerStatuses": [{"name": "episode", "state": {
                "terminated": {"exitCode": 143, "reason": "Error", "finishedAt": "2026-12-03T00:00:05Z"}}}]}}


def test_an_evicted_episode_is_lost_not_the_agents_failure():
    r = judge_episode(pod_facts(killed_pod()), None, log_error="-", evicted=True)
    assert (r.outcome, r.reason) == (v.OUTCOME_LOST, v.EP_EVICTED)
    # an episode that ended well before its pod was deleted is judged as ever
    done = killed_pod()
    done["status"]["phase"] = "Succeeded"
    done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 0
    assert judge_episode(pod_facts(done), None, log_error="gone", evicted=True).reason == v.EP_LOG_UNAVAILABLE
    assert judge_episode(pod_facts(killed_pod()), None, log_error="-").reason != v.EP_EVICTED


def round_(**changes):
    base = dict(stopping=False, stop_done=False, complete=False, busy=False, job_exists=True, job_finished=False,
                job_gone=False, pods_seen=False, since_provisioned=3600.0, unplaced=False, unstartable=False,
                since_job_finished=0.0)
    return lifecycle.Round(**{**base, **changes})


def test_a_queued_batch_waits_without_a_pod_however_long():
    graces = lifecycle.Graces(pod_create=1.0, collect=1.0)
    assert lifecycle.next_step(round_(queued=True), graces) is lifecycle.Step.WAIT
    assert lifecycle.next_step(round_(), graces) is lifecycle.Step.STALL_PODS_NOT_CREATED
    # a deleted Job still stalls, a stop still ends it
    assert lifecycle.next_step(round_(queued=True, job_gone=True), graces) is lifecycle.Step.STALL_SANDBOX_DELETED
    assert lifecycle.next_step(round_(queued=True, stopping=True, stop_done=True), graces) is lifecycle.Step.END
    assert lifecycle.running_phase(False, queued=True) == v.QUEUED
    assert lifecycle.running_phase(True, queued=True) == v.COLLECTING
    assert lifecycle.entry(v.QUEUED, False) is lifecycle.Entry.ADOPT          # a restart never re-provisions
    assert lifecycle.entry(v.QUEUED, True) is lifecycle.Entry.ADOPT


def test_the_spec_replaced_with_the_resolved_queue_keeps_everything_else():
    spec = parse_spec(SPEC)
    assert dataclasses.replace(spec, queue_name="default") == dataclasses.replace(
        parse_spec({**SPEC, "queueName": "default"}))
