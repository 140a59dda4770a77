"""A pool stalled Unschedulable says so no longer once its pod was placed (or scaled away).

An earlier change keeps a pool's pod the scheduler cannot place pending (a cluster autoscaler adds a node
for it) and, after UNSCHEDULABLE_SECONDS, says Stalled Unschedulable. The daemon
(service.pools.PoolReconciler.round) then remembers the stall in ``_stuck`` and keeps it for
STUCK_BACKOFF (60 s) after the last round that saw it, showing it in the status ("While a stuck
template is waited out its broken pods are gone: the status keeps the reason") and making no pod.
That back-off is for broken pods that were deleted. An unplaced pod is *kept*: when the node
arrives and the pod is placed and warm, nothing is being waited out, yet for 60 s more the pool

- says Ready=False, Stalled=True, reason Unschedulable, quoting the scheduler's "0/2 nodes are
  available" about a pod that is now warm, with readyPods == size (a `kubectl wait
  --for=condition=Ready` or a Flux/Argo health check keeps failing; a human reads a stall);
- makes no pod (``missing = 0`` while ``_stuck``): a claim in that minute is not refilled.

The same happens when the user scales the pool down to what the cluster can hold: the unplaced
pods are deleted as surplus in the round that saw them stuck, and the pool, full, says Stalled
for a minute, naming a pod that no longer exists.

Expected: once the unplaced pod is placed (or gone) and the census finds nothing stuck, the pool
says what it is (Ready, PoolWarm when full) at that round.
"""
from __future__ import annotations

import time

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pool_census import UNSCHEDULABLE_SECONDS
from rolloutbatch.service.context import iso_time
from tests.unit.service.conftest import api  # noqa: F401 (the fixture)
from tests.unit.service.memory_pool import live, make_pool, pod_names, reconciler, run, set_status, warm

MESSAGE = "0/2 nodes are available: 2 Insufficient memory."


def _unplaced(api, name: str, since: float) -> None:
    set_status(api, name, {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE,
         "lastTransitionTime": iso_time(since)}]})


def _conditions(api) -> dict:
    return {c["type"]: c for c in live(api)["status"]["conditions"]}


def test_a_pool_whose_unplaced_pod_was_placed_is_ready_at_once(api) -> None:
    make_pool(api, 2)
    rec = reconciler(api)
    run(rec.round())
    first, second = sorted(pod_names(api))
    warm(api, first)
    _unplaced(api, second, time.time() - UNSCHEDULABLE_SECONDS - 10)
    run(rec.round())
    stalled = _conditions(api)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", v.PoolReason.UNSCHEDULABLE)   # as designed

    warm(api, second)          # the autoscaler's node came; the pod is placed, started, warm
    run(rec.round())
    status = live(api)["status"]
    conditions = _conditions(api)
    assert status["readyPods"] == 2
    assert conditions["Stalled"]["status"] == "False", (
        f"both pods warm, yet the pool says Stalled {conditions['Stalled']['reason']}: {status['message']!r}")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("True", v.PoolReason.WARM)


def test_a_pool_scaled_down_past_its_unplaced_pods_is_ready_at_once(api) -> None:
    make_pool(api, 3)
    rec = reconciler(api)
    run(rec.round())
    names = sorted(pod_names(api))
    warm(api, names[0])
    for name in names[1:]:
        _unplaced(api, name, time.time() - UNSCHEDULABLE_SECONDS - 10)
    run(rec.round())
    assert _conditions(api)["Stalled"]["reason"] == v.PoolReason.UNSCHEDULABLE

    rec.body["spec"]["size"] = 1          # the user scales to what the cluster holds
    run(rec.round())                       # the unplaced pods go, as surplus
    run(rec.round())
    assert pod_names(api) == [names[0]]
    status = live(api)["status"]
    conditions = _conditions(api)
    assert conditions["Stalled"]["status"] == "False", (
        f"1/1 warm, yet the pool says Stalled {conditions['Stalled']['reason']}: {status['message']!r}")
    assert conditions["Ready"]["status"] == "True"
