"""Did an episode succeed? Pod facts from the API plus its parsed log give the verdict.

The success rule is DESIGN section 4: the pod Succeeded with exit code 0 and no restarts, its
log holds exactly one ``ready`` and one ``reward`` event, both carrying its own pod name, the
reward is a finite number, and pod created <= ready.at <= reward.at (within a clock-skew
tolerance: inside it the episode succeeds with a flag; beyond it, it fails with ClockSkew).
Failure reasons are checked in this order; the first that applies wins, so the reason names the
most fundamental problem (a dead pod before a missing event, a missing event before a bad one):

 1. InfrastructureFailure  the tracker says retries.infrastructure are used up
                           (``log_error=INFRASTRUCTURE_EXHAUSTED``; checked first because there is
                           no log to look at)
 2. LogUnavailable         the log could not be read (outcome "lost" when the pod is gone/going)
 3. Timeout                the pod hit episodeTimeoutSeconds (pod reason DeadlineExceeded)
 4. ImagePullFailed        the container never started (ErrImagePull, ImagePullBackOff, ...)
 5. NonZeroExit            phase is not Succeeded or the exit code is not 0
 6. Restarted              the container restarted
 7. NoReadyEvent / NoRewardEvent   (LogLimitExceeded instead when the log was truncated)
 8. DuplicateReady / DuplicateReward
 9. IdentityMismatch       an event names another episode
10. InvalidReward          not a finite int/float (bools, strings, NaN, Infinity, 1e400)
11. MissingTimestamp       an event's ``at`` is absent or not a finite number
12. ClockSkew              ready.at before the pod's creation by more than the tolerance
13. RewardBeforeReady      reward.at before ready.at by more than the tolerance
Within the tolerance the episode succeeds with the flag ``ClockSkewWithinTolerance``.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Mapping

from rolloutbatch.core.events import MAX_EVENTS_PER_KIND
from rolloutbatch.core.model import EpisodeResult, ParsedLog, PodFacts
from rolloutbatch.core.naming import CONTAINER_NAME

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
INFRASTRUCTURE_REASONS = {"Evicted", "Preempting", "NodeLost", "UnexpectedAdmissionError", "Terminated",
                          "NodeShutdown", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"}
IMAGE_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
# Passed as ``log_error`` by the tracker when an index used up retries.infrastructure.
INFRASTRUCTURE_EXHAUSTED = "infrastructure retries exhausted"
_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")


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
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = source.get(INDEX_KEY)
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
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


def is_terminal(facts: PodFacts) -> bool:
    return facts.phase in ("Succeeded", "Failed")


def is_infrastructure_failure(facts: PodFacts) -> bool:
    """Failed for reasons outside the episode: retried by the Job, not a task failure.

    True for a pod with the DisruptionTarget condition once it is terminal or being deleted
    (eviction, preemption, taint-manager and PodGC deletions all set it), and for a terminal pod
    whose reason is a node-side one (Evicted, NodeLost, node shutdown, ...). A pod merely being
    deleted, without DisruptionTarget, is NOT counted here: the Job's podFailurePolicy sees the
    exit code it dies with and fails the index (rule 2), so the operator must judge it from its
    log too, or the two would disagree about whether a retry is coming. A pod whose object
    vanishes before any terminal phase is handled by the tracker (``pod_deleted``).
    """
    if facts.phase == "Succeeded":
        return False
    if facts.disrupted:
        return is_terminal(facts) or facts.deleting
    return is_terminal(facts) and facts.pod_reason in INFRASTRUCTURE_REASONS


def _finite_number(value: object) -> bool:
    """int or float (never bool), finite, and representable as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _count(events: tuple) -> str:
    return f"more than {MAX_EVENTS_PER_KIND}" if len(events) > MAX_EVENTS_PER_KIND else str(len(events))


def judge_episode(facts: PodFacts, log: ParsedLog | None, *, log_error: str | None = None,
                  skew_tolerance: float = 2.0, log_tail: str | None = None, attempts: int = 1) -> EpisodeResult:
    ready = log.ready[0] if log and len(log.ready) == 1 else None
    reward = log.reward[0] if log and len(log.reward) == 1 else None

    def verdict(outcome: str, reason: str | None, message: str, flags: tuple[str, ...] = ()) -> EpisodeResult:
        ready_at = ready.at if ready else None
        reward_at = reward.at if reward else None
        return EpisodeResult(
            index=facts.index if facts.index is not None else -1, pod=facts.name, node=facts.node,
            image_id=facts.image_id, outcome=outcome, reason=reason, message=message,
            reward=float(reward.reward) if reward is not None and _finite_number(reward.reward) else None,
            pod_created=facts.created or None, ready_at=ready_at, reward_at=reward_at,
            pod_to_ready_seconds=(ready_at - facts.created) if ready_at is not None and facts.created else None,
            attempts=attempts, log_tail=log_tail, extra=dict(reward.extra) if reward else {}, flags=flags,
        )

    def fail(reason: str, message: str) -> EpisodeResult:
        return verdict("failed", reason, message)

    if log_error == INFRASTRUCTURE_EXHAUSTED:
        return fail("InfrastructureFailure",
                    f"the pod failed for infrastructure reasons ({facts.pod_reason or 'disrupted'}) "
                    f"on every one of {attempts} attempts")
    if log_error is not None:
        return verdict("lost" if facts.deleting or not is_terminal(facts) else "failed", "LogUnavailable", log_error)
    if facts.pod_reason == "DeadlineExceeded":
        return fail("Timeout", facts.pod_message or "the episode ran past episodeTimeoutSeconds")
    if facts.waiting_reason in IMAGE_REASONS:
        return fail("ImagePullFailed", f"{facts.waiting_reason}: {facts.waiting_message or ''}".strip())
    if facts.phase != "Succeeded" or facts.exit_code != 0:
        return fail("NonZeroExit", f"the episode exited with code {facts.exit_code} "
                                   f"({facts.terminated_reason or facts.phase})")
    if facts.restart_count:
        return fail("Restarted", f"the container restarted {facts.restart_count} times")
    assert log is not None
    truncated = " (its log passed the read limit)" if log.truncated else ""
    if not log.ready:
        return fail("LogLimitExceeded" if log.truncated else "NoReadyEvent", f"no ready event{truncated}")
    if not log.reward:
        return fail("LogLimitExceeded" if log.truncated else "NoRewardEvent", f"no reward event{truncated}")
    if len(log.ready) > 1:
        return fail("DuplicateReady", f"expected 1 ready event, saw {_count(log.ready)}")
    if len(log.reward) > 1:
        return fail("DuplicateReward", f"expected 1 reward event, saw {_count(log.reward)}")
    for event in (ready, reward):
        if event.episode_id != facts.name:
            return fail("IdentityMismatch", f"{event.kind} event names episode {event.episode_id!r}, "
                                            f"not {facts.name!r}")
    if not _finite_number(reward.reward):
        return fail("InvalidReward", f"reward must be a finite number, got {reward.reward!r}"[:300])
    if ready.at is None or reward.at is None:
        return fail("MissingTimestamp", "events need a numeric `at` (Unix seconds)")
    flags: tuple[str, ...] = ()
    if facts.created and ready.at < facts.created:
        if facts.created - ready.at > skew_tolerance:
            return fail("ClockSkew", f"ready at {ready.at:.3f} is {facts.created - ready.at:.1f}s before the pod "
                                     "was created: check clock synchronisation")
        flags = ("ClockSkewWithinTolerance",)
    if reward.at < ready.at:
        if ready.at - reward.at > skew_tolerance:
            return fail("RewardBeforeReady", f"reward at {reward.at:.3f} is {ready.at - reward.at:.1f}s before "
                                             f"ready at {ready.at:.3f}")
        flags = ("ClockSkewWithinTolerance",)
    return verdict("succeeded", None, "", flags)
