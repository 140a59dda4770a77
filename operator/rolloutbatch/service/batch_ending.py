"""A batch's end, the half of :class:`~service.reconciler.BatchReconciler` that runs once its
episodes are final or it cannot go on: the final status written after the results that back it
(:meth:`BatchEnding._finish`), a stall ended visibly whatever the API refuses
(:meth:`BatchEnding._end_stalled`), the Job's completion waited for, the cleanup policy and
``ttlSecondsAfterFinished`` (:meth:`BatchEnding._after_finish`). Each step is safe to repeat after
a crash (docs/design.md §5).

A mixin: it works on the reconciler's own state (ref, spec, body, tracker, status, results,
sandbox, storage, ctx, emit, log) and calls its status and results writes; it holds none of its own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rolloutbatch.core import lifecycle, naming, recorded_status
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.results import PENDING_DIGESTS
from rolloutbatch.core.spec import parse_spec, ttl_seconds_after_finished
from rolloutbatch.core.status import final_phase, stopped_phase
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.service import policy
from rolloutbatch.service.context import iso_time



class BatchEnding:
    """The end of a batch: mixed into service.reconciler.BatchReconciler (see the module docstring)."""

    async def _finish(self) -> None:
        tracker, spec = self.tracker, self.spec
        if tracker.stopping:
            tracker.stopped_rest()   # what never ran, or left nothing, is the stop's
        summary = tracker.summary(self._origin())
        # Results first: a crash between the two writes must never leave a final status
        # whose rows are missing (docs/design.md §5).
        await self._write_results(final=True)
        results_cm = naming.results_configmap_name(self.ref)
        # A stop that cut nothing off (every episode ended first) leaves the batch's own verdict.
        phase, reason, message = stopped_phase(summary, results_cm) if summary.stopped \
            else final_phase(summary, spec, results_cm)
        await self._patch_status(phase, reason=reason, message=message, force=True, completion=time.time())
        self.emit("Warning" if phase == v.FAILED else "Normal", reason, message)
        self._batch_finished(phase, summary)
        # a claim its Job never adopted (an earlier leader's, made after this one's list, or one
        # whose index annotation was edited): it would run on, and stay, uncounted
        await self.sandbox.end_unadopted_claims(spec)

    def _batch_finished(self, phase: str, summary: Any) -> None:
        if self._finished_metrics:
            return
        self._finished_metrics = True
        self.ctx.metrics.batch_finished(
            self.ref.namespace, self.ref.name, phase.lower(),
            summary.batch_to_all_ready_seconds if summary else None,
            summary.batch_to_all_rewards_seconds if summary else None, self._job_complete_seconds())
        self.ctx.metrics.set_running(self.ref.namespace, self.ref.name, 0)

    async def _end_stalled(self, reason: str, message: str) -> None:
        """The batch cannot go on: stop its Job, finalize every open episode, say why once.

        Each step is best effort (the API may be what failed); the status patch is retried a few
        times, falling back to the bare phase and reason, so the batch always ends visibly.
        """
        self.log.warning("Stalled: %s: %s", reason, message)
        if self.status.phase in v.TERMINAL_PHASES:
            # Already finished (e.g. its cleanup or TTL deletion failed): keep the verdict.
            self.emit("Warning", reason, message)
            return
        if self.delivery is not None:
            self.delivery.cancel()   # no episode handed over from now: its index is given up below
        if self.later is not None:
            self.later.cancel()      # nor claimed
        await self._judge_finished_pods()
        if self.tracker is not None:
            episode_reason = v.EP_IMAGE_PULL if reason == v.STALL_IMAGE else v.EP_BATCH_STALLED
            self.tracker.give_up_missing(episode_reason, f"the batch stalled ({reason}): {message}"[:1000])
            try:
                await self._write_results(final=True, stall=Stalled(reason, message))
            except Exception as exc:  # noqa: BLE001
                self.log.warning("Could not write the final results: %s", exc)
        await self._record_stall(reason, message)
        # The Job goes only once the stall is recorded: an operator dying before that finds the
        # Job, and its pods to judge again, not a Job gone that it would blame on someone else
        # (SandboxDeleted). One dying after it stops the Job at its restart (_after_finish).
        await self._stop_stalled_job()
        self.emit("Warning", reason, message)
        self._batch_finished(v.FAILED, self.tracker.summary(self._origin()) if self.tracker else None)
        try:
            await self._after_finish()   # an InvalidSpec batch too: its TTL still runs
        except Exception as exc:  # noqa: BLE001
            self.log.warning("Cleanup after the stall failed: %s", exc)

    async def _stop_stalled_job(self) -> None:
        """A stalled batch's Job deleted with its pods, and a pooled one's claims no Job adopted
        evicted; best effort, each (the stall is recorded)."""
        if self.spec is not None:
            await self.sandbox.stop_job(self.spec)
            await self.sandbox.end_unadopted_claims(self.spec)

    async def _record_stall(self, reason: str, message: str) -> None:
        """The Failed status with the stall's reason, until recorded or refused even bare
        (``policy.keep_recording_stall``)."""
        attempt = 0
        while True:
            try:
                if attempt < policy.FULL_STALL_TRIES:
                    await self._patch_status(v.FAILED, reason=reason, message=message, force=True,
                                             completion=time.time())
                else:   # the full status may be what the API refuses: the bare verdict then
                    await self.status.write_bare_failure(reason, message, iso_time(time.time()),
                                                         results_digests=self.results.digests)
                return
            except Exception as exc:  # noqa: BLE001
                if not policy.keep_recording_stall(attempt, exc):
                    self.log.error("The API refused even the bare stall status (%s); the Event tells it", exc)
                    return
                self.log.warning("Could not record the stall (%s); trying again", exc)
                await asyncio.sleep(policy.BACKOFF[min(attempt, len(policy.BACKOFF) - 1)])
                attempt += 1

    async def _judge_finished_pods(self) -> None:
        """Before a stalled batch stops its Job: the episodes that already ended are judged from
        their logs (for at most ``Settings.stall_read_grace``), not given up. Whatever is still open after
        that is lost with the stall's reason (give_up_missing)."""
        if self.tracker is not None:
            self._start_reads()
        if self._reads:
            await asyncio.wait(set(self._reads), timeout=self.ctx.settings.stall_read_grace)
        for task in self._reads:
            task.cancel()

    async def _await_job_end(self, timeout: float = lifecycle.JOB_END_WAIT_SECONDS) -> None:
        """Ready is declared as soon as every episode is final; the Job controller marks the Job
        finished a moment later. Wait for that (bounded) to record jobCompleteSeconds, before
        any cleanup deletes the Job."""
        tracker = self.tracker
        # the recorded figure, not the tracker's: a retry after a failed write must write it again
        if (tracker is None or recorded_status.seconds(self.last_status.get("jobCompleteSeconds")) is not None
                or not lifecycle.job_will_complete(self.status.phase, self.last_status.get("reason"))):
            return
        deadline = time.monotonic() + timeout
        polled = time.monotonic()
        while (not (tracker.job and tracker.job.finished) and not self.sandbox.job_gone(tracker)
               and time.monotonic() < deadline):
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
            if time.monotonic() - polled > 5:
                polled = time.monotonic()
                await self.sandbox.poll_job(self.spec, tracker)
        if tracker.job and tracker.job.finished:
            await self._write_results(final=True, job_completed=True)
            await self._patch_status(self.status.phase or v.SUCCEEDED, force=True)
            # the batch's end was counted before its Job's; its duration is observed now
            self.ctx.metrics.job_completed(self.ref.namespace, self.ref.name, self._job_complete_seconds())

    async def _after_finish(self) -> None:
        """A late jobCompleteSeconds, the cleanup policy, and ttlSecondsAfterFinished. A batch whose
        spec cannot be read (InvalidSpec: nothing was made for it) has only its TTL to run."""
        try:
            spec = self.spec or parse_spec(self.body.get("spec") or {}, provisioned=True)   # it ended
        except SpecError:
            try:
                ttl = ttl_seconds_after_finished(self.body.get("spec") or {})
            except SpecError:
                return
            await self._expire(ttl)
            return
        self.spec = spec
        if lifecycle.stall_leaves_job_to_stop(self.status.phase, self.last_status.get("reason"),
                                              resumed=self.tracker is None):
            await self._stop_stalled_job()   # recorded by an operator that died before it stopped it
        await self._await_job_end()
        phase = self.status.phase
        pending = PENDING_DIGESTS in self.last_status
        if pending and self.tracker is None:
            # ended before this process: an earlier one died between a results write and its status
            await self.results.confirm_pending(self.last_status)
        if pending or (self.results.digests and self.results.digests != (self.last_status.get("resultsDigests") or {})):
            # a results write whose status patch failed or never came: the status records it now
            await self._patch_status(phase, force=True)
        if await self.sandbox.remove_after_finish(spec, phase):
            try:
                await self._patch_status(phase, force=True)   # no longer names the sandbox
            except KubeError as exc:
                if policy.is_transient(exc):
                    raise   # the error policy retries it
                # The verdict stands and the TTL below still runs.
                self.emit("Warning", v.EVENT_CLEANUP_FAILED, f"the status after removing the sandbox was refused: {exc}")
        await self._expire(spec.ttl_seconds_after_finished)

    async def _expire(self, ttl: int | None) -> None:
        """ttlSecondsAfterFinished: the batch deleted that long after its completionTime."""
        if ttl is None:
            return
        delay, later = recorded_status.ttl_wait(self.last_status.get("completionTime"), ttl, time.time())
        if later:
            self.log.warning("status.completionTime is later than now: ttlSecondsAfterFinished counts from now")
        if delay > 0:
            self._retry.succeeded()   # everything before the wait went through
            await asyncio.sleep(delay)
        self.log.info("ttlSecondsAfterFinished (%ss) passed: deleting the RolloutBatch", ttl)
        await self.storage.delete_batch(self.ref.namespace, self.ref.name, self.ref.uid)
