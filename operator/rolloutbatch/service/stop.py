"""spec.stop for one batch: seen in the live object, acted on once, done when no pod is left.

The batch's kopf daemon holds a live view of the object (kopf replaces its body on every watch
event), so the reconciler asks :meth:`StopControl.requested` every round of its loop, about once
a second: no handler of its own is needed. Stopping suspends the Job (the Job controller deletes
its active pods, each with its grace period, and starts none: Kubernetes Job docs, "Suspending a
Job"); the batch then waits until the watch and the Job's own counts show no pod left, bounded by
``Settings.stop_grace`` (a pod can hang Terminating on a lost node). The verdicts and the phase
are core's (``core.stopping``, ``core.status.stopped_phase``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, BatchSpec
from rolloutbatch.core.spec import stop_requested
from rolloutbatch.core.status import acknowledged
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.service.context import Emit



class StopControl:
    def __init__(self, storage: Storage, ref: BatchRef, emit: Emit, log: logging.Logger, grace: float) -> None:
        self.storage, self.ref, self.emit, self.log, self.grace = storage, ref, emit, log, grace
        self._deadline: float | None = None

    @staticmethod
    def requested(body: Mapping) -> bool:
        return stop_requested(body.get("spec"))

    async def begin(self, spec: BatchSpec, tracker: BatchTracker, job_uid: str | None) -> None:
        """Suspend the Job (when there is one of ours) and count what ends from now as the stop's.
        The tracker stops only once the suspend went through: a failed call is retried from the
        top of the reconciler (service.policy), which then asks again."""
        suspended = await self.storage.suspend_job(naming.job_name(self.ref),
                                    naming.child_namespace(self.ref, spec), self.ref.uid, job_uid)
        tracker.stop()
        self._deadline = time.monotonic() + self.grace
        self.log.info("spec.stop: %s", "Job suspended" if suspended else "no Job of the batch to suspend")
        self.emit("Normal", v.REASON_STOPPING, "spec.stop: no new episode starts; running episodes end within "
                                              "their grace period, finished rows are kept")

    def done(self, tracker: BatchTracker, job_gone: bool) -> bool:
        """No pod of the batch is left (or the bound passed), nor a log read pending."""
        if not tracker.stopping or tracker.busy:
            return False
        if tracker.stop_settled(job_gone):
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.log.warning("spec.stop: pods still ending after %ss; the batch ends without them", self.grace)
            return True
        return False


def _acknowledgement(body: Mapping) -> dict | None:
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    if meta.get("deletionTimestamp") or type(generation) is not int:
        return None
    return acknowledged(body.get("status") or {}, generation)


def needs_acknowledging(body: Mapping, **_: Any) -> bool:
    """kopf's ``when`` filter: the handler (and kopf's log line per call) only for an ended batch
    whose status lags its generation, not for every status patch of every batch."""
    return _acknowledgement(body) is not None


async def acknowledge_generation(storage: Storage, body: Mapping, log: logging.Logger) -> None:
    """A spec change of a batch that already ended (a stop that came too late): the verdict
    stands, and the status says it saw that generation (``core.status.acknowledged``). A
    running batch's reconciler does the same with every status it writes."""
    meta = body.get("metadata") or {}
    patch = _acknowledgement(body)
    if patch is None:
        return
    generation = patch["observedGeneration"]
    try:
        await storage.patch_batch_status(meta["namespace"], meta["name"], patch)
    except KubeError as exc:   # gone meanwhile, or the API: the next event of the batch tries again
        log.warning("Could not record generation %s in the status: %s", generation, exc)
