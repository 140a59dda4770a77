"""Kueue: a batch that names a queue waits, its Job suspended, until Kueue admits it.

How a batch meets Kueue (docs/design.md §5.16), each rule decided here:

- **The queue** is a LocalQueue of the batch's namespace: ``spec.queueName``, else the one named
  ``default`` when the namespace has it (Kueue's own defaulting rule for Jobs), else none and the
  batch starts at once. A named queue that does not exist stalls the batch before anything is
  created (:data:`~core.vocabulary.STALL_QUEUE_NOT_FOUND`).
- **Where Kueue looks**: Kueue reads the queue-name label of the Job in the Job's namespace. A
  Dedicated batch's Job lives in its sandbox namespace, so the operator creates a LocalQueue of
  the same name there, pointing at the ClusterQueue the batch's own LocalQueue points at
  (``core.manifests.local_queue``). Only a queue the namespace's owner was given is followed; the
  ClusterQueue's namespaceSelector must also admit sandbox namespaces (else Kueue leaves the
  Workload inadmissible and the batch says so while Queued).
- **Submission**: the Job is created suspended with Kueue's queue-name label; Kueue makes its
  Workload, admits it when the quota allows and unsuspends the Job. While the Job is suspended
  and the batch is not stopping, the batch is Queued, with the Workload's own words
  (:func:`admission_of`).
- **Eviction** (preemption by a higher priority, a stopped ClusterQueue, ...): Kueue sets the
  Job's ``spec.suspend`` and the Job controller deletes its running pods, and only afterwards
  writes the Suspended condition. Each episode so cut off is lost with reason ``EvictedByQueue``
  (nothing of the agent's doing); its index is not run again (the Job's podFailurePolicy counts
  the killed pod's exit as the index's failure). Episodes that ended before keep their rows; the
  rest run once Kueue admits the Job again (:func:`cut_off_by_eviction`).
- **spec.stop** of a queued batch deactivates its Workload (``spec.active: false``) besides
  suspending the Job: Kueue unsuspends a suspended Job whose Workload is admitted.
- **Queue wait** is its own figure (status.queueWaitSeconds, a histogram): from the Job's creation
  to its first admission. Batch -> ready timings start at the admission, so they do not include it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rolloutbatch.core import vocabulary as v

API_GROUP = "kueue.x-k8s.io"
API_VERSION = f"{API_GROUP}/v1beta2"
QUEUE_LABEL = f"{API_GROUP}/queue-name"     # on the Job: the LocalQueue Kueue files it under
JOB_UID_LABEL = f"{API_GROUP}/job-uid"      # on the Workload Kueue makes for a Job
DEFAULT_QUEUE = "default"                   # the LocalQueue a Job without the label gets (Kueue's defaulting)
# How much a deletion time may follow the Job's last resume and still be the suspension's before
# it: both are the API's, in whole seconds.
_SECONDS = 1.0
# How long before the Suspended condition's time the Job controller may have deleted a pod for
# that suspension: it deletes the active pods first, rate limited by its client (~20 requests a
# second: 1,000 pods take ~50 s), then writes the condition. A pod deleted earlier than this went
# for another reason (a user's delete, a drain): not the queue's.
DELETION_SPREAD_SECONDS = 60.0


@dataclass(frozen=True)
class Admission:
    """What Kueue says of a batch's Workload (None of it: Kueue has not made one yet)."""

    admitted: bool
    reason: str
    message: str
    evicted: bool = False


def admission_of(workload: Mapping | None) -> Admission:
    """The Workload's state in Kueue's words: Evicted first (it says why the Job was stopped),
    then Admitted, then QuotaReserved (False says why it waits), then Kueue has not looked yet."""
    if not isinstance(workload, Mapping):
        return Admission(False, "WorkloadNotCreated", "waiting for Kueue to create the Workload")
    status = workload.get("status") if isinstance(workload.get("status"), Mapping) else {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}

    def said(condition: Mapping, default: str) -> tuple[str, str]:
        reason, message = condition.get("reason"), condition.get("message")
        return (reason if isinstance(reason, str) and reason else default,
                message[:500] if isinstance(message, str) and message else default)

    evicted = conditions.get("Evicted") or {}
    admitted = (conditions.get("Admitted") or {}).get("status") == v.CONDITION_TRUE
    if evicted.get("status") == v.CONDITION_TRUE:
        reason, message = said(evicted, "Evicted")
        return Admission(False, reason, f"evicted by Kueue: {message}", evicted=True)
    if admitted:
        reason, message = said(conditions["Admitted"], "Admitted")
        return Admission(True, reason, message)
    reserved = conditions.get("QuotaReserved") or {}
    if reserved:
        reason, message = said(reserved, "Pending")
        return Admission(False, reason, message)
    return Admission(False, "Pending", "waiting for Kueue to consider the Workload")


def queued_message(queue: str, admission: Admission) -> str:
    return f"waiting in LocalQueue {queue} for Kueue to admit the Job: {admission.message}"[:1000]


def cluster_queue_of(local_queue: Mapping | None) -> str | None:
    """The ClusterQueue a LocalQueue points at (None when it names none)."""
    spec = local_queue.get("spec") if isinstance(local_queue, Mapping) else None
    name = spec.get("clusterQueue") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name else None


def cut_off_by_eviction(*, deleted_at: float | None, queue_managed: bool, stopping: bool,
                        suspending: bool, resumed_at: float | None, suspended_at: float | None = None) -> bool:
    """Whether a pod deleted at ``deleted_at`` was deleted by the Job controller because Kueue
    suspended the Job. ``suspending``: the Job's ``spec.suspend`` is true or its Suspended
    condition is, not by the batch's stop (``stopping``: a stop suspends the Job too, and its
    episodes are the stop's); ``resumed_at``: the Suspended condition's last change to False.

    While the Job is suspending, a pod of it that was deleted is the suspension's, whatever the
    condition's time: the Job controller deletes the active pods first (rate limited by its
    client, ~20 requests a second: seconds for many pods) and writes Suspended=True, stamped with
    its clock, only afterwards, so a pod may be deleted, killed (143) and judged before the
    condition exists, or long before its time (up to DELETION_SPREAD_SECONDS before
    ``suspended_at``, the condition's time once written; a pod deleted earlier went for another
    reason). A pod deleted before the Job's last resume was
    cut off by the suspension before it (pods exist only after the first admission); the
    condition outlives an operator restart. A pod not deleted ended on its own: an agent's
    failure in a queued Job, suspended or not, stays the agent's."""
    if not queue_managed or stopping or deleted_at is None:
        return False
    if suspending:
        return suspended_at is None or deleted_at >= suspended_at - DELETION_SPREAD_SECONDS
    return resumed_at is not None and deleted_at <= resumed_at + _SECONDS


def queue_wait_seconds(job_created: float | None, admitted_at: float | None) -> float | None:
    """Seconds from the Job's creation to its first admission (None until both are known)."""
    if job_created is None or admitted_at is None or not math.isfinite(admitted_at - job_created):
        return None
    return max(0.0, round(admitted_at - job_created, 3))
