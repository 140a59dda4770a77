"""A pool's pods mount its paths as written (a trailing '/' the CRD admits: their digest must not
change), and the pool's paths are read cleaned, as a batch's (core.spec_fields.checked_path), so a batch
naming its pool's path, either way, runs on it."""

from __future__ import annotations

from rolloutbatch.core import pool_spec
from rolloutbatch.core.spec import parse_spec

TASK = {"files": {"episode.py": "print(1)"}}


def test_a_pool_verifier_path_with_a_trailing_slash_serves_a_batch_naming_the_same_path() -> None:
    pool = pool_spec.parse_pool_spec({"size": 1, "task": TASK, "verifier": {"mountPath": "/grade/"}})
    for written in ("/grade/", "/grade"):
        batch = parse_spec({"episodes": 1, "poolRef": {"name": "swe"},
                            "verifier": {"files": {"verify.py": "x"}, "mountPath": written}})
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


SYSTEM_MOUNTS = ["/dev", "/proc", "/sys/fs", "/", "/x/../proc/self", "/dev/termination-log"]


def test_no_mount_of_a_pool_or_batch_lands_on_the_systems_directories() -> None:
    """Task files, workspace or verifier files on /dev, /proc, /sys or the termination message's
    file (or over them: '/') make no pod that can start, or one whose launcher cannot write its
    termination message: refused by the spec, naming the field, before anything is made. A mount
    under /dev (a workspace at /dev/shm) is the user's to make."""
    import pytest

    from rolloutbatch.core.model import SpecError
    for path in SYSTEM_MOUNTS:
        for field, spec in [("spec.task.mountPath", {"task": {**TASK, "mountPath": path}}),
                            ("spec.workspace.mountPath", {"task": TASK, "workspace": {"mountPath": path}})]:
            with pytest.raises(SpecError, match="container runtime keeps") as err:
                pool_spec.parse_pool_spec({"size": 1, **spec})
            assert err.value.field == field
            with pytest.raises(SpecError, match="container runtime keeps") as err:
                parse_spec({"episodes": 1, **spec})
            assert err.value.field == field
        with pytest.raises(SpecError) as err:
            parse_spec({"episodes": 1, "task": TASK, "verifier": {"files": {"v.py": "x"}, "mountPath": path}})
        assert err.value.field == "spec.verifier.mountPath"
    assert parse_spec({"episodes": 1, "task": {**TASK, "mountPath": "/devices"}}).task_mount_path == "/devices"
    assert parse_spec({"episodes": 1, "task": TASK, "workspace": {"mountPath": "/dev/shm"}}).workspace_mount_path \
        == "/dev/shm"
