"""spec.stop, the pure parts: its spec field, what the stop makes of the episodes it cuts off
(core.stopping, the tracker), the Stopped phase and its conditions, the status that says it saw
the stop's generation."""
from __future__ import annotations

import dataclasses

import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.conditions import conditions_for
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec import parse_spec, stop_requested
from rolloutbatch.core.status import acknowledged, build_status, stopped_phase
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.stopping import cut_off, finished_before
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.job_facts import JobFacts, job_facts
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.service.context import iso_time
from tests.unit.core.factories import MINIMAL, REF
from tests.unit.core.factories import result as made
from tests.unit.core.test_tracker import JOB_UID, pod, pooled_pod, result, tracker


# --- the spec ---------------------------------------------------------------------------------
def test_stop_and_retention_parse_with_their_defaults():
    spec = parse_spec(MINIMAL)
    assert (spec.stop, spec.cleanup_results, spec.retains_results) == (False, v.RESULTS_DELETE, False)
    spec = parse_spec({**MINIMAL, "stop": True, "cleanup": {"results": v.RESULTS_RETAIN}})
    assert (spec.stop, spec.cleanup_results, spec.retains_results) == (True, v.RESULTS_RETAIN, True)


@pytest.mark.parametrize("change, field", [
    ({"stop": "true"}, "spec.stop"),
    ({"stop": 1}, "spec.stop"),
    ({"cleanup": {"results": "retain"}}, "spec.cleanup.results"),   # never guessed
    ({"cleanup": {"results": "Keep"}}, "spec.cleanup.results"),
])
def test_a_wrong_stop_or_retention_is_refused(change, field):
    with pytest.raises(SpecError) as err:
        parse_spec({**MINIMAL, **change})
    assert err.value.field == field


def test_only_a_true_stop_is_a_stop():
    assert stop_requested({"stop": True})
    for raw in ({}, {"stop": False}, {"stop": "true"}, {"stop": 1}, None, "stop"):
        assert not stop_requested(raw), raw


# --- the episodes: core.stopping and the tracker -----------------------------------------------
def _ended(index: int, deleting: bool, exit_code: int = 143):
    return pod(index, phase="Failed" if exit_code else "Succeeded", exit_code=exit_code, deleting=deleting,
               finished_at=105.0)


def test_a_failure_of_a_pod_the_stop_deleted_is_the_stops():
    facts = _ended(0, deleting=True)
    failed = judge_episode(facts, None, log_error=None)
    assert failed.outcome == v.OUTCOME_FAILED
    cut = cut_off(failed, facts)
    assert (cut.outcome, cut.reason, cut.valid, cut.graded_reward) == (v.OUTCOME_STOPPED, v.EP_BATCH_STOPPED, False,
                                                                       None)
    assert failed.reason in cut.message   # what it ended with is still said
    row = cut.to_row(100.0)
    assert (row["outcome"], row["valid"], row["reward"]) == ("stopped", False, None)


def test_a_pod_whose_log_went_with_the_stop_is_the_stops_not_lost():
    facts = _ended(0, deleting=False)
    gone = judge_episode(facts, None, log_error=v.LOG_POD_GONE)
    assert gone.outcome == v.OUTCOME_LOST
    assert cut_off(gone, facts).outcome == v.OUTCOME_STOPPED


def test_what_finished_stands_and_a_failure_of_its_own_is_the_agents():
    assert cut_off(made(0), _ended(0, deleting=True)).outcome == v.OUTCOME_SUCCEEDED
    # ended on its own before the stop reached it: the Job controller deletes only active pods
    own = judge_episode(_ended(1, deleting=False), None)
    assert cut_off(own, _ended(1, deleting=False)) is own
    broken = judge_episode(_ended(2, deleting=False), None, log_error="log read failed: reset")
    assert cut_off(broken, _ended(2, deleting=False)).outcome == v.OUTCOME_LOST   # the API's failure still


def test_a_stopped_tracker_keeps_what_finished_and_gives_the_rest_to_the_stop():
    t = tracker(6, 2)
    for i in range(3):                       # three finished before the stop
        t.observe_pod(pod(i, phase="Succeeded", exit_code=0))
        (facts,) = t.take_reads()
        t.record(result(i), facts.uid)
    t.observe_pod(pod(3))                    # running
    t.observe_pod(pod(4, phase="Pending"))   # not started
    t.stop()
    assert t.stopping and not t.stop_settled()
    t.observe_pod(_ended(3, deleting=True))  # SIGTERM: exit 143
    (facts,) = t.take_reads()
    t.record(judge_episode(facts, None), facts.uid)
    t.pod_deleted(pod(4, phase="Pending", deleting=True))
    t.observe_job(JobFacts(uid=JOB_UID, created=90.0, name="rb-x", namespace="rb-x", suspended=True), 110.0)
    assert t.stop_settled()
    assert t.stopped_rest() == [4, 5]
    summary = t.summary(90.0)
    assert (summary.succeeded, summary.failed, summary.lost, summary.stopped) == (3, 0, 0, 3)
    assert summary.finished == 3 and t.complete                  # final, but not finished
    assert [t.results[i].reason for i in range(6)] == [None] * 3 + [v.EP_BATCH_STOPPED] * 3
    assert finished_before(summary).startswith("3 of 6 episodes finished before the stop")


def test_a_stopping_tracker_waits_for_the_jobs_own_counts():
    t = tracker(2, 0)
    t.stop()
    job = JobFacts(uid=JOB_UID, created=90.0, name="rb-x", namespace="rb-x", suspended=True, pods_left=1)
    t.observe_job(job, 100.0)
    assert not t.stop_settled()              # a pod the watch never showed is still terminating
    assert t.stop_settled(job_gone=True)     # ... unless the Job itself is gone
    t.observe_job(JobFacts(uid=JOB_UID, created=90.0, name="rb-x", namespace="rb-x", suspended=True), 101.0)
    assert t.stop_settled()


def test_a_stop_waits_for_the_job_to_adopt_the_claims_it_was_made_for():
    """A pooled batch stopped after its operator died between its claims and its Job: the Job
    made then, suspended, counts nothing until its controller adopted the claimed pods; the
    episodes they ran are theirs, not the stop's."""
    t = BatchTracker(2, 0, namespace="rb-x", job_name="rb-x", pooled=True)
    ended = pooled_pod(0, "warm", phase="Succeeded", claimed=True, delivered=True, owner_uid=None)
    t.observe_pod(dataclasses.replace(ended, exit_code=0))
    t.stop()
    t.expect_job(JOB_UID)
    t.observe_job(JobFacts(uid=JOB_UID, created=90.0, name="rb-x", namespace="rb-x", suspended=True), 100.0)
    assert not t.stop_settled()                # the controller has not adopted the claim yet
    assert t.stop_settled(job_gone=True)       # ... and never will once the Job is gone
    t.observe_pod(dataclasses.replace(ended, exit_code=0, owner_uid=JOB_UID))
    (facts,) = t.take_reads()
    t.record(result(0), facts.uid)
    assert t.stop_settled()
    assert t.stopped_rest() == [1]
    assert t.results[0].outcome == v.OUTCOME_SUCCEEDED


def test_no_retry_is_counted_while_the_batch_stops():
    t = tracker(1, 2)
    t.stop()
    t.observe_pod(pod(0, phase="Failed", disrupted=True))
    assert t.retried == 0 and not t.results    # the suspended Job makes no replacement
    t.stopped_rest()
    assert t.results[0].outcome == v.OUTCOME_STOPPED


def test_a_suspended_jobs_facts():
    facts = job_facts({"metadata": {"uid": "u", "name": "rb-x", "namespace": "rb-x"},
                       "status": {"active": 2, "terminating": 1,
                                  "conditions": [{"type": "Suspended", "status": "True"}]}})
    assert facts.suspended and facts.pods_left == 3 and not facts.finished
    assert not job_facts({"metadata": {"uid": "u"}, "status": {"conditions": [
        {"type": "Suspended", "status": "False"}]}}).suspended


# --- the batch: phase, conditions, status -----------------------------------------------------
STOPPED_SUMMARY = summarize([made(0), made(1, outcome="failed", reward=None), made(2, outcome="stopped"),
                             made(3, outcome="stopped")], episodes=4, origin=100.0)


def test_the_stopped_phase_says_how_many_finished_before_the_stop():
    phase, reason, message = stopped_phase(STOPPED_SUMMARY, "b-results")
    assert (phase, reason) == (v.STOPPED, v.REASON_STOPPED) and phase in v.TERMINAL_PHASES
    assert "2 of 4 episodes finished before the stop (1 succeeded, 1 failed, 0 lost), 2 cut off" in message
    assert "b-results" in message


def test_a_stopped_batch_is_finished_not_ready_and_stalled_for_gitops():
    conditions = {c["type"]: c["status"] for c in conditions_for(v.STOPPED, v.REASON_STOPPED, "m", 2, [], "t")}
    assert conditions == {v.CONDITION_READY: "False", v.CONDITION_SUCCEEDED: "False",
                          v.CONDITION_RECONCILING: "False", v.CONDITION_STALLED: "True",
                          v.CONDITION_FINISHED: "True"}


def _status(phase, summary, **kw):
    args = dict(ref=REF, spec=parse_spec({**MINIMAL, "episodes": 4}), phase=phase, summary=summary, running=0,
                ready=0, sandbox_namespace=None, job_name="rb-x", results_configmap="b-results",
                start_time=iso_time(0), completion_time=iso_time(60), job_complete_seconds=None, message="m",
                reason=None, previous={}, now_iso=iso_time(60))
    args.update(kw)
    return build_status(**args)


def test_the_status_counts_the_stopped_apart_from_progress():
    status = _status(v.STOPPED, STOPPED_SUMMARY)
    assert status["reason"] == v.REASON_STOPPED
    assert (status["stoppedEpisodes"], status["lostEpisodes"], status["progress"]) == (2, 0, "2/4")


def test_a_stop_after_the_end_only_acknowledges_its_generation():
    ended = _status(v.SUCCEEDED, summarize([made(i) for i in range(4)], episodes=4, origin=100.0))
    patch = acknowledged(ended, 2)
    assert patch["observedGeneration"] == 2 and all(c["observedGeneration"] == 2 for c in patch["conditions"])
    assert [c["status"] for c in patch["conditions"]] == [c["status"] for c in ended["conditions"]]
    assert acknowledged({**ended, "observedGeneration": 2}, 2) is None
    assert acknowledged(_status(v.RUNNING, STOPPED_SUMMARY), 2) is None   # a running batch's reconciler does it
