"""RolloutBatch.status as the CRD states it (``core.crd`` assembles the CRD).

Only the operator writes the status (``core.status.build_status``), yet the schema matters: the
API server prunes a field the schema lacks without a word, so a status field written but not
declared here would vanish. tests/unit/test_crd_schema.py validates every status build_status
makes against this schema. Phases and condition words are core.vocabulary's.
"""

from __future__ import annotations

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.crd_sandbox import listing
from rolloutbatch.core.openapi import Schema, array, date_time, integer, number, obj, string


def _count(description: str) -> Schema:
    return integer(description, minimum=0)


def _seconds(description: str) -> Schema:
    return number(description, nullable=True)   # null until measured


def status_schema() -> Schema:
    """The openAPIV3Schema node of RolloutBatch.status."""
    return obj(
        ("Written by the operator: aggregates only (per-episode rows are in the results ConfigMap). Use the "
         "conditions to tell the outcome; phase is informational."), {
            "observedGeneration": integer("The metadata.generation this status describes.", format="int64"),
            "phase": string(
                (f"{v.PENDING}, {v.PROVISIONING} (creating the sandbox), {v.QUEUED} (spec.queueName: until Kueue "
                 f"admits the Job, and again after an eviction), {v.RUNNING}, {v.COLLECTING} (reading the last "
                 f"logs), then {v.SUCCEEDED}, {v.FAILED} (a stalled batch is {v.FAILED}) or {v.STOPPED} "
                 "(spec.stop ended it early). Informational: use the conditions."),
                enum=v.PHASES),
            "progress": string("finished/episodes, where finished = succeeded + failed + lost (e.g. 7/10)."),
            "message": string("Human summary of the current state, or what to fix when stalled."),
            "reason": string("CamelCase reason of the current state (as in the conditions)."),
            "sandboxNamespace": string(
                "Namespace of the episode pods: rb-<uid10> (Dedicated) or the batch's own (Shared). Removed once "
                "the operator deleted the sandbox (spec.cleanup.sandbox)."),
            "jobName": string("The Indexed Job running the episodes, in sandboxNamespace."),
            "jobUID": string(
                "The uid of the Job the operator created. Only pods that Job made (by their controller "
                "ownerReference) count as episodes; a Job of the same name made later is not it."),
            "resultsDigests": obj(
                ("ConfigMap name -> sha256 of the results document the operator last wrote there. Anyone with "
                 "ConfigMap rights can write a results ConfigMap; only the operator writes the status. The "
                 "operator (after a restart) and the SDK take a results ConfigMap as the batch's only when its "
                 "digest is the one recorded here."),
                values=string()),
            "pendingResultsDigests": obj(
                ("ConfigMap name -> sha256 of a results document the operator is about to write there: recorded "
                 "before the write, moved to resultsDigests by the status write after it, so a document an "
                 "operator crash kept from resultsDigests is still trusted. Readers accept either."),
                values=string()),
            "resultsConfigMap": string(
                "ConfigMap <name>-results in the batch's namespace: results.json (or results.json.gz), one row "
                "per episode. Owned by the batch, deleted with it (unless spec.cleanup.results is "
                f"{v.RESULTS_RETAIN})."),
            "episodes": _count("spec.episodes."),
            "readyEpisodes": _count("Episodes that reported their ready event."),
            "runningEpisodes": _count("Episode pods running now (0 once the batch has finished)."),
            "succeededEpisodes": _count("Episodes that succeeded (the guide's successful_episodes)."),
            "failedEpisodes": _count("Episodes that failed (ran and broke the episode contract, or exited "
                                     "non-zero)."),
            "lostEpisodes": _count("Episodes that never produced a judgeable run (log gone, never started, "
                                   "infrastructure)."),
            "stoppedEpisodes": _count(
                "Episodes cut off by spec.stop (running when it came, or never started): final, not valid, and "
                "not counted in progress (which counts the episodes that finished)."),
            "retriedEpisodes": _count("Episode re-runs after an infrastructure failure "
                                      "(spec.retries.infrastructure)."),
            "rewardSum": number("Sum of the rewards of the valid episodes, a failed one counting 0 (reward_sum)."),
            "rewardMean": number("Mean reward of the valid episodes (succeeded, and failed as 0); null while "
                                 "there is none.", nullable=True),
            "batchToAllReadySeconds": _seconds(
                "Seconds from the batch's start to the last ready event (batch_to_all_ready_seconds)."),
            "batchToAllRewardsSeconds": _seconds(
                "Seconds from the batch's start to the last reward event (batch_to_all_rewards_seconds)."),
            "queueWaitSeconds": _seconds(
                "spec.queueName: seconds from the Job's creation to Kueue's first admission of it (the wait in the "
                "queue, not part of any batch -> ready timing). Absent for a batch that names no queue."),
            "jobCompleteSeconds": _seconds(
                "Seconds from the Job's creation until the operator saw it finish (client_job_complete_seconds)."),
            "podToReadySeconds": obj(
                "Pod created -> ready event, over the episodes that reported ready (linear-interpolated "
                "percentiles).", {
                    "p50": _seconds("Median seconds (pod_to_ready_p50_seconds)."),
                    "p95": _seconds("95th percentile seconds (pod_to_ready_p95_seconds)."),
                    "max": _seconds("Slowest, seconds (pod_to_ready_max_seconds)."),
                }),
            "pool": obj(
                "spec.poolRef: the episodes handed over so far on a claimed warm pod (hits) and on a cold pod of "
                "the pool's template (misses), and the hits' claim -> hand-over seconds (linear-interpolated "
                "percentiles; each episode's is its row's pool.claim_seconds). Absent for a batch without a pool.", {
                    "hits": integer("Episodes that ran on a claimed warm pod (pool_hits).", minimum=0),
                    "misses": integer("Episodes that ran on a cold pod (pool_misses).", minimum=0),
                    "claimSeconds": obj("A warm pod's claim -> its episode handed over.", {
                        "p50": _seconds("Median seconds (claim_p50_seconds)."),
                        "p95": _seconds("95th percentile seconds (claim_p95_seconds)."),
                    }),
                }),
            "nodes": obj("Node name -> episodes placed there.", values=integer(minimum=0)),
            "imageIDs": array("Image digests the episodes actually ran.", string()),
            "startTime": date_time("When the operator started the batch."),
            "completionTime": date_time(f"When the batch finished ({listing(v.TERMINAL_PHASES, 'or')})."),
            "conditions": array(
                ("kstatus-style conditions: running Reconciling=True, Ready=False; succeeded Ready=True, "
                 "Succeeded=True, Stalled=False; failed, stalled or stopped Stalled=True, Ready=False, "
                 f"Succeeded=False. {v.CONDITION_FINISHED}=True once the batch ended either way (kubectl wait "
                 f"--for=condition={v.CONDITION_FINISHED})."),
                _condition(), list_type="map", map_keys=["type"]),
        })


def _condition() -> Schema:
    return obj(properties={
        "type": string(f"{listing(v.CONDITION_TYPES, 'or')}."),
        "status": string(f"{listing(v.CONDITION_STATUSES, 'or')}.", enum=v.CONDITION_STATUSES),
        "reason": string(f"CamelCase reason (e.g. {v.REASON_SUCCEEDED}, {v.REASON_TOO_FEW}, {v.STALL_INVALID_SPEC},"
                         f" {v.REASON_STOPPED})."),
        "message": string("Human explanation."),
        "observedGeneration": integer("The metadata.generation the condition was set for.", format="int64"),
        "lastTransitionTime": date_time("When status last changed."),
    }, required=["type", "status"])
