"""The batch's lifecycle as a state machine: from the facts a reconciler holds, its next step.

The phases (``core.vocabulary``) and the steps between them::

    Pending ─► Provisioning ─► Running ◄─► Collecting ─► Succeeded | Failed | Stopped
       │             │  │         ▲ │            │
       │             │  └► Queued ┘ ▼ (evicted)  │
       │             │     (spec.queueName: Kueue admits the Job, or evicts it again)
       └─────────────┴────────────┴──────────────┴──► Failed (a Stalled reason)

A reconciler (``service.reconciler``) starts from the phase its batch's status records, which
is what survives a restart: :func:`entry` says where it resumes. While episodes run it gathers
one :class:`Round` of facts at a time and :func:`next_step` says what follows: wait, end (every
episode final, the Job ended and its stragglers given up, a stop done) or stall with a reason.
Every decision is here, pure and unit-tested; the reconciler only carries them out.
"""

from __future__ import annotations

import dataclasses
import enum

from rolloutbatch.core import vocabulary as v

# Phases where the sandbox was made by an earlier run: a reconciler adopts it, never recreates it
# (a Job deleted meanwhile would run every episode again).
PROVISIONED_PHASES = (v.QUEUED, v.RUNNING, v.COLLECTING)
# After the last episode, how long the Job controller may take to mark its Job finished: the
# operator waits so long for it (its completion time is in the status), and so does the CLI's
# watch before it prints the summary.
JOB_END_WAIT_SECONDS = 30.0


class Entry(enum.Enum):
    """Where a reconciler resumes its batch."""

    FINISHED = "finished"                # terminal: only the work after the end (cleanup, TTL)
    STOP_BEFORE_RUN = "stop-before-run"  # spec.stop before it ran: nothing more is created
    ADOPT = "adopt"                      # provisioned by an earlier run: adopt the Job and its pods
    PROVISION = "provision"              # create (or adopt, after a crash mid-way) every child


def entry(phase: str | None, stop_requested: bool) -> Entry:
    if phase in v.TERMINAL_PHASES:
        return Entry.FINISHED
    if stop_requested and phase not in PROVISIONED_PHASES:
        return Entry.STOP_BEFORE_RUN
    if phase in PROVISIONED_PHASES:
        return Entry.ADOPT
    return Entry.PROVISION


def announces_provisioning(phase: str | None) -> bool:
    """Provisioning is said once, before the first child is made (not again after a crash)."""
    return phase in (None, v.PENDING)


def resumes_provisioning(phase: str | None) -> bool:
    """A run that finds Provisioning recorded follows one that died while making the children:
    its Job may exist and may even have run to its end while no operator watched, so the
    batch's pods are listed once (a watch replays what exists only up to the registry's bound)."""
    return phase == v.PROVISIONING


def announces_provisioned(phase: str | None) -> bool:
    """The ``Provisioned`` Event is posted once: not by a run that resumes a running batch."""
    return phase in (None, v.PENDING, v.PROVISIONING)


def running_phase(job_finished: bool, queued: bool = False) -> str:
    """The phase of a batch whose episodes are not all final: Queued while Kueue holds its Job
    (core.queueing), Collecting once its Job ended."""
    if job_finished:
        return v.COLLECTING
    return v.QUEUED if queued else v.RUNNING


def job_will_complete(phase: str | None, reason: str | None) -> bool:
    """Whether the batch's Job may still be marked finished by its controller: a stalled batch's
    Job was deleted, a stopped one's suspended."""
    return reason not in v.STALL_REASONS and phase != v.STOPPED


def stall_leaves_job_to_stop(phase: str | None, reason: str | None, *, resumed: bool) -> bool:
    """A stall is recorded before its Job is deleted: a run that resumes a stalled batch
    (``resumed``: it found the stall recorded) deletes the Job again, in case the run that stalled
    died in between (a Job already gone: nothing to do)."""
    return resumed and phase == v.FAILED and reason in v.STALL_REASONS


def stop_begins(*, stop_requested: bool, stopping: bool, complete: bool, job_finished: bool) -> bool:
    """spec.stop acts while there is something to stop: once the Job has ended (Collecting) the
    batch ends as it would."""
    return stop_requested and not stopping and not complete and not job_finished


@dataclasses.dataclass(frozen=True)
class Graces:
    """How long each wait may last (the operator's settings), in seconds."""

    pod_create: float
    collect: float


@dataclasses.dataclass(frozen=True)
class Round:
    """What a reconciler knows at one round of tracking its batch."""

    stopping: bool            # spec.stop was acted on
    stop_done: bool           # ... and no pod of the batch is left (or the stop's bound passed)
    complete: bool            # every episode is final
    busy: bool                # a log read or a judgement is in flight
    job_exists: bool          # the reconciler has seen its Job
    job_finished: bool        # the Job controller marked it Complete or Failed
    job_gone: bool            # the Job (or its namespace) was deleted, or its name taken since
    pods_seen: bool           # at least one pod of the Job was seen
    since_provisioned: float  # seconds since the Job was created or adopted
    unplaced: bool            # a pod the scheduler could not place for the unschedulable grace
    unstartable: bool         # a pod whose image the node cannot run, past the image grace
    since_job_finished: float  # seconds since the Job's end was seen (0 while it has not ended)
    queued: bool = False      # Kueue holds the Job suspended (not admitted yet, or evicted)


class Step(enum.Enum):
    WAIT = "wait"                                  # go on: write progress, wait for events
    END = "end"                                    # every episode final, or the stop is done
    END_AFTER_JOB = "end-after-job"                # the Job ended: what has no result is given up
    CHECK_ROOM = "check-room"                      # pods unplaced: could any node hold one?
    STALL_SANDBOX_DELETED = v.STALL_SANDBOX_DELETED
    STALL_PODS_NOT_CREATED = v.STALL_PODS_NOT_CREATED
    STALL_IMAGE = v.STALL_IMAGE


def next_step(facts: Round, graces: Graces) -> Step:
    """The step after one round of facts; the checks in the order they take precedence."""
    if facts.stopping:
        # A stop ends the batch once its pods are gone (or every episode is final); no stall,
        # and no give-up after the Job: the stop gives every open index its own reason.
        return Step.END if facts.stop_done or (facts.complete and not facts.busy) else Step.WAIT
    if facts.complete and not facts.busy:
        # Every episode is final: its verdict stands, whatever a pod made since (the Job
        # controller's retry of an index already given up) is waiting for.
        return Step.END
    if facts.job_gone and not facts.complete:
        return Step.STALL_SANDBOX_DELETED
    if facts.queued:
        # No pod is made while Kueue holds the Job: no grace runs out (the queue's wait is its own).
        return Step.WAIT
    if (not facts.pods_seen and facts.job_exists and not facts.job_finished
            and facts.since_provisioned > graces.pod_create):
        return Step.STALL_PODS_NOT_CREATED
    if facts.unplaced:
        return Step.CHECK_ROOM
    if facts.unstartable:
        return Step.STALL_IMAGE
    if facts.job_finished and not facts.busy and facts.since_job_finished >= graces.collect:
        return Step.END_AFTER_JOB
    return Step.WAIT
