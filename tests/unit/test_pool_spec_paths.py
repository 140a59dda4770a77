"""A pool's mount paths are kept as written (a trailing '/' the CRD admits: its pods' digest must
not change), a batch's without it (core.spec.checked_path); the two are compared as directories,
so a batch naming its pool's path, either way, runs on it."""

from __future__ import annotations

from rolloutbatch.core import pool_spec
from rolloutbatch.core.spec import parse_spec

TASK = {"files": {"episode.py": "print(1)"}}


def test_a_pool_verifier_path_with_a_trailing_slash_serves_a_batch_naming_the_same_path() -> None:
    pool = pool_spec.parse_pool_spec({"size": 1, "task": TASK, "verifier": {"mountPath": "/grade/"}})
    for written in ("/grade/", "/grade"):
        batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"},
                            "verifier": {"files": {"v.py": "x"}, "mountPath": written}})
        assert batch.verifier is not None
        problem = pool_spec.verifier_conflict(pool, batch.verifier.mount_path)
        assert problem is None, f"batch verifier.mountPath {written!r}: {problem}"


def test_a_pool_workspace_with_a_trailing_slash_serves_a_batch_naming_the_same_workspace() -> None:
    pool = pool_spec.parse_pool_spec({"size": 1, "task": TASK, "workspace": {"mountPath": "/work/"}})
    batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "workspace": {"mountPath": "/work/"}})
    assert pool_spec.sandbox_conflict(batch, pool) is None


def test_a_workspace_size_the_pool_has_spelled_another_way_is_the_pools() -> None:
    """A workspace size is compared by amount, as resources are (pool_spec.amount): a pooled batch
    written with its pool's size in another unit runs on it."""
    pool = pool_spec.parse_pool_spec({"size": 1, "task": TASK, "workspace": {"sizeLimit": "2048Mi"}})
    batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"}, "workspace": {"sizeLimit": "2Gi"}})
    assert pool_spec.sandbox_conflict(batch, pool) is None
