"""core.lifecycle: where a run resumes, and the step after each round of facts."""
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.core import lifecycle
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.lifecycle import Entry, Graces, Round, Step

GRACES = Graces(pod_create=60.0, collect=15.0)
QUIET = Round(stopping=False, stop_done=False, complete=False, busy=False, job_exists=True, job_finished=False,
              job_gone=False, pods_seen=True, since_provisioned=1.0, unplaced=False, unstartable=False,
              since_job_finished=0.0)


@pytest.mark.parametrize("phase, stop, expected", [
    (None, False, Entry.PROVISION), (v.PENDING, False, Entry.PROVISION), (v.PROVISIONING, False, Entry.PROVISION),
    (v.RUNNING, False, Entry.ADOPT), (v.COLLECTING, False, Entry.ADOPT),
    (None, True, Entry.STOP_BEFORE_RUN), (v.PROVISIONING, True, Entry.STOP_BEFORE_RUN),
    # a running batch's stop is acted on while tracking, after its Job and pods are adopted
    (v.RUNNING, True, Entry.ADOPT), (v.COLLECTING, True, Entry.ADOPT),
    *[(phase, stop, Entry.FINISHED) for phase in v.TERMINAL_PHASES for stop in (False, True)],
])
def test_where_a_run_resumes(phase, stop, expected):
    assert lifecycle.entry(phase, stop) is expected


def test_every_phase_has_an_entry():
    assert {lifecycle.entry(phase, False) for phase in v.PHASES} == {Entry.PROVISION, Entry.ADOPT, Entry.FINISHED}


def test_provisioning_and_provisioned_are_announced_once():
    assert [p for p in (None, *v.PHASES) if lifecycle.announces_provisioning(p)] == [None, v.PENDING]
    assert [p for p in (None, *v.PHASES) if lifecycle.announces_provisioned(p)] == [None, v.PENDING, v.PROVISIONING]


def test_only_a_provisioning_left_by_an_earlier_run_lists_the_pods_again():
    assert [p for p in (None, *v.PHASES) if lifecycle.resumes_provisioning(p)] == [v.PROVISIONING]


def test_a_quiet_round_waits_and_the_phase_follows_the_job():
    assert lifecycle.next_step(QUIET, GRACES) is Step.WAIT
    assert (lifecycle.running_phase(False), lifecycle.running_phase(True)) == (v.RUNNING, v.COLLECTING)


@pytest.mark.parametrize("changes, expected", [
    ({"complete": True}, Step.END),
    ({"complete": True, "busy": True}, Step.WAIT),       # a judgement in flight finishes first
    ({"job_gone": True}, Step.STALL_SANDBOX_DELETED),
    ({"job_gone": True, "complete": True}, Step.END),    # every episode ended: nothing was lost
    ({"pods_seen": False, "since_provisioned": 61.0}, Step.STALL_PODS_NOT_CREATED),
    ({"pods_seen": False, "since_provisioned": 59.0}, Step.WAIT),
    ({"pods_seen": False, "since_provisioned": 61.0, "job_finished": True}, Step.WAIT),
    ({"unplaced": True}, Step.CHECK_ROOM),
    ({"unstartable": True}, Step.STALL_IMAGE),
    ({"job_finished": True, "since_job_finished": 15.0}, Step.END_AFTER_JOB),
    ({"job_finished": True, "since_job_finished": 14.9}, Step.WAIT),
    ({"job_finished": True, "since_job_finished": 20.0, "busy": True}, Step.WAIT),
    # a stop: only its own end, or every episode final
    ({"stopping": True}, Step.WAIT),
    ({"stopping": True, "stop_done": True}, Step.END),
    ({"stopping": True, "complete": True}, Step.END),
    ({"stopping": True, "job_gone": True, "unstartable": True, "unplaced": True}, Step.WAIT),
    ({"stopping": True, "job_finished": True, "since_job_finished": 99.0}, Step.WAIT),
])
def test_the_step_after_a_round(changes, expected):
    assert lifecycle.next_step(dataclasses.replace(QUIET, **changes), GRACES) is expected


rounds = st.builds(Round, stopping=st.booleans(), stop_done=st.booleans(), complete=st.booleans(), busy=st.booleans(),
                   job_exists=st.booleans(), job_finished=st.booleans(), job_gone=st.booleans(),
                   pods_seen=st.booleans(), since_provisioned=st.floats(0, 1e6), unplaced=st.booleans(),
                   unstartable=st.booleans(), since_job_finished=st.floats(0, 1e6))


@given(rounds)
def test_no_round_ends_a_batch_with_a_judgement_in_flight_or_stalls_a_stopping_one(facts):
    step = lifecycle.next_step(facts, GRACES)
    if facts.busy and not (facts.stopping and facts.stop_done):
        assert step not in (Step.END, Step.END_AFTER_JOB)
    if facts.stopping:
        assert step in (Step.END, Step.WAIT)
    if step.name.startswith("STALL"):
        assert step.value in v.STALL_REASONS   # a stall's reason is one of the API's words
    if facts.complete and not facts.busy:
        assert step is Step.END   # nothing can stall a batch whose every episode is final


def test_a_stalled_or_stopped_batchs_job_will_not_complete():
    assert lifecycle.job_will_complete(v.SUCCEEDED, v.REASON_SUCCEEDED)
    assert lifecycle.job_will_complete(v.FAILED, v.REASON_TOO_FEW)
    assert not lifecycle.job_will_complete(v.STOPPED, v.REASON_STOPPED)
    assert all(not lifecycle.job_will_complete(v.FAILED, reason) for reason in v.STALL_REASONS)


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_stop_begins_once_and_only_while_there_is_something_to_stop(requested, stopping, complete, finished):
    begins = lifecycle.stop_begins(stop_requested=requested, stopping=stopping, complete=complete,
                                   job_finished=finished)
    assert begins == (requested and not (stopping or complete or finished))


def test_a_stalled_batch_resumed_by_a_new_operator_stops_its_job_again():
    stall = next(iter(v.STALL_REASONS))
    assert lifecycle.stall_leaves_job_to_stop(v.FAILED, stall, resumed=True)
    assert not lifecycle.stall_leaves_job_to_stop(v.FAILED, stall, resumed=False)   # the run that stalled did
    assert not lifecycle.stall_leaves_job_to_stop(v.FAILED, v.REASON_TOO_FEW, resumed=True)   # its Job ran out
    assert not lifecycle.stall_leaves_job_to_stop(v.SUCCEEDED, None, resumed=True)
