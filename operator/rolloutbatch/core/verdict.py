"""Did an episode succeed? Pod facts from the API plus its parsed log give the verdict.

Whether a failure is the agent's (outcome failed, valid, counted with the worst reward) or an
infrastructure loss (outcome lost, not valid) is decided by reason, in one table:
core.outcomes.REASON_CLASS (below, "lost" marks the infrastructure reasons).

The success rule (docs/design.md): the pod Succeeded (:func:`settled_phase`) with exit code 0
and no restarts, its whole log was read, it holds exactly one ``ready`` and one ``reward`` event,
both carrying its own pod name, the reward is a finite number of magnitude at most
MAX_ABS_REWARD, and pod created <= ready.at <= reward.at <= pod finished. The two events come
from one clock (the episode's), so ``reward`` before ``ready``, by line or by ``at``, fails with
no tolerance; only comparisons with the API's timestamps (creation, finish) allow the clock-skew
tolerance: inside it the episode succeeds with a flag, beyond it, it fails with ClockSkew.
Failure reasons are checked in this order; the first that applies wins, so the reason names the
most fundamental problem (a dead pod before a missing event, a missing event before a bad one):

 1. InfrastructureFailure  (lost) the tracker says retries.infrastructure are used up
                           (``log_error=INFRASTRUCTURE_EXHAUSTED``; checked first because there is
                           no log to look at)
 2. EvictedByQueue         (lost) Kueue suspended the Job and its controller deleted the pod
                           (``evicted``) before it ended well
    InfrastructureFailure  (lost) the inputs init container did not copy the episode's input
                           (``inputs_error``; ImagePullFailed if its image never came): the
                           agent never started
    Timeout                the pod hit episodeTimeoutSeconds (pod reason DeadlineExceeded)
                           unless the Job had deleted it at the batch deadline, before its own;
                           or, a pool's pod without a verifier, its launcher stopped it there
                           (:func:`stopped_at_its_time`) or the API's times say it ended past
                           it (:func:`episode_overran`)
    StorageLimitExceeded   the kubelet evicted it for passing its own storage limits (never retried)
 3. BatchTimeout           the batch's activeDeadlineSeconds ended the pod (``batch_deadline_at``
                           given, the pod did not end Succeeded/0 and ended at or after it)
 4. LogUnavailable         (lost) the log could not be read
 5. ImagePullFailed        (lost) the container never started (ErrImagePull, ImagePullBackOff, ...)
 6. NonZeroExit            phase is not Succeeded or the exit code is not 0
 7. Restarted              the container restarted
 8. LogLimitExceeded       the log passed the read limit: nothing past it was seen, so it can
                           never prove "exactly one reward" (whatever was read)
 9. NoReadyEvent / NoRewardEvent
10. DuplicateReady / DuplicateReward
11. IdentityMismatch       an event names another episode
12. InvalidReward          not a finite int/float (bools, strings, NaN, Infinity, 1e400), or out
                           of range (magnitude above MAX_ABS_REWARD)
13. MissingTimestamp       an event's ``at`` is absent or not a finite number
14. ClockSkew              an event's ``at`` before the pod's creation or after its finish (or
                           after ``now``, when its finish is unknown) by more than the tolerance
                           (the finish counts to the end of its second: finishedAt is whole seconds);
                           before RewardBeforeReady: times from a wrong clock say nothing, their
                           order included
15. RewardBeforeReady      the reward line comes before the ready line, or reward.at < ready.at
Within the tolerance the episode succeeds with the flag ``ClockSkewWithinTolerance``. A row whose
event times lie beyond it reports no durations (they would come from the wrong clock), whichever
reason won; when another reason than ClockSkew won, it is flagged ``ClockSkewBeyondTolerance``.

A pod with spec.verifier is judged by core.verdict_verified, which gives this module its
pod-level reasons and the final check of the two events.
"""

from __future__ import annotations

import re

from rolloutbatch.core import log_tails
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import MAX_EVENTS_PER_KIND, MAX_EXTRA_BYTES, MAX_EXTRA_FIELD_BYTES
from rolloutbatch.core.model import MAX_ABS_REWARD, EpisodeResult, ParsedLog, PodFacts, pool_claim, usable_reward
from rolloutbatch.core.outcomes import never_ran_outcome, outcome_of
from rolloutbatch.core.pod_reading import POD_FAILED, POD_SUCCEEDED
from rolloutbatch.core.strictjson import finite, sanitize
from rolloutbatch.core.launchers import VERIFIER_SLACK_SECONDS
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT, NOT_DELIVERED_EXIT

__all__ = ["INFRASTRUCTURE_EXHAUSTED", "INFRASTRUCTURE_REASONS", "MAX_ABS_REWARD", "is_infrastructure_failure",
           "is_terminal", "judge_episode", "missing_reason", "never_ran", "rejected_by_node"]

# Terminal pod reasons set by the node or the control plane, not by the episode's program.
INFRASTRUCTURE_REASONS = {"Evicted", "Preempting", "NodeLost", "UnexpectedAdmissionError", "Terminated",
                          "NodeShutdown", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"}
# Passed as ``log_error`` by the tracker when an index used up retries.infrastructure.
INFRASTRUCTURE_EXHAUSTED = "infrastructure retries exhausted"
POD_DEADLINE_REASON = "DeadlineExceeded"   # the pod's own activeDeadlineSeconds (episodeTimeoutSeconds)
# How far an event's `at` may lie outside the pod's life (the API's clock) before it is ClockSkew.
CLOCK_SKEW_TOLERANCE_SECONDS = 2.0
# The kubelet's messages for evicting a pod over its own limits (pkg/kubelet/eviction/helpers.go:
# emptyDirMessageFmt, podEphemeralStorageMessageFmt, containerEphemeralStorageMessageFmt). Such an
# eviction carries DisruptionTarget like a node's, but the episode caused it: retried, it would let
# an agent re-roll a bad attempt by filling its disk.
_OWN_LIMIT_EVICTION = re.compile(r"^(Usage of EmptyDir volume .* exceeds the limit"
                                 r"|Pod ephemeral local storage usage exceeds the total limit"
                                 r"|Container .* exceeded its local ephemeral storage limit)")
def is_terminal(facts: PodFacts) -> bool:
    return facts.phase in (POD_SUCCEEDED, POD_FAILED)


def is_infrastructure_failure(facts: PodFacts) -> bool:
    """Failed for reasons outside the episode: retried by the Job, not a task failure.

    True only for a terminal pod with phase Failed that has the DisruptionTarget condition
    (eviction, preemption, taint-manager and PodGC deletions all set it) or a node-side reason
    (Evicted, NodeLost, node shutdown, ...), or that its node refused at admission
    (:func:`rejected_by_node`): that is what the Job's podFailurePolicy counts
    against backoffLimitPerIndex. A pod merely being deleted, even with DisruptionTarget, is not
    one yet: an evicted program that exits 0 on SIGTERM ends Succeeded, the Job counts its index
    succeeded and makes no replacement, so the operator judges it from its log
    like any other pod once it is terminal. A pod whose object vanishes before any terminal
    phase is handled by the tracker (``pod_deleted``).
    """
    if facts.phase != POD_FAILED or over_own_limits(facts):
        return False
    if facts.pooled and never_delivered(facts):
        return True   # the pool's launcher: this pod never ran an episode (core.pool_delivery)
    return facts.disrupted or facts.pod_reason in INFRASTRUCTURE_REASONS or rejected_by_node(facts)


def _claim_of(facts: PodFacts) -> dict | None:
    """A pool's pod handed its episode: a claimed warm pod (a hit) or a cold pod of the pool's
    template (a miss), and the seconds from its claim (a hit) or creation (a miss) to the hand-over,
    both on the control plane's clocks (as rolloutbatch_claim_seconds): no node's clock is in it."""
    if not facts.pooled or facts.delivered_at is None or not facts.created:
        return None
    return pool_claim(facts.claimed_at is not None, facts.delivered_at - facts.created)


def never_delivered(facts: PodFacts) -> bool:
    """A pool's pod ended without running its episode (core.pool_delivery): its episode's
    container exited NOT_DELIVERED_EXIT; with a verifier, the agent's did, or the agent's ended
    well and the verifier's exited so (it was never handed its phase). An agent launcher's own
    failure is the episode's, whatever its verifier then did (core.pools.failure_rules).

    Not once the operator has the launcher's word that the phase was handed over (its
    annotation, or the tracker's own record of it: core.tracker.handed_over): a launcher exits so
    only before that, so such an exit is the doing of what ran in the container (its own user may
    ptrace PID 1 and make it exit so), and a retry would re-roll the attempt it failed."""
    agent = facts.agent
    if agent is not None and agent.state == "terminated" and agent.exit_code not in (0, None):
        return agent.exit_code == NOT_DELIVERED_EXIT and facts.delivered_at is None
    if facts.exit_code != NOT_DELIVERED_EXIT:
        return False
    if agent is not None and agent.state == "terminated" and agent.exit_code == 0:
        return facts.verifier_delivered_at is None   # the verifier's container: its phase's word
    return facts.delivered_at is None


def stopped_at_its_time(facts: PodFacts) -> bool:
    """A pool's pod without a verifier whose launcher stopped its agent at, or saw it run past,
    episodeTimeoutSeconds from its hand-over (core.pool_delivery: AGENT_OVERRAN_EXIT, an agent's
    own exit of it reported as 1): the Timeout a Job's pod gets from its deadline."""
    return facts.pooled and facts.agent is None and facts.phase == POD_FAILED \
        and facts.exit_code == AGENT_OVERRAN_EXIT


def _past_by_the_api(finished_at: float | None, delivered_at: float | None, episode_timeout: int | None) -> bool:
    """A pooled phase that began at its hand-over (``delivered_at``, the operator's clock) ended
    (``finished_at``, the kubelet's) more than VERIFIER_SLACK_SECONDS past ``episode_timeout``.
    Never said of one that did not: it began no later than its hand-over was written down,
    finishedAt is rounded down, and the two clocks may differ by the skew tolerance."""
    if episode_timeout is None or finished_at is None or delivered_at is None:
        return False
    return finished_at - delivered_at > episode_timeout + VERIFIER_SLACK_SECONDS + CLOCK_SKEW_TOLERANCE_SECONDS


def agent_overran(facts: PodFacts, episode_timeout: int | None) -> bool:
    """A pool pod's agent phase (spec.verifier) ran past its time by the API's times, whatever its
    launcher recorded: the launcher reads its time from the script it was handed, in a container
    whose processes (a prepare's leftover) could rewrite it, and its watchdog can be killed."""
    agent = facts.agent
    return facts.pooled and agent is not None and _past_by_the_api(agent.finished_at, facts.delivered_at,
                                                                   episode_timeout)


def episode_overran(facts: PodFacts, episode_timeout: int | None) -> bool:
    """A pool pod's episode without a verifier ran past its time by the API's times (as
    :func:`agent_overran`): the episode container's finish against its hand-over."""
    return facts.pooled and facts.agent is None and _past_by_the_api(facts.finished_at, facts.delivered_at,
                                                                     episode_timeout)


def rejected_by_node(facts: PodFacts) -> bool:
    """The kubelet refused the pod at admission (OutOfcpu, OutOfmemory, OutOfpods, NodeAffinity,
    ...): Failed with its reason, before any container was created, so its status lists none and
    it has no log. Nothing of the agent ran to cause that. A real kubelet does it in the ordinary
    course of things: it still counts a finished pod's resources while tearing it down, the
    scheduler does not, and places the next pending pod there at once (with gVisor's slower
    teardown, often). The Job's podFailurePolicy matches none of its rules for such a pod (no
    condition, no exit code), so the Job counts it against backoffLimitPerIndex, as the
    tracker counts an infrastructure retry."""
    return facts.phase == POD_FAILED and not facts.containers_reported and bool(facts.node)


def over_own_limits(facts: PodFacts) -> bool:
    """Evicted by the kubelet for passing the pod's own storage limits (see _OWN_LIMIT_EVICTION)."""
    return (facts.phase == POD_FAILED and facts.pod_reason == "Evicted"
            and bool(_OWN_LIMIT_EVICTION.match(facts.pod_message or "")))


def count_of(events: tuple) -> str:
    """How many events of a kind a log held, as a message says it (the parser keeps a bounded number)."""
    return f"more than {MAX_EVENTS_PER_KIND}" if len(events) > MAX_EVENTS_PER_KIND else str(len(events))


def shown(value: object, limit: int = 120) -> str:
    """A short repr of a hostile value (a 5,000-digit int or deep nesting cannot make repr raise)."""
    if isinstance(value, int) and not isinstance(value, bool) and finite(value) is None:
        return "an integer too large for a float"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def missing_reason(job_failed: bool, job_reason: str | None) -> str:
    """The episode reason of an index the Job ended without: the deadline is BatchTimeout
    (the batch's word, not the Job's own DeadlineExceeded), any other Job failure JobFailed,
    a Job that completed without it LogUnavailable."""
    if not job_failed:
        return v.EP_LOG_UNAVAILABLE
    return v.EP_BATCH_TIMEOUT if job_reason == v.JOB_DEADLINE_REASON else v.EP_JOB_FAILED


def never_ran(index: int, reason: str, message: str, attempts: int = 0) -> EpisodeResult:
    """The result of an index that produced no judgeable run (no pod, or none that ended): lost,
    whatever the reason (nothing of the agent ran to cause it), or stopped when spec.stop is
    why (``core.outcomes.never_ran_outcome``).

    ``reason`` must be an episode reason (vocabulary.EPISODE_REASONS; see :func:`missing_reason`).
    """
    if reason not in v.EPISODE_REASONS:
        raise ValueError(f"{reason!r} is not an episode reason")
    return EpisodeResult(index=index, pod="", node=None, image_id=None, outcome=never_ran_outcome(reason),
                         reason=reason,
                         message=message, reward=None, pod_created=None, ready_at=None, reward_at=None,
                         pod_to_ready_seconds=None, attempts=max(0, attempts))


def _deleted_by_batch_deadline(facts: PodFacts, deadline: float | None) -> bool:
    """The Job deleted the pod at its deadline, before the pod's own: a container that outlives
    the grace period (a shell as PID 1 ignores SIGTERM) then reaches its own deadline and the
    kubelet reports DeadlineExceeded, but the batch's deadline is what ended the episode. Both
    times are the API's, in whole seconds (hence the one second)."""
    deleted = facts.delete_requested_at
    if deadline is None or deleted is None or deleted < deadline - 1.0:
        return False
    return facts.own_deadline_at is None or deleted < facts.own_deadline_at


def judge_episode(facts: PodFacts, log: ParsedLog | None, *, log_error: str | None = None,
                  skew_tolerance: float = CLOCK_SKEW_TOLERANCE_SECONDS, log_tail: str | None = None, attempts: int = 1,
                  batch_deadline_at: float | None = None, now: float | None = None,
                  channel: str | None = None, evicted: bool = False,
                  episode_timeout: int | None = None) -> EpisodeResult:
    """The verdict of one pod (see the module docstring for the order of reasons).

    ``channel``: where ``log`` came from (vocabulary.CHANNELS), recorded on the result.
    ``batch_deadline_at``: Unix time at which the Job's activeDeadlineSeconds ends, when known.
    ``now``: the time of judgement; it stands in for the finish of a pod being deleted that has
    no finishedAt yet, and bounds event times when the pod's finish is unknown. Without it such a
    deleting pod is never taken for a BatchTimeout (the Job's deadline is known from its start,
    long before it passes; a pod deleted earlier was not ended by it).
    ``evicted``: the Job controller deleted the pod because Kueue suspended the Job
    (core.queueing.cut_off_by_eviction): unless it ended well, EvictedByQueue, lost.
    ``episode_timeout``: the batch's episodeTimeoutSeconds, which a pool's pod counts from its
    hand-over (:func:`episode_overran`).
    Total: any facts and any log give a result, never an exception.
    """
    ready = log.ready[0] if log and len(log.ready) == 1 else None
    reward = log.reward[0] if log and len(log.reward) == 1 else None
    created = finite(facts.created) or None           # 0.0 means "unknown" (pod_facts)
    finished = finite(facts.finished_at)
    now = finite(now)
    deadline = finite(batch_deadline_at)
    # finishedAt has whole-second precision (metav1.Time): an event in the pod's last partial
    # second is after the recorded finish, and must not spend the tolerance.
    upper = finished + 1.0 if finished is not None else now

    def outside(at: float | None) -> float:
        """Seconds an event time lies outside the pod's life: negative before it, 0.0 within
        (of both, the farther: a node's clock can put finishedAt before the creation)."""
        before = at - created if at is not None and created is not None and at < created else 0.0
        after = at - upper if at is not None and upper is not None and at > upper else 0.0
        return before if -before >= after else after

    def verdict(outcome: str, reason: str | None, message: str, flags: tuple[str, ...] = ()) -> EpisodeResult:
        if reward is not None and reward.dropped:
            flags = (*flags, v.FLAG_EXTRAS_DROPPED)
            note = (f"reward extras left out (over {MAX_EXTRA_FIELD_BYTES // 1024} KiB each or "
                    f"{MAX_EXTRA_BYTES // 1024} KiB in all, or not JSON): {', '.join(reward.dropped)}")
            message = f"{message}; {note}" if message else note
        ready_at = finite(ready.at) if ready else None
        reward_at = finite(reward.at) if reward else None
        # A wrong clock gives no durations, whichever reason won (a forged `at` must not reach
        # a row, a percentile or a metric); the flag keeps that across a restart.
        wrong_clock = any(abs(outside(at)) > skew_tolerance for at in (ready_at, reward_at))
        if wrong_clock and reason != v.EP_CLOCK_SKEW:
            flags = (*flags, v.FLAG_SKEW_BEYOND)
        # within the tolerance a ready may read a moment before the pod's creation: never below 0
        startup = finite(max(0.0, ready_at - created)) if ready_at is not None and created is not None \
            and not wrong_clock and reason != v.EP_CLOCK_SKEW else None
        return EpisodeResult(
            index=facts.index if facts.index is not None else -1, pod=facts.name, node=facts.node,
            image_id=facts.image_id, outcome=outcome, reason=reason, message=message,
            # only a usable reward is recorded: a restart must be able to read the row back
            reward=usable_reward(reward.reward) if reward is not None else None,
            pod_created=created, ready_at=ready_at, reward_at=reward_at, pod_to_ready_seconds=startup,
            attempts=attempts, log_tail=log_tails.kept(log_tail, outcome),
            extra=sanitize(dict(reward.extra)) if reward else {}, flags=flags,
            channel=channel if log is not None else None, pool=_claim_of(facts),
        )

    def fail(reason: str, message: str) -> EpisodeResult:
        return verdict(outcome_of(reason), reason, message)

    if log_error == INFRASTRUCTURE_EXHAUSTED:
        return fail(v.EP_INFRASTRUCTURE,
                    f"the pod failed for infrastructure reasons ({facts.pod_reason or 'disrupted'}) "
                    f"on every one of {attempts} attempts")
    ended_normally = facts.phase == POD_SUCCEEDED and facts.exit_code == 0
    if evicted and not ended_normally:
        return fail(v.EP_EVICTED, "Kueue evicted the batch's Job (preempted or its queue stopped) while the episode "
                                  "ran; the Job controller deleted its pod")
    if facts.inputs_error is not None:
        # before any reason of the agent's: its container never started (the inputs container runs first)
        if facts.waiting_reason in v.IMAGE_WAITING_REASONS:
            return fail(v.EP_IMAGE_PULL, f"{facts.waiting_reason}: {facts.waiting_message or ''}".strip())
        return fail(v.EP_INFRASTRUCTURE, facts.inputs_error)
    if facts.pod_reason == POD_DEADLINE_REASON and not _deleted_by_batch_deadline(facts, deadline):
        return fail(v.EP_TIMEOUT, facts.pod_message or "the episode ran past episodeTimeoutSeconds")
    if stopped_at_its_time(facts):
        return fail(v.EP_TIMEOUT, "the episode ran past episodeTimeoutSeconds from its hand-over (its pool "
                                  "launcher stopped it)")
    if episode_overran(facts, episode_timeout):
        return fail(v.EP_TIMEOUT, f"the episode ended more than {VERIFIER_SLACK_SECONDS} s past episodeTimeoutSeconds "
                                  "from its hand-over (by the API's times, whatever its launcher recorded): not graded")
    if over_own_limits(facts):
        return fail(v.EP_STORAGE_LIMIT, f"evicted by the kubelet: {facts.pod_message}"[:1000])
    if deadline is not None and not ended_normally:
        ended = finished if finished is not None else (now if facts.deleting else None)
        if ended is not None and ended >= deadline - skew_tolerance:
            return fail(v.EP_BATCH_TIMEOUT, "the batch's activeDeadlineSeconds ended the episode before it "
                                            f"finished (exit code {facts.exit_code})")
    if log_error is not None:
        return fail(v.EP_LOG_UNAVAILABLE, log_error)
    if facts.waiting_reason in v.IMAGE_WAITING_REASONS:
        return fail(v.EP_IMAGE_PULL, f"{facts.waiting_reason}: {facts.waiting_message or ''}".strip())
    if not ended_normally:
        return fail(v.EP_NON_ZERO_EXIT, f"the episode exited with code {facts.exit_code} "
                                        f"({facts.terminated_reason or facts.phase})")
    if facts.restart_count:
        return fail(v.EP_RESTARTED, f"the container restarted {facts.restart_count} times")
    if log is None:
        return fail(v.EP_LOG_UNAVAILABLE, "no log was read")
    if log.truncated:
        if channel == v.CHANNEL_TERMINATION_MESSAGE:
            return fail(v.EP_LOG_LIMIT, "the termination message reached the kubelet's 4096-byte limit: what it "
                                        f"lost cannot be seen (kept: {count_of(log.ready)} ready, "
                                        f"{count_of(log.reward)} reward)")
        return fail(v.EP_LOG_LIMIT, f"the log passed the read limit after {log.bytes_read} bytes: the events past "
                                    f"it were not seen (read: {count_of(log.ready)} ready, {count_of(log.reward)} "
                                    "reward)")
    if not log.ready:
        return fail(v.EP_NO_READY, "no ready event")
    if not log.reward:
        return fail(v.EP_NO_REWARD, "no reward event")
    if len(log.ready) > 1:
        return fail(v.EP_DUPLICATE_READY, f"expected 1 ready event, saw {count_of(log.ready)}")
    if len(log.reward) > 1:
        return fail(v.EP_DUPLICATE_REWARD, f"expected 1 reward event, saw {count_of(log.reward)}")
    assert ready is not None and reward is not None
    for event in (ready, reward):
        if event.episode_id != facts.name:
            return fail(v.EP_IDENTITY, f"{event.kind} event names episode {shown(event.episode_id)}, "
                                       f"not {shown(facts.name)}")
    if usable_reward(reward.reward) is None:
        if finite(reward.reward) is not None:
            return fail(v.EP_INVALID_REWARD, f"reward {shown(reward.reward)} is out of range "
                                             f"(at most {MAX_ABS_REWARD:g} in magnitude)")
        return fail(v.EP_INVALID_REWARD, f"reward must be a finite number, got {shown(reward.reward)}")
    ready_at, reward_at = finite(ready.at), finite(reward.at)
    if ready_at is None or reward_at is None:
        return fail(v.EP_MISSING_TIMESTAMP, "events need a numeric `at` (Unix seconds)")
    # The API's clock before the episode's: times from a clock that is wrong say nothing, their
    # order included.
    flags: tuple[str, ...] = ()
    for event, at in ((ready, ready_at), (reward, reward_at)):
        off = outside(at)
        if abs(off) > skew_tolerance:
            when = (f"{-off:.1f}s before the pod was created" if off < 0 else
                    f"{off:.1f}s after the pod {'finished' if finished is not None else 'was judged'}")
            return fail(v.EP_CLOCK_SKEW, f"{event.kind} at {at:.3f} is {when}: check clock synchronisation")
        if off:
            flags = (v.FLAG_SKEW_TOLERATED,)
    # Both events come from one clock: their order has no tolerance.
    if reward.line < ready.line:
        return fail(v.EP_REWARD_BEFORE_READY, f"the reward event (line {reward.line}) comes before the ready event "
                                              f"(line {ready.line})")
    if reward_at < ready_at:
        return fail(v.EP_REWARD_BEFORE_READY, f"reward at {reward_at:.3f} is {ready_at - reward_at:.3f}s before "
                                              f"ready at {ready_at:.3f}")
    return verdict(v.OUTCOME_SUCCEEDED, None, "", flags)
