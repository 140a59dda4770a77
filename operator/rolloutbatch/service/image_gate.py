"""spec.inputImages for one batch: each gated episode pod gets its input's image, then is scheduled.

The rules (which image, which patch) are ``core.episode_images``'; this is the I/O. The reconciler
calls :meth:`ImageGate.round` every round of its loop with the tracker, which holds the newest
facts of the batch's own pods (its Job's, by uid: a pod someone else labelled is never patched).
Each gated pod is patched once per snapshot: a patch whose precondition failed (the pod changed
meanwhile) is tried again only when a newer snapshot of the pod arrives, so nothing spins.
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


class ImageGate:
    def __init__(self, call: Call, spec: BatchSpec, emit: Emit, log: logging.Logger) -> None:
        self.call, self.spec, self.emit, self.log = call, spec, emit, log
        self._handled: dict[str, PodFacts] = {}   # uid -> the snapshot last patched (or tried)
        self._tasks: set[asyncio.Task] = set()
        self._said_refused = False
        self.error: BaseException | None = None

    def round(self, tracker: BatchTracker) -> None:
        """Start a patch for every gated pod whose newest snapshot has not been handled."""
        if not self.spec.input_images or tracker.stopping:
            return
        live = set()
        for facts in tracker.live_pods():
            live.add(facts.uid)
            if needs_image(self.spec, facts) and self._handled.get(facts.uid) != facts:
                self._handled[facts.uid] = facts
                task = asyncio.create_task(self._patch(facts))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        for uid in set(self._handled) - live:
            del self._handled[uid]   # ended or gone: bounded by the pods alive at once

    async def _patch(self, facts: PodFacts) -> None:
        try:
            await self.call(resources.patch_pod, facts.namespace, facts.name, image_patch(self.spec, facts))
        except Invalid as exc:
            # A failed precondition: the pod changed since this snapshot; its next one is tried.
            self.log.info("Pod %s/%s changed before its image was set (%s)", facts.namespace, facts.name, exc)
            if not self._said_refused:
                self._said_refused = True
                self.emit("Warning", v.EVENT_IMAGE_NOT_SET, f"the image of pod {facts.name} could not be set "
                                                            f"yet: {exc}"[:1000])
        except Exception as exc:  # noqa: BLE001 - the reconciler's policy decides
            if policy.is_transient(exc):
                self._handled.pop(facts.uid, None)   # the next round tries again
                self.log.warning("Setting the image of pod %s/%s failed (%s); trying again", facts.namespace,
                                 facts.name, exc)
            elif self.error is None:
                self.error = exc
