"""A pool whose pods never leave ContainerCreating says so ("a pool never waits forever without
saying why"): a pod whose containers have not started core.pool_census.NOT_STARTED_SECONDS after
its creation (a RuntimeClass handler the nodes lack, a CNI that fails, a volume the kubelet cannot
mount) is stuck, with the node's reason, and the pool is Stalled."""

from __future__ import annotations

import time

from rolloutbatch.core import vocabulary as v
from tests.unit.service.conftest import api  # noqa: F401 (the fixture)
from tests.unit.service.memory_pool import live, make_pool, pod_names, reconciler, run, set_status

HOURS = 3600.0


def _stuck_creating(api, name: str) -> None:
    set_status(api, name, {
        "phase": "Pending", "startTime": "2026-12-03T00:00:00Z",
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{"name": "episode", "started": False,
                               "state": {"waiting": {"reason": "ContainerCreating"}}}]})


def test_a_pool_whose_pods_never_leave_container_creating_eventually_says_so(api, monkeypatch) -> None:
    make_pool(api, 2)
    rec = reconciler(api)
    run(rec.round())
    first = pod_names(api)
    for name in first:
        _stuck_creating(api, name)
    # hours later (the pods' creation is long past; prepare.timeoutSeconds defaults far below that)
    later = time.time() + 6 * HOURS
    monkeypatch.setattr(time, "time", lambda: later)
    for _ in range(3):
        run(rec.round())
    status = live(api)["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    says_why = conditions["Stalled"]["status"] == "True" or "ContainerCreating" in status["message"] \
        or any(name in status["message"] for name in first)
    assert says_why, (f"six hours on, the pool still says only {status['message']!r} "
                      f"(Reconciling={conditions['Reconciling']['status']}, Stalled={conditions['Stalled']['status']}, "
                      f"reason {conditions['Ready']['reason']}); its pods {pod_names(api)} are the same, never replaced")
    assert conditions["Ready"]["reason"] != v.PoolReason.FILLING
