"""The one place a batch's status is written, and the memory of what was last written.

Progress is paced by ``core.cadence`` (at most once per interval, and about once per 1/40 or
1/20 of the batch); a change of phase waits only for the shortest interval; a forced write (a
transition, the end) is sent at once. Only what changed is sent, as a JSON merge patch
(``core.status.status_patch``). What was written is what the next patch is computed against, so
every write, the bare fallback of a stall included, goes through here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from rolloutbatch.core.cadence import Cadence
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.results import DIGESTS, PENDING_DIGESTS
from rolloutbatch.core.status import bare_failure, status_patch
from rolloutbatch.core.tracker import BatchTracker
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.storage import Storage


class StatusWriter:
    def __init__(self, storage: Storage, ref: BatchRef, recorded: Mapping, cadence: Cadence) -> None:
        self.storage, self.ref, self.cadence = storage, ref, cadence
        self.last: dict = dict(recorded or {})   # the status as last written (or read at start)
        self._version = -1                       # the tracker's version it held
        self._finals = 0                         # ... and how many episodes were final then
        self._at = -math.inf                     # time.monotonic(): a wall clock stepped back holds no write

    @property
    def phase(self) -> str | None:
        return self.last.get("phase")

    def due(self, phase: str, tracker: BatchTracker | None, *, force: bool) -> bool:
        """Whether a write of ``phase`` is due now (a forced one always is)."""
        if force or tracker is None:
            return True
        elapsed = time.monotonic() - self._at
        if phase != self.phase:
            return elapsed >= self.cadence.min_interval
        return self.cadence.due(elapsed=elapsed, changed=tracker.version != self._version,
                                finished_since=len(tracker.results) - self._finals, episodes=tracker.episodes)

    async def write(self, new: dict, tracker: BatchTracker | None, started: float) -> None:
        """Send what changed from the last write to ``new``. ``started``: the monotonic time the
        write was decided, before ``new`` was built (what changes meanwhile makes the next due)."""
        version, finals = (tracker.version, len(tracker.results)) if tracker else (-1, 0)
        patch = status_patch(self.last, new)
        if patch:
            await self.storage.patch_batch_status(self.ref.namespace, self.ref.name, patch)
            crash_point(f"status:{new.get('phase')}")
            self.last = new
        self._at = started
        self._version, self._finals = version, finals

    async def vouch(self, name: str, digest: str, current: str | None) -> None:
        """Record a results write's digest as pending, before the write (``core.results``); the
        next write (a built status holds no pending digests) drops them, the digest recorded then.
        ``current``: the digest of what the ConfigMap holds now, if the operator wrote or adopted it.
        Not recorded yet (adopted by its pending digest after a crash), it is recorded in the same
        patch: the new pending digest replaces the only one that vouched for it."""
        patch: dict = {PENDING_DIGESTS: {name: digest}}
        recorded = self.last.get(DIGESTS)
        recorded = recorded if isinstance(recorded, Mapping) else {}
        if current is not None and recorded.get(name) != current:
            patch[DIGESTS] = {name: current}
        # remembered before it is sent: a patch the API applied though the answer was lost (a
        # timeout) must still be dropped by the next write
        pending = self.last.get(PENDING_DIGESTS)
        self.last = {**self.last, PENDING_DIGESTS: {**(pending if isinstance(pending, Mapping) else {}), name: digest}}
        await self.storage.patch_batch_status(self.ref.namespace, self.ref.name, patch)
        crash_point("status:pending")
        if DIGESTS in patch:
            self.last = {**self.last, DIGESTS: {**recorded, name: current}}

    async def write_bare_failure(self, reason: str, message: str, now_iso: str,
                                 results_digests: Mapping[str, str] | None = None) -> None:
        """The smallest status that says Failed with its reason: the fallback when the API
        refuses the full one (a batch must end visibly). It still records the digests of the
        results written last, or readers would not trust the rows it ended with."""
        bare = bare_failure(reason, message, self.ref.generation, now_iso, self.last.get("conditions") or ())
        if results_digests:
            bare[DIGESTS] = dict(results_digests)
        if PENDING_DIGESTS in self.last:
            bare[PENDING_DIGESTS] = None   # recorded or not written: a pending map must not outlive the end
        await self.storage.patch_batch_status(self.ref.namespace, self.ref.name, bare)
        self.last = {k: val for k, val in {**self.last, **bare}.items() if val is not None}
