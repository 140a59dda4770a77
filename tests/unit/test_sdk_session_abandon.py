"""A session command the trainer abandons (sdk.ops.Call.abandoned): cancelled (asyncio.wait_for,
asyncio.timeout, a task's cancel), interrupted (Ctrl-C, in a script or a notebook) or left by an
error of the trainer's own callback, it is stopped in the sandbox as one past its timeout is
before the error goes on; and nothing else is stopped or lost on the way (the command's time,
a second cancellation, a loop closed under a pending command). On the API in memory, its execs
answered by hand (tests/unit/test_sdk_sessions.py)."""
from __future__ import annotations

import asyncio
import gc
import inspect
import sys
import time
import warnings

import pytest

from rolloutbatch.kube.errors import TimedOut, Unavailable
from rolloutbatch.kube.pod_exec import ExecResult
from rolloutbatch.sdk import aio as sdk_aio
from rolloutbatch.sdk import session_commands
from rolloutbatch.sdk.aio import AsyncClient
from tests.support.interrupts import ctrl_c_in
from tests.support.memory_api import AsyncMemoryApi, MemoryApi
from tests.unit.test_sdk_sessions import (NS, POOL, POOL_NS, VERIFIER, api, hangs, open_sessions,  # noqa: F401
                                          put_pod, quick_polls)


def stops_of(api: MemoryApi) -> list[str]:
    """The markers of the stops sent (core.sessions.stop_command), in order."""
    return [command[4] for _, _, _, command, _ in api.execs if command[3:4] == ["rolloutbatch-stop"]]


async def async_session(api: MemoryApi, stop_seconds: float | None = None, talking: bool = False):
    """Episode 0's session on the asyncio client, its pod's commands hanging and its stop answered
    after ``stop_seconds`` (None: at once, as ``hangs``); ``talking``: each command prints first."""
    client = AsyncClient(api=(Talking if talking else AsyncMemoryApi)(api), namespace=NS)
    batch = await client.open_sessions(POOL, 2, verifier=VERIFIER, inputs=[{"q": 1}], samples_per_input=2)
    pod = put_pod(api, batch.handle, 0)
    if stop_seconds is None:
        hangs(api, pod)
    else:
        slow_stop(api, pod, stop_seconds)
    return await batch.session(0), pod


def test_a_command_the_trainer_cancels_is_stopped_in_the_sandbox_before_the_cancellation_goes_on(api):
    """asyncio.wait_for around run(), or a task cancelled: the exec's stream closes and the command
    would run on, as one past its timeout would (writing into the workspace the verifier grades).
    The cancellation goes on once it is stopped; cancelled again meanwhile, at once, the stop
    still sent to its end."""
    async def main():
        session, pod = await async_session(api)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.run("sleep 100", timeout=60), 0.2)
        ran = api.execs[-2][3]
        assert stops_of(api) == [ran[4]]
        # cancelled twice: the second lands while the stop runs, which the shield keeps going
        stopping, stopped = asyncio.Event(), asyncio.Event()

        async def slow_stop(command, stdin):
            if command[3:4] == ["rolloutbatch-stop"]:
                stopping.set()
                await asyncio.sleep(0.3)
                stopped.set()
                return ExecResult(exit_code=0, stdout=b"1\n", stderr=b"")
            await asyncio.sleep(10)
        api.set_exec(POOL_NS, pod, slow_stop)
        task = asyncio.ensure_future(session.run("sleep 100", timeout=60))
        await asyncio.sleep(0.1)
        task.cancel()
        await stopping.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not stopped.is_set()      # the caller went on at once
        await asyncio.wait_for(stopped.wait(), 5)   # and the stop ran to its end
        return ran
    ran = asyncio.run(main())
    assert len(stops_of(api)) == 2 and stops_of(api)[0] == ran[4]


def test_a_command_interrupted_by_ctrl_c_is_stopped_in_the_sandbox_before_the_interrupt_goes_on(api):
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    hangs(api, pod)
    session = batch.session(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a stop that worked says nothing
        with ctrl_c_in(0.3), pytest.raises(KeyboardInterrupt):
            session.run("sleep 100", timeout=60)
    assert stops_of(api) == [api.execs[-2][3][4]]
    # a stop that fails leaves the interrupt as it was, and says the command may still run
    hangs(api, pod, Unavailable("no route", status=503))
    with pytest.warns(RuntimeWarning, match=r"episode 0 .*\(pod .*\): the command was abandoned \(cancelled or "
                                            r"interrupted\), and stopping it failed \(no route\): it may still run"):
        with ctrl_c_in(0.3), pytest.raises(KeyboardInterrupt):
            session.run("sleep 100", timeout=60)
    assert len(stops_of(api)) == 2


@pytest.mark.parametrize("stopped, said", [
    (ExecResult(exit_code=1, stdout=b"3\n", stderr=b""), r"stopping it failed \(exit code 1: 3 killed\): it may still run"),
    (ExecResult(exit_code=2, stdout=b"", stderr=b"no /proc in this container\n"),
     r"stopping it failed \(exit code 2: no /proc in this container\)"),
    (ExecResult(exit_code=None, stdout=b"", stderr=b""), r"stopping it failed \(no exit status: 0 killed\)"),
    (Unavailable("no route", status=503), r"stopping it failed \(no route\)")])
def test_a_cancelled_command_whose_stop_fails_is_warned_of(api, stopped, said):
    """The caller gets its cancellation, as ever; the warning says the command may still run (and
    change the workspace the verifier grades)."""
    async def main():
        session, pod = await async_session(api)
        hangs(api, pod, stopped)
        with pytest.warns(RuntimeWarning, match=r"the command was abandoned .*, and " + said):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(session.run("sleep 100", timeout=60), 0.2)
    asyncio.run(main())
    assert len(stops_of(api)) == 1


def test_file_verbs_are_never_stopped_when_abandoned(api):
    """Only run() marks its command: a write cut off leaves no file (its part is renamed only
    once whole), and a read changes nothing."""
    batch = open_sessions(api)
    hangs(api, put_pod(api, batch.handle, 0))
    session = batch.session(0)
    for verb in (lambda: session.write_file("a.txt", b"A", timeout=60), lambda: session.read_file("a.txt", timeout=60)):
        with ctrl_c_in(0.3), pytest.raises(KeyboardInterrupt):
            verb()
    assert stops_of(api) == [] and len(api.execs) == 2



class Talking(AsyncMemoryApi):
    """An exec whose command prints at once (on_output hears it) and then runs on."""
    async def exec_in_pod(self, *args, on_output=None, **kwargs):
        if on_output is not None:
            on_output("stdout", b"started\n")
        return await self.api.exec_in_pod(*args, on_output=on_output, **kwargs)


def slow_stop(api, pod, seconds):
    async def handler(command, stdin):
        if command[3:4] == ["rolloutbatch-stop"]:
            await asyncio.sleep(seconds)
            return ExecResult(exit_code=0, stdout=b"1\n", stderr=b"")
        await asyncio.sleep(10)
    api.set_exec(POOL_NS, pod, handler)


def test_a_cancelled_commands_time_excludes_the_stop(api):
    """The command heard output, so it counts; its time is its exec's round trip (as a TimedOut
    one's is: returned() before the stop), not the stop's 0.6 s that follows the cancellation."""
    async def main():
        session, _ = await async_session(api, 0.6, talking=True)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.run("sleep 100", timeout=60, on_output=lambda s, d: None), 0.2)
        return session.stats
    stats = asyncio.run(main())
    assert stats.commands == 1
    assert stats.command_seconds < 0.5, stats.command_seconds


def test_asyncio_timeout_context_still_raises_timeout_error(api):
    async def main():
        session, _ = await async_session(api, 0.3)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await session.run("sleep 100", timeout=60)
        assert asyncio.current_task().cancelling() == 0
    asyncio.run(main())
    assert len(stops_of(api)) == 1


def test_a_task_left_pending_when_its_loop_closes_is_collected_quietly(api):
    """A run() task still pending when its (non-asyncio.run) loop is closed: collecting it closes
    its coroutine (GeneratorExit), which is no abandonment: awaiting the stop inside it would give
    'coroutine ignored GeneratorExit', a stop coroutine never awaited, a task pending on no loop."""
    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.exc_value} in {u.object!r}")
    loop = asyncio.new_event_loop()
    try:
        async def opened():
            return (await async_session(api))[0]
        session = loop.run_until_complete(opened())
        task = loop.create_task(session.run("sleep 100", timeout=60))
        loop.run_until_complete(asyncio.sleep(0.1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loop.close()
            del task
            gc.collect()
    finally:
        sys.unraisablehook = old_hook
    problems = unraisable + [str(w.message) for w in caught if "never awaited" in str(w.message)
                             or "no current event loop" in str(w.message)]
    assert problems == [], problems
    assert not sdk_aio._ABANDONING, sdk_aio._ABANDONING


def test_ctrl_c_in_a_notebook_interrupts_at_once(api):
    """The blocking client in a thread whose loop runs (a notebook: the exec runs on a worker
    thread's loop). Ctrl-C raises at once, the exec cancelled on its thread; waiting for the worker
    waited for the command's own end (its timeout), and the stop came after it."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    slow_stop(api, pod, 0.0)   # the command runs 10 s, then (here) returns nothing
    session = batch.session(0)

    async def notebook_cell():
        session.run("sleep 100", timeout=4)

    loop = asyncio.new_event_loop()   # run_until_complete installs no SIGINT handler, as ipykernel's
    started = time.monotonic()
    try:
        with ctrl_c_in(0.3), pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(notebook_cell())
    finally:
        loop.close()
    took = time.monotonic() - started
    assert took < 2, f"KeyboardInterrupt after {took:.1f}s"


def test_a_cancellation_during_the_stop_of_a_failed_callback_is_not_swallowed(api):
    """on_output raises (an error not the API's): the command is stopped (0.5 s). The task is
    cancelled meanwhile: awaiting it gives CancelledError, not the callback's error with the
    cancellation dropped (a wait_for, TaskGroup or asyncio.timeout around it would never end so)."""
    async def main():
        session, _ = await async_session(api, 0.5, talking=True)

        def boom(stream, data):
            raise ValueError("the trainer's callback")
        task = asyncio.ensure_future(session.run("sleep 100", timeout=60, on_output=boom))
        await asyncio.sleep(0.1)
        assert stops_of(api)   # the stop is under way
        task.cancel()
        try:
            await task
        except BaseException as exc:   # noqa: BLE001
            return type(exc).__name__, task.cancelled()
        return "returned", task.cancelled()
    # main() returns before the stop's 0.5 s are up: asyncio.run cancels it, which is said
    with pytest.warns(RuntimeWarning, match="its stop was cut off: it may still run"):
        got = asyncio.run(main())
    assert got == ("CancelledError", True), got
    assert len(stops_of(api)) == 1


def test_api_errors_and_timeouts_send_one_stop_at_most(api, monkeypatch):
    monkeypatch.setattr(session_commands, "END_SETTLE_SECONDS", 0.1)   # the refused exec's look at the pod
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    session = batch.session(0)

    def refused(command, stdin):
        raise Unavailable("no route", status=503)
    api.set_exec(POOL_NS, pod, refused)
    with pytest.raises(Unavailable):
        session.run("true", timeout=5)
    assert stops_of(api) == []
    hangs(api, pod)
    with pytest.raises(TimedOut):
        session.run("sleep 100", timeout=0.2)
    assert len(stops_of(api)) == 1


def _said(exc: BaseException) -> str:
    """All an exception says: its text, its notes, its chain."""
    out = []
    while exc is not None:
        out += [type(exc).__name__, str(exc), *getattr(exc, "__notes__", [])]
        exc = exc.__cause__ or exc.__context__
    return " | ".join(out)


def test_a_failed_stop_under_an_error_filter_is_said_on_the_callers_interrupt(api):
    """warnings.simplefilter('error') (pytest -W error, a trainer's strict mode): the RuntimeWarning
    is an exception inside the stop op. Raised, it would replace the caller's KeyboardInterrupt;
    dropped, nothing would say the command may still run: it is a note on the interrupt."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)
    hangs(api, pod, Unavailable("no route", status=503))
    session = batch.session(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ctrl_c_in(0.3), pytest.raises(BaseException) as caught:
            session.run("sleep 100", timeout=60)
    assert len(stops_of(api)) == 1
    assert "may still run" in _said(caught.value), _said(caught.value)


def test_a_failed_stop_under_an_error_filter_is_said_on_the_callers_cancellation(api):
    """The same on the asyncio client: a note on the caller's TimeoutError."""
    async def main():
        session, pod = await async_session(api)
        hangs(api, pod, Unavailable("no route", status=503))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                await asyncio.wait_for(session.run("sleep 100", timeout=60), 0.2)
            except BaseException as exc:   # noqa: BLE001
                return exc
    exc = asyncio.run(main())
    assert len(stops_of(api)) == 1
    assert "may still run" in _said(exc), _said(exc)


def test_a_second_abandoned_command_whose_stop_fails_alike_is_warned_of_too(api):
    """Python's default action for RuntimeWarning says a text once per place: the second command
    of an episode abandoned with its stop failing alike is warned of all the same."""
    async def main():
        session, pod = await async_session(api)
        hangs(api, pod, Unavailable("no route", status=503))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")   # what a plain `python train.py` has for RuntimeWarning
            for _ in range(2):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(session.run("sleep 100", timeout=60), 0.2)
        return [w for w in caught if issubclass(w.category, RuntimeWarning)]
    got = asyncio.run(main())
    assert len(stops_of(api)) == 2
    assert len(got) == 2, [str(w.message) for w in got]


def test_the_warning_names_the_trainers_line(api):
    """Not line 0 of the SDK's module: the line of the trainer's code that made the call."""
    batch = open_sessions(api)
    hangs(api, put_pod(api, batch.handle, 0), Unavailable("no route", status=503))
    with pytest.warns(RuntimeWarning, match="may still run") as caught:
        with ctrl_c_in(0.3), pytest.raises(KeyboardInterrupt):
            called = inspect.currentframe().f_lineno + 1
            batch.session(0).run("sleep 100", timeout=60)
    assert (caught[0].filename, caught[0].lineno) == (__file__, called)


def test_the_warning_of_a_call_run_as_its_own_task_names_the_sdk_method(api):
    """asyncio.wait_for runs the call as a task: only the event loop is outside the SDK."""
    async def main():
        session, pod = await async_session(api)
        hangs(api, pod, Unavailable("no route", status=503))
        with pytest.warns(RuntimeWarning, match="may still run") as caught:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(session.run("sleep 100", timeout=60), 0.2)
        return caught[0]
    said = asyncio.run(main())
    assert said.filename == sdk_aio.__file__ and said.lineno > 0, (said.filename, said.lineno)


def test_a_stop_cut_off_by_a_second_ctrl_c_says_the_command_may_still_run(api):
    """Ctrl-C, then Ctrl-C again while the stop waits (README: a second Ctrl-C ends it): the stop
    never answered, so the command may still run, which is said as a failed stop is."""
    batch = open_sessions(api)
    pod = put_pod(api, batch.handle, 0)

    async def slow(command, stdin):
        await asyncio.sleep(3 if command[3:4] == ["rolloutbatch-stop"] else 100)
        return ExecResult(exit_code=0, stdout=b"1\n", stderr=b"")
    api.set_exec(POOL_NS, pod, slow)
    session = batch.session(0)
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ctrl_c_in(0.3), ctrl_c_in(0.8), pytest.raises(KeyboardInterrupt):
            session.run("sleep 100", timeout=60)
    assert time.monotonic() - started < 2.5   # the second Ctrl-C did end the wait
    assert len(stops_of(api)) == 1
    assert any("may still run" in str(w.message) for w in caught), [str(w.message) for w in caught]
