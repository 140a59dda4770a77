"""core.pool_census: a pool's pod the scheduler cannot place is kept pending, not replaced (a
cluster autoscaler adds a node for a pending pod, and a pod made again would start its wait
over): the pool says it is filling, quoting the scheduler, and is Stalled Unschedulable only
after UNSCHEDULABLE_SECONDS, still keeping the pod and making no other."""
from __future__ import annotations

from rolloutbatch.core import naming, pool_census, pool_children, pool_spec
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pod_reading import parse_time

CREATED = "2026-12-03T00:00:00Z"
SAID = "2026-12-03T00:00:05Z"   # when the scheduler first said so
T0 = parse_time(SAID)
MESSAGE = "0/2 nodes are available: 2 Insufficient memory."
SPEC = pool_spec.parse_pool_spec({"size": 2, "task": {"files": {"e.py": "x"}}})
REF = pool_spec.PoolRef(namespace="team", name="warm", uid="u1")


def unplaced(template: str = "t") -> dict:
    return {"metadata": {"name": "p", "creationTimestamp": CREATED,
                         "labels": {naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM},
                         "annotations": {pool_children.TEMPLATE_ANNOTATION: template}},
            "status": {"phase": v.PodPhase.PENDING, "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE,
                 "lastTransitionTime": SAID}]}}


def test_a_pod_the_scheduler_cannot_place_is_kept_and_the_pool_fills_quoting_the_scheduler():
    found = pool_census.census([unplaced()], "t", T0 + pool_census.UNSCHEDULABLE_SECONDS - 1)
    assert (found.starting, found.dead, found.stuck) == (("p",), (), ())
    assert pool_census.pods_to_create(SPEC, found) == 1          # the rest of the pool is made meanwhile
    status = pool_census.pool_status(REF, SPEC, found, 1, 0, SAID)
    ready = next(c for c in status["conditions"] if c["type"] == v.CONDITION_READY)
    assert ready["reason"] == v.PoolReason.FILLING and MESSAGE in status["message"], status["message"]


def test_past_the_grace_the_pool_is_stalled_and_still_keeps_the_pod():
    found = pool_census.census([unplaced()], "t", T0 + pool_census.UNSCHEDULABLE_SECONDS)
    ((name, reason, message),) = found.stuck
    assert (name, reason, message) == ("p", v.PoolReason.UNSCHEDULABLE, MESSAGE)
    assert found.dead == () and found.starting == ("p",) and pool_census.pods_to_delete(SPEC, found) == []
    assert pool_census.pods_to_create(SPEC, found) == 0          # no churn: it may yet be placed
    status = pool_census.pool_status(REF, SPEC, found, 1, 0, SAID)
    stalled = next(c for c in status["conditions"] if c["type"] == v.CONDITION_STALLED)
    assert (stalled["status"], stalled["reason"]) == (v.CONDITION_TRUE, v.PoolReason.UNSCHEDULABLE)


def test_an_older_templates_pending_pod_is_replaced():
    found = pool_census.census([unplaced("old")], "t", T0 + 3600)
    assert "p" in found.dead + found.stale and not found.stuck


def test_an_older_templates_broken_pod_is_replaced_without_stalling_todays_template():
    """A pool whose image could not be pulled, fixed: the old pods in ImagePullBackOff go, and
    their failure is not today's template's (it would hold the new pods back for the stuck
    back-off, under a Warning that blames the fixed template)."""
    broken = unplaced("old")
    broken["status"] = {"phase": v.PodPhase.PENDING, "containerStatuses": [
        {"name": naming.CONTAINER_NAME, "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}
    found = pool_census.census([broken], "t", T0)
    assert found.dead == ("p",) and not found.stuck
    assert pool_census.pods_to_create(SPEC, found) == 2
    same = pool_census.census([dict(broken, metadata={**broken["metadata"],
                                                      "annotations": {pool_children.TEMPLATE_ANNOTATION: "t"}})], "t", T0)
    assert [s[1] for s in same.stuck] == [v.PoolReason.IMAGE]
