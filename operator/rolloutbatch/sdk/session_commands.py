"""Commands in an open trainer-driven session (``sdk.sessions`` opens it): sans-IO ops for both clients.

:class:`SessionCore` runs a session's commands (``run``, ``write_file``, ``read_file``) through
``pods/exec`` in the agent container and ends it (:func:`end_target`); :class:`SessionsCore`
holds a client's open sessions of one batch and ends those a trainer left open. A refusal or a
pod that ended is made plain: ``ExecForbidden`` names the rights a trainer needs, ``SessionOver``
says why the session is over, ``SessionLost`` that its pod was lost (the episode runs again).
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rolloutbatch.core import defaults as d
from rolloutbatch.core import naming, sessions
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.verdict import is_infrastructure_failure
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import BadRequest, Forbidden, KubeError, NotFound, TimedOut, Unavailable
from rolloutbatch.sdk.ops import Call, Op, Sleep, get, is_finished
from rolloutbatch.sdk.sessions import (END_SETTLE_SECONDS, END_TIMEOUT, EXEC_SLACK, FILE_TIMEOUT, MAX_FILE_BYTES,
                                       POLL_SECONDS, RUN_LIMIT_BYTES, CommandResult, ExecForbidden, OnOutput,
                                       SessionError, SessionLost, SessionOver, SessionStats, SessionTarget,
                                       batch_pods, episode_env, exec_argv, over_reason, pods_forbidden,
                                       pool_namespace, session_state_of)
from rolloutbatch.sdk.timeouts import checked_timeout

# -- opening a session ------------------------------------------------------------------------------
def open_session(batch: Mapping, index: int, *, timeout: float, opened_at: float,
                 interval: float | None = None) -> Op:
    """Wait (at most ``timeout`` s) until episode ``index``'s pod runs and holds its episode; its
    SessionCore. SessionOver when its session already ended or the batch did."""
    meta, spec = batch["metadata"], batch.get("spec") or {}
    episodes = int(spec.get("episodes") or 0)
    if not (type(index) is int and 0 <= index < episodes):   # not a bool: session(True) is no episode 1
        raise ValueError(f"episode index {index!r} is not in 0..{episodes - 1}")
    checked_timeout(timeout, zero_ok=True)
    namespace = pool_namespace(batch)
    where = f"episode {index} of RolloutBatch {meta['namespace']}/{meta['name']}"
    deadline = time.monotonic() + timeout
    while True:
        state, facts, seen = yield from session_state_of(batch, namespace, index)
        if state == "ready":
            assert facts is not None and facts.delivered_at is not None
            target = SessionTarget(batch=f"{meta['namespace']}/{meta['name']}", namespace=namespace, pod=facts.name,
                                   index=index, env=episode_env(batch, index, facts.name),
                                   default_timeout=float(spec.get("episodeTimeoutSeconds")
                                                         or d.EPISODE_TIMEOUT_SECONDS) + EXEC_SLACK,
                                   batch_uid=meta.get("uid") or "")
            stats = SessionStats(claim_seconds=round(facts.delivered_at - facts.created, 3),
                                 ready_seconds=round(time.monotonic() - opened_at, 3))
            return SessionCore(target, stats)
        if state == "over":
            raise SessionOver(f"the session of {where} is over: {seen}", why=seen)
        try:
            live = yield from get(meta["name"], meta["namespace"])
        except NotFound:
            live = {"metadata": {}}
        if live["metadata"].get("uid") != meta.get("uid"):
            raise SessionOver(f"the session of {where} is over: the batch was deleted", why="the batch was deleted")
        if is_finished(live.get("status")):
            status = live.get("status") or {}
            said = f": {status['message']}" if status.get("message") else ""
            why = f"the batch ended ({status.get('phase')}{said})"
            raise SessionOver(f"the session of {where} never opened: {why}", why=why)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{where} held no session after {timeout:g}s ({seen}; the batch is "
                               f"{(live.get('status') or {}).get('phase') or v.PENDING}): is its pool warm "
                               f"(kubectl get rp {spec['poolRef']['name']} -n {meta['namespace']})?")
        yield Sleep(interval or POLL_SECONDS)



# -- commands in a session -----------------------------------------------------------------------------
# A command's exit code from this up: a signal ended it (128 + its number: 137 KILL, 143 TERM).
SIGNALLED_EXIT = 128
KILLED_EXIT = SIGNALLED_EXIT + 9   # SIGKILL
END_WAIT_SECONDS = 0.05   # how often an end() looks whether another one under way is done
HOLDING_TIMEOUT = 10      # the exec asking whether the hold still runs
STOP_TIMEOUT = sessions.STOP_TRIES * 0.1 + 20   # the exec stopping a command past its timeout


def _over(target: SessionTarget) -> Op:
    """Why the target's session is over (its pod read now), or None while it holds. SessionLost
    when its pod was lost: that is no end of the episode, which runs again on another pod."""
    try:
        pod = yield Call("get", (resources.object_path("Pod", target.pod, target.namespace),
                                 f"get Pod {target.namespace}/{target.pod}"))
    except NotFound:
        return f"its pod {target.pod} is gone"
    except Forbidden as exc:
        raise pods_forbidden(exc, target.namespace) from None
    facts = pod_facts(pod)
    if facts.disrupted or is_infrastructure_failure(facts):
        why = (f"its pod {facts.name} was lost (evicted, or its node lost): nothing of it is graded, and the Job "
               f"runs episode {target.index} again on a new pod; open that with session({target.index})")
        raise SessionLost(f"the session of episode {target.index} of RolloutBatch {target.batch} is lost: {why}",
                          why=why)
    return over_reason(facts)


def _over_settled(target: SessionTarget) -> Op:
    """Why the session is over, looked at again for up to END_SETTLE_SECONDS while it still looks
    held: the watchdog's or the end's kill reaches a command (exit KILLED_EXIT), or an exec finds
    the agent container gone, before the kubelet reports that container ended."""
    settle = time.monotonic() + END_SETTLE_SECONDS
    while (why := (yield from _over(target))) is None and time.monotonic() < settle:
        yield Sleep(POLL_SECONDS)
    return why


def _holds(target: SessionTarget) -> Op:
    """Whether the session's hold still runs, asked in its container (core.sessions.holding_command):
    True only when it says so. A refused or failed exec cannot say so."""
    try:
        result = yield Call("exec_in_pod", (target.namespace, target.pod, naming.AGENT_CONTAINER,
                                            sessions.holding_command()),
                            {"stdin": b"", "timeout": HOLDING_TIMEOUT, "limit_bytes": 4096, "on_output": None})
    except KubeError:
        return False
    return result.exit_code == 0


def _stop_call(target: SessionTarget, marker: str) -> Call:
    """The exec that stops every process of a marked command (core.sessions.stop_command)."""
    return Call("exec_in_pod", (target.namespace, target.pod, naming.AGENT_CONTAINER, sessions.stop_command(marker)),
                {"stdin": b"", "timeout": STOP_TIMEOUT, "limit_bytes": 4096, "on_output": None})


def _stop(target: SessionTarget, marker: str) -> Op:
    """Stop every process of a marked command: whether it was stopped, and what the trainer is
    told of it."""
    try:
        result = yield _stop_call(target, marker)
    except KubeError as exc:
        return False, f"stopping it failed ({exc}): it may still run in the sandbox, unless the session ended"
    killed = result.stdout.decode(errors="replace").strip()
    if result.exit_code == 0:
        return True, f"it was stopped: its processes in the sandbox were killed ({killed or 0})"
    said = result.stderr.decode(errors="replace").strip() or f"{killed or 0} killed"
    status = "no exit status" if result.exit_code is None else f"exit code {result.exit_code}"
    return False, f"stopping it failed ({status}: {said}): it may still run in the sandbox"


def _stop_abandoned(target: SessionTarget, marker: str, where: str) -> Op:
    """Stop a command the trainer abandoned. Its caller gets the error that abandoned it (a
    cancellation, KeyboardInterrupt), so a stop that failed, or was itself cut off (a second
    Ctrl-C, the loop's end), is a warning, never silence: the command may still change the
    workspace the verifier grades. Under a filter that makes warnings errors, the drivers add it
    to the caller's error as a note."""
    try:
        stopped, said = yield from _stop(target, marker)
    except GeneratorExit:
        try:
            _warn_each(f"{where}: the command was abandoned (cancelled or interrupted), and its stop was cut "
                       "off: it may still run in the sandbox")
        except Warning:   # an error by a filter: raised from close() it would replace the caller's error
            pass
        raise
    if not stopped:
        _warn_each(f"{where}: the command was abandoned (cancelled or interrupted), and {said}")


def _warn_each(text: str) -> None:
    """A RuntimeWarning said every time: the default filters say a text once per place, and a
    second abandoned command of an episode whose stop failed alike would go unsaid. It names the
    trainer's line that made the call (:func:`_call_site`)."""
    frame = _call_site(sys._getframe(1))
    warnings.warn_explicit(text, RuntimeWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__", __name__), registry={},
                           module_globals=frame.f_globals)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_ASYNCIO = os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep


def _call_site(frame: Any) -> Any:
    """The first frame outside this package, walking out from ``frame``: the trainer's call. A
    call run as its own task (``asyncio.wait_for`` makes one) has only the event loop outside the
    package: then the outermost frame of the package, the SDK method the trainer called."""
    inner = frame
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        inner, frame = frame, frame.f_back
    return inner if frame is None or frame.f_code.co_filename.startswith(_ASYNCIO) else frame


def _exec(target: SessionTarget, argv: list[str], what: str, *, stdin: bytes = b"", timeout: float,
          limit_bytes: int, on_output: OnOutput | None = None, returned: Callable[[], None] | None = None,
          stop_on_timeout: bool = False) -> Op:
    """One exec in the session's agent container, its refusals made plain: Forbidden names the
    Role a trainer needs; a pod that ended is SessionOver. Given stdin, the command runs behind
    core.sessions.drained_command. ``returned`` is called as soon as the
    exec returns or fails, before any look at the pod. ``stop_on_timeout``: past its timeout, the
    command and all it started are stopped in the sandbox before TimedOut is raised (closing the
    exec's stream leaves them running, and they could change the workspace the verifier grades);
    so are they when the trainer abandons the call (a cancelled task, Ctrl-C: the drivers run
    the Call's ``abandoned``) before its error goes on."""
    where = f"{what} in episode {target.index} of RolloutBatch {target.batch}"
    if stdin:   # all of it is read, whatever the command reads, or the exec never answers
        argv = sessions.drained_command(argv, len(stdin))
    marker = secrets.token_hex(16) if stop_on_timeout else None
    if marker is not None:
        argv = sessions.marked_command(argv, marker)
    # a command the trainer abandons (a cancelled task, Ctrl-C) is stopped as one past its timeout
    abandoned = None if marker is None else _stop_abandoned(target, marker, f"{where} (pod {target.pod})")
    try:
        try:
            result = yield Call("exec_in_pod", (target.namespace, target.pod, naming.AGENT_CONTAINER, argv),
                                {"stdin": stdin, "timeout": timeout, "limit_bytes": limit_bytes,
                                 "on_output": on_output}, abandoned=abandoned)
        finally:
            if returned is not None:
                returned()
    except TimedOut as exc:
        if marker is None:
            raise
        _, said = yield from _stop(target, marker)
        raise TimedOut(f"{where} (pod {target.pod}): no exit status within {timeout:g}s; {said}",
                       status=exc.status, reason=exc.reason) from None
    except Forbidden as exc:
        raise ExecForbidden(f"{where}: {exc}: a trainer needs get and create on pods/exec (and get, list on "
                            f"pods) in the pool's namespace {target.namespace}", status=exc.status,
                            reason=exc.reason) from None
    except (NotFound, BadRequest, Unavailable) as exc:
        why = yield from _over_settled(target)
        if why is not None:
            raise SessionOver(f"{where}: the session is over: {why}", why=why) from None
        raise type(exc)(f"{where}: {exc}", status=exc.status, reason=exc.reason) from None
    if result.exit_code is None:
        why = yield from _over_settled(target)
        if why is not None:
            raise SessionOver(f"{where}: the session is over: {why}", why=why)
        raise SessionError(f"{where}: the command did not run to an exit code: {result.message}")
    return result


class SessionCore:
    """One open session, for both clients: where its commands go, whether it ended, its stats.
    Each method returns the op its client runs."""

    def __init__(self, target: SessionTarget, stats: SessionStats) -> None:
        self.target = target
        self.stats = stats
        self.ended: str | None = None      # why no command may run any more
        self.ending = False                # end() began: its stats are written, its kill may come
        self.telling_hold = False          # end() is writing the hold's line: its kill may come now

    def _check(self) -> None:
        why = self.ended or ("end() was called" if self.ending else None)
        if why is not None:
            raise SessionOver(f"the session of episode {self.target.index} of RolloutBatch {self.target.batch} "
                              f"is over: {why}", why=why)

    def _guarded(self, op: Op) -> Op:
        """``op``, remembering a session found over (later calls say so without an exec)."""
        self._check()
        try:
            return (yield from op)
        except SessionOver as exc:
            self.ended = exc.why
            raise

    def run(self, command: str | Sequence[str], *, stdin: bytes = b"", timeout: float | None = None,
            on_output: OnOutput | None = None, limit_bytes: int = RUN_LIMIT_BYTES) -> Op:
        argv = exec_argv(self.target, command)
        # refused before any exec, as exec_argv refuses what no exec can carry
        if not isinstance(stdin, (bytes, bytearray)):
            raise TypeError(f"stdin takes bytes, not {type(stdin).__name__}")
        checked_timeout(timeout, none_ok=True)
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 0:
            raise ValueError(f"limit_bytes must be a whole number of bytes, 0 or more, got {limit_bytes!r}")
        return self._guarded(self._run(argv, bytes(stdin), self.target.default_timeout if timeout is None else timeout,
                                       on_output, limit_bytes))

    def _run(self, argv: list[str], stdin: bytes, timeout: float, on_output: OnOutput | None,
             limit_bytes: int) -> Op:
        """A command that ran counts, with its time, whatever its end (a timeout, the session's
        end): "commands run, their total time". Its time is its exec's round trip, not the looks
        at the session after it. One that ends after end() recorded the stats does not count (the
        row has them already). Killed by a signal, it is checked against the session
        (``_cut_off``), as the file verbs are."""
        started = time.monotonic()
        finished: float | None = None   # the exec's own end: no look at the pod after it is its time
        ran = False   # to an exit code, or for its whole timeout, or its output reached the trainer
        heard = False   # one flag, not a record per frame: a sandbox may print for its whole timeout

        def returned() -> None:
            nonlocal finished
            finished = time.monotonic()

        def hear(stream: str, data: bytes) -> None:
            nonlocal heard
            heard = True   # it ran: a callback that raises does not take that back
            on_output(stream, data)

        try:
            try:
                result = yield from _exec(self.target, argv, "a command", stdin=stdin, timeout=timeout,
                                          limit_bytes=limit_bytes, on_output=hear if on_output else None,
                                          returned=returned, stop_on_timeout=True)
            except TimedOut:
                ran = True
                raise
            ran = True
            yield from self._cut_off(result, "a command")
        finally:
            # the client closes this op on an error of the callback's, or on a cancellation
            ran = ran or heard
            seconds = (finished if finished is not None else time.monotonic()) - started
            if ran and self.ended is None and not self.ending:
                self.stats.commands += 1
                self.stats.command_seconds = round(self.stats.command_seconds + seconds, 6)
        return CommandResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                             seconds=seconds, stdout_truncated=result.stdout_truncated,
                             stderr_truncated=result.stderr_truncated)

    def _cut_off(self, result: Any, what: str) -> Op:
        """SessionOver when a signal ended the exec (exit code SIGNALLED_EXIT and up) and the
        session is over: the end or the deadline kills every process, and its 137 is not what
        ``what`` did. While the session holds, the exit code is the exec's own."""
        if result.exit_code is not None and result.exit_code >= SIGNALLED_EXIT:
            # an end() telling the hold meanwhile (another task's) kills it before the pod shows
            # the end; while the end only writes its stats, nothing of it kills a command
            if self.telling_hold:
                why: str | None = "end() was called"
            elif result.exit_code == KILLED_EXIT:   # what the deadline's and the end's kills leave
                why = yield from _over(self.target)
                # the pod may not show the end yet (the kubelet reports it late): the end's kill
                # comes only after the hold ended, so while the hold runs the 137 is the command's
                # own (an OOM kill, `kill -9 $$`), answered at once; else the pod is read again
                if why is None and not (yield from _holds(self.target)):
                    why = yield from _over_settled(self.target)
            else:
                why = yield from _over(self.target)
            if why is not None:
                raise SessionOver(f"{what} in episode {self.target.index} of RolloutBatch {self.target.batch} "
                                  f"was cut off (exit code {result.exit_code}): the session is over: {why}", why=why)

    def write_file(self, path: str, data: bytes, *, timeout: float = FILE_TIMEOUT) -> Op:
        if not isinstance(data, (bytes, bytearray)):
            hint = ": encode text first, e.g. write_file(path, text.encode())" if isinstance(data, str) else ""
            raise TypeError(f"write_file takes the file's bytes, not {type(data).__name__}{hint}")
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"{path}: {len(data)} bytes, more than one exec carries ({MAX_FILE_BYTES})")
        return self._guarded(self._write(sessions.checked_path(path), bytes(data), checked_timeout(timeout)))

    def _write(self, path: str, data: bytes, timeout: float) -> Op:
        result = yield from _exec(self.target, sessions.write_file_command(path, len(data)), f"writing {path}",
                                  stdin=data, timeout=timeout, limit_bytes=4096)
        yield from self._cut_off(result, f"writing {path}")
        if result.exit_code == sessions.IS_A_DIRECTORY:
            raise IsADirectoryError(f"a directory, not a file: {path} in episode {self.target.index}'s sandbox")
        if result.exit_code != 0:
            raise SessionError(f"writing {path} in episode {self.target.index} failed (exit code "
                               f"{result.exit_code}): {result.stderr.decode(errors='replace').strip()}")

    def read_file(self, path: str, *, max_bytes: int = MAX_FILE_BYTES, timeout: float = FILE_TIMEOUT) -> Op:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 0 <= max_bytes <= MAX_FILE_BYTES:
            raise ValueError(f"max_bytes must be a whole number of bytes from 0 to {MAX_FILE_BYTES}, got {max_bytes!r}")
        return self._guarded(self._read(sessions.checked_path(path), max_bytes, checked_timeout(timeout)))

    def _read(self, path: str, max_bytes: int, timeout: float) -> Op:
        result = yield from _exec(self.target, sessions.read_file_command(path, max_bytes), f"reading {path}",
                                  timeout=timeout, limit_bytes=max_bytes)
        yield from self._cut_off(result, f"reading {path}")
        where = f"{path} in episode {self.target.index}'s sandbox"
        if result.exit_code == sessions.NO_SUCH_FILE:
            raise FileNotFoundError(f"no such file: {where}")
        if result.exit_code == sessions.IS_A_DIRECTORY:
            raise IsADirectoryError(f"a directory, not a file: {where}")
        if result.exit_code == sessions.NOT_PERMITTED:
            raise PermissionError(f"{result.stderr.decode(errors='replace').strip()}: {where}")
        if result.exit_code == sessions.NOT_A_FILE:
            raise SessionError(f"not a regular file (a FIFO, a socket or a device): {where}")
        if result.exit_code == sessions.LINK_LOOP:
            raise OSError(errno.ELOOP, f"the symbolic links loop: {where}")
        if result.exit_code != 0:
            raise SessionError(f"reading {where} failed (exit code {result.exit_code}): "
                               f"{result.stderr.decode(errors='replace').strip()}")
        if result.stdout_truncated:
            raise SessionError(f"{where} is larger than max_bytes ({max_bytes})")
        return result.stdout

    def end(self) -> Op:
        """End the session (its verifier then grades the workspace); a session that has ended,
        by end() or otherwise, is left as it is. Its stats go into its row first. An end() under
        way (another task's, another thread's) is waited for: this one returns once the session
        ended, or tries again if that one failed."""
        while self.ending and self.ended is None:
            yield Sleep(END_WAIT_SECONDS)
        if self.ended is None and not self.ending:
            self.ending = True
            try:
                yield from self._record_stats()
                self.telling_hold = True
                yield from end_target(self.target)
                self.ended = "end() was called"
            except SessionLost as exc:   # reported once, here; a later end() is quiet
                self.ended = exc.why
                raise
            finally:
                # not ended (a failure, a cancellation, an interrupt, even while the stats were
                # written): end() may be tried again, and the session is still the trainer's
                self.ending, self.telling_hold = self.ended is not None, False

    def _record_stats(self) -> Op:
        """The stats as an annotation of the batch (core.sessions), which the operator copies into
        the episode's row. A refusal (no ``patch`` on RolloutBatches, the 256 KiB bound of
        annotations) leaves the row without them and says so in a warning; the session still ends."""
        namespace, name = self.target.batch.split("/", 1)
        try:
            metadata: dict = {"annotations": sessions.stats_annotation(self.target.index, self.target.pod,
                                                                       self.stats.commands,
                                                                       self.stats.command_seconds)}
            if self.target.batch_uid:
                metadata["uid"] = self.target.batch_uid     # a precondition: 409 for a namesake
            yield Call("merge_patch", (resources.object_path("RolloutBatch", name, namespace), {"metadata": metadata},
                                       f"record the session stats of episode {self.target.index} on RolloutBatch "
                                       f"{self.target.batch}"))
        except NotFound:
            return                                     # the batch is gone: no row to record them in
        except (KubeError, ValueError) as exc:         # ValueError: stats past their bounds
            warnings.warn(f"the session stats of episode {self.target.index} were not recorded on RolloutBatch "
                          f"{self.target.batch}, so its row has none: {exc}", RuntimeWarning, stacklevel=2)


def end_target(target: SessionTarget) -> Op:
    """Kill every process of the session's container but its launcher, the hold among them
    (core.sessions.end_command). The launcher then kills what is left, the end's own exec among
    them at times (exit 137, or no exit code), before the kubelet reports the agent container
    ended: such an end is taken as done once the pod says so, within END_SETTLE_SECONDS."""
    said = ""
    try:
        result = yield from _exec(target, sessions.end_command(), "ending the session", timeout=END_TIMEOUT,
                                  limit_bytes=4096)
        code, said = result.exit_code, result.stderr.decode(errors="replace").strip()
    except SessionLost:
        raise            # not an end: the episode runs again elsewhere
    except SessionOver:
        return
    except (SessionError, Unavailable, TimedOut) as exc:   # TimedOut: a node that does not answer
        code, said = None, str(exc)
    # Confirmed by the pod, whatever the end said: the session's own commands can take the FIFO's
    # line, forge the hold's marker or remove the FIFO (the end then kills all the same).
    settle = time.monotonic() + END_SETTLE_SECONDS
    while (yield from _over(target)) is None:
        if time.monotonic() >= settle:
            if code == sessions.NOT_HOLDING:
                raise SessionError(f"episode {target.index} of RolloutBatch {target.batch} cannot be ended: its "
                                   "session's end FIFO is gone and its agent container still runs after the end "
                                   "killed its processes (the hold never started, or it runs something other than "
                                   "the hold); it holds until episodeTimeoutSeconds")
            if code in (sessions.ENDED, sessions.ALREADY_ENDED):
                raise SessionError(f"the session of episode {target.index} of RolloutBatch {target.batch} did not "
                                   "end: its agent container still runs after the end killed its processes; it "
                                   "holds until episodeTimeoutSeconds")
            raise SessionError(f"ending the session of episode {target.index} of RolloutBatch {target.batch} "
                               f"failed (exit code {code}): {said}")
        yield Sleep(POLL_SECONDS)


class SessionView:
    """What both clients' session objects show of their SessionCore (``_core``)."""

    _core: SessionCore
    index = property(lambda self: self._core.target.index)
    pod = property(lambda self: self._core.target.pod)
    stats = property(lambda self: self._core.stats)
    ended = property(lambda self: self._core.ended is not None)


class EndsOnExit:
    """A context manager that ends what is left open (``_end_left_open``) on exit. A failure to
    end it is raised only when the body raised nothing: the body's own error is the one to see."""

    def _end_left_open(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            self._end_left_open()
        except KubeError:
            if exc_type is None:
                raise


class AsyncEndsOnExit:
    """EndsOnExit for ``async with``."""

    async def _end_left_open(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, exc_type: object, *_: object) -> None:
        try:
            await self._end_left_open()
        except KubeError:
            if exc_type is None:
                raise


class SessionsCore:
    """The session batch, for both clients: the sessions opened, and the ops on all of them."""

    def __init__(self, batch: dict) -> None:
        self.namespace = pool_namespace(batch)
        self.opened_at = time.monotonic()
        self.opened: dict[int, SessionCore] = {}

    def session(self, batch: Mapping, index: int, timeout: float) -> Op:
        """The episode's session; the one already open on its pod when there is one (opened twice,
        from two tasks or a retry loop, it would count its commands twice over, and the last end()
        would write only its own share into the row)."""
        core = yield from open_session(batch, index, timeout=timeout, opened_at=self.opened_at)
        known = self.opened.get(index)
        if known is not None and known.ended is None and known.target.pod == core.target.pod:
            return known
        self.opened[index] = core
        return core

    def end_all(self, batch: Mapping) -> Op:
        """End every session of the batch that still holds: those opened here, and those no one
        opened (so none waits for its deadline). Episodes not started yet are not stopped."""
        meta = batch["metadata"]
        ops = [core.end() for core in self.opened.values()]
        ended = {core.target.pod for core in self.opened.values()}
        for pod in (yield from batch_pods(batch, self.namespace)):
            facts = pod_facts(pod)
            if facts.name in ended or facts.index is None or facts.delivered_at is None or over_reason(facts):
                continue
            ops.append(end_target(SessionTarget(batch=f"{meta['namespace']}/{meta['name']}", namespace=self.namespace,
                                                pod=facts.name, index=facts.index, env=(),
                                                default_timeout=END_TIMEOUT)))
        failed: list[KubeError] = []
        for n, op in enumerate(ops):     # each tried: one that cannot be ended leaves the others to their end
            try:
                yield from op
            except SessionLost as exc:       # said for the sessions opened here; the others no one drove
                if n < len(self.opened):
                    failed.append(exc)
            except KubeError as exc:
                failed.append(exc)
        if failed:
            raise failed[0]

    def with_stats(self, rows: list) -> list:
        """The rows, each of a session opened here (by its pod) with ``session``: its stats as
        measured here (the claim's and the wait's seconds too) over what its row recorded."""
        by_pod = {core.target.pod: core.stats for core in self.opened.values()}
        return [dict(row, session={**(row.get("session") or {}), **by_pod[row["pod"]].as_dict()})
                if row.get("pod") in by_pod else row for row in rows]
