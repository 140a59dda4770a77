"""One batch from creation to its final status: provision, track, collect, finish, clean up.

A :class:`BatchReconciler` runs as the body of the batch's kopf daemon. It is a state machine
whose decisions are ``core.lifecycle``'s (pure, unit-tested): :func:`~core.lifecycle.entry` says
where a run resumes from the phase the status records, and each round of tracking gathers a
:class:`~core.lifecycle.Round` of facts for :func:`~core.lifecycle.next_step`. This module
carries the steps out, each transition in one place:

- the batch's end (the final status, a stall, the Job's completion, cleanup and TTL) is
  ``service.batch_ending``'s, a mixin of this class;
- the sandbox (created, adopted, its Job watched, removed) is ``service.sandbox_lifecycle``'s;
- the status is written only through ``service.status_writer`` (paced by ``core.cadence``);
- the results ConfigMaps through ``service.results_store``; finished pods are judged by
  ``service.episode_judge``; the tracker is the one place an episode becomes final, and
  ``service.transitions`` turns each such change into metrics and Events;
- the error policy (retry or stall) is ``service.policy``'s; every API call goes through
  ``kube.storage``.

Every step is safe to repeat after a crash: children have deterministic names and are
created-or-adopted, results already written are restored before any log is read, and the final
status is written only after the results ConfigMap holds every row (docs/design.md §5). Pod and
Job watch events arrive through :meth:`observe_pod` / :meth:`observe_job` and wake the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping

from rolloutbatch.core import lifecycle, naming, recorded_status, sessions
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.egress import empty_peers_warning
from rolloutbatch.core.lifecycle import Entry, Step
from rolloutbatch.core.model import BatchSpec, PodFacts, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.status import build_status
from rolloutbatch.core.results import STALL_MESSAGE, STALL_REASON
from rolloutbatch.core.stopping import stopping_message
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.kube.errors import KubeError, NotOurs, OwnerGone
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service import policy, pool_claims, sandbox
from rolloutbatch.service.context import Context, Emit, batch_ref, iso_time, owner_of_batch
from rolloutbatch.service.episode_delivery import EpisodeDelivery
from rolloutbatch.service.episode_judge import EpisodeJudge
from rolloutbatch.service.image_gate import ImageGate
from rolloutbatch.service.later_claims import LaterClaims
from rolloutbatch.service.queue_watch import QueueWatch
from rolloutbatch.service.results_store import ResultsStore
from rolloutbatch.service.sandbox_lifecycle import SandboxLifecycle
from rolloutbatch.service.status_writer import StatusWriter
from rolloutbatch.service.stop import StopControl
from rolloutbatch.service.transitions import TransitionReport
from rolloutbatch.service.batch_ending import BatchEnding

RUNNING_MESSAGE = "Episodes are running"
COLLECTING_MESSAGE = "The Job has ended; the last episodes' results are being collected"
SETTLE_WAIT = 30.0    # how long the finalizer waits for the batch's calls still running (the client's timeout)
POOL_WAIT_PERIOD = 1.0   # spec.poolRef.whenEmpty Wait: how often the pool is looked at


class BatchReconciler(BatchEnding):
    """Drives one RolloutBatch; created by the registry, run by the batch's daemon."""

    def __init__(self, ctx: Context, body: Mapping, emit: Emit, logger: logging.Logger) -> None:
        self.ctx = ctx
        self.storage = Storage(ctx.api, ctx.writer)   # the batch's own: the finalizer closes it (kube.storage)
        self.ref = batch_ref(body)
        self.body = body
        ctx.metrics.batch_seen(self.ref.namespace, self.ref.name, self.ref.uid)
        self.emit = emit
        self.log = logger
        self.spec: BatchSpec | None = None
        self.tracker: BatchTracker | None = None
        self.images: ImageGate | None = None            # spec.inputImages (once the spec is read)
        self.delivery: EpisodeDelivery | None = None   # spec.poolRef (once the spec is read)
        self.later: LaterClaims | None = None          # spec.poolRef: the indexes past the first wave
        self.pool_storage = PoolStorage(ctx.api, ctx.writer)   # its writes on the loop (kube.async_writes)
        self._early: list[tuple[str, PodFacts]] = []   # pod events before the spec was parsed
        self._early_job: JobFacts | None = None
        self.wake = asyncio.Event()
        recorded = body.get("status") or {}
        self.status = StatusWriter(self.storage, self.ref, recorded, ctx.settings.status_cadence)
        self.sandbox = SandboxLifecycle(self.storage, self.ref, ctx.settings, recorded,
                                        lambda *event: self.emit(*event), logger)
        self.results = ResultsStore(self.storage, self.ref, owner_of_batch(self.ref), logger,
                                    ctx.settings.results_shard_rows, emit=lambda *event: self.emit(*event),
                                    vouch=self.status.vouch)
        self.judge = EpisodeJudge(ctx, self.storage)
        self.stop = StopControl(self.storage, self.ref, lambda *event: self.emit(*event), logger, ctx.settings.stop_grace)
        self.queue = QueueWatch(self.storage, self.ref, lambda *event: self.emit(*event), ctx.metrics, logger,
                                recorded.get("queueWaitSeconds"))
        self._reads: set[asyncio.Task] = set()
        self._read_error: BaseException | None = None  # a bug while judging: ends the batch
        self._restored = False
        self._said_unschedulable = False               # the Event of the current spell was posted
        self._said_provisioned = False                 # the Provisioned Event was posted by this operator
        self._run_id = uuid.uuid4().hex[:16]            # names the pooled Job this run makes (its claims' count)
        self._claims_counted = False                   # this run counted the batch's claims
        self._workload_deactivated = False   # spec.stop of a queued batch: its Workload made inactive
        # What a running batch says when nothing is wrong; a warning found at its start (declared
        # egress peers that select no pod) stays in it while it runs.
        self._running_message = RUNNING_MESSAGE
        self._started_metrics = False
        self._finished_metrics = False
        self._retry = policy.Retry(ctx.settings.transient_give_up)
        self._outage_said = False   # a finished batch's cleanup waiting for the API, said once

    @property
    def last_status(self) -> dict:
        """The status as last written (or as read when the reconciler was made)."""
        return self.status.last

    # -- feeding from watch handlers -------------------------------------------------------
    def observe_pod(self, facts: PodFacts, deleted: bool = False) -> None:
        tracker = self.tracker
        if tracker is None:
            self._early.append(("deleted" if deleted else "seen", facts))
        elif deleted:
            tracker.pod_deleted(facts)
        else:
            tracker.observe_pod(facts)
        self.wake.set()

    def _handed_over(self, uid: str, at: float, verifier: bool) -> None:
        if self.tracker is not None:
            self.tracker.handed_over(uid, at, verifier=verifier)

    def observe_job(self, job: JobFacts, deleted: bool = False) -> None:
        if deleted:
            self.sandbox.job_deleted_event(job)
        elif self.tracker is None:
            self._early_job = job
        else:
            self.tracker.observe_job(job, time.time())
        self.wake.set()

    # -- the error policy ------------------------------------------------------------------
    async def run(self) -> None:
        """Run the batch to its end. Never raises (but for cancellation): every failure either
        is retried (transient API errors) or ends the batch with a reason."""
        while True:
            try:
                await self._run()
                return
            except Stalled as exc:
                await self._end_stalled(exc.reason, exc.message)
                return
            except OwnerGone as exc:   # the batch is being deleted: its finalizer does the rest
                self.log.info("%s", exc)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the policy decides; nothing escapes silently
                if policy.is_transient(exc):
                    delay = self._retry.failed(time.monotonic())
                    if delay is None and self.status.phase in v.TERMINAL_PHASES:
                        # A finished batch's verdict stands: what is left (its cleanup, its TTL's
                        # deletion) waits out an API outage, said once, never dropped.
                        if not self._outage_said:
                            self.emit("Warning", v.STALL_API_UNAVAILABLE,
                                      f"the batch's cleanup waits for the API server: {exc}"[:1000])
                            self._outage_said = True
                        delay = policy.BACKOFF[-1]
                    if delay is not None:
                        self.log.warning("API call failed (%s); retrying in %ss (attempt %d)", exc, delay,
                                         self._retry.failures)
                        await asyncio.sleep(delay)
                        continue
                elif not isinstance(exc, KubeError):
                    self.log.exception("Unexpected error")
                reason, message = policy.stall_for(exc)
                await self._end_stalled(reason, message)
                return

    async def _run(self) -> None:
        if lifecycle.entry(self.status.phase, stop_requested=False) is Entry.FINISHED:
            await self._after_finish()
            return
        await self._prepare()
        if self.results.restored_stall is not None:
            await self._resume_stall(*self.results.restored_stall)
        # spec.stop read after the restore's API calls: a stop that came meanwhile creates nothing
        step = lifecycle.entry(self.status.phase, self.stop.requested(self.body))
        if step is not Entry.ADOPT:
            # What this install cannot run (core.scope) is refused before anything is read of its
            # children, a stopped one too: its stop would read a Job where the Role does not reach.
            self.ctx.settings.scope.refuse(self.spec)
        if step is Entry.STOP_BEFORE_RUN:
            await self._stop_before_run()
        elif step is Entry.ADOPT:
            await self._adopt()
        else:
            await self._provision()
        await self._track()
        await self._finish()
        await self._after_finish()

    async def _prepare(self) -> None:
        """The spec read, the tracker made and restored from the results ConfigMap, the events
        that came before it replayed. Each part once, however often a retried run comes here."""
        if self.tracker is None:
            try:
                self.spec = parse_spec(self.body.get("spec") or {},
                                       provisioned=not lifecycle.announces_provisioning(self.status.phase))
            except SpecError as exc:
                raise Stalled(v.STALL_INVALID_SPEC, str(exc)) from None
            self.tracker = BatchTracker(self.spec.episodes, self.spec.infrastructure_retries,
                                        namespace=naming.child_namespace(self.ref, self.spec),
                                        job_name=naming.job_name(self.ref), pooled=bool(self.spec.pool_name))
            self.delivery = EpisodeDelivery(self.storage, self.pool_storage, self.ref, self.spec,
                                            lambda *event: self.emit(*event), self.log,
                                            self.ctx.metrics.claim_observed, channels=self.ctx.channels,
                                            handed=self._handed_over)
            self.results.configure(self.spec)
            delivery = self.delivery
            self.later = LaterClaims(self.pool_storage, self.ref, self.spec, lambda pods: delivery.claimed(pods),
                                     lambda hits, misses: self.ctx.metrics.pool_claims(
                                         self.ref.namespace, self.spec.pool_name, hits, misses),
                                     lambda *event: self.emit(*event), self.log)
            self.images = ImageGate(self.storage, self.spec, lambda *event: self.emit(*event), self.log,
                                    self.ctx.settings.transient_give_up)
        if not self._restored:
            # The tracker exists before restoring: a restore that fails (a foreign ConfigMap,
            # the API) still ends the batch with every episode accounted for (_end_stalled).
            await self.results.restore(self.tracker, self.last_status,
                                       retried=recorded_status.retried_episodes(self.last_status.get("retriedEpisodes")))
            self.tracker.listener = TransitionReport(self.ctx.metrics, self.ref, self.emit)
            self._restored = True
        for kind, facts in self._early:
            self.tracker.pod_deleted(facts) if kind == "deleted" else self.tracker.observe_pod(facts)
        self._early.clear()
        if self._early_job:
            self.tracker.observe_job(self._early_job, time.time())
            self._early_job = None   # once: a retried run must not replay a stale snapshot
        if not self._started_metrics:
            self.ctx.metrics.batch_started(self.ref.namespace, self.ref.name)
            self._started_metrics = True

    async def _resume_stall(self, reason: str, message: str) -> None:
        """An operator died between a stall's final rows and its Failed status: the rows name the
        stall, which ends the batch again, nothing created. Its pods are listed first: rows the
        status did not vouch for (a shard edited since) are judged again from them, not lost."""
        await self.sandbox.poll_job(self.spec, self.tracker)
        if self.tracker.job_uid is not None:
            await self.sandbox.resync_pods(self.spec, self.tracker)
        raise Stalled(reason, message)

    # -- entering the tracking: three ways -------------------------------------------------
    async def _stop_before_run(self) -> None:
        """Stopped before it ran: nothing more is created. A Job an interrupted provisioning
        made is adopted first, with its pods, so episodes that already ended are judged and the
        stop waits for the running ones, then suspended all the same."""
        await self.sandbox.poll_job(self.spec, self.tracker)
        if self.tracker.job_uid is None and self.spec.pool_name and not self.sandbox.recorded_job_uid:
            # claims made by an operator that died before their Job: a Job made suspended adopts them
            try:
                job = await pool_claims.job_for_claims(self.storage, self.pool_storage, self.ref, self.spec)
            except NotOurs as exc:   # a namesake Job: the claims are ended instead
                self.log.warning("No Job for the batch's claims: %s", exc)
                job = None
            if job is not None:
                self.sandbox.took_pooled_job(job, self.tracker)
        if self.tracker.job_uid is not None:
            await self.sandbox.resync_pods(self.spec, self.tracker)
        else:   # nothing claimed, or no Job could be made for the claims: they are ended
            await self.sandbox.end_unadopted_claims(self.spec)
        await self._begin_stop()

    async def _adopt(self) -> None:
        if self.last_status.get("reason") == v.REASON_RUNNING and self.last_status.get("message"):
            self._running_message = self.last_status["message"]   # the start's warning, if any
        await self.sandbox.adopt(self.spec, self.tracker)

    async def _provision(self) -> None:
        phase = self.status.phase
        if lifecycle.announces_provisioning(phase):
            await self._patch_status(v.PROVISIONING, reason=v.REASON_PROVISIONING, message="Creating the sandbox",
                                     force=True)
        if self.spec.pool_name:   # the pool's claims and the Job in its namespace (service.pool_claims)
            # (a namespaced install refused pools in _run, before this wait, which lists the pool's
            # namespace: its Role does not reach it, and the 403 would say nothing of why)
            if self.spec.pool_when_empty == v.POOL_WAIT:
                await self._wait_for_pool()
            if self.stop.requested(self.body):
                # Stopped while it waited (its last look included), or since the entry looked: each
                # claim hands its pod an episode at once, so a stop seen after one claims too late.
                await self._stop_before_run()
                return
            empty: list[str] = []
            delivery, later = self.delivery, self.later

            def claimed(pods: list[dict]) -> None:
                delivery.claimed(pods, held=True)
                later.first_wave_claimed(pods)
            await self.sandbox.provision_pooled(lambda: pool_claims.provision(
                self.storage, self.pool_storage, self.ref, self.spec, lambda *event: self.emit(*event),
                self.ctx.metrics, claimed, self.ctx.settings.scope,
                delivery.settled,
                made_by=self._run_id, count=not self._claims_counted, waiting=self._say_waiting_for_pool), self.tracker)
            self._claims_counted = True
        else:
            empty = await self.sandbox.provision(self.spec, self.tracker)
        if lifecycle.resumes_provisioning(phase):
            await self.sandbox.resync_pods(self.spec, self.tracker)
        if self._said_provisioned:
            pass   # a retried run (the Running status failed transiently) says it once
        elif lifecycle.announces_provisioned(phase):
            self._said_provisioned = True
            self.emit("Normal", v.EVENT_PROVISIONED, f"Sandbox {naming.child_namespace(self.ref, self.spec)} and Job "
                                                     f"{naming.job_name(self.ref)} are ready")
        if empty and self._running_message == RUNNING_MESSAGE:
            warning = empty_peers_warning(empty)
            self.log.warning("%s", warning)
            self.emit("Warning", v.EVENT_EGRESS_PEER_EMPTY, warning)
            self._running_message = f"{RUNNING_MESSAGE}; warning: {warning}"[:1000]
        if self.queue.queued(self.tracker):   # spec.queueName: its Job waits for Kueue
            await self.queue.round(self.tracker)
            await self._patch_status(v.QUEUED, reason=v.REASON_QUEUED, message=self.queue.message(self.tracker),
                                     force=True)
        else:
            await self._patch_status(v.RUNNING, reason=v.REASON_RUNNING, message=self._running_message, force=True)

    async def _say_waiting_for_pool(self, message: str) -> None:
        await self._patch_status(v.PROVISIONING, reason=v.REASON_WAITING_FOR_POOL, message=message, force=True)

    async def _wait_for_pool(self) -> None:
        """spec.poolRef.whenEmpty Wait: Provisioning/WaitingForPool until the pool holds the batch's
        first wave, or the batch is stopped. The stop is looked at before the pool: a pool that
        filled after it came must not end the wait as ready (the caller looks once more)."""
        said = seen = None
        while not self.stop.requested(self.body):
            ready, message, seen = await pool_claims.readiness(self.pool_storage, self.ref, self.spec, seen)
            if ready:
                return
            await self._patch_status(v.PROVISIONING, reason=v.REASON_WAITING_FOR_POOL, message=message,
                                     force=message != said)
            if said is None:   # once per wait: `kubectl describe` says why the batch waits
                self.emit("Normal", v.REASON_WAITING_FOR_POOL, message)
            said = message
            await asyncio.sleep(POOL_WAIT_PERIOD)

    async def _begin_stop(self) -> None:
        if self.later is not None:
            self.later.cancel()   # no index claims from now: the stop suspends the Job
        await self._deactivate_workload()   # else Kueue unsuspends the Job the stop suspends (core.queueing)
        await self.stop.begin(self.spec, self.tracker, self.tracker.job_uid or self.sandbox.recorded_job_uid)

    @property
    def _workload_active(self) -> bool:
        """The stopped batch is queued (spec.queueName, or the namespace's default LocalQueue,
        which after a restart only the Job's label says) and its Workload not yet deactivated."""
        job = self.tracker.job
        queued = self.spec.queue_name is not None or (job is not None and job.queue is not None)
        return queued and not self._workload_deactivated

    async def _deactivate_workload(self) -> None:
        """The stopped Job's Workload made inactive, so Kueue neither admits it nor unsuspends the
        Job. Kueue makes the Workload after the Job, and may not have yet (slow, restarting): asked
        again every round of the stop until it is done."""
        job_uid = self.tracker.job_uid or self.sandbox.recorded_job_uid
        if self._workload_active and job_uid is not None:
            namespace = naming.child_namespace(self.ref, self.spec)
            self._workload_deactivated = await self.storage.deactivate_workload(namespace, job_uid)

    async def _end_stop(self) -> None:
        """The stop is done. A Workload still not found would be made, admitted and unsuspend the
        Job once Kueue comes: the Job goes instead (no pod of it is left, and a stopped batch's rows
        are kept; its sandbox otherwise stays as cleanup says)."""
        await self._deactivate_workload()
        if self._workload_active and (self.tracker.job_uid or self.sandbox.recorded_job_uid):
            self.log.warning("spec.stop: no Workload of the queued Job to deactivate; deleting the Job")
            await self.sandbox.stop_job(self.spec)

    # -- tracking --------------------------------------------------------------------------
    def _round(self) -> lifecycle.Round:
        tracker, settings, now = self.tracker, self.ctx.settings, time.monotonic()
        job_gone = self.sandbox.job_gone(tracker)
        job = tracker.job
        return lifecycle.Round(
            stopping=tracker.stopping, stop_done=tracker.stopping and self.stop.done(tracker, job_gone),
            complete=tracker.complete, busy=tracker.busy, job_exists=job is not None,
            job_finished=bool(job and job.finished), job_gone=job_gone, pods_seen=tracker.seen_pods,
            since_provisioned=now - self.sandbox.provisioned_at,
            unplaced=not tracker.stopping and tracker.stuck_unschedulable(now, settings.unschedulable_grace)
            is not None,
            unstartable=not tracker.stopping and tracker.unstartable(now, settings.image_pull_grace) is not None,
            since_job_finished=time.time() - (tracker.job_finished_seen_at or time.time()),
            queued=self.queue.queued(tracker))

    async def _track(self) -> None:
        """Round after round until a step ends the batch; read logs, write status and results."""
        tracker, settings = self.tracker, self.ctx.settings
        graces = lifecycle.Graces(pod_create=settings.pod_create_grace, collect=settings.collect_grace)
        last_job_poll = time.monotonic()
        while True:
            job = tracker.job
            if lifecycle.stop_begins(stop_requested=self.stop.requested(self.body), stopping=tracker.stopping,
                                     complete=tracker.complete, job_finished=bool(job and job.finished)):
                await self._begin_stop()
            elif tracker.stopping:
                await self._deactivate_workload()
            if await self.queue.round(tracker):
                self.sandbox.provisioned_at = time.monotonic()   # the pods' creation grace starts at admission
            self._start_reads()
            if self._read_error is not None:
                raise self._read_error  # a bug in judging: the policy ends the batch with it
            self.delivery.round(tracker)
            self.later.round(tracker)
            self.images.round(tracker)
            if self.images.error is not None:
                raise self.images.error  # e.g. no right to patch pods: the policy ends the batch with it
            self._report_foreign()
            step = lifecycle.next_step(self._round(), graces)
            if step is Step.CHECK_ROOM:
                await self._check_room()   # stalls, or the wait for room goes on: another grace
                step = lifecycle.next_step(self._round(), graces)
                if step is Step.CHECK_ROOM:
                    step = Step.WAIT       # no grace at all (--unschedulable-grace 0): asked once a round
            if step is Step.END:
                if tracker.stopping:
                    await self._end_stop()
                return
            if step is Step.END_AFTER_JOB:
                missing = tracker.give_up_after_job_end()
                if missing:
                    self.log.warning("Episodes %s ended without a result", missing[:20])
                return
            if step is not Step.WAIT:
                raise Stalled(step.value, await self._stall_message(step))
            if time.monotonic() - last_job_poll > settings.job_poll_interval:
                last_job_poll = time.monotonic()
                await self.sandbox.poll_job(self.spec, tracker)
            phase = lifecycle.running_phase(bool(tracker.job and tracker.job.finished), self.queue.held_at_round)
            self.ctx.metrics.set_running(self.ref.namespace, self.ref.name, tracker.running)
            await self._write_results()
            state = self._running_state(phase)
            # a change of reason (pods that cannot be placed, or placed again) is shown at once
            changed = bool(state) and (state["reason"] != self.last_status.get("reason")
                                       # Kueue's word on the wait (read every few seconds at most), or
                                       # which later indexes wait for a warm pod
                                       or ((phase == v.QUEUED or state["reason"] == v.REASON_WAITING_FOR_POOL)
                                           and state["message"] != self.last_status.get("message")))
            await self._patch_status(phase, **state, force=changed)
            # A whole round went through: a later error starts a new count. Rounds that change
            # nothing write no status (a batch Kueue holds for hours), and two blips hours apart
            # are not transient errors without a break (service.policy).
            self._retry.succeeded()
            self.wake.clear()
            try:
                # woken by events; idle, often enough for the longest waits of either cadence
                await asyncio.wait_for(self.wake.wait(),
                                       timeout=min(settings.status_interval, settings.results_max_interval))
            except asyncio.TimeoutError:
                pass
            # Coalesce: a burst of pod events is handled as one round.
            await asyncio.sleep(0.05)

    async def _check_room(self) -> None:
        """Pods the scheduler could not place: a stall when no node could hold one even empty,
        else the wait goes on (a busy cluster: room may come)."""
        tracker = self.tracker
        unplaced = tracker.stuck_unschedulable(time.monotonic(), self.ctx.settings.unschedulable_grace)
        if await self.sandbox.never_fits(self.spec):
            raise Stalled(v.STALL_UNSCHEDULABLE,
                          f"no node can hold an episode pod even when empty (requests "
                          f"{self.sandbox.requests_text(self.spec)}); pod {unplaced.name}: "
                          f"{unplaced.unschedulable}"[:1000])
        tracker.keep_waiting(time.monotonic())

    async def _stall_message(self, step: Step) -> str:
        if step is Step.STALL_SANDBOX_DELETED:
            return self.sandbox.job_gone_message()
        if step is Step.STALL_PODS_NOT_CREATED:
            return await self.sandbox.pods_not_created_message(self.spec, self.tracker.job)
        assert step is Step.STALL_IMAGE, step
        stuck = self.tracker.unstartable(time.monotonic(), self.ctx.settings.image_pull_grace)
        return f"pod {stuck.name} cannot start: {stuck.waiting_reason}: {stuck.waiting_message or ''}".strip()

    def _running_state(self, phase: str) -> dict:
        """Reason and message of a batch whose Job is there (Queued, Running, Collecting: the
        phase's own reason once the Job has ended): pods the scheduler cannot place are said,
        with its words (and an Event, once per spell), not hidden behind RUNNING_MESSAGE; so are
        later indexes waiting for a warm pod (spec.poolRef.whenEmpty Wait: service.later_claims)."""
        if self.tracker.stopping:
            return {"reason": v.REASON_STOPPING,
                    "message": stopping_message(self.tracker.summary(self._origin()), self.tracker.running)}
        if phase == v.QUEUED:
            return {"reason": v.REASON_QUEUED, "message": self.queue.message(self.tracker)}
        if phase == v.RUNNING and self.last_status.get("reason") == v.REASON_QUEUED:
            return {"reason": v.REASON_RUNNING, "message": self._running_message}
        if phase != v.RUNNING:   # Collecting: whatever the pods waited for, they wait no more (the start's warning kept)
            return {"reason": v.REASON_COLLECTING,
                    "message": COLLECTING_MESSAGE + self._running_message.removeprefix(RUNNING_MESSAGE)}
        pending = self.tracker.unschedulable()
        if pending:
            message = (f"{len(pending)} episode pod(s) cannot be scheduled: {pending[0].unschedulable}")[:1000]
            if not self._said_unschedulable:
                self._said_unschedulable = True
                self.emit("Warning", v.EVENT_UNSCHEDULABLE, message)
            return {"reason": v.EVENT_UNSCHEDULABLE, "message": message}
        self._said_unschedulable = False
        waiting = self.later.waiting_message() if self.later is not None else None
        if waiting:   # spec.poolRef.whenEmpty Wait: later indexes wait, gated, for warm pods
            if self.last_status.get("reason") != v.REASON_WAITING_FOR_POOL:   # once per spell
                self.emit("Normal", v.REASON_WAITING_FOR_POOL, waiting)
            return {"reason": v.REASON_WAITING_FOR_POOL, "message": waiting}
        if self.last_status.get("reason") == v.REASON_WAITING_FOR_POOL and self.later is not None \
                and self.later.answering():
            return {}   # the answer in flight says whether they still wait (after a restart, the first)
        if self.last_status.get("reason") in (v.EVENT_UNSCHEDULABLE, v.REASON_WAITING_FOR_POOL):
            return {"reason": v.REASON_RUNNING, "message": self._running_message}
        return {}

    def _start_reads(self) -> None:
        """A judging task for every finished pod the tracker hands out."""
        for facts in self.tracker.take_reads():
            task = asyncio.create_task(self._read_and_judge(facts))
            self._reads.add(task)
            task.add_done_callback(self._read_done)

    def _read_done(self, task: asyncio.Task) -> None:
        self._reads.discard(task)
        if not task.cancelled() and task.exception() is not None and self._read_error is None:
            self._read_error = task.exception()
            self.wake.set()

    async def _read_and_judge(self, facts: PodFacts) -> None:
        job = self.tracker.job
        result = await self.judge.judge(facts, verified=self.spec.verifier is not None,
                                        batch_deadline_at=job.deadline_at if job else None, now=time.time(),
                                        evicted=self.queue.evicted(facts, self.tracker),
                                        episode_timeout=self.spec.episode_timeout_seconds)
        if self.spec.pool_name and facts.index is not None:   # a trainer-driven session's stats (core.sessions)
            result = result.replace(session=sessions.stats_of(
                (self.body.get("metadata") or {}).get("annotations") or {}, facts.index, facts.name))
        self.tracker.record(result, facts.uid)
        self.wake.set()

    def _report_foreign(self) -> None:
        """Pods that carry the batch's label but are not its episodes: ignored, and said once."""
        for facts in self.tracker.take_foreign():
            self.log.warning("Ignoring pod %s/%s: it carries this batch's label but was not made by its Job",
                             facts.namespace, facts.name)
            self.emit("Warning", v.EVENT_FOREIGN_POD,
                      f"pod {facts.namespace}/{facts.name} carries this batch's label but was not made by its Job "
                      f"{naming.job_name(self.ref)}: ignored"[:1000])

    # -- status and results ----------------------------------------------------------------
    def _origin(self) -> float | None:
        """The batch's clock starts when its Job is created, or (spec.queueName) admitted, or (a
        pooled batch, which has no queue) when its first claim was made."""
        job = self.tracker.job if self.tracker else None
        return job.began_at + self.queue.origin_offset(job) if job and job.began_at is not None else None

    def _job_complete_seconds(self) -> float | None:
        t = self.tracker
        if t and t.job and t.job.finished and t.job.created and t.job_finished_seen_at:
            return max(0.0, t.job_finished_seen_at - t.job.created)
        return recorded_status.seconds(self.last_status.get("jobCompleteSeconds"))

    def _build_status(self, phase: str, reason: str | None, message: str | None, completion: float | None,
                      now: float) -> dict:
        tracker, spec = self.tracker, self.spec
        return build_status(
            ref=self.ref, spec=spec, phase=phase, summary=tracker.summary(self._origin()) if tracker else None,
            running=tracker.running if tracker else 0, ready=tracker.ready if tracker else 0,
            sandbox_namespace=self.sandbox.namespace(spec), job_name=naming.job_name(self.ref) if spec else None,
            job_uid=(tracker.job_uid if tracker else None) or self.last_status.get("jobUID"),
            results_configmap=naming.results_configmap_name(self.ref),
            start_time=self.last_status.get("startTime") or iso_time(now),
            completion_time=iso_time(completion) if completion else self.last_status.get("completionTime"),
            job_complete_seconds=self._job_complete_seconds(),
            message=message if message is not None else self.last_status.get("message", ""),
            reason=reason if reason is not None else self.last_status.get("reason"),
            previous=self.last_status, now_iso=iso_time(now), raw_episodes=(self.body.get("spec") or {}).get("episodes"),
            results_digests=self.results.digests, queue_wait_seconds=self.queue.wait_seconds(tracker and tracker.job),
        )

    async def _patch_status(self, phase: str, *, reason: str | None = None, message: str | None = None,
                            force: bool = False, completion: float | None = None) -> None:
        """The status for ``phase``, written through the status writer when due."""
        now, started = time.time(), time.monotonic()
        self._acknowledge_generation()
        if self.results.digests != (self.last_status.get("resultsDigests") or {}):
            force = True   # a results write is adopted after a restart only once the status records it
        if not self.status.due(phase, self.tracker, force=force):
            return
        await self.status.write(self._build_status(phase, reason, message, completion, now), self.tracker, started)
        self.sandbox.recorded_job_uid = self.last_status.get("jobUID") or None
        self._retry.succeeded()

    def _acknowledge_generation(self) -> None:
        """The status says it saw the object's newest generation: the only spec change the CRD
        admits, spec.stop, is read from the live object every round."""
        generation = (self.body.get("metadata") or {}).get("generation")
        if type(generation) is int and generation > self.ref.generation:
            self.ref = dataclasses.replace(self.ref, generation=generation)
            self.status.ref = self.ref

    async def _write_results(self, final: bool = False, job_completed: bool = False,
                             stall: Stalled | None = None) -> None:
        """``job_completed``: the Job's end was seen after the batch's; its figure is written even
        when no row changed. ``stall``: the one the final document is written for (it names it)."""
        tracker = self.tracker
        if tracker is None or not (job_completed or self.results.unwritten(tracker, final)):
            return
        if not final and not self.results.checkpoint_due(tracker, self.ctx.settings.results_cadence):
            return
        await self.results.write(tracker, self.spec, self._origin(),
                                 {"client_job_complete_seconds": self._job_complete_seconds(),
                                  "retried_episodes": tracker.retried, "final": final,
                                  **({STALL_REASON: stall.reason, STALL_MESSAGE: stall.message} if stall else {})},
                                 final=final)

    # -- endings ---------------------------------------------------------------------------
    async def delete_sandbox(self, timeout: float) -> bool:
        """The finalizer's work: remove every child of the batch, and its results unless retained;
        needs no spec. First the batch's own calls are stopped and those still running in their
        threads waited for, so nothing they create lands after the removal. True when gone."""
        for task in self._reads:
            task.cancel()
        if self.later is not None:   # a claim landing after the sandbox's removal would run uncounted
            await self.later.cancelled(within=min(timeout, SETTLE_WAIT))
        self.storage.close()
        if not await self.storage.settled(timeout=min(timeout, SETTLE_WAIT)):
            self.log.warning("API calls of the batch still running after %ss: removing its sandbox anyway",
                             min(timeout, SETTLE_WAIT))
        storage = Storage(self.ctx.api)
        pool = ((self.body.get("spec") or {}).get("poolRef") or {}).get("name")
        pool_ns = naming.pool_namespace(self.ref.namespace, pool) if isinstance(pool, str) and pool else None
        gone = await sandbox.remove(storage, self.ref, self.log, timeout, finalizer=True,
                                    scope=self.ctx.settings.scope, pool_namespace=pool_ns)
        await sandbox.remove_results(storage, self.ref, self.log)
        return gone
