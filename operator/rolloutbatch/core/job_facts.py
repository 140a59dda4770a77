"""What the operator needs to know of its Job, read from the API's JSON.

:func:`job_facts` is the one reader of a Job's status conditions (finished, failed and why,
suspended and when, its deadline) for the tracker (core.tracker), the queue watch and the
sandbox's lifecycle. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.naming import ANNOTATION_CLAIMS_BEGAN_AT, ANNOTATION_POOL_TEMPLATE, LABEL_POOL_UID
from rolloutbatch.core.queueing import QUEUE_LABEL
from rolloutbatch.core.pod_reading import annotation_seconds, parse_time


# The longest a pooled batch's first claim can come before its Job: the claims and the Job's
# creation follow each other, with an operator's restart at most between them.
CLAIMS_BEFORE_JOB_SECONDS = 3600


@dataclasses.dataclass(frozen=True)
class JobFacts:
    """What the operator needs to know of its Job."""

    uid: str
    created: float | None
    finished: bool = False
    failed: bool = False
    reason: str | None = None
    message: str | None = None
    deadline_at: float | None = None     # status.startTime + spec.activeDeadlineSeconds
    name: str = ""
    namespace: str = ""
    suspended: bool = False              # condition Suspended=True (spec.stop suspends the Job, so does Kueue)
    pods_left: int = 0                   # status.active + status.terminating: its pods not yet gone
    queue: str | None = None             # Kueue's queue-name label (core.queueing)
    suspend: bool = False                # spec.suspend: asked for, before the Job controller says Suspended
    suspended_at: float | None = None    # the Suspended condition's last change to True ...
    resumed_at: float | None = None      # ... or to False (resumed: admitted by Kueue, after its first start)
    claims_began_at: float | None = None  # a pooled batch's first claim (naming.ANNOTATION_CLAIMS_BEGAN_AT)
    # a pooled Job whose later indexes claim (naming.ANNOTATION_POOL_TEMPLATE): the warm pods'
    # template digest, and its pool's uid (naming.LABEL_POOL_UID)
    pool_template: str | None = None
    pool_uid: str | None = None

    @property
    def began_at(self) -> float | None:
        """Where the batch's clock starts: the Job's creation, or a pooled batch's first claim, which
        comes before its Job (and is kept to the millisecond, the creation to the second, rounded
        down: a claim in the Job's own second is before it, and taking the whole second for it
        would add up to a second to every timing). A claim time more than CLAIMS_BEFORE_JOB_SECONDS
        before the Job, or after its second, is not the batch's (an annotation edited by hand): it
        would make every timing of the batch a wrong number."""
        claims = self.claims_began_at
        if self.created is None or claims is None:
            return self.created if claims is None else claims
        return claims if self.created - CLAIMS_BEFORE_JOB_SECONDS <= claims < self.created + 1 else self.created


def job_facts(job: Mapping) -> JobFacts:
    """Read a Job dict (API JSON) into :class:`JobFacts`."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    finished = failed = suspended = False
    reason = message = None
    suspended_at = resumed_at = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Suspended":
            changed = parse_time(cond.get("lastTransitionTime"))
            if cond.get("status") == v.CONDITION_TRUE:
                suspended_at = changed
            else:
                resumed_at = changed
        if cond.get("status") != v.CONDITION_TRUE:
            continue
        if cond.get("type") == "Complete":
            finished = True
        elif cond.get("type") == "Failed":
            finished = failed = True
            reason, message = cond.get("reason"), cond.get("message")
        elif cond.get("type") == "Suspended":
            suspended = True
        elif cond.get("type") == "FailureTarget" and reason is None:
            # Set before the Job controller kills the pods; Failed follows once they are gone.
            reason, message = cond.get("reason"), cond.get("message")
    started, deadline = parse_time(status.get("startTime")), spec.get("activeDeadlineSeconds")
    deadline_at = started + deadline if started is not None and isinstance(deadline, int) else None
    return JobFacts(uid=meta.get("uid", ""), created=parse_time(meta.get("creationTimestamp")),
                    finished=finished, failed=failed, reason=reason, message=message, deadline_at=deadline_at,
                    name=meta.get("name", ""), namespace=meta.get("namespace", ""), suspended=suspended,
                    pods_left=sum(n for n in (status.get("active"), status.get("terminating"))
                                  if type(n) is int and n > 0),
                    queue=_queue_label(meta), suspend=spec.get("suspend") is True,
                    suspended_at=suspended_at, resumed_at=resumed_at,
                    claims_began_at=annotation_seconds(meta, ANNOTATION_CLAIMS_BEGAN_AT),
                    pool_template=_text((meta.get("annotations") or {}).get(ANNOTATION_POOL_TEMPLATE)),
                    pool_uid=_text((meta.get("labels") or {}).get(LABEL_POOL_UID)))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _queue_label(meta: Mapping) -> str | None:
    value = (meta.get("labels") or {}).get(QUEUE_LABEL)
    return value if isinstance(value, str) and value else None
