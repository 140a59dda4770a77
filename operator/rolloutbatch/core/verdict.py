"""Did an episode succeed? Pod facts from the API plus its parsed log give the verdict.

The success rule (docs/design.md): the pod Succeeded with exit code 0 and no restarts, its whole
log was read, it holds exactly one ``ready`` and one ``reward`` event, both carrying its own pod
name, the reward is a finite number of magnitude at most MAX_ABS_REWARD, and
pod created <= ready.at <= reward.at <= pod finished. The two events come from one clock (the
episode's), so ``reward`` before ``ready``, by line or by ``at``, fails with no tolerance; only
comparisons with the API's timestamps (creation, finish) allow the clock-skew tolerance: inside
it the episode succeeds with a flag, beyond it, it fails with ClockSkew.
Failure reasons are checked in this order; the first that applies wins, so the reason names the
most fundamental problem (a dead pod before a missing event, a missing event before a bad one):

 1. InfrastructureFailure  the tracker says retries.infrastructure are used up
                           (``log_error=INFRASTRUCTURE_EXHAUSTED``; checked first because there is
                           no log to look at)
 2. Timeout                the pod hit episodeTimeoutSeconds (pod reason DeadlineExceeded)
 3. BatchTimeout           the batch's activeDeadlineSeconds ended the pod (``batch_deadline_at``
                           given, the pod did not end Succeeded/0 and ended at or after it)
 4. LogUnavailable         the log could not be read (outcome "lost" when the pod is gone/going)
 5. ImagePullFailed        the container never started (ErrImagePull, ImagePullBackOff, ...)
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
14. RewardBeforeReady      the reward line comes before the ready line, or reward.at < ready.at
15. ClockSkew              an event's ``at`` before the pod's creation or after its finish (or
                           after ``now``, when its finish is unknown) by more than the tolerance
                           (the finish counts to the end of its second: finishedAt is whole seconds)
Within the tolerance the episode succeeds with the flag ``ClockSkewWithinTolerance``.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import MAX_EVENTS_PER_KIND
from rolloutbatch.core.model import MAX_ABS_REWARD, EpisodeResult, ParsedLog, PodFacts, usable_reward
from rolloutbatch.core.naming import CONTAINER_NAME
from rolloutbatch.core.strictjson import finite, sanitize

__all__ = ["INFRASTRUCTURE_EXHAUSTED", "INFRASTRUCTURE_REASONS", "MAX_ABS_REWARD", "is_infrastructure_failure",
           "is_terminal", "judge_episode", "missing_reason", "never_ran", "parse_time", "pod_facts"]

# Terminal pod reasons set by the node or the control plane, not by the episode's program.
INFRASTRUCTURE_REASONS = {"Evicted", "Preempting", "NodeLost", "UnexpectedAdmissionError", "Terminated",
                          "NodeShutdown", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"}
# Passed as ``log_error`` by the tracker when an index used up retries.infrastructure.
INFRASTRUCTURE_EXHAUSTED = "infrastructure retries exhausted"
POD_DEADLINE_REASON = "DeadlineExceeded"   # the pod's own activeDeadlineSeconds (episodeTimeoutSeconds)
_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")
_INDEX = re.compile(r"^[0-9]{1,9}$")


def parse_time(value: object) -> float | None:
    """RFC 3339 timestamp (as the API writes them) to Unix seconds; None if absent or odd."""
    if not isinstance(value, str):
        return None
    match = _TIME.match(value.strip())
    if not match:
        return None
    y, mo, d, h, mi, s = (int(match.group(i)) for i in range(1, 7))
    ts = float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
    if match.group(7):
        ts += float(match.group(7))
    zone = match.group(8)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        ts -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return ts


def _index(meta: Mapping) -> int | None:
    """The completion index: decimal digits only (never negative, never '1_0' or ' 3')."""
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = source.get(v.COMPLETION_INDEX_KEY)
        if value is not None:
            return int(value) if isinstance(value, str) and _INDEX.match(value) else None
    return None


def pod_facts(pod: Mapping) -> PodFacts:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    container = next((c for c in statuses if c.get("name") == CONTAINER_NAME), statuses[0] if statuses else {})
    state = container.get("state") or {}
    terminated, waiting = state.get("terminated") or {}, state.get("waiting") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    disruption = conditions.get("DisruptionTarget") or {}
    return PodFacts(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), uid=meta.get("uid", ""),
        index=_index(meta), created=parse_time(meta.get("creationTimestamp")) or 0.0,
        phase=status.get("phase") or "Pending", node=spec.get("nodeName"), image_id=container.get("imageID") or None,
        exit_code=terminated.get("exitCode"), restart_count=int(container.get("restartCount") or 0),
        terminated_reason=terminated.get("reason"), pod_reason=status.get("reason") or disruption.get("reason"),
        pod_message=status.get("message") or disruption.get("message"),
        disrupted=disruption.get("status") == "True", deleting=bool(meta.get("deletionTimestamp")),
        ready=(conditions.get("Ready") or {}).get("status") == "True" or bool(state.get("running"))
        or bool(terminated),
        started_at=parse_time(terminated.get("startedAt") or (state.get("running") or {}).get("startedAt")),
        finished_at=parse_time(terminated.get("finishedAt")),
        waiting_reason=waiting.get("reason"), waiting_message=waiting.get("message"),
    )


POD_SUCCEEDED, POD_FAILED = "Succeeded", "Failed"     # pod phases (not the batch's)


def is_terminal(facts: PodFacts) -> bool:
    return facts.phase in (POD_SUCCEEDED, POD_FAILED)


def is_infrastructure_failure(facts: PodFacts) -> bool:
    """Failed for reasons outside the episode: retried by the Job, not a task failure.

    True only for a terminal pod with phase Failed that has the DisruptionTarget condition
    (eviction, preemption, taint-manager and PodGC deletions all set it) or a node-side reason
    (Evicted, NodeLost, node shutdown, ...): that is what the Job's podFailurePolicy counts
    against backoffLimitPerIndex. A pod merely being deleted, even with DisruptionTarget, is not
    one yet: an evicted program that exits 0 on SIGTERM ends Succeeded, the Job counts its index
    succeeded and makes no replacement (issue 10 item 7), so the operator judges it from its log
    like any other pod once it is terminal. A pod whose object vanishes before any terminal
    phase is handled by the tracker (``pod_deleted``).
    """
    if facts.phase != POD_FAILED:
        return False
    return facts.disrupted or facts.pod_reason in INFRASTRUCTURE_REASONS


def _count(events: tuple) -> str:
    return f"more than {MAX_EVENTS_PER_KIND}" if len(events) > MAX_EVENTS_PER_KIND else str(len(events))


def _show(value: object, limit: int = 120) -> str:
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
    (issue 10 item 8, not the Job's own word DeadlineExceeded), any other Job failure JobFailed,
    a Job that completed without it LogUnavailable."""
    if not job_failed:
        return v.EP_LOG_UNAVAILABLE
    return v.EP_BATCH_TIMEOUT if job_reason == v.JOB_DEADLINE_REASON else v.EP_JOB_FAILED


def never_ran(index: int, reason: str, message: str, attempts: int = 0) -> EpisodeResult:
    """The result of an index that produced no judgeable run (no pod, or none that ended): lost.

    ``reason`` must be an episode reason (vocabulary.EPISODE_REASONS; see :func:`missing_reason`).
    """
    if reason not in v.EPISODE_REASONS:
        raise ValueError(f"{reason!r} is not an episode reason")
    return EpisodeResult(index=index, pod="", node=None, image_id=None, outcome=v.OUTCOME_LOST, reason=reason,
                         message=message, reward=None, pod_created=None, ready_at=None, reward_at=None,
                         pod_to_ready_seconds=None, attempts=max(0, attempts))


def judge_episode(facts: PodFacts, log: ParsedLog | None, *, log_error: str | None = None,
                  skew_tolerance: float = 2.0, log_tail: str | None = None, attempts: int = 1,
                  batch_deadline_at: float | None = None, now: float | None = None) -> EpisodeResult:
    """The verdict of one pod (see the module docstring for the order of reasons).

    ``batch_deadline_at``: Unix time at which the Job's activeDeadlineSeconds ends, when known.
    ``now``: the time of judgement; it stands in for the finish of a pod being deleted that has
    no finishedAt yet, and bounds event times when the pod's finish is unknown. Without it such a
    deleting pod is never taken for a BatchTimeout (the Job's deadline is known from its start,
    long before it passes; a pod deleted earlier was not ended by it).
    Total: any facts and any log give a result, never an exception.
    """
    ready = log.ready[0] if log and len(log.ready) == 1 else None
    reward = log.reward[0] if log and len(log.reward) == 1 else None
    created = finite(facts.created) or None           # 0.0 means "unknown" (pod_facts)
    finished = finite(facts.finished_at)
    now = finite(now)
    deadline = finite(batch_deadline_at)

    def verdict(outcome: str, reason: str | None, message: str, flags: tuple[str, ...] = ()) -> EpisodeResult:
        ready_at = finite(ready.at) if ready else None
        reward_at = finite(reward.at) if reward else None
        startup = finite(ready_at - created) if ready_at is not None and created is not None else None
        return EpisodeResult(
            index=facts.index if facts.index is not None else -1, pod=facts.name, node=facts.node,
            image_id=facts.image_id, outcome=outcome, reason=reason, message=message,
            # only a usable reward is recorded: a restart must be able to read the row back
            reward=usable_reward(reward.reward) if reward is not None else None,
            pod_created=created, ready_at=ready_at, reward_at=reward_at, pod_to_ready_seconds=startup,
            attempts=attempts, log_tail=log_tail, extra=sanitize(dict(reward.extra)) if reward else {}, flags=flags,
        )

    def fail(reason: str, message: str) -> EpisodeResult:
        return verdict(v.OUTCOME_FAILED, reason, message)

    if log_error == INFRASTRUCTURE_EXHAUSTED:
        return fail(v.EP_INFRASTRUCTURE,
                    f"the pod failed for infrastructure reasons ({facts.pod_reason or 'disrupted'}) "
                    f"on every one of {attempts} attempts")
    if facts.pod_reason == POD_DEADLINE_REASON:
        return fail(v.EP_TIMEOUT, facts.pod_message or "the episode ran past episodeTimeoutSeconds")
    ended_normally = facts.phase == POD_SUCCEEDED and facts.exit_code == 0
    if deadline is not None and not ended_normally:
        ended = finished if finished is not None else (now if facts.deleting else None)
        if ended is not None and ended >= deadline - skew_tolerance:
            return fail(v.EP_BATCH_TIMEOUT, "the batch's activeDeadlineSeconds ended the episode before it "
                                            f"finished (exit code {facts.exit_code})")
    if log_error is not None:
        outcome = v.OUTCOME_LOST if facts.deleting or not is_terminal(facts) else v.OUTCOME_FAILED
        return verdict(outcome, v.EP_LOG_UNAVAILABLE, log_error)
    if facts.waiting_reason in v.IMAGE_WAITING_REASONS:
        return fail(v.EP_IMAGE_PULL, f"{facts.waiting_reason}: {facts.waiting_message or ''}".strip())
    if not ended_normally:
        return fail(v.EP_NON_ZERO_EXIT, f"the episode exited with code {facts.exit_code} "
                                        f"({facts.terminated_reason or facts.phase})")
    if facts.restart_count:
        return fail(v.EP_RESTARTED, f"the container restarted {facts.restart_count} times")
    if log is None:
        return verdict(v.OUTCOME_LOST, v.EP_LOG_UNAVAILABLE, "no log was read")
    if log.truncated:
        return fail(v.EP_LOG_LIMIT, f"the log passed the read limit after {log.bytes_read} bytes: the events past "
                                    f"it were not seen (read: {_count(log.ready)} ready, {_count(log.reward)} "
                                    "reward)")
    if not log.ready:
        return fail(v.EP_NO_READY, "no ready event")
    if not log.reward:
        return fail(v.EP_NO_REWARD, "no reward event")
    if len(log.ready) > 1:
        return fail(v.EP_DUPLICATE_READY, f"expected 1 ready event, saw {_count(log.ready)}")
    if len(log.reward) > 1:
        return fail(v.EP_DUPLICATE_REWARD, f"expected 1 reward event, saw {_count(log.reward)}")
    assert ready is not None and reward is not None
    for event in (ready, reward):
        if event.episode_id != facts.name:
            return fail(v.EP_IDENTITY, f"{event.kind} event names episode {_show(event.episode_id)}, "
                                       f"not {_show(facts.name)}")
    if usable_reward(reward.reward) is None:
        if finite(reward.reward) is not None:
            return fail(v.EP_INVALID_REWARD, f"reward {_show(reward.reward)} is out of range "
                                             f"(at most {MAX_ABS_REWARD:g} in magnitude)")
        return fail(v.EP_INVALID_REWARD, f"reward must be a finite number, got {_show(reward.reward)}")
    ready_at, reward_at = finite(ready.at), finite(reward.at)
    if ready_at is None or reward_at is None:
        return fail(v.EP_MISSING_TIMESTAMP, "events need a numeric `at` (Unix seconds)")
    # One clock (the episode's) before the API's: the order of the two events is definitive.
    if reward.line < ready.line:
        return fail(v.EP_REWARD_BEFORE_READY, f"the reward event (line {reward.line}) comes before the ready event "
                                              f"(line {ready.line})")
    if reward_at < ready_at:
        return fail(v.EP_REWARD_BEFORE_READY, f"reward at {reward_at:.3f} is {ready_at - reward_at:.3f}s before "
                                              f"ready at {ready_at:.3f}")
    flags: tuple[str, ...] = ()
    # finishedAt has whole-second precision (metav1.Time): an event in the pod's last partial
    # second is after the recorded finish, and must not spend the tolerance.
    upper = finished + 1.0 if finished is not None else now
    for event, at in ((ready, ready_at), (reward, reward_at)):
        if created is not None and at < created:
            if created - at > skew_tolerance:
                return fail(v.EP_CLOCK_SKEW, f"{event.kind} at {at:.3f} is {created - at:.1f}s before the pod "
                                             "was created: check clock synchronisation")
            flags = (v.FLAG_SKEW_TOLERATED,)
        if upper is not None and at > upper:
            if at - upper > skew_tolerance:
                return fail(v.EP_CLOCK_SKEW, f"{event.kind} at {at:.3f} is {at - upper:.1f}s after the pod "
                                             f"{'finished' if finished is not None else 'was judged'}: "
                                             "check clock synchronisation")
            flags = (v.FLAG_SKEW_TOLERATED,)
    return verdict(v.OUTCOME_SUCCEEDED, None, "", flags)
