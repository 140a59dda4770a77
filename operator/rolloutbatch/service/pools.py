"""A RolloutPool from creation to deletion: its namespace, its warm pods, its status.

One :class:`PoolReconciler` runs as the body of the pool's kopf daemon. Each round reads the
pool's namespace (the pod watch's view of it, kube.pool_pods; a list while that view is not
whole), sorts its unclaimed pods (``core.pool_census.census``), deletes the dead, stale and surplus
ones, creates what is missing up to ``spec.size`` and writes the status when it changed. The
rounds are paced: a short one while the pool fills, a long one (``FULL_PERIOD``) when it is full.
A claim does not wake it, and a round creates no pod while the episodes the pool gave out start
(core.pool_census.refill_hold: until 3 s after the newest claim or hand-over, and while a claimed
pod waits for its hand-over; 20 s at most): on this 2-core machine a refill started at once took
the CPU from the episodes just handed over (20 episodes from a full pool: batch -> all ready
5.3 s with an immediate refill, 2.3 s when it waited for the next round; bench/pools.py). The spec
is read from the daemon's live body each round, so a ``kubectl scale`` takes effect without a
restart.

A template that cannot run (an image that cannot be pulled, a missing RuntimeClass, a prepare that
fails) is not churned: the pool says ``Stalled`` with the reason, deletes the broken pods, and
tries again only after ``STUCK_BACKOFF`` or when the spec changes (or, stalled on a missing or
refused class, as soon as the class is there). A creation refused transiently (429 throttling, a
5xx, a generated name drawn twice: service.policy.is_transient) is no fault of the template's: the
next round makes the pod. Transient errors without a break for ``api_give_up`` (the batches'
``Settings.transient_give_up``) say ``Stalled`` ``ApiUnavailable`` until a round goes through, as
a batch's do: nothing is retried for ever without a visible state.

Deletion (:meth:`delete`): the warm pods go at once; the namespace waits while a batch's Job
or a pod it claimed (its labels written or not yet: core.pool_children.claimed_by) still runs in it, and
the pool's message says so. A namespace that is another pool's (core.pool_children.owned_by_pool) is
left to its owner: nothing in it is this pool's, and the deletion ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping

from rolloutbatch.core import naming, pool_census, pool_children, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import check_priority_class, check_quota_fits, runtime_overhead
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.scope import POOLS_REFUSED_MESSAGE
from rolloutbatch.kube.errors import Forbidden, KubeError, NotFound, NotOurs
from rolloutbatch.kube.pool_pods import PoolPods
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service import policy
from rolloutbatch.service.context import Emit, Settings, iso_time
from rolloutbatch.service.warm_channels import WarmChannels

FILLING_PERIOD = 0.5       # a round while pods start (seconds), at least
FULL_PERIOD = 5.0          # a round when the pool is full: a claim's refill starts within this, after the hold
# A round reads the pool's namespace whole (and lists it while the watch's view is not whole):
# while pods start, one more second between rounds per this many pods, so a large pool's fill does
# not read every pod twice a second (a pool of 200 filling and listing: 28 ms of CPU per pod,
# bench/README.md).
PODS_PER_FILLING_SECOND = 80
TRANSIENT_RETRY = 2.0      # the next round after a transient API error (seconds)
STUCK_BACKOFF = 60.0       # a stuck template is tried again after this long, or at once when it changes
MAX_CREATES_PER_ROUND = 50  # pod creations in flight at once


def _namespace_gone(refused: KubeError) -> bool:
    """A pod refused because the pool's namespace is gone (404) or being deleted (403, "because it
    is being terminated"): made again with its children next round, not a template that cannot run."""
    return isinstance(refused, NotFound) or (isinstance(refused, Forbidden) and "being terminated" in str(refused))


def filling_period(pods: int) -> float:
    """Seconds to the next round while the pool's pods start, ``pods`` in its namespace (as the
    round read them): FILLING_PERIOD, longer as they grow, never past FULL_PERIOD."""
    return min(FULL_PERIOD, max(FILLING_PERIOD, pods / PODS_PER_FILLING_SECOND))


class PoolReconciler:
    """Drives one RolloutPool; ``body`` is kopf's live view of it."""

    def __init__(self, storage: PoolStorage, body: Mapping, emit: Emit, logger: logging.Logger,
                 clusterwide: bool = True, channels: WarmChannels | None = None, pods: PoolPods | None = None,
                 api_give_up: float = Settings.transient_give_up) -> None:
        self.clusterwide = clusterwide
        self.api_give_up = api_give_up   # transient errors this long without a break: ApiUnavailable
        self._api_failing_since: float | None = None   # the first of the transient errors since a round went through
        self.channels = channels   # attaches opened to the warm pods ahead of their claims
        self.pods = pods           # the pod watch's view of the pool namespaces (None: each round lists)
        self.storage = storage
        self.body = body
        self.ref = pool_spec.pool_ref(body)
        self.emit = emit
        self.log = logger
        self._last_status: dict | None = None
        # A stuck template: (its digest, since, (pod, reason, message)); kept while it is waited out
        self._stuck: tuple[str, float, tuple[str, str, str]] | None = None
        # its pod is kept (unplaced, not started yet), not replaced: the stall ends once a round
        # no longer finds it (placed, started, or gone), without the back-off
        self._stuck_kept = False
        self._held_at_deletion = 0   # the pods batches hold, as the deletion last listed them
        self._children_for: str | None = None    # the task ConfigMap the children match
        # no pod nor running Job made before naming.LABEL_NETWORK is left (_label_pods_made_before)
        self._labels_carried = False
        self._network_before: tuple[str, dict | None] | None = None   # (network, unlabelled policy): _label_pods_made_before
        self._short_since: float | None = None   # when a round first found the pool short of pods
        # the task ConfigMap the last collection found alone (no older one to wait out): no list
        # of them again until the task changes (a fill's rounds listed them twice a second)
        self._collected_for: str | None = None

    @property
    def namespace(self) -> str:
        return naming.pool_namespace(self.ref.namespace, self.ref.name)

    def _generation(self) -> int:
        return int((self.body.get("metadata") or {}).get("generation") or 1)

    async def run(self) -> None:
        """Rounds until cancelled (the pool's deletion). A transient API error is logged and
        retried; anything else (an invalid spec, a refused object, a name taken) is said in the
        status (Stalled, with the reason) and tried again each round: the spec may be fixed."""
        try:
            await self._rounds()
        finally:
            if self.channels is not None:
                await self.channels.close_namespace(self.namespace)

    async def _rounds(self) -> None:
        while True:
            period = FULL_PERIOD
            try:
                period = await self.round()
            except asyncio.CancelledError:
                raise
            except SpecError as exc:
                await self._say_stalled(v.PoolReason.INVALID_SPEC, f"invalid spec: {exc}")
            except NotOurs as exc:
                await self._say_stalled(v.PoolReason.REFUSED, str(exc))
            except KubeError as exc:
                self._children_for = None   # its namespace may be gone: made again next round
                if policy.is_transient(exc):
                    self.log.warning("Pool round failed (%s); retrying", exc)
                    period = TRANSIENT_RETRY
                    lasting = self._api_failed(exc, time.time())
                    if lasting is not None:
                        try:
                            await self._say_stalled(v.PoolReason.API_UNAVAILABLE, lasting)
                        except KubeError as unsaid:   # the API is down: the log says it meanwhile
                            self.log.warning("Pool status not written (%s)", unsaid)
                else:
                    await self._say_stalled(v.PoolReason.REFUSED, f"the API refused the pool's objects: {exc}")
            await asyncio.sleep(period)

    def _api_failed(self, exc: KubeError, now: float) -> str | None:
        """A transient API error recorded; the stall's message once such errors have gone on
        without a break (no round through) for ``api_give_up``, else None."""
        if self._api_failing_since is None:
            self._api_failing_since = now
        if now - self._api_failing_since <= self.api_give_up:
            return None
        return f"the API server has kept failing since {iso_time(self._api_failing_since)}: {exc}"

    async def _say_stalled(self, reason: str, message: str) -> None:
        """Ready=False, Stalled=True with ``reason``, the counts as last written; a Warning Event
        when the pool was not stalled for that reason already (said once, not each round)."""
        status = pool_census.stalled_status(self.ref, str(reason), message[:1000], self._generation(),
                                            iso_time(time.time()) or "", self.body.get("status") or {})
        if pools.stall_reason(self._last_status or self.body.get("status") or {}) != str(reason):
            self.emit("Warning", str(reason), message[:1000])
        await self._write(status)

    async def round(self) -> float:
        spec = pool_spec.parse_pool_spec(self.body.get("spec") or {})
        generation = self._generation()
        if not self.clusterwide:   # nothing is created: the status says why (core.scope)
            await self._say_stalled(v.PoolReason.CLUSTER_RIGHTS, POOLS_REFUSED_MESSAGE)
            return FULL_PERIOD
        every = await self._namespace_pods()
        await self._label_pods_made_before(spec, every)   # before the policies are written: they select by it
        await self._ensure_children(spec)
        pods = [p for p in every if ((p.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_POOL_UID)
                == self.ref.uid]
        template = pool_children.template_digest(self.ref, spec)
        now = time.time()
        found = pool_census.census(pods, template, now)
        if found.stuck:
            # a pod replaced (its failure would come again) is said first, and keeps the back-off
            replaced = [s for s in found.stuck if s[0] in found.dead]
            name, reason, message = (replaced or found.stuck)[0]
            if self._stuck is None or self._stuck[0] != template:
                self.emit("Warning", str(reason), f"pod {name}: {message}")
            waiting_out = self._stuck is not None and not self._stuck_kept and self._stuck[0] == template \
                and now - self._stuck[1] <= STUCK_BACKOFF
            self._stuck = (template, now, (name, reason, message))
            self._stuck_kept = not replaced and not waiting_out
        elif self._stuck is not None and (self._stuck_kept or self._stuck[0] != template
                                          or now - self._stuck[1] > STUCK_BACKOFF or await self._class_made(spec)):
            self._stuck = None
        listed = {(p.get("metadata") or {}).get("name"): p for p in pods}
        doomed = pool_census.pods_to_delete(spec, found)
        deleted = set()
        for name in doomed:
            if await self.storage.delete_pod(listed[name]):   # not if claimed since the list
                deleted.add(name)
        if self.channels is not None:
            container = pool_children.episode_container(spec)
            self.channels.keep(self.namespace, [(uid, name, container) for name in found.warm if name not in doomed
                                                if (uid := (listed[name].get("metadata") or {}).get("uid"))])
        # A batch claims up to the pool's size at once: a connection for each claim is opened
        # now, not then. As many as the pool keeps, not as are warm now: a fill would open them
        # a few at a time, each time through GETs on all of them (AsyncWriter.warm).
        await self.storage.keep_claims_open(spec.size)
        missing = 0 if self._stuck is not None else pool_census.pods_to_create(spec, found)
        self._short_since = (self._short_since or now) if missing else None
        hold = pool_census.refill_hold(every, now, self._short_since) if missing else 0.0   # claimed episodes first
        wanted = 0 if hold else missing
        created = 0
        transient: KubeError | None = None   # a creation refused transiently this round
        # read each time pods are to be made: the pool's namespace is outside every quota of the
        # pool's own, so nothing else would see one lowered since
        problem = (await cannot_run(self.storage, spec) or await self._quota_exceeded(spec)) if wanted else None
        if problem is not None:
            self._stuck_on(template, now, ("-", *problem))
            wanted = 0
        for start in range(0, wanted, MAX_CREATES_PER_ROUND):
            count = min(MAX_CREATES_PER_ROUND, wanted - start)
            batch = [pool_children.warm_pod(self.ref, spec, template) for _ in range(count)]
            results = await asyncio.gather(*(self.storage.create_pod(p) for p in batch), return_exceptions=True)
            made = tuple(r["metadata"]["name"] for r in results if isinstance(r, dict))
            if self.pods is not None:
                for r in results:
                    if isinstance(r, dict):
                        self.pods.remember(r)   # the next round counts it, if the watch has not brought it
            created += len(made)
            found = dataclasses.replace(found, starting=found.starting + made)   # the status counts them now
            refused = next((r for r in results if isinstance(r, KubeError)), None)
            if refused is not None:
                self._children_for = None   # a namespace deleted meanwhile is made again next round
                # no fault of the template's, no back-off: its namespace gone, or a transient error
                # (429 throttling, a 5xx, a name the server drew twice: generateName's 409 before
                # Kubernetes 1.31 retried it, RetryGenerateName), made again next round
                if policy.is_transient(refused):
                    transient = refused
                    self.log.warning("Creating a warm pod failed (%s); made next round", refused)
                elif not _namespace_gone(refused):
                    self._stuck_on(template, now, ("-", str(v.PoolReason.PODS_NOT_CREATED),
                                                   f"creating a warm pod was refused: {refused}"))
                break
        await self._collect_task_configmaps(spec, every)
        # While a stuck template is waited out its broken pods are gone: the status keeps the reason.
        shown = found if self._stuck is None or found.stuck else dataclasses.replace(found, stuck=(self._stuck[2],))
        # nor are the pods this round deleted counted (a scale down: readyPods is /scale's replicas)
        shown = dataclasses.replace(shown, warm=tuple(n for n in shown.warm if n not in deleted),
                                    starting=tuple(n for n in shown.starting if n not in deleted))
        if transient is None:
            self._api_failing_since = None   # a round through
        elif (lasting := self._api_failed(transient, now)) is not None and not shown.stuck:
            shown = dataclasses.replace(shown, stuck=(("-", str(v.PoolReason.API_UNAVAILABLE), lasting),))
        status = pool_census.pool_status(self.ref, spec, shown, generation, pool_census.held_pods(every, now),
                                         iso_time(now) or "", self.body.get("status"), refill_held=bool(hold),
                                         elsewhere=pool_census.held_elsewhere(every, spec.network, now))
        await self._write(status)
        if hold:
            return max(hold, FILLING_PERIOD)   # the refill's round: when the hold ends
        if transient is not None:
            return TRANSIENT_RETRY
        filling = len(found.warm) < spec.size and self._stuck is None
        return filling_period(len(every)) if filling or created else FULL_PERIOD

    async def _quota_exceeded(self, spec: pool_spec.PoolSpec) -> tuple[str, str] | None:
        """The pool's namespace's quotas against its warm pods, which run in its own namespace where
        none of them reaches (docs/design.md §8.1): spec.size of them must fit what they leave."""
        problem = check_quota_fits(await self.storage.resource_quotas(self.ref.namespace), spec,
                                   await template_overhead(self.storage, spec), spec.size,
                                   f"the pool's {spec.size} warm pods (spec.size, run outside the namespace)")
        return (str(v.PoolReason.QUOTA), problem) if problem else None

    async def _namespace_pods(self) -> list[dict]:
        """Every pod the operator made in the namespace: the watch's view, else (not whole yet, or
        its watch broken) a list."""
        seen = self.pods.pods(self.namespace) if self.pods is not None else None
        if seen is not None:
            return seen
        return await self.storage.list_pods(self.namespace, naming.MANAGED_SELECTOR)

    async def _label_pods_made_before(self, spec: pool_spec.PoolSpec, every: list[dict]) -> None:
        """The upgrade from an operator before naming.LABEL_NETWORK, whose one policy applied the
        pool's network to every pod: the pool's policies now deny egress to a pod without the
        label, which would cut a running AllowEgress episode off. So, before they are written,
        each pod without it is labelled with the network it ran under (core.pool_children.network_before_labels,
        read from the live policies), and while Jobs of that time run (a running Job's template
        cannot be changed: its cold pods come without the label) core.pool_children.unlabelled_egress_policy
        keeps their egress if that was AllowEgress; it is deleted once they ended. Every step is
        idempotent and read from the live objects, so a restart anywhere in it ends the same. Once
        nothing of that time is left, nothing more is read."""
        if self._labels_carried:
            return
        ns, uid = self.namespace, self.ref.uid
        if self._network_before is None:
            home = await self.storage.get_namespace(ns)
            if home is None:   # a pool new, or its namespace made again: nothing of that time in it
                self._labels_carried = True
                return
            if not pool_children.owned_by_pool(home, uid):
                return   # another pool's: nothing in it is this one's to label (_ensure_children says so)
            unlabelled = await self.storage.get_network_policy(ns, naming.POOL_UNLABELLED_EGRESS_POLICY)
            network = pool_children.network_before_labels(
                await self.storage.get_network_policy(ns, naming.DEDICATED_POLICY), unlabelled, spec.network)
            # read once a process: the rounds while an old Job runs (for hours when Kueue holds it
            # suspended) list its Jobs only; this process is the policies' only writer meanwhile
            self._network_before = (network, unlabelled)
        network, unlabelled = self._network_before
        pods = [p for p in every if pool_children.network_of(p) is None]
        jobs = pools.unlabelled_jobs(await self.storage.list_jobs(ns), uid)
        if network == v.NETWORK_ALLOW_EGRESS and unlabelled is None and jobs:
            unlabelled = await self.storage.ensure(pool_children.unlabelled_egress_policy(self.ref), uid)
            self._network_before = (network, unlabelled)
        for pod in pods:
            await self.storage.label_pod(ns, pod["metadata"]["name"], {naming.LABEL_NETWORK: network})
        if jobs:
            return   # their next cold pods: labelled by the next round, open from their start meanwhile
        if unlabelled is not None:
            await self.storage.delete_network_policy(ns, naming.POOL_UNLABELLED_EGRESS_POLICY, uid)
        self._labels_carried = True

    async def _ensure_children(self, spec: pool_spec.PoolSpec) -> None:
        """The namespace, its ServiceAccount and NetworkPolicies, today's task ConfigMap: made when
        the task changed, and again after a refusal (made anew if deleted). The policies do not
        change with spec.network (core.pool_children.network_policies: each pod keeps its own)."""
        wanted = pool_children.task_configmap_name(self.ref, spec)
        if self._children_for == wanted:
            return
        for obj in (pool_children.namespace(self.ref), pool_children.service_account(self.ref),
                    *pool_children.network_policies(self.ref), pool_children.task_configmap(self.ref, spec)):
            live = await self.storage.ensure(obj, self.ref.uid)
            if obj["kind"] == "Namespace" and (live.get("metadata") or {}).get("deletionTimestamp"):
                raise NotOurs(f"the pool's namespace {self.namespace} is being deleted; waiting to make it again")
        self._children_for = wanted

    async def _collect_task_configmaps(self, spec: pool_spec.PoolSpec, pods: list[dict]) -> None:
        """Task ConfigMaps of earlier templates, once no pod and no running Job mounts them."""
        current = pool_children.task_configmap_name(self.ref, spec)
        if self._collected_for == current:
            return
        old = [cm for cm in await self.storage.list_configmaps(self.namespace, f"{naming.LABEL_POOL_UID}={self.ref.uid}")
               if cm["metadata"]["name"] != current]
        if not old:
            self._collected_for = current
            return
        used: set[str] = set()
        for pod in pods:
            if (pod.get("status") or {}).get("phase") not in (v.PodPhase.SUCCEEDED, v.PodPhase.FAILED):
                used |= pool_children.mounted_configmaps(pod)
        for job in await self.storage.list_jobs(self.namespace):
            if not pools.job_finished(job):
                used |= pool_children.mounted_configmaps(job)
        for cm in old:
            if cm["metadata"]["name"] not in used:
                await self.storage.delete_configmap(cm)

    async def _write(self, status: dict) -> None:
        comparable = {k: val for k, val in status.items() if k != "conditions"}
        conditions = [{k: val for k, val in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []]
        key = {**comparable, "conditions": conditions}
        if key == self._last_status:
            return
        await self.storage.patch_pool_status(self.ref.namespace, self.ref.name, status)
        self._last_status = key

    async def _class_made(self, spec: pool_spec.PoolSpec) -> bool:
        """A stall on a missing or refused class (no pod was made: nothing fails the same way
        again) ends as soon as the class is there and allowed, not after STUCK_BACKOFF: a user who
        creates the RuntimeClass expects the pool to fill (one GET a round while it waits)."""
        assert self._stuck is not None
        if self._stuck[2][1] == v.PoolReason.QUOTA:   # likewise a quota raised, or a size lowered to fit
            return await self._quota_exceeded(spec) is None
        return self._stuck[2][1] in v.POOL_CLASS_REASONS and await cannot_run(self.storage, spec) is None

    def _stuck_on(self, template: str, now: float, problem: tuple[str, str, str]) -> None:
        """The template cannot run (no pod made for STUCK_BACKOFF): said once, as a Warning."""
        if self._stuck is None:
            self.emit("Warning", problem[1], problem[2])
        self._stuck, self._stuck_kept = (template, now, problem), False

    def deleting_status(self, waiting: str) -> dict:
        """What the pool says while its deletion waits (``waiting``: for whom)."""
        return pool_census.deleting_status(self.ref, f"{pools.DELETING_MESSAGE}{waiting}"[:1000], self._generation(),
                                           iso_time(time.time()) or "", self.body.get("status") or {},
                                           claimed=self._held_at_deletion)

    async def delete(self) -> str | None:
        """Remove the pool's warm pods and, once no batch runs in it, its namespace (with the
        finished Jobs a batch kept: ``cleanup.sandbox: Never`` keeps a pooled batch's pods only
        as long as its pool). Returns what it still waits for (None: done)."""
        if not self.clusterwide:
            return None   # a namespaced install created nothing for it
        if not await self._namespace_is_ours():
            return None
        # One list for both: the unclaimed warm pods to delete, and the pods batches hold. Each
        # delete is of the pod as listed (resourceVersion precondition), so when all went through
        # none was claimed since; one refused (claimed, changed or gone since) may be held now,
        # and only then is the namespace read again to count it.
        pods = await self.storage.list_pods(self.namespace, naming.MANAGED_SELECTOR)
        refused = False
        for pod in pods:
            if pool_children.not_enrolled(pod, self.ref) and pool_children.claimed_by(pod) is None:
                refused |= not await self.storage.delete_pod(pod)
        if refused:
            pods = await self.storage.list_pods(self.namespace, naming.MANAGED_SELECTOR)
        now = time.time()
        held_pods = [p for p in pods if pool_census.is_held(p, now)]
        self._held_at_deletion = len(held_pods)
        jobs = [j for j in await self.storage.list_jobs(self.namespace)
                if pool_children.owned_by_pool(j, self.ref.uid) and not (j.get("metadata") or {}).get("deletionTimestamp")
                and not pools.job_finished(j) and not pools.job_stopped(j)]
        held = pool_census.holding_batches(held_pods, jobs)
        if held:
            return f"waiting for {len(held)} batch(es) that run on its pods: {', '.join(held[:5])}"
        await self.storage.delete_namespace(self.namespace, self.ref.uid)
        return None

    async def _namespace_is_ours(self) -> bool:
        """Whether the pool's namespace is there and its own. One that is another pool's (two
        pools' names may map to one namespace: naming.pool_namespace) holds nothing of this pool's
        (it was refused it, and so were its batches): it is left to its owner, neither read nor
        waited on, and this pool's deletion ends (said once; an error would be retried for ever,
        and the pool never deleted)."""
        live = await self.storage.get_namespace(self.namespace)
        if live is None:
            return False
        if not pool_children.owned_by_pool(live, self.ref.uid):
            message = (f"namespace {self.namespace} is another RolloutPool's (two pools' names map to it); "
                       "left to its owner")
            self.emit("Warning", v.PoolReason.REFUSED, message)
            self.log.warning("deleting RolloutPool %s/%s: %s", self.ref.namespace, self.ref.name, message)
            return False
        return True


async def cannot_run(storage: PoolStorage, spec: pool_spec.PoolSpec) -> tuple[str, str] | None:
    """(reason, message) when the classes the pods name say they cannot run, or may not: a
    missing RuntimeClass (said as such, not as the admission plugin's refusal of every pod), a
    missing PriorityClass, or one above the user range, which a batch may not use either
    (core.admission.check_priority_class): a pool must not lend its batches a priority they
    could not ask for. The live classes, read now (a pool's status may be a round behind a class
    just created)."""
    if spec.runtime_class_name and await storage.runtime_class(spec.runtime_class_name) is None:
        return (str(v.PoolReason.RUNTIME_CLASS), f"RuntimeClass {spec.runtime_class_name!r} does not exist in "
                                                 "the cluster: create it, or change spec.runtimeClassName")
    priority = spec.pod_template.get("priorityClassName")
    if priority:
        live = await storage.priority_class(priority)
        if live is None:
            return (str(v.PoolReason.PRIORITY_CLASS), f"PriorityClass {priority!r} does not exist in the cluster: "
                                                      "create it, or change spec.podTemplate.priorityClassName")
        denied = check_priority_class(live)
        if denied:
            return str(v.PoolReason.PRIORITY_CLASS_DENIED), denied
    return None


async def template_overhead(storage: PoolStorage, template: pool_spec.PoolSpec) -> dict | None:
    """The pod overhead of the pool's RuntimeClass, which the quota system adds to each pod."""
    rc = await storage.runtime_class(template.runtime_class_name) if template.runtime_class_name else None
    return runtime_overhead(rc) if rc else None
