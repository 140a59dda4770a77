"""A pool scaled down removes its newest warm pods, whatever order the API lists them in (by
name: random with respect to age for generateName pods); the oldest are claimed first
(core.pools.claim_order) and their prepare is long done."""

from __future__ import annotations

from rolloutbatch.core import naming, pool_census, pool_children, pool_spec, pools

SPEC = pool_spec.parse_pool_spec({"size": 1, "task": {"files": {"e.py": "x"}}})


def _warm(name: str, created: str) -> dict:
    return {"metadata": {"name": name, "uid": f"u-{name}", "creationTimestamp": created,
                         "labels": {naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM},
                         "annotations": {pool_children.TEMPLATE_ANNOTATION: "t1"}},
            "spec": {"containers": [{"name": "episode"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "episode", "started": True,
                                                                  "state": {"running": {}}}]}}


def test_scaling_down_keeps_the_oldest_warm_pod() -> None:
    # as the API lists them: by name
    listed = [_warm("warm-aaaaa", "2026-12-03T10:00:00Z"),    # the newest
              _warm("warm-zzzzz", "2026-12-03T08:00:00Z")]    # waited two hours: claimed first
    found = pool_census.census(listed, "t1")
    assert pools.claim_order(listed)[0]["metadata"]["name"] == "warm-zzzzz"
    doomed = pool_census.pods_to_delete(SPEC, found)
    assert doomed == ["warm-aaaaa"], f"scaled to 1, the pool deletes {doomed}: the oldest warm pod, not the newest"
