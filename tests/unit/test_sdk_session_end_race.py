"""A command that exits 128 or more while an end() only writes its stats does not end the session.

An earlier change made ``SessionCore.end()`` reset ``ending`` in a ``finally`` (``self.ending = self.ended
is not None``), so that an end() cancelled while it writes the stats can be tried again. But
``ended`` is not only end()'s to set: ``SessionCore._run`` reads a command's exit code of 128 or
more, while ``self.ending`` is true, as "the end killed it" and raises
``SessionOver(why="end() was called")`` without looking at the pod, and ``_guarded`` stores that
in ``self.ended``. Any command of another task that exits >= 128 on its own (exit 255 of many
tools, 130/137 of a program its test harness killed) during the end's stats write does so.

If that end() is then cancelled (``asyncio.wait_for(session.end(), ...)`` against a slow API
server, the case an earlier change fixed), its ``finally`` sees ``ended`` set and keeps ``ending`` True:
the hold was never told to end, yet

- every later ``end()`` returns at once and does nothing (the session holds its pod until
  episodeTimeoutSeconds; its row says AgentTimedOut although the trainer called end() twice);
- ``session.ended`` is True and ``run()`` raises SessionOver for a sandbox that still holds.

Expected: a command's "the end killed it" is taken as the session's end only once the end
happened (the pod says so, or end() finished); an end() that did not end the session leaves it
endable, so the next end() writes the hold's line.
"""
from __future__ import annotations

import asyncio

from rolloutbatch.sdk.sessions import SessionOver
from tests.unit.test_sdk_session_end_cancelled import opened_slowly
from tests.unit.test_sdk_sessions import api, quick_polls  # noqa: F401 (the fixtures)


def test_a_command_exiting_255_during_a_cancelled_end_leaves_the_session_endable(api, tmp_path):
    async def scenario():
        slow, sandbox, session = await opened_slowly(api, tmp_path)

        ending = asyncio.ensure_future(asyncio.wait_for(session.end(), 0.3))
        await slow.patching.wait()                 # end() is writing the stats; the hold holds
        cut = None
        try:                                       # another task's command ends with 255 on its own
            await session.run("exit 255")
        except SessionOver as exc:
            cut = exc
        try:
            await ending                           # the trainer's bound on end() runs out
        except asyncio.TimeoutError:
            pass
        assert sandbox.ends == 0                    # nothing was ended

        slow.gate.set()                            # the API server answers again; end() once more
        await session.end()
        return sandbox, session, cut

    sandbox, session, cut = asyncio.run(scenario())
    assert sandbox.ends == 1, (f"end() was cancelled before the hold was told, yet the next end() did nothing "
                               f"(the command's exit 255 was read as the end's kill: {cut}); the session "
                               f"holds until episodeTimeoutSeconds")
