"""spec.inputImages for one batch: each gated episode pod gets its input's image, then is scheduled.

The rules (which image, which patch) are ``core.episode_images``'; this is the I/O. The reconciler
calls :meth:`ImageGate.round` every round of its loop with the tracker, which holds the newest
facts of the batch's own pods (its Job's, by uid: a pod someone else labelled is never patched).
Each gated pod is patched once (never while its patch is in flight); a patch whose precondition
failed (the pod changed meanwhile) is tried again only when a newer snapshot of the pod arrives,
so nothing spins.
Transient errors are retried next round; any other error is kept in :attr:`error` for the
reconciler's error policy, which ends the batch with it (a pod left gated would otherwise wait,
unscheduled, until the batch's deadline).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.episode_images import image_patch, needs_image
from rolloutbatch.core.model import BatchSpec, PodFacts
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Invalid
from rolloutbatch.service import policy

Call = Callable[..., Awaitable[Any]]
Emit = Callable[[str, str, str], None]
# A pod's first snapshots race with the scheduler's own status writes: one failed precondition is
# normal, a pod that keeps refusing its patch is said in an Event.
REFUSALS_BEFORE_WARNING = 3


class ImageGate:
    def __init__(self, call: Call, spec: BatchSpec, emit: Emit, log: logging.Logger) -> None:
        self.call, self.spec, self.emit, self.log = call, spec, emit, log
        self._tried: dict[str, PodFacts] = {}     # uid -> the snapshot last patched (or tried)
        self._failures: dict[str, int] = {}       # uid -> patches whose preconditions failed
        self._in_flight: set[str] = set()
        self._done: set[str] = set()              # patched: a gate once lifted never comes back
        self._tasks: set[asyncio.Task] = set()
        self._said_refused = False
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
            await self.call(resources.patch_pod, facts.namespace, facts.name, image_patch(self.spec, facts))
            self._done.add(facts.uid)
        except Invalid as exc:
            # A failed precondition: the pod changed since this snapshot; its next one is tried.
            failures = self._failures[facts.uid] = self._failures.get(facts.uid, 0) + 1
            self.log.info("Pod %s/%s changed before its image was set (%s)", facts.namespace, facts.name, exc)
            if failures >= REFUSALS_BEFORE_WARNING and not self._said_refused:
                self._said_refused = True
                self.emit("Warning", v.EVENT_IMAGE_NOT_SET, f"the image of pod {facts.name} could not be set "
                                                            f"({failures} tries): {exc}"[:1000])
        except Exception as exc:  # noqa: BLE001 - the reconciler's policy decides
            if policy.is_transient(exc):
                self._tried.pop(facts.uid, None)   # the next round tries again
                self.log.warning("Setting the image of pod %s/%s failed (%s); trying again", facts.namespace,
                                 facts.name, exc)
            elif self.error is None:
                self.error = exc
        finally:
            self._in_flight.discard(facts.uid)
