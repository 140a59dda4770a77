"""A RolloutPool from creation to deletion: its namespace, its warm pods, its status.

One :class:`PoolReconciler` runs as the body of the pool's kopf daemon. Each round lists the
pool's unclaimed pods, sorts them (``core.pools.census``), deletes the dead, stale and surplus
ones, creates what is missing up to ``spec.size`` and writes the status when it changed. The
rounds are paced: a short one while the pool fills, a long one (``FULL_PERIOD``) when it is full.
A claim does not wake it: on this 2-core machine a refill started at once took the CPU from the
episodes just handed over (20 episodes from a full pool: batch -> all ready 5.3 s with an
immediate refill, 2.3 s when it waits for the next round; bench/pools.py). The spec is read from the daemon's live body each round, so a
``kubectl scale`` takes effect without a restart.

A template that cannot run (an image that cannot be pulled, a missing RuntimeClass, a prepare that
fails) is not churned: the pool says ``Stalled`` with the reason, deletes the broken pods, and
tries again only after ``STUCK_BACKOFF`` or when the spec changes.

Deletion (:meth:`delete`): the warm pods go at once; the namespace waits while a batch's Job
still runs in it (the claimed pods are that batch's), and the pool's message says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from rolloutbatch.core import naming, pools
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.scope import POOLS_REFUSED_MESSAGE
from rolloutbatch.kube.errors import KubeError, NotOurs
from rolloutbatch.kube.pool_storage import PoolStorage
from rolloutbatch.service.context import iso_time

Emit = Callable[[str, str, str], None]
FILLING_PERIOD = 0.5       # a round while pods start (seconds)
FULL_PERIOD = 5.0          # a round when the pool is full: a claim's refill starts within this
STUCK_BACKOFF = 60.0       # a stuck template is tried again after this long, or at once on a spec change
MAX_CREATES_PER_ROUND = 50  # pod creations in flight at once


class PoolReconciler:
    """Drives one RolloutPool; ``body`` is kopf's live view of it."""

    def __init__(self, storage: PoolStorage, body: Mapping, emit: Emit, logger: logging.Logger,
                 clusterwide: bool = True) -> None:
        self.clusterwide = clusterwide
        self.storage = storage
        self.body = body
        self.ref = pools.pool_ref(body)
        self.emit = emit
        self.log = logger
        self._last_status: dict | None = None
        # A stuck template: (generation, since, (pod, reason, message)); kept while it is waited out
        self._stuck: tuple[int, float, tuple[str, str, str]] | None = None
        self._children_for: tuple[int, str] | None = None    # (generation, task digest) the children match

    @property
    def namespace(self) -> str:
        return naming.pool_namespace(self.ref.namespace, self.ref.name)

    def _generation(self) -> int:
        return int((self.body.get("metadata") or {}).get("generation") or 1)

    def _claimed(self) -> int:
        return int(((self.body.get("status") or {}).get("claimedPods")) or 0)

    async def run(self) -> None:
        """Rounds until cancelled (the pool's deletion). An API error is logged and retried;
        an invalid spec is said in the status and waited out (the spec may be fixed)."""
        while True:
            period = FULL_PERIOD
            try:
                period = await self.round()
            except asyncio.CancelledError:
                raise
            except SpecError as exc:
                await self._write({"message": f"invalid spec: {exc}", "observedGeneration": self._generation()})
            except NotOurs as exc:
                await self._write({"message": str(exc), "observedGeneration": self._generation()})
            except KubeError as exc:
                self.log.warning("Pool round failed (%s); retrying", exc)
                period = 2.0
            await asyncio.sleep(period)

    async def round(self) -> float:
        spec = pools.parse_pool_spec(self.body.get("spec") or {})
        generation = self._generation()
        if not self.clusterwide:   # nothing is created: the status says why (core.scope)
            refused = pools.PoolCensus((), (), (), (("-", str(v.PoolReason.CLUSTER_RIGHTS), POOLS_REFUSED_MESSAGE),), ())
            await self._write(pools.pool_status(self.ref, spec, refused, generation, self._claimed(),
                                                iso_time(time.time()) or "", self.body.get("status")))
            return FULL_PERIOD
        await self._ensure_children(spec, generation)
        pods = await self.storage.list_pods(self.namespace, f"{naming.LABEL_POOL_UID}={self.ref.uid}")
        found = pools.census(pods, pools.template_digest(self.ref, spec))
        now = time.time()
        if found.stuck:
            name, reason, message = found.stuck[0]
            if self._stuck is None or self._stuck[0] != generation:
                self.emit("Warning", str(reason), f"pod {name}: {message}")
            self._stuck = (generation, now, found.stuck[0])
        elif self._stuck is not None and (self._stuck[0] != generation or now - self._stuck[1] > STUCK_BACKOFF):
            self._stuck = None
        uids = {(p.get("metadata") or {}).get("name"): (p.get("metadata") or {}).get("uid") for p in pods}
        for name in pools.pods_to_delete(spec, found):
            await self.storage.delete_pod(self.namespace, name, uids.get(name) or "")
        wanted = 0 if self._stuck is not None else pools.pods_to_create(spec, found)
        created = 0
        for start in range(0, wanted, MAX_CREATES_PER_ROUND):
            batch = [pools.warm_pod(self.ref, spec) for _ in range(min(MAX_CREATES_PER_ROUND, wanted - start))]
            results = await asyncio.gather(*(self.storage.create_pod(p) for p in batch), return_exceptions=True)
            made = tuple(r["metadata"]["name"] for r in results if isinstance(r, dict))
            created += len(made)
            found = dataclasses.replace(found, starting=found.starting + made)   # the status counts them now
            refused = next((r for r in results if isinstance(r, KubeError)), None)
            if refused is not None:
                problem = ("-", str(v.PoolReason.PODS_NOT_CREATED), f"creating a warm pod was refused: {refused}")
                if self._stuck is None:
                    self.emit("Warning", problem[1], problem[2])
                self._stuck = (generation, now, problem)
                break
        # While a stuck template is waited out its broken pods are gone: the status keeps the reason.
        shown = found if self._stuck is None or found.stuck else dataclasses.replace(found, stuck=(self._stuck[2],))
        status = pools.pool_status(self.ref, spec, shown, generation, self._claimed(), iso_time(now) or "",
                                   self.body.get("status"))
        await self._write(status)
        filling = len(found.warm) < spec.size and self._stuck is None
        return FILLING_PERIOD if filling or created else FULL_PERIOD

    async def _ensure_children(self, spec: pools.PoolSpec, generation: int) -> None:
        digest = str(hash(tuple(sorted(spec.task_files.items())))) + spec.network
        if self._children_for == (generation, digest):
            return
        for obj in (pools.namespace(self.ref), pools.service_account(self.ref),
                    pools.network_policy(self.ref, spec), pools.task_configmap(self.ref, spec)):
            await self.storage.ensure(obj, self.ref.uid)
        self._children_for = (generation, digest)

    async def _write(self, status: dict) -> None:
        comparable = {k: val for k, val in status.items() if k != "conditions"}
        conditions = [{k: val for k, val in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []]
        key = {**comparable, "conditions": conditions}
        if key == self._last_status:
            return
        await self.storage.patch_pool_status(self.ref.namespace, self.ref.name, status)
        self._last_status = key

    async def delete(self) -> str | None:
        """Remove the pool's pods and, once no batch's Job runs in it, its namespace. Returns what
        it still waits for (None: done)."""
        if not self.clusterwide:
            return None   # a namespaced install created nothing for it
        pods = await self.storage.list_pods(self.namespace, pools.warm_selector(self.ref))
        for pod in pods:
            meta = pod.get("metadata") or {}
            await self.storage.delete_pod(self.namespace, meta.get("name", ""), meta.get("uid", ""))
        jobs = [j for j in await self.storage.list_jobs(self.namespace)
                if not (j.get("metadata") or {}).get("deletionTimestamp")]
        if jobs:
            names = ", ".join(sorted((j.get("metadata") or {}).get("labels", {}).get(naming.LABEL_BATCH_NAME, "?")
                                     for j in jobs)[:5])
            return f"waiting for {len(jobs)} batch(es) that hold its pods to end: {names}"
        await self.storage.delete_namespace(self.namespace, self.ref.uid)
        return None

