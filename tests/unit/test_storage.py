"""kube.storage: a call abandoned by its cancelled task never starts or is waited for; a closed
storage makes no call."""
import asyncio
import threading

import pytest

from rolloutbatch.kube.errors import OwnerGone
from rolloutbatch.kube.storage import Storage
from tests.support.memory_api import MemoryApi


def test_a_closed_storage_refuses_every_call():
    async def main():
        storage = Storage(MemoryApi())
        storage.close()
        with pytest.raises(OwnerGone):
            await storage.get("Namespace", "default")
        assert storage.api.calls == []
    asyncio.run(main())


def test_settled_waits_for_a_call_its_cancelled_task_left_running():
    async def main():
        api = MemoryApi()
        release, entered = threading.Event(), threading.Event()
        api.meanwhile("GET", "Namespace", lambda: (entered.set(), release.wait(5)))
        storage = Storage(api)
        task = asyncio.create_task(storage.get("Namespace", "x"))
        await asyncio.to_thread(entered.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await storage.settled(timeout=0.05)   # still running in its thread
        threading.Timer(0.05, release.set).start()
        assert await storage.settled(timeout=5)
    asyncio.run(main())


def test_a_call_whose_task_is_cancelled_before_it_starts_never_runs():
    async def main():
        api = MemoryApi()
        storage = Storage(api)
        # the default executor's workers are all busy: the call waits in its queue
        busy = threading.Event()
        blockers = [asyncio.get_running_loop().run_in_executor(None, busy.wait, 5) for _ in range(64)]
        task = asyncio.create_task(storage.get("Namespace", "x"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        busy.set()
        await asyncio.gather(*blockers)
        await asyncio.sleep(0.05)
        assert api.calls == [] and await storage.settled(timeout=0.1)
    asyncio.run(main())
