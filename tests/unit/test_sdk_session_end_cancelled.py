"""An end() cancelled while it writes the session's stats leaves the session endable.

``SessionCore.end()`` sets ``ending = True`` and writes the stats annotation on the batch
(``_record_stats``) *before* its ``try`` that resets ``ending`` on any error. When the trainer's
task is cancelled during that patch (``asyncio.wait_for(session.end(), 5)`` against a slow API
server, a trainer shutting down its tasks, a KeyboardInterrupt in the blocking client), the op is
abandoned and ``ending`` stays True although nothing was ended: the hold still holds.

From then on:
- ``end()`` returns at once and does nothing (``if self.ended is None and not self.ending``), so
  the session is never ended: it holds its pod until ``episodeTimeoutSeconds`` and its row says
  AgentTimedOut, although the trainer called end() and saw it return without an error;
- ``run()`` raises ``SessionOver("end() was called")`` for a session whose sandbox still holds;
- ``Sessions.end_all()`` (the ``async with`` exit) skips it too: it is among the opened sessions,
  so it is not ended through ``end_target`` either.

Expected: an end() that did not end the session leaves it endable (as an end_target failure
does: ``ending`` reset), so the next end() ends it.
"""
from __future__ import annotations

import asyncio

from rolloutbatch.sdk.aio import AsyncClient
from tests.support.memory_api import AsyncMemoryApi
from tests.unit.test_sdk_sessions import NS, POOL, POOL_NS, VERIFIER, api, put_pod, quick_polls  # noqa: F401


class SlowBatchPatches(AsyncMemoryApi):
    """The API server is slow to answer a PATCH of a RolloutBatch until ``gate`` is set."""

    def __init__(self, api) -> None:
        super().__init__(api)
        self.gate = asyncio.Event()
        self.patching = asyncio.Event()

    async def merge_patch(self, path, patch, what):
        if "/rolloutbatches/" in path:
            self.patching.set()
            await self.gate.wait()
        return self.api.merge_patch(path, patch, what)


async def opened_slowly(api, tmp_path):
    """Episode 0's session through an API server slow on RolloutBatch patches: (the slow API, its
    sandbox, the session)."""
    slow = SlowBatchPatches(api)
    batch = await AsyncClient(api=slow, namespace=NS).open_sessions(POOL, 2, verifier=VERIFIER)
    pod = put_pod(api, batch.handle, 0, workspace=tmp_path)
    return slow, api.exec_handlers[(POOL_NS, pod)], await batch.session(0)


def test_an_end_cancelled_while_it_records_the_stats_can_be_ended_again(api, tmp_path):
    async def scenario():
        slow, sandbox, session = await opened_slowly(api, tmp_path)
        assert (await session.run("true")).ok

        # the trainer bounds its end; the API server is slow on the stats' patch
        try:
            await asyncio.wait_for(session.end(), 0.2)
        except asyncio.TimeoutError:
            pass
        assert slow.patching.is_set() and sandbox.ends == 0 and not session.ended

        slow.gate.set()            # the API server answers again; the trainer ends it once more
        await session.end()
        return sandbox, session

    sandbox, session = asyncio.run(scenario())
    assert sandbox.ends == 1, "the second end() did nothing: the session holds until its deadline"
    assert session.ended


def test_an_end_while_another_is_under_way_returns_once_the_session_ended(api, tmp_path):
    """Two tasks end the session (one of them an `async with` exit): the second returned at once,
    quietly, while the first still wrote the stats and the session held; had the first failed, no
    one would have heard. It waits for the first now, and the hold is told once."""
    async def scenario():
        slow, sandbox, session = await opened_slowly(api, tmp_path)
        first = asyncio.ensure_future(session.end())
        await slow.patching.wait()
        asyncio.get_running_loop().call_later(0.3, slow.gate.set)
        await session.end()
        seen = (session.ended, sandbox.ends)
        await first
        return seen

    assert asyncio.run(scenario()) == (True, 1)
