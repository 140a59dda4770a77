"""A batch's sandbox from creation to removal: provision or adopt it, watch its Job, remove it.

The sandbox is what a batch creates (``core.children``: namespace, policies, task ConfigMaps, the
Job). This class holds what is known of it (made, removed, its Job gone) and does the API work
on it; when to do what is the reconciler's, by ``core.lifecycle``. The facts it keeps survive a
restart through the batch's status: ``sandboxNamespace`` is written once creation began, and
``jobUID`` names the one Job that is the batch's (a namesake made since is not it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled, fits_an_empty_node
from rolloutbatch.core.children import adoptable, removes_sandbox
from rolloutbatch.core.k8s_rules import admitted, format_quantity, pod_amounts
from rolloutbatch.core.model import BatchRef, BatchSpec
from rolloutbatch.core.job_facts import JobFacts, job_facts
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.faults import crash_point
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import egress_checks, policy, provisioning, sandbox
from rolloutbatch.service.context import Emit, Settings, owner_of_batch

MAX_DELETED_JOBS = 100   # uids of deleted namesakes kept: anyone may create and delete Jobs of its name


def pooled_namespace(ref: BatchRef, spec: BatchSpec | None) -> str | None:
    """A pooled batch's Job's namespace (its pool's), else None."""
    return naming.pool_namespace(ref.namespace, spec.pool_name) if spec is not None and spec.pool_name else None


class SandboxLifecycle:
    """The sandbox of one batch (see the module docstring)."""

    def __init__(self, storage: Storage, ref: BatchRef, settings: Settings, recorded: Mapping, emit: Emit,
                 log: logging.Logger) -> None:
        self.storage, self.ref, self.settings, self.emit, self.log = storage, ref, settings, emit, log
        # Named in the status only once creating it began (a batch refused first never had one).
        self.created = bool(recorded.get("sandboxNamespace"))
        # A terminal batch without sandboxNamespace had its sandbox removed by the cleanup policy.
        self.removed = recorded.get("phase") in v.TERMINAL_PHASES and not recorded.get("sandboxNamespace")
        self.recorded_job_uid: str | None = recorded.get("jobUID") or None
        self.job_deleted = False                  # by someone else, mid-batch (or its name taken since)
        self._deleted_job_uids: set[str] = set()  # Jobs named ours whose deletion was seen
        self.overhead: dict | None = None         # the RuntimeClass's pod overhead
        # The pod of the Job it took (a pooled batch's is its pool's): what the room check asks for.
        self.pod: Mapping | None = None
        self.provisioned_at = time.monotonic()

    # -- what is known of it ---------------------------------------------------------------
    def namespace(self, spec: BatchSpec | None) -> str | None:
        """The sandbox namespace while it exists (what the status names)."""
        return naming.child_namespace(self.ref, spec) if spec and self.created and not self.removed else None

    def job_deleted_event(self, job: JobFacts) -> None:
        """A watch saw a Job of the batch's name deleted: the batch's own only if it is its Job."""
        if job.name == naming.job_name(self.ref) and len(self._deleted_job_uids) < MAX_DELETED_JOBS:
            self._deleted_job_uids.add(job.uid)

    def job_gone(self, tracker: BatchTracker) -> bool:
        return self.job_deleted or tracker.job_uid in self._deleted_job_uids

    def job_gone_message(self) -> str:
        return (f"the Job {naming.job_name(self.ref)} (or its namespace) was deleted before every episode "
                "ended; the operator does not run episodes twice: recreate the batch")

    # -- making it -------------------------------------------------------------------------
    async def provision(self, spec: BatchSpec, tracker: BatchTracker) -> list[str]:
        """Check, then create or adopt every child; the tracker learns its Job. Returns the
        declared egress peers that select no pod (a warning, never a failure)."""
        owner = owner_of_batch(self.ref)
        dns = self.settings.dns_cidrs
        spec, cluster_queue = await provisioning.resolve_queue(self.storage, self.ref, spec, scope=self.settings.scope,
                                                               logger=self.log)
        spec, self.overhead = await provisioning.check(self.storage, self.ref, spec, owner, dns,
                                                 service_cidrs=self.settings.service_cidrs, scope=self.settings.scope,
                                                 logger=self.log)
        empty = await egress_checks.empty_peers(self.storage, self.ref, spec, self.log) if spec.egress else []
        self.created = True
        shared = spec.isolation_namespace == v.ISOLATION_SHARED

        async def create(obj: dict) -> dict:
            live = await self.storage.create_or_adopt(
                obj, self.ref.uid,
                lambda existing, desired: adoptable(existing, desired, shared=shared, job_uid=self.recorded_job_uid))
            crash_point(f"provision:{obj['kind']}")
            return live

        self._took_job(await provisioning.create(self.storage, create, self.ref, spec, owner, self.overhead,
                                                 dns, cluster_queue), tracker)
        return empty

    async def provision_pooled(self, make_job: Callable[[], Awaitable[dict]], tracker: BatchTracker) -> None:
        """spec.poolRef: the pool's claims and the Job (service.pool_claims) instead of a sandbox."""
        self.took_pooled_job(await make_job(), tracker)

    def took_pooled_job(self, job: dict, tracker: BatchTracker) -> None:
        """A pooled batch's Job, made now (or adopted): the tracker learns it, and a poll that
        found none before no longer counts as its deletion."""
        self.created = True
        self.job_deleted = False
        self._took_job(job, tracker)

    def _took_job(self, job: Mapping, tracker: BatchTracker) -> None:
        facts = job_facts(job)
        if self.recorded_job_uid and facts.uid != self.recorded_job_uid:
            # Ours was created (the status names it) and is gone; a namesake is not it.
            raise Stalled(v.STALL_SANDBOX_DELETED, self.job_gone_message())
        tracker.expect_job(facts.uid)
        tracker.observe_job(facts, time.time())
        self._took_pod(job)
        self.provisioned_at = time.monotonic()

    def _took_pod(self, job: Mapping) -> None:
        pod = ((job.get("spec") or {}).get("template") or {}).get("spec")
        if isinstance(pod, Mapping):
            self.pod = pod

    async def adopt(self, spec: BatchSpec, tracker: BatchTracker) -> None:
        """Provisioned by an earlier run: its Job and pods, read once; never recreated. A Job gone
        stalls the batch only while an episode is open (core.lifecycle.next_step): every row
        restored final (a crash after the final results write, a finished batch's phase edited
        back), the batch ends with its rows."""
        self.created = True
        await self.poll_job(spec, tracker)
        if not self.job_deleted:
            await self.resync_pods(spec, tracker)
        elif not tracker.complete:
            raise Stalled(v.STALL_SANDBOX_DELETED, self.job_gone_message())
        self.provisioned_at = time.monotonic()

    async def poll_job(self, spec: BatchSpec, tracker: BatchTracker) -> None:
        """Read the batch's Job. The first read after a restart learns its uid: the one the
        status recorded when the operator created it (a namesake made since is not it)."""
        job = await self.storage.get("Job", naming.job_name(self.ref), naming.child_namespace(self.ref, spec))
        if job is None:
            self.job_deleted = True
            return
        facts = job_facts(job)
        if tracker.job_uid is None:
            recorded = self.recorded_job_uid
            if recorded and facts.uid != recorded or not recorded and not resources.owned_by(job, self.ref.uid):
                self.job_deleted = True
                return
            tracker.expect_job(facts.uid)
        if facts.uid != tracker.job_uid:
            self.job_deleted = True   # ours is gone: its name was taken since
            return
        tracker.observe_job(facts, time.time())
        self._took_pod(job)

    async def resync_pods(self, spec: BatchSpec, tracker: BatchTracker) -> None:
        """After a restart: the batch's pods listed once from its own namespace. Events that came
        before the reconciler existed were kept by the registry only up to a bound (anyone can
        label pods with a batch's uid, and a flood of them must not push the batch's out). The
        watch goes on meanwhile: a pod it brought during the list is its, not the list's."""
        mark = tracker.listing_mark()
        for pod in await self.storage.list_pods(naming.child_namespace(self.ref, spec), naming.label_selector(self.ref)):
            tracker.observe_listed(pod_facts(pod), mark)

    # -- why it is stuck ---------------------------------------------------------------------
    async def pods_not_created_message(self, spec: BatchSpec, job: JobFacts) -> str:
        """Why the Job controller created no pod, from its FailedCreate events when readable."""
        base = (f"no episode pod was created within {self.settings.pod_create_grace:g}s of the Job "
                f"{naming.job_name(self.ref)}")
        try:
            events = await self.storage.events_of(naming.child_namespace(self.ref, spec), job.uid)
        except KubeError:
            return base
        failed = [e.get("message") or "" for e in events if e.get("reason") == "FailedCreate"]
        return f"{base}: {failed[-1]}"[:1000] if failed else base

    def _requests(self) -> dict | None:
        """What the scheduler reserves for one pod of the batch's Job: its own template, not the
        batch's spec (a pooled batch's pods are its pool's: agent and verifier side by side)."""
        return pod_amounts(admitted(self.pod, self.overhead))["requests"] if self.pod is not None else None

    async def never_fits(self, spec: BatchSpec) -> bool:
        """No node could hold one episode pod even empty. Unknown (nodes unreadable, the Job not
        read yet): False, since a batch must not be ended on a guess; a busy cluster only delays it."""
        requests = self._requests()
        if requests is None:
            return False
        try:
            allocatables = await self.storage.node_allocatables()
        except KubeError as exc:
            self.log.warning("Cannot read the nodes' allocatable resources (%s): waiting for room", exc)
            return False
        return bool(allocatables) and not fits_an_empty_node(requests, allocatables)

    def requests_text(self, spec: BatchSpec) -> str:
        requests = self._requests() or {}
        return ", ".join(f"{name} {format_quantity(amount)}" for name, amount in sorted(requests.items())) or "none"

    # -- removing it -------------------------------------------------------------------------
    async def remove_after_finish(self, spec: BatchSpec, phase: str | None) -> bool:
        """The cleanup policy, once the batch ended. True when this call removed the sandbox."""
        if self.removed or not removes_sandbox(spec.cleanup_sandbox, phase):
            return False
        try:
            if await sandbox.remove(self.storage, self.ref, self.log, self.settings.namespace_delete_timeout,
                                    scope=self.settings.scope, pool_namespace=pooled_namespace(self.ref, spec)):
                self.removed = True
                return True
        except KubeError as exc:
            if policy.is_transient(exc):
                raise   # the error policy retries it
            # The verdict stands and the TTL still runs (the finalizer tries again).
            self.emit("Warning", v.EVENT_CLEANUP_FAILED, f"removing the sandbox was refused: {exc}")
        return False

    async def end_unadopted_claims(self, spec: BatchSpec) -> None:
        """A pooled batch that ends (stalled, or stopped) with warm pods it claimed that no Job
        adopted (its Job refused, or never made: the operator died between the claims and the
        Job): they were handed their episodes with their claims, and nothing would judge or end
        them before their deadlines. Evicted, best effort (the finalizer tries again)."""
        namespace = pooled_namespace(self.ref, spec)
        if namespace is None or not self.settings.scope.reaches(namespace):
            return
        try:
            await sandbox.evict_unowned_claims(self.storage, self.ref, namespace, self.log)
        except KubeError as exc:
            self.log.warning("Could not end the claimed pods no Job adopted: %s", exc)

    async def stop_job(self, spec: BatchSpec) -> None:
        """A stalled batch's Job, deleted with its pods (foreground), best effort. Not looked for
        where a namespaced operator never makes one (core.scope: a refused Dedicated batch)."""
        namespace = naming.child_namespace(self.ref, spec)
        if not self.settings.scope.reaches(namespace):
            return
        try:
            await self.storage.delete_owned("Job", naming.job_name(self.ref), namespace,
                                            self.ref.uid, propagation="Foreground")
        except Exception as exc:  # noqa: BLE001 - best effort: the stall must still be reported
            self.log.warning("Could not stop the Job: %s", exc)

