"""A pooled batch's side of the warm pools (core.pools): the claims and its Job.

:func:`provision` replaces the sandbox's creation for a batch with ``spec.poolRef``: the pool is
read and checked (its namespace must be its own, the batch must fit its namespace's quotas), up
to ``parallelism`` warm pods are claimed (the first indexes), and the Job is created or adopted. It is safe to repeat: pods already claimed for the batch keep their
indexes, and only the indexes without one are claimed.

The hand-overs that follow are service.episode_delivery's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, MutableMapping

from rolloutbatch.core import naming, pool_children, pool_spec, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled, check_quota_outside, input_shards
from rolloutbatch.core.model import BatchRef, BatchSpec, SpecError
from rolloutbatch.core.scope import Scope
from rolloutbatch.core.pod_reading import annotation_seconds, completion_index
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.errors import KubeError
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.kube.storage import Storage
from rolloutbatch.service import policy
from rolloutbatch.service.pools import cannot_run, template_overhead
from rolloutbatch.service.context import Emit, owner_of_batch

CLAIM_RELISTS = 2            # lists of the warm pods again when claims were lost and none is left
LISTED_TRIES, LISTED_PAUSE = 5, 0.1   # lists of the batch's pods until its claims show (seconds apart)
HAND_OVER_FIRST = 2.0        # seconds the Job's creation waits for the claimed pods' hand-overs
POOL_NAMESPACE_WAIT, POOL_NAMESPACE_PAUSE = 30.0, 0.5   # a new pool's namespace, waited for so long
_NOT_YET = "does not exist yet"


async def read_pool(pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec,
                    waiting: Callable[[str], Awaitable[None]] | None = None
                    ) -> tuple[pool_spec.PoolRef, pool_spec.PoolSpec]:
    """The batch's pool, checked: a missing, deleted or unusable pool stalls the batch before
    anything is claimed. ``waiting`` hears what the batch waits for, if it waits."""
    assert spec.pool_name is not None
    pool, definition = checked_pool(await pool_storage.get_pool(ref.namespace, spec.pool_name), ref, spec)
    await _own_namespace(pool_storage, pool, waiting)
    problem = await cannot_run(pool_storage, definition)
    if problem is not None:
        # the pool's pods cannot be made: nor can the cold ones of the batch's Job (the same template)
        raise Stalled(v.STALL_POOL_CONFLICT, f"RolloutPool {spec.pool_name} cannot run pods ({problem[0]}): "
                                             f"{problem[1]}"[:1000])
    quota = check_quota_outside(await pool_storage.resource_quotas(ref.namespace), spec,
                                await template_overhead(pool_storage, definition), definition)
    if quota:
        raise Stalled(v.STALL_QUOTA, quota)
    return pool, definition


async def _own_namespace(pool_storage: PoolStorage, pool: pool_spec.PoolRef,
                         waiting: Callable[[str], Awaitable[None]] | None = None) -> None:
    """Stalled unless the pool's namespace is the pool's (:func:`_namespace_problem`). One not made
    yet is waited for, up to POOL_NAMESPACE_WAIT seconds, said once to ``waiting``: a pool and a
    batch applied together (`kubectl apply -f dir/`) may reach the batch before the pool's first
    round made it."""
    waited = 0.0
    while (problem := await _namespace_problem(pool_storage, pool)) is not None:
        if waited >= POOL_NAMESPACE_WAIT or not problem.endswith(_NOT_YET):
            raise Stalled(v.STALL_POOL_CONFLICT, f"{problem}: nothing of this batch is made there")
        if not waited and waiting is not None:
            await waiting(f"waiting up to {POOL_NAMESPACE_WAIT:.0f} s for RolloutPool {pool.name} to make its "
                          f"namespace: {problem}"[:1000])
        await asyncio.sleep(POOL_NAMESPACE_PAUSE)
        waited += POOL_NAMESPACE_PAUSE


async def _namespace_problem(pool_storage: PoolStorage, pool: pool_spec.PoolRef) -> str | None:
    """What is wrong with the pool's namespace, None when it exists and is the pool's
    (core.pool_children.owned_by_pool): two pools' names may map to one namespace (naming.pool_namespace,
    and a pool recreated finds its predecessor's until it is gone), and a batch must not claim
    from, nor run its Job in, another pool's."""
    namespace = naming.pool_namespace(pool.namespace, pool.name)
    live = await pool_storage.get_namespace(namespace)
    if live is not None and pool_children.owned_by_pool(live, pool.uid):
        return None
    state = _NOT_YET if live is None else "is not this pool's (another pool's, or a former one's)"
    return f"the namespace {namespace} of RolloutPool {pool.name} {state}"


def _stalled(body: dict) -> dict | None:
    """The pool's Stalled condition when it is true."""
    return next((c for c in (body.get("status") or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") == v.CONDITION_STALLED
                 and c.get("status") == v.CONDITION_TRUE), None)


def checked_pool(body: dict | None, ref: BatchRef, spec: BatchSpec,
                 conflicts: bool = True) -> tuple[pool_spec.PoolRef, pool_spec.PoolSpec]:
    """The batch's pool (its object ``body``) and its parsed spec; Stalled when it is missing,
    being deleted, or cannot run the batch's episodes (``conflicts``: its sandbox or verifier)."""
    assert spec.pool_name is not None
    if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
        state = "does not exist" if body is None else "is being deleted"
        raise Stalled(v.STALL_POOL_NOT_FOUND, f"RolloutPool {ref.namespace}/{spec.pool_name} {state} (spec.poolRef)")
    try:
        definition = pool_spec.parse_pool_spec(body.get("spec") or {})
    except SpecError as exc:
        raise Stalled(v.STALL_POOL_CONFLICT, f"RolloutPool {spec.pool_name} cannot run episodes: {exc}") from None
    problem = conflicts and (pool_spec.sandbox_conflict(spec, definition) or
                             pool_spec.verifier_conflict(definition, spec.verifier.mount_path if spec.verifier else None))
    if problem:
        raise Stalled(v.STALL_POOL_CONFLICT, f"RolloutPool {spec.pool_name}: {problem}")
    return pool_spec.pool_ref(body), definition


async def readiness(pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec,
                    seen: str | None = None) -> tuple[bool, str, str | None]:
    """spec.poolRef.whenEmpty Wait: whether the pool holds the batch's first wave now (its warm pods
    and those the batch claimed already), the message that says where it stands, and the pool's
    uid. A pool not made yet is waited for too (a directory applied in file order may make the
    batch first); one being deleted, gone or replaced since the wait saw it (``seen``, its uid: a
    deletion with no batch on its pods ends between two looks), or one that can never hold the
    first wave (its maxSize), stalls the batch."""
    assert spec.pool_name is not None
    body = await pool_storage.get_pool(ref.namespace, spec.pool_name)
    uid = ((body or {}).get("metadata") or {}).get("uid")
    if seen is not None and uid != seen:
        state = "was deleted" if body is None else "was deleted and made again"
        raise Stalled(v.STALL_POOL_NOT_FOUND, f"RolloutPool {ref.namespace}/{spec.pool_name} {state} while this "
                                              "batch waited for it (spec.poolRef)")
    if body is None:
        return False, (f"waiting for RolloutPool {ref.namespace}/{spec.pool_name} to be created "
                       f"(spec.poolRef.whenEmpty: {v.POOL_WAIT})"), None
    pool, definition = checked_pool(body, ref, spec)
    listed = pools.pool_pods(await pool_storage.list_pods(naming.pool_namespace(pool.namespace, pool.name),
                                                          naming.MANAGED_SELECTOR),
                             pool, ref.uid, pool_children.template_digest(pool, definition))
    warm, mine = len(listed.warm), len(listed.mine)
    wanted = min(spec.parallelism, spec.episodes)
    if definition.max_size < wanted - mine:
        raise Stalled(v.STALL_POOL_CONFLICT,
                      f"RolloutPool {pool.name} keeps at most {definition.max_size} warm pods (its spec.maxSize), and "
                      f"this batch waits for {wanted - mine} (spec.poolRef.whenEmpty: {v.POOL_WAIT}): lower "
                      f"spec.parallelism, raise the pool's maxSize, or start the rest cold "
                      f"(whenEmpty: {v.POOL_COLD})")
    foreign = await _namespace_problem(pool_storage, pool)
    if foreign is not None:   # waited for as a stalled pool is (the pool says Refused meanwhile)
        return False, f"waiting for RolloutPool {pool.name}: {foreign}"[:1000], uid
    message = (f"waiting for RolloutPool {pool.name}: {warm + mine} of the {wanted} warm pods this batch starts "
               f"with are ready (spec.poolRef.whenEmpty: {v.POOL_WAIT})")
    if definition.size < wanted - mine:
        message += f"; the pool keeps only {definition.size}: scale it (kubectl scale rp/{pool.name} --replicas=N)"
    stalled = _stalled(body)
    said = (body.get("status") or {}).get("message")
    if stalled is not None:   # its pods cannot run: the wait lasts until the pool is mended
        message += f"; the pool is stalled ({stalled.get('reason')}): {stalled.get('message')}"
    elif warm + mine < wanted and isinstance(said, str) and said:
        # why it is short (pods no node can place yet, still preparing), long before it stalls
        message += f"; the pool says: {said}"
    return warm + mine >= wanted, message[:1000], uid


@dataclasses.dataclass(frozen=True)
class Claims:
    """What :func:`claim` did: ``hits`` pods of the batch (claimed now or before) of the ``wanted``
    first indexes, the pods ``claimed`` by this call as the API returned them, when the batch's
    first claim was made (``began``: an earlier run's, when there was one), and the claims (this
    call's and an earlier run's) whose labels are still to be written (:func:`enrol`)."""

    hits: int
    wanted: int
    claimed: list[dict]
    began: float
    unenrolled: list = dataclasses.field(default_factory=list)   # the batch's claims still to enrol


async def claim(pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec, pool: pool_spec.PoolRef,
                episode_seconds: int, template: str | None = None,
                on_claimed: Callable[[list[dict]], None] | None = None) -> Claims:
    """Claim warm pods for the first ``parallelism`` indexes that have none. ``on_claimed`` hears of
    each pod as soon as its own claim is made: its hand-over need not wait for the others' (the
    claims go out together through the API threads, and their answers come back one by one)."""
    namespace = naming.pool_namespace(pool.namespace, pool.name)
    listed = pools.pool_pods(await pool_storage.list_pods(namespace, naming.MANAGED_SELECTOR), pool, ref.uid, template)
    warm, mine = listed.warm, listed.mine
    taken = {i for p in mine if (i := completion_index(p.get("metadata") or {})) is not None}
    wanted = [i for i in range(min(spec.parallelism, spec.episodes)) if i not in taken]
    now = time.time()
    # hits: the batch's claimed pods (an earlier run's too), not the cold pods its Job made since
    earlier = [t for p in mine
               if (t := annotation_seconds(p.get("metadata") or {}, naming.ANNOTATION_CLAIMED_AT)) is not None]
    hits = len(earlier)
    fresh: list[dict] = []

    async def claim_one(index: int, pod: dict) -> dict | None:
        live = await pool_storage.claim_pod(namespace, pod["metadata"]["name"],
                                            pools.claim_patch(pod, ref, index, now, episode_seconds))
        if live is not None and on_claimed is not None:
            on_claimed([live])
        return live

    relists = 0
    while wanted and warm:
        pairs = list(zip(wanted, warm))
        warm = warm[len(pairs):]
        claimed = await asyncio.gather(*(claim_one(index, pod) for index, pod in pairs))
        done = {index for (index, _), live in zip(pairs, claimed) if live is not None}
        fresh += [live for live in claimed if live is not None]
        hits += len(done)
        wanted = [i for i in wanted if i not in done]   # a pod lost to a race: the next warm one
        if wanted and not warm and relists < CLAIM_RELISTS:
            # A claim carries the resourceVersion listed: a pod whose own status changed since (a
            # kubelet update) refuses it and is still warm. Listed again, it is claimed; a pod
            # another batch took is no longer warm.
            relists += 1
            warm = pools.claim_order(await pool_storage.list_pods(namespace, pool_children.warm_selector(pool)), template)
    return Claims(hits=hits, wanted=min(spec.parallelism, spec.episodes), claimed=fresh, began=min([now, *earlier]),
                  unenrolled=[*pools.unenrolled_claims(mine, ref.uid), *fresh])


async def enrol(pool_storage: PoolStorage, namespace: str, ref: BatchRef, claimed: list[dict],
                records: MutableMapping[str, pools.HandOverRecord] | None = None) -> list[dict]:
    """The batch's labels on its claimed pods (core.pools.enrol_patch), all at once; returns them
    as the API did (a pod gone meanwhile is not: the Job runs its index cold). A claim whose index
    annotation was edited by hand is left out: it runs to the deadline its claim set, and its index
    gets a cold pod. ``records`` (pod uid -> core.pools.HandOverRecord) are the hand-overs held for
    this write (EpisodeDelivery.settled): each goes with its pod's labels, and leaves ``records``
    once written (what is left, the delivery writes alone)."""
    held = records if records is not None else {}

    async def one(pod: dict, index: int) -> dict | None:
        uid = (pod.get("metadata") or {}).get("uid")
        record = held.get(uid) if isinstance(uid, str) else None
        got = await pool_storage.enrol_pod(namespace, pod["metadata"]["name"], pools.enrol_patch(ref, index, record))
        if got is not None and record is not None:
            held.pop(uid, None)
        return got
    # an index edited by hand to anything but decimal digits ("²" passes str.isdigit) is left out
    indexed = [(p, i) for p in claimed if (i := completion_index(p.get("metadata") or {})) is not None]
    enrolled = await asyncio.gather(*(one(p, i) for p, i in indexed))
    return [p for p in enrolled if p is not None]


async def _until_listed(pool_storage: PoolStorage, namespace: str, ref: BatchRef, claimed: list[dict]) -> None:
    """Wait (briefly) until a list of the batch's pods shows every pod just claimed. The Job
    controller reads pods from its informer: a Job created before that has seen a claim gets a
    cold pod for the claimed index too (core.pools, step 2), which costs a pod start and its
    deletion while the claimed episodes start. A list is served from the API server's watch cache
    once it is as new as etcd (ConsistentListFromCache), and that cache feeds the informers."""
    wanted = {(p.get("metadata") or {}).get("uid") for p in claimed}
    for _ in range(LISTED_TRIES):
        if not wanted or wanted <= {(p.get("metadata") or {}).get("uid")
                                    for p in await pool_storage.list_pods(namespace, naming.label_selector(ref))}:
            return
        await asyncio.sleep(LISTED_PAUSE)


async def provision(storage: Storage, pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec,
                    emit: Emit, metrics: object, claimed: Callable[[list[dict]], None], scope: Scope,
                    handed_over: Callable[[float], Awaitable[MutableMapping[str, pools.HandOverRecord] | None]] | None = None,
                    made_by: str | None = None, count: bool = True,
                    waiting: Callable[[str], Awaitable[None]] | None = None) -> dict:
    """Check the pool, claim, create or adopt the Job; returns the live Job. ``claimed`` hears of
    each pod as it is claimed (its delivery need not wait for the other claims, nor the Job's
    adoption). When every index of the first wave got a warm pod, the Job is created once their
    hand-overs are done (``handed_over``, at most HAND_OVER_FIRST seconds): its creation and its
    adoption of the claimed pods (a write to each, seen by every pod watcher) would share the
    machine with them, and the Job makes no pod before its first wave ends. ``handed_over`` returns
    the records of the hand-overs done (:func:`enrol`). The claims are counted
    (the pool_claims metric, the ClaimedFromPool Event) with ``count`` by the operator run
    ``made_by`` that made the Job (naming.ANNOTATION_MADE_BY: its retry after a lost answer adopts
    it and counts; a new operator's resumed provisioning does not); without ``made_by``, always.
    ``waiting`` hears what the provisioning waits for, if it waits (a pool's namespace not made yet)."""
    scope.refuse(spec)
    pool, definition = await read_pool(pool_storage, ref, spec, waiting)
    await copy_inputs(storage, ref, spec)
    template = pool_children.template_digest(pool, definition)
    claims = await claim(pool_storage, ref, spec, pool, pools.batch_episode_seconds(spec), template,
                         on_claimed=claimed)
    hits, wanted = claims.hits, claims.wanted
    crash_point("pool:claimed")
    # The Job waits for the first wave's hand-overs only when it has no cold pod to make; the
    # records of those done come back to go with the labels (one write per pod, not two).
    records = await handed_over(HAND_OVER_FIRST if claims.claimed and hits >= wanted else 0.0) \
        if handed_over is not None else None
    namespace = naming.pool_namespace(pool.namespace, pool.name)
    enrolled = await enrol(pool_storage, namespace, ref, claims.unenrolled, records)
    crash_point("pool:enrolled")
    await _until_listed(pool_storage, namespace, ref, enrolled)
    job = pools.batch_pooled_job(ref, spec, pool, definition, claims.began, later_claims=template)
    if made_by is not None:
        job["metadata"].setdefault("annotations", {})[naming.ANNOTATION_MADE_BY] = made_by
    try:
        live = await storage.create_or_adopt(job, ref.uid)
    except KubeError as exc:
        if policy.is_transient(exc):
            raise   # the error policy retries (service.policy); the claims stand and are kept
        raise Stalled(v.STALL_REFUSED, f"creating the Job in the pool's namespace: {exc}") from None
    made_here = made_by is None or ((live.get("metadata") or {}).get("annotations") or {}).get(
        naming.ANNOTATION_MADE_BY) == made_by
    if not count or not made_here:
        return live
    misses = wanted - hits
    later = pools.claims_later(spec.episodes, spec.parallelism)
    record = getattr(metrics, "pool_claims", None)
    if record is not None:
        # with later waves a miss's pod is gated and answered as a later index is: it counts
        # itself then, a hit or not (service.later_claims)
        record(ref.namespace, pool.name, hits, 0 if later else misses)
    # with later waves, the Job's pods are gated: a miss is answered as a later index is
    # (service.later_claims), and with whenEmpty Wait it waits for the pool's refill
    waits = later and spec.pool_when_empty == v.POOL_WAIT
    said = f"{hits} of the first {wanted} episodes got a warm pod of RolloutPool {pool.name}"
    cold = "wait for a warm pod while the pool can make one" if waits else "start cold"
    said += (f"; {misses} {cold}" if misses else "") + (
        f"; {spec.episodes - wanted} later episode(s) claim a warm pod as each starts, or "
        f"{cold.replace('a warm pod', 'one')}" if later else "")
    if spec.pool_when_empty == v.POOL_WAIT and hits < wanted:
        # Another batch claimed since the pool held this one's first wave. A claim cannot be given
        # back (its pod's deadline is set, its episode handed over): the rest start cold (or, with
        # later waves, wait gated for the refill), said so.
        emit("Warning", v.EVENT_CLAIMED, f"{said}: another batch claimed warm pods after the pool held this "
                                         f"batch's first wave (spec.poolRef.whenEmpty: {v.POOL_WAIT})")
    else:
        emit("Normal", v.EVENT_CLAIMED, said)
    return live




async def job_for_claims(storage: Storage, pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec) -> dict | None:
    """A pooled batch stopped before its Job was made (an operator died between its claims and its
    Job): the Job, made suspended, so that the Job controller adopts the claimed pods (a suspended
    Job adopts its orphans and deletes its active pods): the episodes that ended are judged and the
    running ones stopped, as any stopped batch's. None when the batch claimed nothing, or its pool
    is gone or changed so that its Job cannot be made (the caller evicts the claims then)."""
    assert spec.pool_name is not None
    try:   # the claims were made: what the batch says of its sandbox is moot for a Job that runs nothing
        pool, definition = checked_pool(await pool_storage.get_pool(ref.namespace, spec.pool_name), ref, spec,
                                    conflicts=False)
        await _own_namespace(pool_storage, pool)
    except Stalled:
        return None
    namespace = naming.pool_namespace(pool.namespace, pool.name)
    mine = pools.pool_pods(await pool_storage.list_pods(namespace, naming.MANAGED_SELECTOR), pool, ref.uid).mine
    began = [t for p in mine if (t := annotation_seconds(p.get("metadata") or {}, naming.ANNOTATION_CLAIMED_AT))]
    if not began:
        return None
    await _until_listed(pool_storage, namespace, ref,
                        await enrol(pool_storage, namespace, ref, pools.unenrolled_claims(mine, ref.uid)))
    job = pools.batch_pooled_job(ref, spec, pool, definition, min(began), suspend=True)
    return await storage.create_or_adopt(job, ref.uid)


async def copy_inputs(storage: Storage, ref: BatchRef, spec: BatchSpec) -> None:
    """spec.inputsFrom: the ConfigMaps checked (opted in, exactly the keys of the groups; a
    refusal stalls the batch before anything is claimed) and copied into the batch's own
    namespace, owned by it (core.pools.input_copies); each episode's input is read from the copies
    when it is handed over."""
    if not spec.inputs_from:
        return
    shards = input_shards([await storage.get("ConfigMap", name, ref.namespace) for name in spec.inputs_from],
                          spec.inputs_from, spec.inputs_count)
    for copy in pools.input_copies(ref, shards, owner_of_batch(ref)):
        try:
            await storage.create_or_adopt(copy, ref.uid)
        except KubeError as exc:
            if policy.is_transient(exc):
                raise
            raise Stalled(v.STALL_REFUSED, f"copying spec.inputsFrom: {exc}") from None
