"""One batch from creation to its final status: provision, track, collect, finish, clean up.

A :class:`BatchReconciler` runs as the body of the batch's kopf daemon. Every step is safe to
repeat after a crash: children have deterministic names and are created-or-adopted, results
already written to the results ConfigMap are restored before any log is read, and the final
status is written only after the results ConfigMap holds every row (docs/design.md §5). Pod and
Job watch events reach the reconciler through :meth:`observe_pod` / :meth:`observe_job` and wake
its loop; the loop writes status and results at the pace of the batch's progress
(``core.cadence``: at most once a second, and about once per 1/40 or 1/20 of the batch).

This module is the I/O loop (read, judge, write). The rules live in ``core`` (the tracker is the
one place an episode becomes final; ``service.transitions`` turns each such change into metrics
and Events), the API calls in ``kube``, the error policy in ``service.policy``, reading and
judging one finished pod in ``service.episode_judge`` and the sandbox's removal in
``service.sandbox``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.egress import empty_peers_warning
from rolloutbatch.core.admission import Stalled, fits_an_empty_node, scheduling_requests
from rolloutbatch.core.k8s_rules import format_quantity
from rolloutbatch.core.children import adoptable, removes_sandbox
from rolloutbatch.core.model import BatchSpec, PodFacts, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.status import bare_failure, build_status, final_phase, status_patch, stopped_phase
from rolloutbatch.core.stopping import stopping_message
from rolloutbatch.core.tracker import BatchTracker, JobFacts, job_facts
from rolloutbatch.core.verdict import parse_time, pod_facts
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.service import egress_checks, policy, provisioning, sandbox
from rolloutbatch.service.context import Context, batch_ref, iso_time, owner_of_batch
from rolloutbatch.service.episode_judge import EpisodeJudge
from rolloutbatch.service.image_gate import ImageGate
from rolloutbatch.service.results_store import ResultsStore
from rolloutbatch.service.stop import StopControl
from rolloutbatch.service.transitions import TransitionReport

Emit = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message) -> posts an Event
RUNNING_MESSAGE = "Episodes are running"


class BatchReconciler:
    """Drives one RolloutBatch; created by the registry, run by the batch's daemon."""

    def __init__(self, ctx: Context, body: Mapping, emit: Emit, logger: logging.Logger) -> None:
        self.ctx = ctx
        self.ref = batch_ref(body)
        self.body = body
        self.emit = emit
        self.log = logger
        self.spec: BatchSpec | None = None
        self.tracker: BatchTracker | None = None
        self.images: ImageGate | None = None            # spec.inputImages (once the spec is read)
        self._early: list[tuple[str, PodFacts]] = []   # pod events before the spec was parsed
        self._early_job: JobFacts | None = None
        self.wake = asyncio.Event()
        self.last_status: dict = dict(body.get("status") or {})
        self._patched_version = -1
        self._patched_finals = 0
        self._patched_at = -math.inf      # time.monotonic(): a wall clock stepped back holds no write
        self.storage = ctx.storage
        self.results = ResultsStore(self.storage, self.ref, owner_of_batch(self.ref), logger,
                                    ctx.settings.results_shard_rows, emit=lambda *event: self.emit(*event))
        self.judge = EpisodeJudge(ctx, self.storage)
        self.stop = StopControl(self.storage, self.ref, lambda *event: self.emit(*event), logger, ctx.settings.stop_grace)
        self._reads: set[asyncio.Task] = set()
        self._read_error: BaseException | None = None  # a bug while judging: ends the batch
        self._job_deleted = False                      # by someone else, mid-batch
        self._deleted_job_uids: set[str] = set()       # Jobs named ours whose deletion was seen
        self._restored = False
        self._overhead: dict | None = None             # the RuntimeClass's pod overhead (provisioning)
        self._said_unschedulable = False               # the Event of the current spell was posted
        # What a running batch says when nothing is wrong; a warning found at its start (declared
        # egress peers that select no pod) stays in it while it runs.
        self._running_message = RUNNING_MESSAGE
        self._provisioned_at = time.monotonic()
        self._started_metrics = False
        self._finished_metrics = False
        self._retry = policy.Retry(ctx.settings.transient_give_up)
        # Named in the status only once creating it began (a batch refused first never had one).
        self._sandbox_created = bool(self.last_status.get("sandboxNamespace"))
        # A terminal batch without sandboxNamespace had its sandbox removed by the cleanup policy.
        self._sandbox_removed = (self.last_status.get("phase") in v.TERMINAL_PHASES
                                 and not self.last_status.get("sandboxNamespace"))

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

    def observe_job(self, job: JobFacts, deleted: bool = False) -> None:
        if deleted:
            if job.name == naming.job_name(self.ref) and len(self._deleted_job_uids) < 100:
                self._deleted_job_uids.add(job.uid)   # the batch's own only if it is its Job (_track)
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
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the policy decides; nothing escapes silently
                if policy.is_transient(exc):
                    delay = self._retry.failed(time.monotonic())
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
        if self.last_status.get("phase") in v.TERMINAL_PHASES:
            await self._after_finish()
            return
        if self.tracker is None:
            try:
                self.spec = parse_spec(self.body.get("spec") or {})
            except SpecError as exc:
                raise Stalled(v.STALL_INVALID_SPEC, str(exc)) from None
            self.tracker = BatchTracker(self.spec.episodes, self.spec.infrastructure_retries,
                                        namespace=naming.child_namespace(self.ref, self.spec),
                                        job_name=naming.job_name(self.ref))
            self.results.configure(self.spec)
            self.images = ImageGate(self.storage, self.spec, lambda *event: self.emit(*event), self.log,
                                    self.ctx.settings.transient_give_up)
        if not self._restored:
            # The tracker exists before restoring: a restore that fails (a foreign ConfigMap,
            # the API) still ends the batch with every episode accounted for (_end_stalled).
            retried = self.last_status.get("retriedEpisodes")
            await self.results.restore(self.tracker, self.last_status.get("resultsDigests"),
                                       retried=retried if type(retried) is int and retried >= 0 else 0)
            self.tracker.listener = TransitionReport(self.ctx.metrics, self.ref, self.emit)
            self._restored = True   # a retried run() after an API error does not restore twice
        for kind, facts in self._early:
            self.tracker.pod_deleted(facts) if kind == "deleted" else self.tracker.observe_pod(facts)
        self._early.clear()
        if self._early_job:
            self.tracker.observe_job(self._early_job, time.time())
            self._early_job = None   # once: a retried run() must not replay a stale snapshot
        if not self._started_metrics:
            self.ctx.metrics.batch_started(self.ref.namespace, self.ref.name)
            self._started_metrics = True
        if self.stop.requested(self.body) and self.last_status.get("phase") not in (v.RUNNING, v.COLLECTING):
            # Stopped before it ran: nothing more is created. A Job an interrupted provisioning
            # made is adopted first, with its pods, so episodes that already ended are judged and
            # the stop waits for the running ones, then suspended all the same.
            await self._poll_job()
            if self.tracker.job_uid is not None:
                await self._resync_pods()
            await self.stop.begin(self.spec, self.tracker, self.tracker.job_uid or self.last_status.get("jobUID"))
        else:
            await self._provision()
        await self._track()
        await self._finish()
        await self._after_finish()

    async def _create(self, obj: dict) -> dict:
        shared = self.spec.isolation_namespace == v.ISOLATION_SHARED
        recorded = self.last_status.get("jobUID")
        live = await self.storage.create_or_adopt(obj, self.ref.uid,
                                lambda existing, desired: adoptable(existing, desired, shared=shared, job_uid=recorded))
        crash_point(f"provision:{obj['kind']}")
        return live

    async def _provision(self) -> None:
        spec, ref = self.spec, self.ref
        assert spec is not None
        if self.last_status.get("phase") in (v.RUNNING, v.COLLECTING):
            # Provisioned by an earlier run: adopt, never recreate (a Job deleted meanwhile
            # would run every episode again).
            self._sandbox_created = True
            if self.last_status.get("reason") == v.REASON_RUNNING and self.last_status.get("message"):
                self._running_message = self.last_status["message"]   # the start's warning, if any
            await self._poll_job()
            if self._job_deleted:
                raise Stalled(v.STALL_SANDBOX_DELETED, self._job_gone_message())
            await self._resync_pods()
            self._provisioned_at = time.monotonic()
            return
        if self.last_status.get("phase") in (None, v.PENDING):
            await self._patch_status(v.PROVISIONING, reason=v.REASON_PROVISIONING, message="Creating the sandbox",
                                     force=True)
        owner = owner_of_batch(ref)
        dns = self.ctx.settings.dns_cidrs
        overhead = self._overhead = await provisioning.check(self.storage, ref, spec, owner, dns,
                                                             service_cidrs=self.ctx.settings.service_cidrs,
                                                             logger=self.log)
        empty = await egress_checks.empty_peers(self.storage, ref, spec, self.log) if spec.egress else []
        self._sandbox_created = True
        job = await provisioning.create(self.storage, self._create, ref, spec, owner, overhead, dns)
        facts = job_facts(job)
        recorded = self.last_status.get("jobUID")
        if recorded and facts.uid != recorded:
            # Ours was created (the status names it) and is gone; a namesake is not it.
            raise Stalled(v.STALL_SANDBOX_DELETED, self._job_gone_message())
        self.tracker.expect_job(facts.uid)
        self.tracker.observe_job(facts, time.time())
        self._provisioned_at = time.monotonic()
        if self.last_status.get("phase") in (None, v.PENDING, v.PROVISIONING):
            self.emit("Normal", "Provisioned",
                      f"Sandbox {naming.child_namespace(ref, spec)} and Job {naming.job_name(ref)} are ready")
        if empty:
            warning = empty_peers_warning(empty)
            self.log.warning("%s", warning)
            self.emit("Warning", v.EVENT_EGRESS_PEER_EMPTY, warning)
            self._running_message = f"{RUNNING_MESSAGE}; warning: {warning}"[:1000]
        await self._patch_status(v.RUNNING, reason=v.REASON_RUNNING, message=self._running_message, force=True)

    async def _track(self) -> None:
        """Loop until every episode is final; read logs, flush status and results as we go."""
        tracker, settings = self.tracker, self.ctx.settings
        assert tracker is not None
        last_job_poll = time.monotonic()
        while True:
            # Once the Job has ended (Collecting) there is nothing left to stop: the batch ends as it would.
            if not tracker.stopping and not tracker.complete and not (tracker.job and tracker.job.finished) \
                    and self.stop.requested(self.body):
                await self.stop.begin(self.spec, tracker, tracker.job_uid or self.last_status.get("jobUID"))
            for facts in tracker.take_reads():
                task = asyncio.create_task(self._read_and_judge(facts))
                self._reads.add(task)
                task.add_done_callback(self._read_done)
            if self._read_error is not None:
                raise self._read_error  # a bug in judging: the policy ends the batch with it
            self.images.round(tracker)
            if self.images.error is not None:
                raise self.images.error  # e.g. no right to patch pods: the policy ends the batch with it
            self._report_foreign()
            job_gone = self._job_deleted or tracker.job_uid in self._deleted_job_uids
            if tracker.stopping:
                if self.stop.done(tracker, job_gone):
                    return   # _finish gives the stop every index still open
            elif job_gone and not tracker.complete:
                raise Stalled(v.STALL_SANDBOX_DELETED, self._job_gone_message())
            if (not tracker.stopping and not tracker.seen_pods and tracker.job and not tracker.job.finished
                    and time.monotonic() - self._provisioned_at > settings.pod_create_grace):
                raise Stalled(v.STALL_PODS_NOT_CREATED, await self._pods_not_created())
            unplaced = None if tracker.stopping else tracker.stuck_unschedulable(time.monotonic(),
                                                                                 settings.unschedulable_grace)
            if unplaced is not None:
                if await self._never_fits():
                    raise Stalled(v.STALL_UNSCHEDULABLE,
                                  f"no node can hold an episode pod even when empty (requests "
                                  f"{self._requests_text()}); pod {unplaced.name}: {unplaced.unschedulable}"[:1000])
                tracker.keep_waiting(time.monotonic())   # a busy cluster: room may come
            stuck = None if tracker.stopping else tracker.unstartable(time.monotonic(), settings.image_pull_grace)
            if stuck is not None:
                raise Stalled(v.STALL_IMAGE, f"pod {stuck.name} cannot start: {stuck.waiting_reason}: "
                                             f"{stuck.waiting_message or ''}".strip())
            if tracker.complete and not tracker.busy:
                return
            if tracker.job and tracker.job.finished and not tracker.busy and not tracker.stopping:
                seen = tracker.job_finished_seen_at or time.time()
                if time.time() - seen >= settings.collect_grace:
                    missing = tracker.give_up_after_job_end()
                    if missing:
                        self.log.warning("Episodes %s ended without a result", missing[:20])
                    return
            if time.monotonic() - last_job_poll > settings.job_poll_interval:
                last_job_poll = time.monotonic()
                await self._poll_job()
            phase = v.COLLECTING if tracker.job and tracker.job.finished else v.RUNNING
            self.ctx.metrics.set_running(self.ref.namespace, self.ref.name, tracker.running)
            await self._write_results()
            state = self._running_state(phase)
            # a change of reason (pods that cannot be placed, or placed again) is shown at once
            changed = bool(state) and state["reason"] != self.last_status.get("reason")
            await self._patch_status(phase, **state, force=changed)
            self.wake.clear()
            try:
                # woken by events; idle, often enough for the longest waits of either cadence
                await asyncio.wait_for(self.wake.wait(),
                                       timeout=min(settings.status_interval, settings.results_max_interval))
            except asyncio.TimeoutError:
                pass
            # Coalesce: a burst of pod events is handled as one round.
            await asyncio.sleep(0.05)

    async def _never_fits(self) -> bool:
        """No node could hold one episode pod even empty. Unknown (nodes unreadable): False, since
        a batch must not be ended on a guess; a busy cluster only delays it."""
        try:
            allocatables = await self.storage.node_allocatables()
        except KubeError as exc:
            self.log.warning("Cannot read the nodes' allocatable resources (%s): waiting for room", exc)
            return False
        requests = scheduling_requests(self.spec, self._overhead)
        return bool(allocatables) and not fits_an_empty_node(requests, allocatables)

    def _requests_text(self) -> str:
        requests = scheduling_requests(self.spec, self._overhead)
        return ", ".join(f"{name} {format_quantity(amount)}" for name, amount in sorted(requests.items())) or "none"

    def _running_state(self, phase: str) -> dict:
        """Reason and message of a running batch: pods the scheduler cannot place are said,
        with its words (and an Event, once per spell), not hidden behind RUNNING_MESSAGE."""
        if self.tracker.stopping:
            return {"reason": v.REASON_STOPPING,
                    "message": stopping_message(self.tracker.summary(self._origin()), self.tracker.running)}
        if phase != v.RUNNING:
            return {}
        pending = self.tracker.unschedulable()
        if pending:
            message = (f"{len(pending)} episode pod(s) cannot be scheduled: {pending[0].unschedulable}")[:1000]
            if not self._said_unschedulable:
                self._said_unschedulable = True
                self.emit("Warning", v.EVENT_UNSCHEDULABLE, message)
            return {"reason": v.EVENT_UNSCHEDULABLE, "message": message}
        self._said_unschedulable = False
        if self.last_status.get("reason") == v.EVENT_UNSCHEDULABLE:
            return {"reason": v.REASON_RUNNING, "message": self._running_message}
        return {}

    def _read_done(self, task: asyncio.Task) -> None:
        self._reads.discard(task)
        if not task.cancelled() and task.exception() is not None and self._read_error is None:
            self._read_error = task.exception()
            self.wake.set()

    async def _resync_pods(self) -> None:
        """After a restart: the batch's pods listed once from its own namespace. Events that came
        before this reconciler existed were kept by the registry only up to a bound (anyone can
        label pods with a batch's uid, and a flood of them must not push the batch's out)."""
        pods = await self.storage.list_pods(naming.child_namespace(self.ref, self.spec),
                                naming.label_selector(self.ref))
        for pod in pods:
            self.tracker.observe_pod(pod_facts(pod))

    def _job_gone_message(self) -> str:
        return (f"the Job {naming.job_name(self.ref)} (or its namespace) was deleted before every episode "
                "ended; the operator does not run episodes twice: recreate the batch")

    async def _poll_job(self) -> None:
        """Read the batch's Job. The first read after a restart learns its uid: the one the
        status recorded when the operator created it (a namesake made since is not it)."""
        tracker = self.tracker
        job = await self.storage.get("Job", naming.job_name(self.ref),
                               naming.child_namespace(self.ref, self.spec))
        if job is None:
            self._job_deleted = True
            return
        facts = job_facts(job)
        if tracker.job_uid is None:
            recorded = self.last_status.get("jobUID")
            if recorded and facts.uid != recorded or not recorded and not resources.owned_by(job, self.ref.uid):
                self._job_deleted = True
                return
            tracker.expect_job(facts.uid)
        if facts.uid != tracker.job_uid:
            self._job_deleted = True   # ours is gone: its name was taken since
            return
        tracker.observe_job(facts, time.time())

    def _report_foreign(self) -> None:
        """Pods that carry the batch's label but are not its episodes: ignored, and said once."""
        for facts in self.tracker.take_foreign():
            self.log.warning("Ignoring pod %s/%s: it carries this batch's label but was not made by its Job",
                             facts.namespace, facts.name)
            self.emit("Warning", v.EVENT_FOREIGN_POD,
                      f"pod {facts.namespace}/{facts.name} carries this batch's label but was not made by its Job "
                      f"{naming.job_name(self.ref)}: ignored"[:1000])

    async def _pods_not_created(self) -> str:
        """Why the Job controller created no pod, from its FailedCreate events when readable."""
        base = (f"no episode pod was created within {self.ctx.settings.pod_create_grace:g}s of the Job "
                f"{naming.job_name(self.ref)}")
        job = self.tracker.job
        try:
            events = await self.storage.events_of(naming.child_namespace(self.ref, self.spec), job.uid)
        except KubeError:
            return base
        failed = [e.get("message") or "" for e in events if e.get("reason") == "FailedCreate"]
        return f"{base}: {failed[-1]}"[:1000] if failed else base

    async def _read_and_judge(self, facts: PodFacts) -> None:
        job = self.tracker.job
        result = await self.judge.judge(facts, verified=self.spec.verifier is not None,
                                        batch_deadline_at=job.deadline_at if job else None, now=time.time())
        self.tracker.record(result, facts.uid)
        self.wake.set()

    # -- status and results ----------------------------------------------------------------
    def _origin(self) -> float | None:
        job = self.tracker.job if self.tracker else None
        return job.created if job else None

    def _job_complete_seconds(self) -> float | None:
        t = self.tracker
        if t and t.job and t.job.finished and t.job.created and t.job_finished_seen_at:
            return max(0.0, t.job_finished_seen_at - t.job.created)
        return self.last_status.get("jobCompleteSeconds")

    def _build_status(self, phase: str, reason: str | None, message: str | None, completion: float | None,
                      now: float) -> dict:
        tracker, spec = self.tracker, self.spec
        sandbox_ns = naming.child_namespace(self.ref, spec) \
            if spec and self._sandbox_created and not self._sandbox_removed else None
        return build_status(
            ref=self.ref, spec=spec, phase=phase, summary=tracker.summary(self._origin()) if tracker else None,
            running=tracker.running if tracker else 0, ready=tracker.ready if tracker else 0,
            sandbox_namespace=sandbox_ns, job_name=naming.job_name(self.ref) if spec else None,
            job_uid=(tracker.job_uid if tracker else None) or self.last_status.get("jobUID"),
            results_configmap=naming.results_configmap_name(self.ref),
            start_time=self.last_status.get("startTime") or iso_time(now),
            completion_time=iso_time(completion) if completion else self.last_status.get("completionTime"),
            job_complete_seconds=self._job_complete_seconds(),
            message=message if message is not None else self.last_status.get("message", ""),
            reason=reason if reason is not None else self.last_status.get("reason"),
            previous=self.last_status, now_iso=iso_time(now), raw_episodes=(self.body.get("spec") or {}).get("episodes"),
            results_digests=self.results.digests,
        )

    async def _patch_status(self, phase: str, *, reason: str | None = None, message: str | None = None,
                            force: bool = False, completion: float | None = None) -> None:
        now, tick = time.time(), time.monotonic()
        tracker = self.tracker
        self._acknowledge_generation()
        if self.results.digests != (self.last_status.get("resultsDigests") or {}):
            force = True   # a results write is adopted after a restart only once the status records it
        if not force and tracker is not None:
            cadence, elapsed = self.ctx.settings.status_cadence, tick - self._patched_at
            if phase != self.last_status.get("phase"):
                if elapsed < cadence.min_interval:
                    return
            elif not cadence.due(elapsed=elapsed, changed=tracker.version != self._patched_version,
                                 finished_since=len(tracker.results) - self._patched_finals,
                                 episodes=tracker.episodes):
                return
        # What this patch holds, taken before it is awaited: a change meanwhile makes the next one due.
        version, finals = (tracker.version, len(tracker.results)) if tracker else (-1, 0)
        new = self._build_status(phase, reason, message, completion, now)
        patch = status_patch(self.last_status, new)
        if patch:
            await self.storage.patch_batch_status(self.ref.namespace, self.ref.name, patch)
            crash_point(f"status:{phase}")
            self.last_status = new
        self._retry.succeeded()
        self._patched_at = tick
        self._patched_version, self._patched_finals = version, finals

    def _acknowledge_generation(self) -> None:
        """The status says it saw the object's newest generation: the only spec change the CRD
        admits, spec.stop, is read from the live object every round."""
        generation = (self.body.get("metadata") or {}).get("generation")
        if type(generation) is int and generation > self.ref.generation:
            self.ref = dataclasses.replace(self.ref, generation=generation)

    async def _write_results(self, final: bool = False) -> None:
        tracker = self.tracker
        if tracker is None or not self.results.unwritten(tracker, final):
            return
        if not final and not self.results.checkpoint_due(tracker, self.ctx.settings.results_cadence):
            return
        await self.results.write(tracker, self.spec, self._origin(),
                                 {"client_job_complete_seconds": self._job_complete_seconds(),
                                  "retried_episodes": tracker.retried, "final": final}, final=final)

    # -- endings ---------------------------------------------------------------------------
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
        if self.last_status.get("phase") in v.TERMINAL_PHASES:
            # Already finished (e.g. its cleanup or TTL deletion failed): keep the verdict.
            self.emit("Warning", reason, message)
            return
        await self._judge_finished_pods()
        if self.spec is not None:
            try:
                await self.storage.delete_owned("Job", naming.job_name(self.ref),
                                 naming.child_namespace(self.ref, self.spec), self.ref.uid,
                                 propagation="Foreground")
            except Exception as exc:  # noqa: BLE001 - best effort: the stall must still be reported
                self.log.warning("Could not stop the Job: %s", exc)
        if self.tracker is not None:
            episode_reason = v.EP_IMAGE_PULL if reason == v.STALL_IMAGE else v.EP_BATCH_STALLED
            self.tracker.give_up_missing(episode_reason, f"the batch stalled ({reason}): {message}"[:1000])
            try:
                await self._write_results(final=True)
            except Exception as exc:  # noqa: BLE001
                self.log.warning("Could not write the final results: %s", exc)
        attempt = 0
        while True:   # until recorded, or refused even bare (policy.keep_recording_stall)
            try:
                if attempt < policy.FULL_STALL_TRIES:
                    await self._patch_status(v.FAILED, reason=reason, message=message, force=True,
                                             completion=time.time())
                else:   # the full status may be what the API refuses: the bare verdict then
                    await self.storage.patch_batch_status(self.ref.namespace, self.ref.name,
                                     bare_failure(reason, message, self.ref.generation, iso_time(time.time())))
                break
            except Exception as exc:  # noqa: BLE001
                if not policy.keep_recording_stall(attempt, exc):
                    self.log.error("The API refused even the bare stall status (%s); the Event tells it", exc)
                    break
                self.log.warning("Could not record the stall (%s); trying again", exc)
                await asyncio.sleep(policy.BACKOFF[min(attempt, len(policy.BACKOFF) - 1)])
                attempt += 1
        self.emit("Warning", reason, message)
        self._batch_finished(v.FAILED, self.tracker.summary(self._origin()) if self.tracker else None)
        if self.spec is not None:
            try:
                await self._after_finish()
            except Exception as exc:  # noqa: BLE001
                self.log.warning("Cleanup after the stall failed: %s", exc)

    async def _judge_finished_pods(self) -> None:
        """Before a stalled batch stops its Job: the episodes that already ended are judged from
        their logs (for at most ``Settings.stall_read_grace``), not given up. Whatever is still open after
        that is lost with the stall's reason (give_up_missing)."""
        tracker = self.tracker
        if tracker is not None:
            for facts in tracker.take_reads():
                task = asyncio.create_task(self._read_and_judge(facts))
                self._reads.add(task)
                task.add_done_callback(self._read_done)
        if self._reads:
            await asyncio.wait(set(self._reads), timeout=self.ctx.settings.stall_read_grace)
        for task in self._reads:
            task.cancel()

    async def _await_job_end(self, timeout: float = 30.0) -> None:
        """Ready is declared as soon as every episode is final; the Job controller marks the Job
        finished a moment later. Wait for that (bounded) to record jobCompleteSeconds, before
        any cleanup deletes the Job."""
        tracker = self.tracker
        # a stalled batch's Job was deleted, a stopped one's suspended: neither will complete
        stopped = self.last_status.get("reason") in v.STALL_REASONS or self.last_status.get("phase") == v.STOPPED
        if tracker is None or stopped or self._job_complete_seconds() is not None:
            return
        deadline = time.monotonic() + timeout
        polled = time.monotonic()
        while not (tracker.job and tracker.job.finished) and time.monotonic() < deadline:
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
            if time.monotonic() - polled > 5:
                polled = time.monotonic()
                await self._poll_job()
        if tracker.job and tracker.job.finished:
            await self._write_results(final=True)
            await self._patch_status(self.last_status.get("phase", v.SUCCEEDED), force=True)
            # the batch's end was counted before its Job's; its duration is observed now
            self.ctx.metrics.job_completed(self.ref.namespace, self.ref.name, self._job_complete_seconds())

    async def _after_finish(self) -> None:
        """A late jobCompleteSeconds, the cleanup policy, and ttlSecondsAfterFinished."""
        try:
            spec = self.spec or parse_spec(self.body.get("spec") or {})
        except SpecError:
            return
        self.spec = spec
        await self._await_job_end()
        phase = self.last_status.get("phase")
        if not self._sandbox_removed and removes_sandbox(spec.cleanup_sandbox, phase):
            try:
                if await sandbox.remove(self.storage, self.ref, self.log, self.ctx.settings.namespace_delete_timeout):
                    self._sandbox_removed = True
                    await self._patch_status(phase, force=True)
            except KubeError as exc:
                if policy.is_transient(exc):
                    raise   # the error policy retries it
                # The verdict stands and the TTL below still runs (its finalizer tries again).
                self.emit("Warning", v.EVENT_CLEANUP_FAILED, f"removing the sandbox was refused: {exc}")
        ttl = spec.ttl_seconds_after_finished
        if ttl is not None:
            finished = parse_time(self.last_status.get("completionTime")) or time.time()
            delay = finished + ttl - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.log.info("ttlSecondsAfterFinished (%ss) passed: deleting the RolloutBatch", ttl)
            await self.storage.delete_batch(self.ref.namespace, self.ref.name, self.ref.uid)

    async def delete_sandbox(self, timeout: float) -> bool:
        """The finalizer's work: remove every child of the batch; needs no spec. True when gone."""
        for task in self._reads:
            task.cancel()
        return await sandbox.remove(self.storage, self.ref, self.log, timeout, finalizer=True)


