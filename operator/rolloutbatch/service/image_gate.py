"""spec.inputImages for one batch: each gated episode pod gets its input's image, then is scheduled.

The rules (which image, which patch) are ``core.episode_images``'; this is the I/O. The reconciler
calls :meth:`ImageGate.round` every round of its loop with the tracker, which holds the newest
facts of the batch's own pods (its Job's, by uid: a pod someone else labelled is never patched).
Each gated pod is patched once (never while its patch is in flight); a patch whose precondition
failed (the pod changed meanwhile) is tried again only when a newer snapshot of the pod arrives,
so nothing spins.
Transient errors are retried with the policy's backoff, until they last past its give-up time; a
patch the cluster refuses (an admission policy on images answers 422 like a failed test: the pod,
read again, tells them apart) and any other error are kept in :attr:`error` for the reconciler's
error policy, which ends the batch with it (a pod left gated would otherwise wait, unscheduled,
until the batch's deadline, under a status saying the episodes run).
"""

from __future__ import annotations

import asyncio
import logging
import time

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.episode_images import image_patch, needs_image
from rolloutbatch.core.model import BatchSpec, PodFacts
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.errors import Invalid
from rolloutbatch.service import policy
from rolloutbatch.service.context import Emit

# A pod's first snapshots race with the scheduler's own status writes: one failed precondition is
# normal, a pod that keeps refusing its patch is said in an Event.
REFUSALS_BEFORE_WARNING = 3


class ImageGate:
    def __init__(self, storage: Storage, spec: BatchSpec, emit: Emit, log: logging.Logger,
                 give_up_after: float = 600.0) -> None:
        self.storage, self.spec, self.emit, self.log = storage, spec, emit, log
        self._tried: dict[str, PodFacts] = {}     # uid -> the snapshot last patched (or tried)
        self._failures: dict[str, int] = {}       # uid -> patches whose preconditions failed
        self._in_flight: set[str] = set()
        self._done: set[str] = set()              # patched: a gate once lifted never comes back
        self._tasks: set[asyncio.Task] = set()
        self._said_refused = False
        self._retry = policy.Retry(give_up_after)   # consecutive transient failures, any pod
        self.error: BaseException | None = None

    def round(self, tracker: BatchTracker) -> None:
        """Start a patch for every gated pod whose newest snapshot has not been tried."""
        if not self.spec.input_images or tracker.stopping:
            return
        live = set()
        for facts in tracker.live_pods():
            uid = facts.uid
            live.add(uid)
            if uid in self._done or uid in self._in_flight or self._tried.get(uid) == facts \
                    or not needs_image(self.spec, facts):
                continue
            self._tried[uid] = facts
            self._in_flight.add(uid)
            task = asyncio.create_task(self._patch(facts))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for table in (self._tried, self._failures):
            for uid in set(table) - live:
                del table[uid]   # ended or gone: bounded by the pods alive at once
        self._done &= live | self._in_flight

    async def _patch(self, facts: PodFacts) -> None:
        try:
            await self.storage.patch_pod(facts.namespace, facts.name, image_patch(self.spec, facts))
            self._done.add(facts.uid)
            self._retry.succeeded()
        except Invalid as exc:
            try:
                await self._invalid(facts, exc)
            except Exception as read_error:  # noqa: BLE001 - the pod could not be read again
                await self._failed(facts, read_error)
        except Exception as exc:  # noqa: BLE001 - the reconciler's policy decides
            await self._failed(facts, exc)
        finally:
            self._in_flight.discard(facts.uid)

    async def _failed(self, facts: PodFacts, exc: Exception) -> None:
        """A transient error is tried again after the policy's backoff, until its give-up time;
        any other is kept for the reconciler's policy."""
        delay = self._retry.failed(time.monotonic()) if policy.is_transient(exc) else None
        if delay is None:   # refused, or failing for Settings.transient_give_up
            self.error = self.error or exc
            return
        self.log.warning("Setting the image of pod %s/%s failed (%s); trying again in %ss", facts.namespace,
                         facts.name, exc, delay)
        await asyncio.sleep(delay)
        self._tried.pop(facts.uid, None)   # the next round tries again

    async def _invalid(self, facts: PodFacts, exc: Invalid) -> None:
        """422: a test of the patch failed (the pod changed: its next snapshot is tried), or the
        cluster refused the change itself (an admission policy on images): told apart by reading
        the pod, since a refusal leaves it exactly as the patch's tests expect."""
        live = await self.storage.get("Pod", facts.name, facts.namespace)
        if live is not None and image_patch(self.spec, pod_facts(live)) == image_patch(self.spec, facts) \
                and needs_image(self.spec, pod_facts(live)):
            self.error = self.error or Invalid(f"the cluster refused to set the image of pod {facts.namespace}/"
                                               f"{facts.name} (spec.inputImages): {exc}"[:900], status=exc.status,
                                               reason=exc.reason)
            return
        failures = self._failures[facts.uid] = self._failures.get(facts.uid, 0) + 1
        self.log.info("Pod %s/%s changed before its image was set (%s)", facts.namespace, facts.name, exc)
        if failures >= REFUSALS_BEFORE_WARNING and not self._said_refused:
            self._said_refused = True
            self.emit("Warning", v.EVENT_IMAGE_NOT_SET, f"the image of pod {facts.name} could not be set "
                                                        f"({failures} tries): {exc}"[:1000])
