"""`submit(batch, pool=...)` and `rolloutbatch submit --pool` refuse a cold manifest whose task (or
another pool-owned field) is not the pool's, also when one of those fields is invalid: with_pool
drops them, so nothing else would refuse it, and its episodes would run the pool's task."""

from __future__ import annotations

import asyncio

import pytest

from rolloutbatch import GROUP, POOL_KIND, VERSION, sdk
from rolloutbatch.core.pool_conversion import manifest_conflict
from rolloutbatch.sdk.aio import AsyncClient
from tests.support.memory_api import AsyncMemoryApi, MemoryApi

NS = "rl"
POOL_FILES = {"episode.py": "print('pool task')"}
POOL_SPEC = {"size": 2, "task": {"files": POOL_FILES}}

# Cold manifests whose task is NOT the pool's, each with one invalid pool-owned field beside it.
BAD_COLD = [
    pytest.param({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}, id="requests-above-limits"),
    pytest.param({"image": "my image"}, id="image-with-a-space"),
    pytest.param({"workspace": {"sizeLimit": "-1Gi"}}, id="negative-workspace"),
]


def _cold(extra: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutBatch", "metadata": {"name": "step", "namespace": NS},
            "spec": {"episodes": 1, "command": ["python", "/task/episode.py"],
                     "task": {"files": {"episode.py": "print('MY task, not the pool')"}}, **extra}}


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND, "metadata": {"name": "warm", "namespace": NS},
             "spec": POOL_SPEC})
    return api


@pytest.mark.parametrize("extra", BAD_COLD)
def test_manifest_conflict_still_sees_another_task_beside_an_invalid_field(extra) -> None:
    assert manifest_conflict(_cold(extra)["spec"], POOL_SPEC) is not None


@pytest.mark.parametrize("extra", BAD_COLD)
def test_submit_on_a_pool_refuses_a_manifest_with_another_task_and_an_invalid_field(api, extra) -> None:
    with pytest.raises(ValueError):
        sdk.Client(api=api, namespace=NS).submit(_cold(extra), pool="warm")
    assert not api.list_objects("RolloutBatch", NS), "created: its episodes run the pool's task, not the one written"


@pytest.mark.parametrize("extra", BAD_COLD[:1])
def test_the_async_submit_refuses_it_too(api, extra) -> None:
    async def main():
        await AsyncClient(api=AsyncMemoryApi(api), namespace=NS).submit(_cold(extra), pool="warm")
    with pytest.raises(ValueError):
        asyncio.run(main())
    assert not api.list_objects("RolloutBatch", NS)
