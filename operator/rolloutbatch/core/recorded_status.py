"""What a restarted operator takes back from its batch's status, and within which bounds.

The status is the operator's record of a batch across restarts (docs/design.md §5.9), but it is
not the operator's alone: whoever may write the status subresource (``kubectl edit
--subresource=status``, a backup restored with its status, another controller) writes it too. A
figure read back from it therefore counts only within what the batch itself allows, each rule
here, once (docs/design.md §8.2):

- ``retriedEpisodes``: a non-negative int; the tracker bounds it further by the rows and the
  spec (``core.tracker.BatchTracker.restore``);
- ``jobCompleteSeconds``: a finite number >= 0, else the Job's end is measured again;
- ``queueWaitSeconds``: only for a batch whose Job a queue holds, from 0 to the Job's age (its
  last admission, when the Job says it): a wait shifts the batch's origin, and so every row's
  timings;
- ``completionTime``: never later than now (the writer's clock), so ttlSecondsAfterFinished
  always runs.

Pure: no I/O.
"""

from __future__ import annotations

import math

from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.pod_reading import parse_time


def retried_episodes(value: object) -> int:
    """``retriedEpisodes`` as recorded: a non-negative int, else 0."""
    return value if type(value) is int and value >= 0 else 0


def seconds(value: object) -> float | None:
    """A recorded duration (``jobCompleteSeconds``): a finite number >= 0, else None (unknown)."""
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def queue_wait(value: object, job: JobFacts | None, now: float) -> float | None:
    """``queueWaitSeconds`` as recorded, if the Job allows it. No Job known (a finished batch after
    a restart recomputes nothing): the recorded figure stands as the other counts do. A Job no
    queue manages has no wait. Else the wait lies between the Job's creation and its first
    admission, which is no later than its last one (the Suspended condition's change to False)
    or, before that is known, now."""
    wait = seconds(value)
    if wait is None or job is None:
        return wait
    if job.queue is None or job.created is None:
        return None
    admitted = job.resumed_at if job.resumed_at is not None else now
    return wait if wait <= round(admitted - job.created, 3) else None


def ttl_wait(completion_time: object, ttl: int, now: float) -> tuple[float, bool]:
    """Seconds until ttlSecondsAfterFinished is due, counted from the recorded ``completionTime``
    (from now when it has none), and whether that was later than ``now``: then it counts as now
    (a time to come would hold the TTL back until then)."""
    at = parse_time(completion_time)
    later = at is not None and at > now
    return (now if at is None or later else at) + ttl - now, later
