"""One batch from creation to its final status: provision, track, collect, finish, clean up.

A :class:`BatchReconciler` runs as the body of the batch's kopf daemon. Every step is safe to
repeat after a crash: children have deterministic names and are created-or-adopted, results
already written to the results ConfigMap are restored before any log is read, and the final
status is written only after the results ConfigMap holds every row (DESIGN section 5). Pod and
Job watch events reach the reconciler through :meth:`observe_pod` / :meth:`observe_job` and wake
its loop; the loop coalesces status patches to about one per second.

This module holds the orchestration; the rules live in ``core`` and the API calls in ``kube``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import manifests, naming
from rolloutbatch.core.admission import Stalled, check_quota_fits, runtime_overhead
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.model import BatchRef, BatchSpec, PodFacts, SpecError
from rolloutbatch.core.results import decode_results, results_document, results_from_document
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.status import build_status, status_patch
from rolloutbatch.core.tracker import BatchTracker, JobFacts, job_facts
from rolloutbatch.core.verdict import judge_episode, parse_time
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.client import Api
from rolloutbatch.kube.errors import KubeError, NotFound, NotOurs

TERMINAL_PHASES = ("Succeeded", "Failed")
RESULT_ROWS_PER_SECOND = 100  # checkpoint spacing: 1,000 rows -> every 10 s, 10,000 -> every 100 s
LOG_READ_ATTEMPTS = 3  # transient failures (apiserver restart, broken stream) are retried
Emit = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message) -> posts an Event


@dataclasses.dataclass
class Settings:
    """Operator-wide knobs (``rolloutbatch operator --help`` sets them)."""

    log_limit_bytes: int = 1 << 20          # per episode; beyond this the log is truncated
    log_tail_bytes: int = 4096               # kept in the results for failed episodes
    read_concurrency: int = 16               # log reads in flight across all batches
    status_interval: float = 1.0             # at most one status patch per batch per interval
    results_interval: float = 5.0            # at most one results ConfigMap write per interval
    job_poll_interval: float = 30.0          # safety net beside the Job watch
    collect_grace: float = 15.0              # after the Job ended, wait this long for stragglers
    image_pull_grace: float = 20.0           # an image the nodes cannot run stalls the batch after this
    namespace_delete_timeout: float = 120.0  # finalizer waits this long for the sandbox to vanish


@dataclasses.dataclass
class Context:
    """What every reconciler shares: the API client, metrics, settings, the read limiter."""

    api: Api
    metrics: Any  # rolloutbatch.metrics.Metrics (kept untyped: service does not import prometheus)
    settings: Settings
    read_slots: asyncio.Semaphore


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))




def batch_ref(body: Mapping) -> BatchRef:
    meta = body["metadata"]
    return BatchRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                    generation=int(meta.get("generation") or 1))


def owner_of_batch(ref: BatchRef) -> dict:
    return manifests.owner_reference(f"{GROUP}/{VERSION}", KIND, ref.name, ref.uid)


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
        self._early: list[tuple[str, PodFacts]] = []   # pod events before the spec was parsed
        self._early_job: JobFacts | None = None
        self.wake = asyncio.Event()
        self.last_status: dict = dict(body.get("status") or {})
        self._patched_version = -1
        self._patched_at = 0.0
        self._results_version = -1
        self._results_at = 0.0
        self._results_rv: str | None = None          # resourceVersion of our last results write
        self._reads: set[asyncio.Task] = set()
        self._waiting_since: dict[str, float] = {}
        self._started_metrics = False

    # -- feeding from watch handlers -------------------------------------------------------
    def observe_pod(self, facts: PodFacts, deleted: bool = False) -> None:
        tracker = self.tracker
        if tracker is None:
            self._early.append(("deleted" if deleted else "seen", facts))
            self.wake.set()
            return
        retried = tracker.retried
        if deleted:
            tracker.pod_deleted(facts)
        else:
            tracker.observe_pod(facts)
        for _ in range(tracker.retried - retried):
            self.ctx.metrics.episode_retried(self.ref.namespace, self.ref.name)
        self.wake.set()

    def observe_job(self, job: JobFacts) -> None:
        if self.tracker is None:
            self._early_job = job
        else:
            self.tracker.observe_job(job, time.time())
        self.wake.set()

    # -- the life of a batch ---------------------------------------------------------------
    async def run(self) -> None:
        phase = self.last_status.get("phase")
        if phase in TERMINAL_PHASES:
            await self._after_finish()
            return
        if self.tracker is None:
            try:
                self.spec = parse_spec(self.body.get("spec") or {})
            except SpecError as exc:
                await self._stall("InvalidSpec", str(exc))
                return
            tracker = BatchTracker(self.spec.episodes, self.spec.infrastructure_retries)
            await self._restore_results(tracker)
            self.tracker = tracker  # only now: a retried run() after an API error keeps it
        for kind, facts in self._early:
            self.tracker.pod_deleted(facts) if kind == "deleted" else self.tracker.observe_pod(facts)
        self._early.clear()
        if self._early_job:
            self.tracker.observe_job(self._early_job, time.time())
        if not self._started_metrics:
            self.ctx.metrics.batch_started(self.ref.namespace, self.ref.name)
            self._started_metrics = True
        try:
            await self._provision()
        except Stalled as exc:
            await self._stall(exc.reason, exc.message)
            return
        try:
            await self._track()
        except Stalled as exc:
            await self._stall(exc.reason, exc.message, stop_job=True)
            return
        await self._finish()
        await self._after_finish()

    async def _call(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, self.ctx.api, *args, **kwargs)

    async def _create(self, obj: dict) -> dict:
        live = await self._call(resources.create_or_adopt, obj, self.ref.uid)
        crash_point(f"provision:{obj['kind']}")
        return live

    async def _restore_results(self, tracker: BatchTracker) -> None:
        """Results persisted by an earlier run of the operator are final: adopt them."""
        cm = await self._call(resources.get_or_none, "ConfigMap", naming.results_configmap_name(self.ref),
                              self.ref.namespace)
        if not cm or not resources.owned_by(cm, self.ref.uid):
            return
        document = decode_results(cm)
        if document:
            restored = results_from_document(document)
            tracker.restore(restored, retried=int(document.get("retried_episodes") or 0))
            self._results_version = tracker.version
            self.log.info("Restored %d episode results from the results ConfigMap", len(restored))

    async def _provision(self) -> None:
        spec, ref = self.spec, self.ref
        assert spec is not None
        if not self.last_status.get("phase") or self.last_status.get("phase") == "Pending":
            await self._patch_status("Provisioning", reason="Provisioning", message="Creating the sandbox",
                                     force=True)
        overhead: dict | None = None
        if spec.runtime_class_name:
            rc = await self._call(resources.runtime_class, spec.runtime_class_name)
            if rc is None:
                raise Stalled("RuntimeClassNotFound",
                              f"RuntimeClass {spec.runtime_class_name!r} does not exist in the cluster")
            overhead = runtime_overhead(rc)
        namespace = naming.child_namespace(ref, spec)
        owner = owner_of_batch(ref)
        try:
            if spec.isolation_namespace == "Dedicated":
                live_ns = await self._create(manifests.namespace(ref, spec))
                if live_ns.get("metadata", {}).get("deletionTimestamp"):
                    raise Stalled("NamespaceTerminating", f"sandbox namespace {namespace} is being deleted")
                await self._create(manifests.network_policy(ref, spec))
                await self._create(manifests.resource_quota(ref, spec, overhead))
                cm_owner = None  # the namespace is the unit of cleanup
            else:
                quotas = await self._call(resources.resource_quotas, namespace)
                problem = check_quota_fits(quotas, spec, overhead)
                if problem:
                    raise Stalled("QuotaExceeded", problem)
                await self._create(manifests.network_policy(ref, spec, owner))
                cm_owner = owner
            await self._create(manifests.task_configmap(ref, spec, cm_owner))
            inputs = manifests.inputs_configmap(ref, spec, cm_owner)
            if inputs is not None:
                await self._create(inputs)
            job_owner = owner if spec.isolation_namespace == "Shared" else None
            job = await self._create(manifests.job(ref, spec, job_owner))
        except NotOurs as exc:
            raise Stalled("NamespaceConflict" if "Namespace" in str(exc) else "NameConflict", str(exc)) from None
        except KubeError as exc:
            if exc.status in (403, 422):
                raise Stalled("ProvisioningRefused", str(exc)) from None
            raise
        self.tracker.observe_job(job_facts(job), time.time())
        if self.last_status.get("phase") in (None, "Pending", "Provisioning"):
            self.emit("Normal", "Provisioned", f"Sandbox {namespace} and Job {naming.job_name(ref)} are ready")
        await self._patch_status("Running", reason="EpisodesRunning", message="Episodes are running", force=True)

    async def _track(self) -> None:
        """Loop until every episode is final; read logs, flush status and results as we go."""
        tracker, settings = self.tracker, self.ctx.settings
        assert tracker is not None
        last_job_poll = time.monotonic()
        while True:
            for facts in tracker.take_reads():
                task = asyncio.create_task(self._read_and_judge(facts))
                self._reads.add(task)
                task.add_done_callback(self._reads.discard)
            self._check_waiting()
            if tracker.complete and not tracker.busy:
                return
            if tracker.job and tracker.job.finished and not tracker.busy:
                seen = tracker.job_finished_seen_at or time.time()
                if time.time() - seen >= settings.collect_grace:
                    missing = tracker.give_up_missing(
                        "LogUnavailable" if not tracker.job.failed else (tracker.job.reason or "JobFailed"),
                        "the Job ended before this episode reported a result"
                        + (f": {tracker.job.message}" if tracker.job.message else ""))
                    if missing:
                        self.log.warning("Episodes %s ended without a result", missing[:20])
                    return
            if time.monotonic() - last_job_poll > settings.job_poll_interval:
                last_job_poll = time.monotonic()
                await self._poll_job()
            phase = "Collecting" if tracker.job and tracker.job.finished else "Running"
            self.ctx.metrics.set_running(self.ref.namespace, self.ref.name, tracker.running)
            await self._patch_status(phase)
            await self._write_results()
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=settings.status_interval)
            except asyncio.TimeoutError:
                pass
            # Coalesce: a burst of pod events is handled as one round.
            await asyncio.sleep(0.05)

    async def _poll_job(self) -> None:
        job = await self._call(resources.get_or_none, "Job", naming.job_name(self.ref),
                               naming.child_namespace(self.ref, self.spec))
        if job is not None and resources.owned_by(job, self.ref.uid):
            self.tracker.observe_job(job_facts(job), time.time())

    def _check_waiting(self) -> None:
        """A pod the nodes cannot start (e.g. an image they cannot run) stalls the batch."""
        now = time.monotonic()
        waiting = {f.uid: f for f in self.tracker.waiting()
                   if f.waiting_reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")}
        for uid in list(self._waiting_since):
            if uid not in waiting:
                del self._waiting_since[uid]
        for uid, facts in waiting.items():
            since = self._waiting_since.setdefault(uid, now)
            if now - since >= self.ctx.settings.image_pull_grace:
                raise Stalled("ImagePullFailed",
                              f"pod {facts.name} cannot start: {facts.waiting_reason}: {facts.waiting_message or ''}".strip())

    async def _read_and_judge(self, facts: PodFacts) -> None:
        settings = self.ctx.settings
        async with self.ctx.read_slots:
            started = time.monotonic()
            log_error = None
            data, truncated = b"", False
            for attempt in range(LOG_READ_ATTEMPTS):
                try:
                    data, truncated = await self._call(resources.read_log, facts.namespace, facts.name,
                                                       naming.CONTAINER_NAME, settings.log_limit_bytes)
                    log_error = None
                    break
                except NotFound:
                    log_error = "the pod was deleted before its log was read"
                    break
                except Exception as exc:  # noqa: BLE001 - a stream can break in many ways; retry, then record
                    log_error = f"log read failed: {exc}"
                    await asyncio.sleep(0.5 * 2 ** attempt)
            self.ctx.metrics.log_read(time.monotonic() - started, len(data))
        parsed = None if log_error else parse_log(data, truncated=truncated)
        tail = data[-settings.log_tail_bytes:].decode("utf-8", "replace") if data else None
        crash_point("track:log-read")
        result = judge_episode(facts, parsed, log_error=log_error, log_tail=tail)
        if result.outcome == "succeeded":
            result = dataclasses.replace(result, log_tail=None)
        self.tracker.record(result, facts.uid)
        startup = result.pod_to_ready_seconds
        duration = (result.reward_at - result.ready_at) if result.reward_at and result.ready_at else None
        self.ctx.metrics.episode_finished(self.ref.namespace, self.ref.name, result.outcome, startup, duration,
                                          result.reward if result.outcome == "succeeded" else None)
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

    async def _patch_status(self, phase: str, *, reason: str | None = None, message: str | None = None,
                            force: bool = False, completion: float | None = None) -> None:
        now = time.time()
        tracker = self.tracker
        if not force and tracker is not None:
            if tracker.version == self._patched_version and phase == self.last_status.get("phase"):
                return
            if now - self._patched_at < self.ctx.settings.status_interval:
                return
        summary = tracker.summary(self._origin()) if tracker else None
        spec = self.spec
        new = build_status(
            ref=self.ref, spec=spec, phase=phase, summary=summary,
            running=tracker.running if tracker else 0, ready=tracker.ready if tracker else 0,
            sandbox_namespace=naming.child_namespace(self.ref, spec) if spec else None,
            job_name=naming.job_name(self.ref) if spec else None,
            results_configmap=naming.results_configmap_name(self.ref),
            start_time=self.last_status.get("startTime") or _iso(now),
            completion_time=_iso(completion) if completion else self.last_status.get("completionTime"),
            job_complete_seconds=self._job_complete_seconds(),
            message=message if message is not None else self.last_status.get("message", ""),
            reason=reason if reason is not None else self.last_status.get("reason"),
            previous=self.last_status, now_iso=_iso(now),
        )
        patch = status_patch(self.last_status, new)
        if patch:
            await self._call(resources.patch_batch_status, self.ref.namespace, self.ref.name, patch)
            crash_point(f"status:{phase}")
            self.last_status = new
        self._patched_at = now
        self._patched_version = tracker.version if tracker else -1

    async def _write_results(self, final: bool = False) -> None:
        tracker = self.tracker
        if tracker is None or tracker.version == self._results_version:
            return
        # Each write re-encodes every row: space writes out as the document grows, so a big
        # batch costs linear, not quadratic, CPU. Rows not yet written are never lost: their pods
        # (and logs) stay until the batch finishes.
        interval = max(self.ctx.settings.results_interval, len(tracker.results) / RESULT_ROWS_PER_SECOND)
        if not final and time.time() - self._results_at < interval:
            return
        if not tracker.results and not final:
            return
        version = tracker.version
        summary = tracker.summary(self._origin())
        document = results_document(
            ref=self.ref, spec=self.spec, summary=summary,
            results=sorted(tracker.results.values(), key=lambda r: r.index), origin=self._origin(),
            extra={"client_job_complete_seconds": self._job_complete_seconds(),
                   "retried_episodes": tracker.retried, "final": final},
        )
        cm = manifests.results_configmap(self.ref, document, owner_of_batch(self.ref))
        live = await self._call(resources.put_configmap, cm, self.ref.uid, self._results_rv)
        self._results_rv = (live.get("metadata") or {}).get("resourceVersion")
        crash_point("results:final" if final else "results:partial")
        self._results_version, self._results_at = version, time.time()

    # -- endings ---------------------------------------------------------------------------
    async def _finish(self) -> None:
        tracker, spec = self.tracker, self.spec
        summary = tracker.summary(self._origin())
        ok = summary.succeeded >= spec.min_successful_episodes
        # Results first: a crash between the two writes must never leave a final status
        # whose rows are missing (DESIGN section 5).
        await self._write_results(final=True)
        if ok:
            phase, reason = "Succeeded", "EpisodesSucceeded"
            message = f"{summary.succeeded}/{spec.episodes} episodes succeeded, reward sum {summary.reward_sum:g}"
        else:
            phase, reason = "Failed", "TooFewSuccessfulEpisodes"
            message = (f"{summary.succeeded}/{spec.episodes} episodes succeeded, "
                       f"{spec.min_successful_episodes} required; see {naming.results_configmap_name(self.ref)}")
        await self._patch_status(phase, reason=reason, message=message, force=True, completion=time.time())
        self.emit("Normal" if ok else "Warning", reason, message)
        self.ctx.metrics.batch_finished(self.ref.namespace, self.ref.name, phase.lower(),
                                        summary.batch_to_all_ready_seconds, summary.batch_to_all_rewards_seconds,
                                        self._job_complete_seconds())
        self.ctx.metrics.set_running(self.ref.namespace, self.ref.name, 0)

    async def _stall(self, reason: str, message: str, *, stop_job: bool = False) -> None:
        """The cluster cannot serve this spec: say so once, touch nothing we do not own."""
        self.log.warning("Stalled: %s: %s", reason, message)
        if stop_job and self.spec is not None:
            try:
                await self._call(resources.delete_owned, "Job", naming.job_name(self.ref),
                                 naming.child_namespace(self.ref, self.spec), self.ref.uid)
            except KubeError as exc:
                self.log.warning("Could not stop the Job: %s", exc)
            if self.tracker is not None:
                self.tracker.give_up_missing(reason, message)
                await self._write_results(final=True)
        await self._patch_status("Failed", reason=reason, message=message, force=True, completion=time.time())
        self.emit("Warning", reason, message)
        self.ctx.metrics.batch_finished(self.ref.namespace, self.ref.name, "failed", None, None, None)

    async def _await_job_end(self, timeout: float = 30.0) -> None:
        """Ready is declared as soon as every episode is final; the Job controller marks the Job
        finished a moment later. Wait for that (bounded) to record jobCompleteSeconds, before
        any cleanup deletes the Job."""
        tracker = self.tracker
        if tracker is None or self._job_complete_seconds() is not None:
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
            await self._patch_status(self.last_status.get("phase", "Succeeded"), force=True)

    async def _after_finish(self) -> None:
        """A late jobCompleteSeconds, the cleanup policy, and ttlSecondsAfterFinished."""
        try:
            spec = self.spec or parse_spec(self.body.get("spec") or {})
        except SpecError:
            return
        self.spec = spec
        await self._await_job_end()
        phase = self.last_status.get("phase")
        policy = spec.cleanup_sandbox
        if policy == "Always" or (policy == "DeleteOnSuccess" and phase == "Succeeded"):
            await self.delete_sandbox(wait=False)
        ttl = spec.ttl_seconds_after_finished
        if ttl is not None:
            finished = parse_time(self.last_status.get("completionTime")) or time.time()
            delay = finished + ttl - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.log.info("ttlSecondsAfterFinished (%ss) passed: deleting the RolloutBatch", ttl)
            await self._call(resources.delete_batch, self.ref.namespace, self.ref.name, self.ref.uid)

    async def delete_sandbox(self, *, wait: bool) -> bool:
        """Delete the Job (foreground) and, for Dedicated isolation, the sandbox namespace.

        Returns True when nothing of the sandbox is left.
        """
        try:
            return await self._delete_sandbox(wait=wait)
        except NotOurs as exc:
            # Never ours (e.g. a namespace squatting the sandbox's name): nothing to delete.
            self.log.warning("Leaving alone what is not ours: %s", exc)
            return True

    async def _delete_sandbox(self, *, wait: bool) -> bool:
        spec = self.spec or parse_spec(self.body.get("spec") or {})
        ns = naming.child_namespace(self.ref, spec)
        uid = self.ref.uid
        if spec.isolation_namespace == "Dedicated":
            gone = not await self._call(resources.delete_owned, "Namespace", ns, None, uid,
                                        propagation="Foreground")
            if wait:  # the finalizer's path, not the after-finish cleanup policy
                crash_point("cleanup:namespace")
        else:
            gone = not await self._call(resources.delete_owned, "Job", naming.job_name(self.ref), ns, uid,
                                        propagation="Foreground")
            for name in (naming.task_configmap_name(self.ref), naming.inputs_configmap_name(self.ref)):
                await self._call(resources.delete_owned, "ConfigMap", name, ns, uid)
        if gone or not wait:
            return gone
        kind, name, where = (("Namespace", ns, None) if spec.isolation_namespace == "Dedicated"
                             else ("Job", naming.job_name(self.ref), ns))
        return await self._call(resources.get_or_none, kind, name, where) is None
