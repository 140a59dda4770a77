"""The blocking client called from a thread whose event loop runs (a notebook cell): each exec
runs on a worker thread's loop (sdk.client._on_a_thread). An exec that fails ends that loop; its
error must reach the caller as it is (TimedOut with its stop, ExecForbidden), not as the
RuntimeError of cancelling a task on a loop already closed."""
from __future__ import annotations

import asyncio

import pytest

from rolloutbatch.kube.errors import Forbidden, TimedOut, Unavailable
from rolloutbatch.sdk.sessions import ExecForbidden
from tests.support.interrupts import ctrl_c_in
from tests.unit.test_sdk_session_abandon import stops_of
from tests.unit.test_sdk_sessions import (POOL_NS, api, hangs, open_sessions, put_pod,  # noqa: F401
                                          quick_polls)


def in_a_notebook(fn):
    """fn() called from a coroutine on a running loop, as a notebook cell runs."""
    async def cell():
        return fn()
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(cell())
    finally:
        loop.close()


def session_with(api, handler=None):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    if handler is not None:
        api.set_exec(POOL_NS, pod, handler)
    return batch.session(0), pod


def test_a_refused_exec_in_a_notebook_is_exec_forbidden(api):
    async def refused(command, stdin):
        raise Forbidden("pods/exec is forbidden", status=403)
    session, _ = session_with(api, refused)
    with pytest.raises(ExecForbidden, match="a trainer needs get and create on pods/exec"):
        in_a_notebook(lambda: session.run("true", timeout=5))


def test_a_command_past_its_timeout_in_a_notebook_is_timed_out_and_stopped(api):
    session, pod = session_with(api)
    hangs(api, pod)
    with pytest.raises(TimedOut, match="it was stopped"):
        in_a_notebook(lambda: session.run("sleep 100", timeout=0.3))
    assert len(stops_of(api)) == 1


def test_ctrl_c_in_a_notebook_whose_stop_fails_warns_that_the_command_may_still_run(api):
    session, pod = session_with(api)
    hangs(api, pod, Unavailable("no route", status=503))
    with pytest.warns(RuntimeWarning, match="stopping it failed .*may still run"):
        with ctrl_c_in(0.3), pytest.raises(KeyboardInterrupt):
            in_a_notebook(lambda: session.run("sleep 100", timeout=60))
    assert len(stops_of(api)) == 1
