"""A failed prepare keeps its back-off when an unplaced pod heads the same round's stalls.

An earlier change added ``PoolReconciler._stuck_kept``: a stall whose pod is *kept* (unplaced, or not
started) ends at the first round that no longer finds it, without the STUCK_BACKOFF (60 s).
It is set from ``found.stuck[0]`` alone: ``self._stuck_kept = name not in found.dead``. census()
lists the stuck pods oldest first, so one round may find two problems of today's template: an
older pod the scheduler could not place for UNSCHEDULABLE_SECONDS (kept) and a newer pod whose
prepare failed (dead: deleted this round). The stall is then marked "kept" though one of its
causes is a broken template whose pods were deleted.

When the kept pod is placed (an autoscaler's node arrives a few seconds later), the next round
finds nothing stuck (the failed pod is gone) and, since ``_stuck_kept`` is true, drops the stall
at once: the pool says Ready/Filling, not Stalled PrepareFailed, and creates a pod at once for
the prepare that failed one round earlier: the churn the back-off exists to stop ("A template
that cannot run ... is not churned: ... tries again only after STUCK_BACKOFF or when the spec
changes").

Expected: a round that finds a dead (replaced) stuck pod keeps the back-off, whatever pod heads
the list: the pool stays Stalled PrepareFailed and makes no pod until STUCK_BACKOFF has passed.
"""
from __future__ import annotations

import time

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pool_census import UNSCHEDULABLE_SECONDS
from rolloutbatch.service.context import iso_time
from tests.unit.service.conftest import api  # noqa: F401 (the fixture)
from tests.unit.service.memory_pool import live, make_pool, pod_names, reconciler, run, set_status, warm

PREPARE_FAILED = {"exitCode": v.NOT_DELIVERED_EXIT, "reason": "Error",
                  "message": "rolloutbatch: the pool prepare exited 1; its output ends:\npip: no such package"}


def _conditions(api) -> dict:
    return {c["type"]: c for c in live(api)["status"]["conditions"]}


def test_a_failed_prepare_keeps_its_back_off_when_an_unplaced_pod_is_listed_first(api) -> None:
    make_pool(api, 2, prepare={"command": ["/bin/sh", "-c", "pip install no-such-package"]})
    events: list = []
    rec = reconciler(api, events)
    run(rec.round())
    first, second = sorted(pod_names(api))   # census order: oldest first, then by name
    set_status(api, first, {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available: 2 Insufficient memory.",
         "lastTransitionTime": iso_time(time.time() - UNSCHEDULABLE_SECONDS - 10)}]})
    set_status(api, second, {"phase": "Failed", "containerStatuses": [
        {"name": naming.CONTAINER_NAME, "state": {"terminated": PREPARE_FAILED}}]})
    run(rec.round())
    assert second not in pod_names(api)            # the failed pod is deleted
    assert _conditions(api)["Stalled"]["status"] == "True"

    warm(api, first)                                # the autoscaler's node came: the old pod is placed
    run(rec.round())                                # a second later, well within STUCK_BACKOFF
    made = sorted(set(pod_names(api)) - {first})
    conditions = _conditions(api)
    assert made == [], (f"the prepare failed one round ago, yet the pool made {made} at once (the "
                        f"back-off was dropped with the unplaced pod's stall)")
    assert conditions["Stalled"]["status"] == "True", (
        f"the template's prepare fails, yet the pool says Stalled=False: {live(api)['status']['message']!r}")
