"""A pooled batch's indexes past its first wave claim warm pods as they start (core.pools).

The first wave, ``min(parallelism, episodes)`` indexes, is claimed before the Job
(service.pool_claims). Later indexes start as earlier ones end, when the Job controller makes a
pod for each: a claim the operator made then would race it. So the Job's cold pods carry a
scheduling gate (naming.CLAIM_GATE; core.pools.pooled_job): a gated pod is created but never
scheduled (KEP-3521), and costs no node anything. Each round, every such pod of an index no other
pod holds is answered: a warm pod of the pool (of the Job's template digest) is claimed for its
index, handed its episode at once (service.episode_delivery) and enrolled (the batch's labels), so
the Job adopts it and deletes the gated pod as its index's duplicate (the least advanced: upstream
``appendDuplicatedIndexPodsForRemoval``; it takes its tracking finalizer off first, so nothing is
counted); with no warm pod left (or every claim tried lost), the gate is lifted and the pod starts
cold. With ``whenEmpty: Wait`` a later index with no warm pod stays gated instead, looked at again
every WAIT_RECHECK_SECONDS, while its pool can still give it one (the same pool, not being deleted
nor stalled, of size above 0, making pods of the Job's template: :meth:`LaterClaims._pool_refills`);
the batch's status says so (:meth:`LaterClaims.waiting_message`). Else it starts cold: nothing would
come. The Job's ``activeDeadlineSeconds`` bounds the wait, as it bounds every episode.

The tracker's view can lag (a watch reconnecting): each answer lists the pool's namespace once
and answers only what that list still shows gated, of an index no live claimed pod of the batch
holds, so a claim the tracker has not seen yet is never made twice. A pod answered is left alone
for ANSWER_SETTLE_SECONDS (the Job's deletion of it, or the watch's news of the claim, comes
within it); one still gated past it, its index held by no pod (its claimed pod lost before the Job
adopted it), is answered again. Claims of the batch that were never enrolled (an operator that
died between a claim and its enrolment) are enrolled first, and their indexes are theirs. A gated
pod of an index already final (the Job controller's retry of an index this batch judged) is only
ungated: it is handed nothing and ends at its deadline, as such a retry did before the gate.
Answers that keep failing (GIVE_UP_AFTER in a row) lift the gates of the pods they wait on, which
then start cold, with a Warning Event; the next answer tries claims again. One answer runs at a
time; the batch's stall, stop or deletion cancels it.

``pool_claims_total`` counts each index answered once per operator run: the first wave's hits
are counted when the Job is made (:meth:`LaterClaims.first_wave_claimed`), its misses as they are
answered here (with ``whenEmpty: Wait`` most of them get a warm pod after all); a retry is not
counted again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping

from rolloutbatch.core import naming, pool_children, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import Stalled
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.model import BatchRef, BatchSpec, PodFacts
from rolloutbatch.core.pod_reading import completion_index, pod_facts
from rolloutbatch.core.pool_spec import PoolRef
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.verdict import is_terminal
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service import pool_claims

ANSWER_SETTLE_SECONDS = 15.0
WAIT_RECHECK_SECONDS = 2.0   # whenEmpty Wait: how often a later index kept gated looks for a warm pod
GIVE_UP_AFTER = 3   # failed answers in a row (about 30 s) before the pods they wait on start cold


class LaterClaims:
    """Answers the gated cold pods of a pooled batch's Job (see the module docstring).
    ``claimed`` hears of each pod as its claim is made (EpisodeDelivery.claimed: its hand-over);
    ``counted(hits, misses)`` of each answer's claims and cold starts (Metrics.pool_claims);
    ``emit(type, reason, message)`` posts the batch's Events."""

    def __init__(self, pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec,
                 claimed: Callable[[list[dict]], None], counted: Callable[[int, int], None],
                 emit: Callable[[str, str, str], None], log: logging.Logger) -> None:
        self.pool_storage, self.ref, self.spec = pool_storage, ref, spec
        self.claimed, self.counted, self.emit, self.log = claimed, counted, emit, log
        self._answered: dict[str, float] = {}   # gated pod uid -> when it was answered (time.monotonic)
        self._counted: set[int] = set()         # later indexes counted in pool_claims_total
        self._failures = 0                      # answers failed in a row
        self._kept: dict[str, int] = {}         # whenEmpty Wait: gated pod uid -> its index, waiting for a warm pod
        self._task: asyncio.Task | None = None
        self._cancelled = False

    def cancel(self) -> None:
        """No answer from now (the batch stalled, stopped or is being deleted): the one in flight
        stops, claims and all. A pod it claimed and did not enrol ends at its claim's deadline,
        handed nothing."""
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()

    async def cancelled(self, within: float) -> None:
        """:meth:`cancel`, then until the answer in flight has stopped (at most ``within`` s)."""
        self.cancel()
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=within)

    def first_wave_claimed(self, pods: list[dict]) -> None:
        """The first wave's claims, counted when the Job is made: a retry of their index is not
        counted again."""
        self._counted |= _indexes(pods)

    def answering(self) -> bool:
        """An answer is in flight: whether the indexes it looks at still wait is not known yet
        (after a restart, the status keeps saying they wait until the first answer says)."""
        return self._task is not None and not self._task.done()

    def waiting_message(self) -> str | None:
        """What the batch's status says while later indexes wait for a warm pod (whenEmpty Wait)."""
        if not self._kept:
            return None
        indexes = sorted(set(self._kept.values()))
        shown = ", ".join(map(str, indexes[:10])) + (", ..." if len(indexes) > 10 else "")
        return (f"{len(indexes)} later episode(s) wait for a warm pod of RolloutPool {self.spec.pool_name} "
                f"(spec.poolRef.whenEmpty: {v.POOL_WAIT}; indexes {shown})")

    def round(self, tracker: BatchTracker) -> None:
        job = tracker.job
        if self._kept:   # only pods still gated and unanswered wait
            gated = {f.uid for f in tracker.live_pods() if pools.awaits_claim(f)}
            self._kept = {uid: index for uid, index in self._kept.items() if uid in gated}
        if self._cancelled or not self.spec.pool_name or tracker.stopping or job is None or job.finished \
                or job.suspend or job.suspended or job.pool_template is None or job.pool_uid is None:
            return
        if self._task is not None and not self._task.done():
            return
        held = pools.held_indexes(tracker.index_holders())
        now = time.monotonic()
        # answers settled are forgotten (a pod still gated then is answered again): kept small
        self._answered = {uid: at for uid, at in self._answered.items() if now - at < ANSWER_SETTLE_SECONDS}
        waiting: dict[int, PodFacts] = {}   # one answer per index: two gated pods of one are the Job's to thin
        for f in sorted(tracker.live_pods(), key=lambda f: (f.index or 0, f.created, f.name)):
            if pools.awaits_claim(f) and f.index is not None and f.index not in tracker.results \
                    and not pools.shadowed(f, held) and f.index not in waiting \
                    and f.uid not in self._answered:
                waiting[f.index] = f
        after_end = [f for f in tracker.gated_after_the_end() if f.uid not in self._answered]
        if waiting or after_end:
            for facts in [*waiting.values(), *after_end]:
                self._answered[facts.uid] = now
            self._task = asyncio.create_task(self._answer(list(waiting.values()), after_end, job))

    async def _answer(self, waiting: list[PodFacts], after_end: list[PodFacts], job: JobFacts) -> None:
        try:
            hits, misses = await self._claim_or_ungate(waiting, after_end, job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - answered again once settled; its pod waits gated meanwhile
            self._failures += 1
            if self._failures < GIVE_UP_AFTER:
                self.log.warning("Answering %d gated pod(s) of the later waves failed (%s); tried again in %.0f s",
                                 len(waiting), exc, ANSWER_SETTLE_SECONDS)
                return
            started = await self._start_cold(waiting + after_end)
            if missed := self._count({f.index for f, done in zip(waiting, started) if done and f.index is not None}):
                self.counted(0, missed)
            message = (f"{len(waiting)} later episode(s) could not claim a warm pod of RolloutPool "
                       f"{self.spec.pool_name} {self._failures} times in a row ({exc})"[:900]
                       + f"; {sum(started)} start cold")
            self.log.warning("%s", message)
            if self._failures == GIVE_UP_AFTER:   # once per spell; the log has every one
                self.emit("Warning", v.EVENT_LATER_CLAIMS_FAILED, message)
            return
        self._failures = 0
        if hits or misses:
            self.counted(hits, misses)

    async def _ungate(self, pods: list[PodFacts]) -> list[bool]:
        """The gates of ``pods`` lifted, at once; per pod whether its patch took."""
        return list(await asyncio.gather(*(self.pool_storage.ungate_pod(f.namespace, f.name, pools.ungate_patch(f))
                                           for f in pods)))

    async def _start_cold(self, pods: list[PodFacts]) -> list[bool]:
        """Best effort: the gates of ``pods`` lifted (the API may be what failed); per pod whether
        its gate was."""
        try:
            return await self._ungate(pods)
        except Exception as exc:  # noqa: BLE001 - the next answer tries again
            self.log.warning("Lifting the gates of %d pod(s) failed too: %s", len(pods), exc)
            return []

    def _count(self, indexes: set[int]) -> int:
        """How many of ``indexes`` are not counted yet (and count them)."""
        new = indexes - self._counted
        self._counted |= new
        return len(new)

    async def _claim_or_ungate(self, waiting: list[PodFacts], after_end: list[PodFacts],
                               job: JobFacts) -> tuple[int, int]:
        assert job.pool_template is not None and job.pool_uid is not None
        asked = [f.uid for f in waiting]   # kept waiting until this answer says otherwise (the status)
        namespace = naming.pool_namespace(self.ref.namespace, self.spec.pool_name or "")
        pool = PoolRef(name=self.spec.pool_name or "", namespace=self.ref.namespace, uid=job.pool_uid)
        # one list: the warm pods, the batch's claims (enrolled or not) and its gated pods as they are now
        listed = pools.pool_pods(await self.pool_storage.list_pods(namespace, naming.MANAGED_SELECTOR),
                                 pool, self.ref.uid, job.pool_template)
        now_facts = {f.uid: f for f in map(pod_facts, listed.mine)}
        left = pools.unenrolled_claims(listed.mine, self.ref.uid)
        owned: set[int] = set()
        if left:   # a claim an earlier operator made and never enrolled: its index is its own
            owned = _indexes(await pool_claims.enrol(self.pool_storage, namespace, self.ref, left))
        held = owned | {f.index for f in now_facts.values() if f.index is not None and f.claimed_at is not None
                        and not f.deleting and not is_terminal(f)}
        still = [now_facts[f.uid] for f in waiting if f.uid in now_facts and pools.awaits_claim(now_facts[f.uid])]
        waiting = [f for f in still if f.index not in held]
        now, seconds = time.time(), pools.batch_episode_seconds(self.spec)
        candidates: Iterator[Mapping] = iter(listed.warm)

        async def claim_one(facts: PodFacts) -> dict | None:
            assert facts.index is not None
            for pod in candidates:   # shared: each warm pod is tried by one index once; a 409 tries the next
                live = await self.pool_storage.claim_pod(namespace, pod["metadata"]["name"],
                                                         pools.claim_patch(pod, self.ref, facts.index, now, seconds))
                if live is not None:
                    self.claimed([live])   # its hand-over starts now, beside its enrolment
                    return live
            return None
        claims = await asyncio.gather(*(claim_one(facts) for facts in waiting))
        crash_point("pool:later-claimed")
        enrolled = await pool_claims.enrol(self.pool_storage, namespace, self.ref, [c for c in claims if c is not None])
        taken = _indexes(enrolled)
        # no warm pod left, or every one tried lost to a race: the pod starts cold; a gated pod of
        # an index already final is ungated too, and not counted (a refused patch, its gates
        # changed since, or gone: answered again once settled, if it is still gated)
        ending = [now_facts[f.uid] for f in after_end if f.uid in now_facts and pools.awaits_claim(now_facts[f.uid])]
        cold = [f for f in waiting if f.index not in taken]
        kept: dict[str, int] = {}
        if cold and self.spec.pool_when_empty == v.POOL_WAIT and await self._pool_refills(job):
            for f in cold:   # looked at again soon: the pool refills behind the claims
                assert f.index is not None   # awaits_claim: every waiting pod has its index
                kept[f.uid] = f.index
                self._answered[f.uid] = time.monotonic() - ANSWER_SETTLE_SECONDS + WAIT_RECHECK_SECONDS
            cold = []
        for uid in asked:
            self._kept.pop(uid, None)
        self._kept.update(kept)
        ungated = await self._ungate(cold + ending)
        started_cold = {f.index for f, done in zip(cold, ungated) if done and f.index is not None}
        if taken or started_cold or any(ungated):
            self.log.info("Later wave: %d index(es) claimed a warm pod, %d start cold, %d gated pod(s) of "
                          "indexes already final ungated", len(taken), len(started_cold), sum(ungated[len(cold):]))
        return self._count(taken | owned), self._count(started_cold)

    async def _pool_refills(self, job: JobFacts) -> bool:
        """whenEmpty Wait: whether a later index may wait, gated, for a warm pod: the pool the Job
        claimed from is there (the same object), not being deleted nor stalled, keeps pods, and
        makes them of the Job's template. Otherwise none would ever come, and it starts cold."""
        body = await self.pool_storage.get_pool(self.ref.namespace, self.spec.pool_name or "")
        if body is None or (body.get("metadata") or {}).get("uid") != job.pool_uid or pools.is_stalled(body):
            return False
        try:
            pool, definition = pool_claims.checked_pool(body, self.ref, self.spec)
        except Stalled:
            return False
        return definition.size > 0 and pool_children.template_digest(pool, definition) == job.pool_template


def _indexes(pods: list[dict]) -> set[int]:
    return {i for p in pods if (i := completion_index(p.get("metadata") or {})) is not None}
