"""One batch's Kueue queue while it runs: Queued or admitted, evictions, the queue wait.

The rules are ``core.queueing``'s; this class holds what the reconciler needs between rounds:
whether the Job was held last round (so admission and eviction are each said once, as an Event
and in the metrics), Kueue's last word on the Workload (read at most every
:data:`READ_INTERVAL` seconds while the Job is held), and the queue wait. Everything it reads is
the Job's and the Workload's own state, so a restarted operator picks up where it was: the
queue wait from the status, an eviction from the Job's Suspended condition.
"""

from __future__ import annotations

import logging
import time

from rolloutbatch.core import queueing, recorded_status
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, PodFacts
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service.context import Emit

READ_INTERVAL = 5.0   # seconds between reads of a held Job's Workload (its message changes rarely)


def held(job: JobFacts | None, stopping: bool) -> bool:
    """Kueue holds the Job: queue-managed, suspended (asked or done) and not by a stop, not ended."""
    return (job is not None and job.queue is not None and (job.suspend or job.suspended)
            and not stopping and not job.finished)


class QueueWatch:
    def __init__(self, storage: Storage, ref: BatchRef, emit: Emit, metrics, log: logging.Logger,
                 recorded_wait: object) -> None:
        self.storage, self.ref, self.emit, self.metrics, self.log = storage, ref, emit, metrics, log
        self._recorded = recorded_wait                # the status's: counts as the Job allows (wait_seconds)
        self._measured: float | None = None           # seen by this process
        self.admission: queueing.Admission | None = None
        self._was_held: bool | None = None   # None: not yet seen by this operator
        self._read_at = 0.0

    def queued(self, tracker: BatchTracker) -> bool:
        return held(tracker.job, tracker.stopping)

    @property
    def held_at_round(self) -> bool:
        """Whether the Job was held when :meth:`round` last looked. The status's phase follows it,
        not the Job as it is later in the round: Queued turns Running in the round that says
        Admitted (a Job resumed between the two read Running with no Admitted event yet)."""
        return bool(self._was_held)

    def message(self, tracker: BatchTracker) -> str:
        job = tracker.job
        admission = self.admission or queueing.admission_of(None)
        return queueing.queued_message(job.queue if job and job.queue else "?", admission)

    def evicted(self, facts: PodFacts, tracker: BatchTracker) -> bool:
        """The Job controller deleted this pod because Kueue suspended the Job (core.queueing)."""
        job = tracker.job
        if job is None:
            return False
        return queueing.cut_off_by_eviction(
            deleted_at=facts.delete_requested_at, queue_managed=job.queue is not None, stopping=tracker.stopping,
            suspending=job.suspend or job.suspended, resumed_at=job.resumed_at, suspended_at=job.suspended_at)

    def wait_seconds(self, job: JobFacts | None) -> float | None:
        """The queue wait: measured by this process, else the status's within what the Job allows
        (core.recorded_status: anyone who may write the status subresource wrote it too)."""
        if self._measured is not None:
            return self._measured
        return recorded_status.queue_wait(self._recorded, job, time.time())

    def origin_offset(self, job: JobFacts | None) -> float:
        """Seconds to add to the Job's creation for the batch's own clock (ready timings start at admission)."""
        return self.wait_seconds(job) or 0.0

    async def round(self, tracker: BatchTracker) -> bool:
        """Once a round: read the Workload while the Job is held, say admission and eviction once.
        True when the batch was just admitted (its pods' grace starts now)."""
        job, now = tracker.job, time.monotonic()
        is_held = held(job, tracker.stopping)
        was_held = self._was_held
        if is_held and (was_held is not True or now - self._read_at >= READ_INTERVAL):
            # A failed read is made again by the retried round, not READ_INTERVAL later: rounds in
            # between would go through, and a read failing every time would never end the batch
            # (service.policy counts transient errors without a break).
            self.admission = queueing.admission_of(await self.storage.job_workload(job.namespace, job.uid))
            self._read_at = now
            if was_held is False:
                self.metrics.batch_evicted(self.ref.namespace, self.ref.name)
                self.log.warning("Kueue evicted the Job: %s", self.admission.message)
                self.emit("Warning", v.EVENT_EVICTED, f"Kueue evicted the Job ({self.admission.reason}): running "
                                                      f"episodes are cut off ({v.EP_EVICTED}); the rest run once it "
                                                      f"is admitted again; {self.admission.message}"[:1000])
        self._was_held = is_held
        if (was_held is None and not is_held and job is not None and job.queue is not None
                and self.wait_seconds(job) is None and job.resumed_at is not None):
            # admitted while no operator watched: its last admission is the best the Job says
            self._measured = queueing.queue_wait_seconds(job.created, job.resumed_at)
        if was_held is True and not is_held and job is not None and job.queue is not None and not tracker.stopping:
            first = self.wait_seconds(job) is None
            if first:
                self._measured = queueing.queue_wait_seconds(job.created, job.resumed_at or time.time())
                self.metrics.batch_admitted(self.ref.namespace, self.ref.name, self._measured)
            waited = f" after {self._measured:.1f}s in the queue" if first and self._measured is not None else ""
            self.emit("Normal", v.EVENT_ADMITTED, f"Kueue admitted the Job from LocalQueue {job.queue}{waited}; "
                                                  "the episodes start")
            return True
        return False
