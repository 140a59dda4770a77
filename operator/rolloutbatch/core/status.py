"""The RolloutBatch status: aggregates only (never a per-episode list), and minimal patches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rolloutbatch.core.conditions import conditions_for
from rolloutbatch.core.model import BatchRef, BatchSpec, Summary

DEFAULT_REASONS = {"Pending": "Pending", "Provisioning": "Provisioning", "Running": "EpisodesRunning",
                   "Collecting": "CollectingResults", "Succeeded": "EpisodesSucceeded", "Failed": "Failed"}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def build_status(*, ref: BatchRef, spec: BatchSpec | None, phase: str, summary: Summary | None, running: int,
                 ready: int, sandbox_namespace: str | None, job_name: str | None, results_configmap: str,
                 start_time: str | None, completion_time: str | None, job_complete_seconds: float | None,
                 message: str, reason: str | None, previous: Mapping, now_iso: str) -> dict:
    reason = reason or DEFAULT_REASONS.get(phase, phase)
    episodes = spec.episodes if spec else int(previous.get("episodes") or 0)
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
    if completion_time:
        status["completionTime"] = completion_time
    if summary is not None:
        status.update({
            "progress": f"{summary.finished}/{episodes}",
            "readyEpisodes": ready,
            "runningEpisodes": running,
            "succeededEpisodes": summary.succeeded,
            "failedEpisodes": summary.failed,
            "lostEpisodes": summary.lost,
            "retriedEpisodes": summary.retried,
            "rewardSum": _ms(summary.reward_sum),
            "rewardMean": _ms(summary.reward_mean),
            "batchToAllReadySeconds": _ms(summary.batch_to_all_ready_seconds),
            "batchToAllRewardsSeconds": _ms(summary.batch_to_all_rewards_seconds),
            "podToReadySeconds": {"p50": _ms(summary.pod_to_ready_p50), "p95": _ms(summary.pod_to_ready_p95),
                                  "max": _ms(summary.pod_to_ready_max)},
            "jobCompleteSeconds": _ms(job_complete_seconds),
            "nodes": dict(summary.nodes),
            "imageIDs": list(summary.image_ids),
        })
    else:
        status["progress"] = f"0/{episodes}"
    return status


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
