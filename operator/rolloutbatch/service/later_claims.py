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
counted); with no warm pod left (or its claim lost), the gate is lifted and the pod starts cold.
``whenEmpty: Wait`` waits for the first wave only: a later index never waits.

A pod answered is left alone for ANSWER_SETTLE_SECONDS (the Job's deletion of it, or the watch's
news of the claim, comes within it); one still gated past it, its index held by no pod (its claimed
pod lost before the Job adopted it), is answered again. Claims of the batch that were never
enrolled (an operator that died between a claim and its enrolment) are enrolled first, and their
indexes are theirs. One answer runs at a time; the claims and enrolments of one go out together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from rolloutbatch.core import naming, pool_children, pools
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.core.model import BatchRef, BatchSpec, PodFacts
from rolloutbatch.core.pod_reading import completion_index
from rolloutbatch.core.pool_spec import PoolRef
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service import pool_claims

ANSWER_SETTLE_SECONDS = 15.0


class LaterClaims:
    """Answers the gated cold pods of a pooled batch's Job (see the module docstring).
    ``claimed`` hears of each pod as its claim is made (EpisodeDelivery.claimed: its hand-over);
    ``counted(hits, misses)`` of each answer's claims and cold starts (Metrics.pool_claims)."""

    def __init__(self, pool_storage: PoolStorage, ref: BatchRef, spec: BatchSpec,
                 claimed: Callable[[list[dict]], None], counted: Callable[[int, int], None],
                 log: logging.Logger) -> None:
        self.pool_storage, self.ref, self.spec = pool_storage, ref, spec
        self.claimed, self.counted, self.log = claimed, counted, log
        self._answered: dict[str, float] = {}   # gated pod uid -> when it was answered (time.monotonic)
        self._task: asyncio.Task | None = None
        self._cancelled = False

    def cancel(self) -> None:
        """No answer from now (the batch stalled): the one in flight stops, claims and all. A pod it
        claimed and did not enrol ends at its claim's deadline, handed nothing."""
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()

    def round(self, tracker: BatchTracker) -> None:
        job = tracker.job
        if self._cancelled or not self.spec.pool_name or tracker.stopping or job is None or job.finished \
                or job.suspended or job.pool_template is None or job.pool_uid is None:
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
        if waiting:
            for facts in waiting.values():
                self._answered[facts.uid] = now
            self._task = asyncio.create_task(self._answer(list(waiting.values()), job))

    async def _answer(self, waiting: list[PodFacts], job: JobFacts) -> None:
        try:
            hits, misses = await self._claim_or_ungate(waiting, job)
        except Exception as exc:  # noqa: BLE001 - answered again once settled; its pod waits gated meanwhile
            self.log.warning("Answering %d gated pod(s) of the later waves failed (%s); tried again in %.0f s",
                             len(waiting), exc, ANSWER_SETTLE_SECONDS)
            return
        if hits or misses:
            self.counted(hits, misses)

    async def _claim_or_ungate(self, waiting: list[PodFacts], job: JobFacts) -> tuple[int, int]:
        assert job.pool_template is not None and job.pool_uid is not None
        namespace = naming.pool_namespace(self.ref.namespace, self.spec.pool_name or "")
        pool = PoolRef(name=self.spec.pool_name or "", namespace=self.ref.namespace, uid=job.pool_uid)
        listed = await self.pool_storage.list_pods(namespace, pool_children.warm_selector(pool))
        left = pools.unenrolled_claims(listed, self.ref.uid)
        owned: set[int] = set()
        if left:   # a claim an earlier operator made and never enrolled: its index is its own
            enrolled = await pool_claims.enrol(self.pool_storage, namespace, self.ref, list(left))
            owned = {i for p in enrolled if (i := completion_index(p.get("metadata") or {})) is not None}
        waiting = [f for f in waiting if f.index not in owned]
        warm = pools.claim_order(listed, job.pool_template)
        now, seconds = time.time(), pools.batch_episode_seconds(self.spec)

        async def claim_one(facts: PodFacts, pod: dict) -> dict | None:
            assert facts.index is not None
            live = await self.pool_storage.claim_pod(namespace, pod["metadata"]["name"],
                                                     pools.claim_patch(pod, self.ref, facts.index, now, seconds))
            if live is not None:
                self.claimed([live])   # its hand-over starts now, beside its enrolment
            return live
        pairs = list(zip(waiting, warm))
        claims = await asyncio.gather(*(claim_one(facts, pod) for facts, pod in pairs))
        crash_point("pool:later-claimed")
        enrolled = await pool_claims.enrol(self.pool_storage, namespace, self.ref, [c for c in claims if c is not None])
        taken = {i for p in enrolled if (i := completion_index(p.get("metadata") or {})) is not None}
        # a claim lost to a race, or no warm pod left: the pod starts cold (a refused patch, its
        # gates changed since, or gone: answered again once settled, if it is still gated)
        ungated = await asyncio.gather(*(self.pool_storage.ungate_pod(f.namespace, f.name, pools.ungate_patch(f))
                                         for f in waiting if f.index not in taken))
        cold = sum(ungated)
        if taken or cold:
            self.log.info("Later wave: %d index(es) claimed a warm pod, %d start cold", len(taken), cold)
        return len(taken), cold
