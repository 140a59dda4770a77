"""handle.refresh(), sync and async: the batch read again by name, never a namesake in its place."""
from __future__ import annotations

import asyncio

import pytest

from rolloutbatch.kube.errors import NotFound
from rolloutbatch.sdk import BatchHandle
from rolloutbatch.sdk.aio import AsyncBatchHandle


def _batch_obj(uid: str, phase: str) -> dict:
    return {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
            "metadata": {"name": "exp", "namespace": "ns", "uid": uid},
            "spec": {"episodes": 2}, "status": {"phase": phase}}


class _NamesakeClient:
    """The batch `exp` (uid A) was deleted and a new `exp` (uid B) created, and it succeeded."""

    def __init__(self, uid: str = "uid-B") -> None:
        self.uid = uid

    def get(self, name, namespace=None):
        return _batch_obj(self.uid, "Succeeded")


class _AsyncNamesakeClient(_NamesakeClient):
    async def get(self, name, namespace=None):
        return _NamesakeClient.get(self, name, namespace)


def test_handle_refresh_does_not_adopt_a_namesake():
    """Every other verb refuses a namesake (ops.stop, delete: a uid precondition, Follower:
    deleted). refresh() took whatever had the name: the handle of batch A then read, stopped and
    deleted batch B."""
    handle = BatchHandle(_NamesakeClient(), _batch_obj("uid-A", "Running"))
    with pytest.raises(NotFound, match="replaced by a namesake .*uid-A -> uid-B"):
        handle.refresh()
    assert handle.uid == "uid-A" and handle.status == {"phase": "Running"}


def test_async_handle_refresh_does_not_adopt_a_namesake():
    handle = AsyncBatchHandle(_AsyncNamesakeClient(), _batch_obj("uid-A", "Running"))
    with pytest.raises(NotFound, match="replaced by a namesake .*uid-A -> uid-B"):
        asyncio.run(handle.refresh())
    assert handle.uid == "uid-A" and handle.status == {"phase": "Running"}


def test_refresh_reads_the_same_batch_anew():
    handle = BatchHandle(_NamesakeClient("uid-A"), _batch_obj("uid-A", "Running"))
    assert handle.refresh() == {"phase": "Succeeded"}
    handle = AsyncBatchHandle(_AsyncNamesakeClient("uid-A"), _batch_obj("uid-A", "Running"))
    assert asyncio.run(handle.refresh()) == {"phase": "Succeeded"}
