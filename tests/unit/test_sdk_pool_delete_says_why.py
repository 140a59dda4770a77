"""`rolloutbatch pool delete` / Client.delete_pool that times out says what the pool waits for
(status.message, written by the operator's deletion handler: its batches still running on its
pods), not "is the operator running?" when the operator is running and said why."""

from __future__ import annotations

import pytest

from rolloutbatch import sdk
from rolloutbatch.sdk import ops
from tests.support.memory_api import MemoryApi

NS = "rl"
FILES = {"setup.sh": "true"}


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


def test_a_pool_delete_that_times_out_says_what_the_pool_waits_for(api, monkeypatch):
    client = sdk.Client(api=api, namespace=NS)
    client.create_pool("warm", 1, task_files=FILES)
    api.merge_patch(f"{ops.pools_path(NS)}/warm", {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}},
                    "the operator's finalizer")
    waiting = "Deleting: waiting for 1 batch(es) that run on its pods: train-7"
    api.merge_patch(f"{ops.pools_path(NS)}/warm/status", {"status": {"message": waiting}}, "the operator, running")
    monkeypatch.setattr("time.sleep", lambda _: None)
    with pytest.raises(TimeoutError) as err:
        client.delete_pool("warm", timeout=0)
    assert "train-7" in str(err.value), f"the timeout says {str(err.value)!r}, not what the pool said: {waiting!r}"
