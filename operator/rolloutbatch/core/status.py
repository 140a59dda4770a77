"""The RolloutBatch status: aggregates only (never a per-episode list), and minimal patches.

Also the batch's own success rule (:func:`final_phase`) and the rule that counts shown to users
never go backwards (:func:`monotonic`): after an operator restart the tracker starts from the
last results checkpoint, which can be a few rows behind the last status patch; until it has
re-judged those pods, the status keeps the higher counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.conditions import conditions_for
from rolloutbatch.core.model import BatchRef, BatchSpec, Summary
from rolloutbatch.core.stopping import stopped_message
from rolloutbatch.core.strictjson import finite, sanitize

DEFAULT_REASONS = {v.PENDING: v.REASON_PENDING, v.PROVISIONING: v.REASON_PROVISIONING, v.QUEUED: v.REASON_QUEUED,
                   v.RUNNING: v.REASON_RUNNING,
                   v.COLLECTING: v.REASON_COLLECTING, v.SUCCEEDED: v.REASON_SUCCEEDED, v.FAILED: v.REASON_FAILED,
                   v.STOPPED: v.REASON_STOPPED}
# Counters of the status that only grow while a batch runs.
SUMMARY_KEYS = ("readyEpisodes", "runningEpisodes", "succeededEpisodes", "failedEpisodes", "lostEpisodes",
                "stoppedEpisodes", "retriedEpisodes", "rewardSum", "rewardMean", "batchToAllReadySeconds", "batchToAllRewardsSeconds",
                "podToReadySeconds", "jobCompleteSeconds", "nodes", "imageIDs", "pool")
MONOTONIC_COUNTS = ("readyEpisodes", "succeededEpisodes", "failedEpisodes", "lostEpisodes", "stoppedEpisodes",
                    "retriedEpisodes")


def final_phase(summary: Summary, spec: BatchSpec, results_configmap: str) -> tuple[str, str, str]:
    """(phase, reason, message) of a batch whose every episode is final."""
    if summary.succeeded >= spec.min_successful_episodes:
        return (v.SUCCEEDED, v.REASON_SUCCEEDED,
                f"{summary.succeeded}/{spec.episodes} episodes succeeded, reward sum {summary.reward_sum:.15g}")
    return (v.FAILED, v.REASON_TOO_FEW,
            f"{summary.succeeded}/{spec.episodes} episodes succeeded, {spec.min_successful_episodes} required; "
            f"see {results_configmap}")


def stopped_phase(summary: Summary, results_configmap: str) -> tuple[str, str, str]:
    """(phase, reason, message) of a batch that spec.stop ended before every episode did: its
    own phase, whatever the successes so far (a partial experiment is never reported as one
    that succeeded)."""
    return v.STOPPED, v.REASON_STOPPED, stopped_message(summary, results_configmap)


def _progress_done(status: Mapping) -> int:
    try:
        return int(str(status.get("progress") or "0/0").split("/")[0])
    except ValueError:
        return 0


def monotonic(new: dict, previous: Mapping) -> dict:
    """``new`` with no counter below ``previous`` while the batch is not terminal.

    A terminal status is the truth of the final results and is returned as is: it is what the
    results ConfigMap holds, and it must agree with the rows.
    """
    if new.get("phase") in v.TERMINAL_PHASES:
        return new
    out = dict(new)
    for key in MONOTONIC_COUNTS:
        before = previous.get(key)
        if isinstance(before, int) and not isinstance(before, bool) and isinstance(out.get(key), int):
            out[key] = max(out[key], before)
    if "progress" in out:
        done = max(_progress_done(out), _progress_done(previous))
        out["progress"] = f"{done}/{out.get('episodes', 0)}"
    return out


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _declared_episodes(previous: Mapping, raw: object) -> int:
    """spec.episodes as written, for a spec the operator refused (the schema bounds it)."""
    for value in (raw, previous.get("episodes")):
        if type(value) is int and 0 <= value <= 1_000_000:
            return value
    return 0


def build_status(*, ref: BatchRef, spec: BatchSpec | None, phase: str, summary: Summary | None, running: int,
                 ready: int, sandbox_namespace: str | None, job_name: str | None, results_configmap: str,
                 start_time: str | None, completion_time: str | None, job_complete_seconds: float | None,
                 message: str, reason: str | None, previous: Mapping, now_iso: str,
                 raw_episodes: object = None, job_uid: str | None = None,
                 results_digests: Mapping[str, str] | None = None, queue_wait_seconds: float | None = None) -> dict:
    reason = reason or DEFAULT_REASONS.get(phase, phase)
    episodes = spec.episodes if spec else _declared_episodes(previous, raw_episodes)
    status: dict[str, Any] = {
        "observedGeneration": ref.generation,
        "conditions": conditions_for(phase, reason, message or phase, ref.generation,
                                     previous.get("conditions") or [], now_iso),
        "phase": phase,
        "reason": reason,
        "message": message,
        "episodes": episodes,
        "resultsConfigMap": results_configmap,
        "startTime": start_time,
    }
    if sandbox_namespace:
        status["sandboxNamespace"] = sandbox_namespace
    if job_name:
        status["jobName"] = job_name
    if job_uid:
        status["jobUID"] = job_uid     # the Job the operator created: a namesake made since is not it
    if results_digests:
        status["resultsDigests"] = dict(results_digests)
    elif previous.get("resultsDigests"):
        status["resultsDigests"] = previous["resultsDigests"]
    if completion_time:
        status["completionTime"] = completion_time
    if queue_wait_seconds is not None:   # what the queue watch allows of the recorded one, or measured
        status["queueWaitSeconds"] = _ms(queue_wait_seconds)
    if summary is not None:
        status.update({
            "progress": f"{summary.finished}/{episodes}",
            "readyEpisodes": ready,
            # a finished batch's status is its last: pods its stop or stall still ends are not
            # episodes running, and nothing would ever count them down
            "runningEpisodes": 0 if phase in v.TERMINAL_PHASES else running,
            "succeededEpisodes": summary.succeeded,
            "failedEpisodes": summary.failed,
            "lostEpisodes": summary.lost,
            "stoppedEpisodes": summary.stopped,
            "retriedEpisodes": summary.retried,
            # rewards as they are (a sum of 0.0004 is not 0): only seconds round to milliseconds
            "rewardSum": finite(summary.reward_sum),
            "rewardMean": finite(summary.reward_mean),
            "batchToAllReadySeconds": _ms(summary.batch_to_all_ready_seconds),
            "batchToAllRewardsSeconds": _ms(summary.batch_to_all_rewards_seconds),
            "podToReadySeconds": {"p50": _ms(summary.pod_to_ready_p50), "p95": _ms(summary.pod_to_ready_p95),
                                  "max": _ms(summary.pod_to_ready_max)},
            "jobCompleteSeconds": _ms(job_complete_seconds),
            "nodes": dict(summary.nodes),
            "imageIDs": list(summary.image_ids),
        })
        if summary.pool_hits or summary.pool_misses:
            status["pool"] = {"hits": summary.pool_hits, "misses": summary.pool_misses,
                              "claimSeconds": {"p50": _ms(summary.claim_p50), "p95": _ms(summary.claim_p95)}}
    else:
        # Not recomputed here (a finished batch after a restart, a refused spec): what the status
        # already says stands, so a late patch (the cleanup's) never erases the counts.
        for key in SUMMARY_KEYS:
            if key in previous:
                status[key] = previous[key]
        status["progress"] = previous.get("progress") or f"0/{episodes}"
    # Strict JSON whatever the numbers: the API server refuses NaN/Infinity.
    return monotonic(sanitize(status), previous)


def status_patch(old: Mapping, new: Mapping) -> dict:
    """A JSON merge patch turning ``old`` into ``new``: changed keys only, None deletes.

    Lists (conditions) are replaced whole, as merge patches do; nested maps are diffed.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = status_patch(before, value)
            if inner:
                patch[key] = inner
        elif value != before or key not in old:
            if value is None and key not in old:
                continue
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def acknowledged(status: Mapping, generation: int) -> dict | None:
    """The status patch that says a terminal batch has seen ``generation``, or None.

    A spec change after the end (the CRD admits only spec.stop) leaves the verdict as it is, but
    a status whose observedGeneration lags reads as "in progress" to kstatus, Flux and Argo CD
    for ever."""
    if status.get("phase") not in v.TERMINAL_PHASES:
        return None
    seen = status.get("observedGeneration")
    if type(seen) is int and seen >= generation:
        return None
    return {"observedGeneration": generation,
            "conditions": [dict(c, observedGeneration=generation) for c in status.get("conditions") or []]}


def bare_failure(reason: str, message: str, generation: int, now_iso: str,
                 previous_conditions: Sequence[Mapping] = ()) -> dict:
    """The smallest status that still says Failed/Stalled with its reason: the fallback when the
    API refuses the full status (a batch must end visibly). Its completionTime anchors the TTL.
    It is merged into the status last written: what a finished batch's status says of running
    episodes (none) is said here too, and a condition that does not flip keeps its transition time."""
    return {"phase": v.FAILED, "reason": reason, "message": message[:1000], "completionTime": now_iso,
            "runningEpisodes": 0, "observedGeneration": generation,
            "conditions": conditions_for(v.FAILED, reason, message[:1000], generation,
                                         list(previous_conditions), now_iso)}
