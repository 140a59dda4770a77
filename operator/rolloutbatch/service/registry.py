"""Routes watch events to the reconciler of their batch, by the batch-UID label.

Pod and Job events can arrive before the batch's daemon has started (after an operator restart,
kopf lists all three kinds at once); they are kept and replayed when the reconciler appears.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping

from rolloutbatch.core.model import PodFacts
from rolloutbatch.core.job_facts import JobFacts
from rolloutbatch.service.context import Context
from rolloutbatch.service.reconciler import BatchReconciler, Emit

# Events of batches without a reconciler: bounded so orphaned or forged children (anyone can
# label a pod with a batch's uid) cannot grow memory. What is dropped is not lost: a reconciler
# that adopts a running batch lists the batch's pods itself.
MAX_EARLY_BATCHES = 1000
MAX_EARLY_PODS = 50_000


class Registry:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._reconcilers: dict[str, BatchReconciler] = {}
        self._early_pods: OrderedDict[str, dict[str, tuple[PodFacts, bool]]] = OrderedDict()
        self._early_jobs: dict[str, JobFacts] = {}
        self._early_count = 0     # pod facts held in _early_pods

    def reconciler(self, body: Mapping, emit: Emit, logger: logging.Logger) -> BatchReconciler:
        uid = body["metadata"]["uid"]
        rec = self._reconcilers.get(uid)
        if rec is None:
            rec = BatchReconciler(self.ctx, body, emit, logger)
            self._reconcilers[uid] = rec
            early = self._early_pods.pop(uid, {})
            self._early_count -= len(early)
            for facts, deleted in early.values():
                rec.observe_pod(facts, deleted)
            job = self._early_jobs.pop(uid, None)
            if job is not None:
                rec.observe_job(job)
        else:
            rec.body, rec.emit, rec.log = body, emit, logger
        return rec

    def get(self, uid: str) -> BatchReconciler | None:
        return self._reconcilers.get(uid)

    def forget(self, uid: str) -> None:
        self._reconcilers.pop(uid, None)
        self._early_count -= len(self._early_pods.pop(uid, {}))
        self._early_jobs.pop(uid, None)

    def pod_event(self, batch_uid: str, facts: PodFacts, deleted: bool) -> None:
        rec = self._reconcilers.get(batch_uid)
        if rec is not None:
            rec.observe_pod(facts, deleted)
            return
        pods = self._early_pods.setdefault(batch_uid, {})
        if facts.uid not in pods:
            self._early_count += 1
        pods[facts.uid] = (facts, deleted)
        self._early_pods.move_to_end(batch_uid)
        while len(self._early_pods) > MAX_EARLY_BATCHES or self._early_count > MAX_EARLY_PODS:
            _, dropped = self._early_pods.popitem(last=False)
            self._early_count -= len(dropped)

    def job_event(self, batch_uid: str, facts: JobFacts, deleted: bool = False) -> None:
        rec = self._reconcilers.get(batch_uid)
        if rec is not None:
            rec.observe_job(facts, deleted)
        elif not deleted and len(self._early_jobs) < MAX_EARLY_BATCHES:
            self._early_jobs[batch_uid] = facts

