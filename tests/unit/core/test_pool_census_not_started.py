"""core.pool_census: how long a pool's pod may go without starting its containers."""
from __future__ import annotations

import pytest

from rolloutbatch.core import naming, pool_census, pool_children
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pod_reading import parse_time

CREATED = "2026-12-03T00:00:00Z"
T0 = parse_time(CREATED)


def pod(state: dict | None, started: bool = False) -> dict:
    statuses = [{"name": naming.CONTAINER_NAME, "started": started, "state": state}] if state is not None else []
    return {"metadata": {"name": "p", "creationTimestamp": CREATED, "labels": {naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM},
                         "annotations": {pool_children.TEMPLATE_ANNOTATION: "t"}},
            "status": {"phase": v.PodPhase.PENDING if not started else v.PodPhase.RUNNING, "containerStatuses": statuses}}


@pytest.mark.parametrize("state", [None, {"waiting": {"reason": "ContainerCreating"}},
                                   {"waiting": {"reason": "ContainerCreating", "message": "sandbox: no handler"}}])
def test_a_pod_not_started_past_the_bound_is_stuck_and_says_what_waits(state):
    young = pool_census.census([pod(state)], "t", T0 + pool_census.NOT_STARTED_SECONDS - 1)
    assert young.starting == ("p",) and not young.stuck
    old = pool_census.census([pod(state)], "t", T0 + pool_census.NOT_STARTED_SECONDS)
    ((name, reason, message),) = old.stuck
    # said, and kept (an image may still be pulling): no pod is made meanwhile, none deleted
    assert (name, reason, old.dead, old.starting) == ("p", v.PoolReason.CANNOT_START, (), ("p",))
    assert pool_census.pods_to_create(pool_census_spec(), old) == 0
    assert "have not started 900s" in message and (not state or "ContainerCreating" in message)


def pool_census_spec():
    from rolloutbatch.core import pool_spec
    return pool_spec.parse_pool_spec({"size": 3, "task": {"files": {"e.py": "x"}}})


def test_the_bound_counts_from_the_pods_scheduling():
    late = pod({"waiting": {"reason": "ContainerCreating"}})
    late["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                     "lastTransitionTime": "2026-12-03T00:10:00Z"}]   # 10 minutes in the queue
    assert not pool_census.census([late], "t", T0 + pool_census.NOT_STARTED_SECONDS + 300).stuck
    assert pool_census.census([late], "t", T0 + pool_census.NOT_STARTED_SECONDS + 600).stuck


def test_a_pod_preparing_is_bounded_by_its_startup_probe_not_here():
    found = pool_census.census([pod({"running": {}}, started=False)], "t", T0 + 10 * pool_census.NOT_STARTED_SECONDS)
    assert found.starting == ("p",) and not found.stuck


def test_without_a_clock_no_pod_is_stuck_for_its_age():
    assert pool_census.census([pod(None)], "t").starting == ("p",)
