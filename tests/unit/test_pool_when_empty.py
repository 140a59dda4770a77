"""`submit(batch, pool=...)` and `rolloutbatch submit --pool` (sdk.build.with_pool) keep what a
manifest's poolRef says besides its name (``whenEmpty: Wait``), and refuse one naming another pool."""
from __future__ import annotations

import asyncio

import pytest

from rolloutbatch import GROUP, POOL_KIND, VERSION, sdk
from rolloutbatch.sdk.aio import AsyncClient
from tests.support.memory_api import AsyncMemoryApi, MemoryApi

NS = "rl"


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.put({"apiVersion": f"{GROUP}/{VERSION}", "kind": POOL_KIND, "metadata": {"name": "warm", "namespace": NS},
             "spec": {"size": 2, "task": {"files": {"e.py": "x"}}}})
    return api


def _waiting_batch() -> dict:
    """A pooled manifest as a user writes it (batch.yaml), waiting for warm pods."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RolloutBatch", "metadata": {"name": "step", "namespace": NS},
            "spec": {"episodes": 2, "command": ["python", "/task/e.py"],
                     "poolRef": {"name": "warm", "whenEmpty": "Wait"}}}


def test_with_pool_keeps_when_empty() -> None:
    assert sdk.with_pool(_waiting_batch(), "warm")["spec"]["poolRef"] == {"name": "warm", "whenEmpty": "Wait"}


def test_build_batch_with_pool_keeps_a_when_empty_asked_for() -> None:
    """build_batch(pool=...) keeps a poolRef's whenEmpty asked for in so many words."""
    batch = sdk.build_batch("step", None, 2, namespace=NS, pool="warm", command=["python", "/task/e.py"],
                            poolRef={"name": "warm", "whenEmpty": "Wait"})
    assert batch["spec"]["poolRef"] == {"name": "warm", "whenEmpty": "Wait"}


def test_submit_on_its_own_pool_keeps_when_empty(api) -> None:
    handle = sdk.Client(api=api, namespace=NS).submit(_waiting_batch(), pool="warm")
    assert api.get_object("RolloutBatch", handle.name, NS)["spec"]["poolRef"] == {"name": "warm", "whenEmpty": "Wait"}


def test_the_async_submit_keeps_it_too(api) -> None:
    async def main():
        return await AsyncClient(api=AsyncMemoryApi(api), namespace=NS).submit(_waiting_batch(), pool="warm")
    handle = asyncio.run(main())
    assert api.get_object("RolloutBatch", handle.name, NS)["spec"]["poolRef"] == {"name": "warm", "whenEmpty": "Wait"}


def test_a_pool_ref_naming_another_pool_is_refused_not_overwritten() -> None:
    with pytest.raises(ValueError, match="names RolloutPool 'other'"):
        sdk.with_pool({**_waiting_batch(), "spec": {**_waiting_batch()["spec"], "poolRef": {"name": "other"}}}, "warm")
