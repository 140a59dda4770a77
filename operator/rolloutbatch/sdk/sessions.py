"""Trainer-driven episodes on a pooled sandbox: the SDK's sans-IO half (docs/design.md §5.17).

Many RL stacks run the agent loop in the trainer and use the sandbox as a tool executor. A
session batch (:func:`build_sessions`) is a pooled batch with a verifier whose episode command is
the hold (``core.sessions``): each episode's agent container waits, its ``ready`` event printed,
while the trainer runs commands in it through ``pods/exec``; ``end`` lets the hold exit 0, and the
batch's verifier grades the workspace. The row is a row like any other. A session nobody ends
(a crashed trainer) is stopped by the agent launcher's watchdog at ``episodeTimeoutSeconds``: the
row says ``AgentTimedOut``, and the verifier grades all the same.

Every verb is a sans-IO generator, as in ``sdk.ops``: ``Client`` runs them blocking (the exec, a
coroutine on every API object, on an event loop of its own), ``AsyncClient`` on the caller's
loop. :class:`SessionCore` and :class:`SessionsCore` hold what both clients' session objects
share (where a session's commands go, whether it ended, its stats); the classes in
``sdk.client`` and ``sdk.aio`` only run their ops.

A trainer needs, beside the rights on RolloutBatches, ``get``/``list`` on pods and ``get`` and
``create`` on ``pods/exec`` in the pool's namespace (``rp-<digest>``): an exec is a GET upgraded
to a WebSocket, authorized as both verbs.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rolloutbatch.core import defaults as d
from rolloutbatch.core import naming, sessions
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.groups import group_and_sample
from rolloutbatch.core.model import BatchRef, PodFacts
from rolloutbatch.core.verdict import is_infrastructure_failure, pod_facts
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import BadRequest, Forbidden, KubeError, NotFound, Unavailable
from rolloutbatch.sdk.build import _env_entries, build_batch
from rolloutbatch.sdk.ops import Call, Op, Sleep, get, is_finished

SESSION_TIMEOUT = 600        # session(index): the pod's claim (or cold start) and its delivery
POLL_SECONDS = 0.5
RUN_LIMIT_BYTES = 1 << 20    # what run() keeps of each stream (on_output hears all of it)
MAX_FILE_BYTES = 16 << 20    # write_file / read_file: one exec's stdin or stdout
EXEC_SLACK = 30              # a command's default time: the episode's own, and this
END_TIMEOUT = sessions.END_WAIT_TRIES * 0.1 + 20
END_SETTLE_SECONDS = 10      # an end killed with the hold's leftovers: the kubelet's report of it

OnOutput = Callable[[str, bytes], None]


class SessionError(KubeError):
    """A session verb failed; the message says why (and what the sandbox answered)."""


class SessionOver(SessionError):
    """The session has ended: ``end()`` was called, its deadline (``episodeTimeoutSeconds``)
    stopped it, or its pod ended. Its verifier grades what it left. ``why`` says which."""

    def __init__(self, message: str, *, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


class SessionLost(SessionOver):
    """The session's pod was lost before the session ended (evicted, its node lost): nothing it did
    is graded, and the Job runs the episode again on a new pod, which ``session(i)`` opens."""


class ExecForbidden(Forbidden):
    """RBAC refused the trainer's call in the pool's namespace; the message names the Role it needs."""


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What one command left: its exit code, its output (each cut at ``limit_bytes``), and its
    seconds as the SDK measured them (the exec's round trip included)."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclasses.dataclass
class SessionStats:
    """One session as the SDK saw it: the commands it ran and their total seconds; the claim
    latency (the claim, or a cold pod's creation, to the episode handed over: the pod's
    annotations, the operator's clock), and from ``open_sessions`` to this session ready."""

    commands: int = 0
    command_seconds: float = 0.0
    claim_seconds: float | None = None
    ready_seconds: float | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SessionTarget:
    """Where one session's commands go, and the episode's variables they get (an exec sees the
    container's env, not the episode's: the launcher set those for the hold alone)."""

    batch: str                     # namespace/name of the batch
    namespace: str                 # the pool's namespace
    pod: str
    index: int
    env: tuple[tuple[str, str], ...]
    default_timeout: float
    batch_uid: str = ""            # the batch's uid: the stats' patch is for it, never a namesake


# -- building ---------------------------------------------------------------------------------
def build_sessions(pool: str, episodes: int, *, verifier: Mapping, name: str = "session-",
                   inputs: Sequence[Mapping] | None = None, samples_per_input: int | None = None,
                   episode_timeout_seconds: int | None = None,
                   env: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None,
                   namespace: str | None = None, **spec: Any) -> dict:
    """A session batch: ``episodes`` episodes on the RolloutPool ``pool`` (which needs
    ``spec.verifier``), each holding its sandbox for the trainer until ended, then graded by
    ``verifier`` (``files``, ``command``, ``env``, ``timeoutSeconds``). ``episode_timeout_seconds``
    is each session's deadline. ``spec``: further spec fields (``build_batch``'s). ValueError
    before any call for what the operator would refuse."""
    if verifier is None:
        raise ValueError("a session batch needs a verifier: it is what grades the workspace a session leaves")
    if "command" in spec or "args" in spec:
        raise ValueError("a session batch's command is the hold (core.sessions): run commands with Session.run")
    options = dict(spec)
    if episode_timeout_seconds is not None:
        options["episode_timeout_seconds"] = episode_timeout_seconds
    entries = _env_entries(env)
    if entries:
        options["env"] = entries
    return build_batch(name, None, episodes, None, inputs, namespace, samples_per_input, pool=pool,
                       command=sessions.hold_command(), verifier=copy.deepcopy(dict(verifier)), **options)


def pool_namespace(batch: Mapping) -> str:
    """Where the batch's pods run: its pool's namespace, from its spec (no read)."""
    meta, spec = batch["metadata"], batch.get("spec") or {}
    pool = (spec.get("poolRef") or {}).get("name")
    if not pool or not sessions.is_hold_command(spec.get("command")):
        raise ValueError(f"RolloutBatch {meta['namespace']}/{meta['name']} is not a session batch "
                         "(open one with open_sessions)")
    return naming.pool_namespace(meta["namespace"], pool)


def episode_env(batch: Mapping, index: int) -> tuple[tuple[str, str], ...]:
    """The variables episode ``index``'s command would see beside the container's: its identity,
    its input's file (the operator wrote it into the claim directory), the batch's plain env."""
    spec = batch.get("spec") or {}
    group, sample = group_and_sample(index, int(spec.get("samplesPerInput") or 1))
    env = [("EPISODE_INDEX", str(index)), ("EPISODE_GROUP", str(group)), ("EPISODE_SAMPLE", str(sample)),
           ("BATCH_NAME", batch["metadata"]["name"])]
    if spec.get("inputs") or spec.get("inputsFrom"):   # submit() moves large inputs to inputsFrom
        env.append(("EPISODE_INPUT", f"{naming.CLAIM_MOUNT_PATH}/input.json"))
    env += [(e["name"], str(e.get("value", ""))) for e in spec.get("env") or [] if "valueFrom" not in e]
    return tuple(env)


def exec_argv(target: SessionTarget, command: str | Sequence[str]) -> list[str]:
    """A string runs under ``/bin/sh -c``, a list as it is; both under env(1) with the episode's
    variables."""
    if isinstance(command, str):
        argv = ["/bin/sh", "-c", command]
    else:
        argv = [str(word) for word in command]
        if not argv:
            raise ValueError("an empty command")
        if "=" in argv[0]:
            raise ValueError(f"the command's first word {argv[0]!r} holds '=': env(1) would read it as a "
                             "variable; run it through a shell (a string) instead")
    return ["env", *(f"{name}={value}" for name, value in target.env), *argv]


# -- finding a session's pod -------------------------------------------------------------------------
def _of_index(pods: Sequence[Mapping], index: int) -> list[PodFacts]:
    facts = [pod_facts(p) for p in pods]
    return sorted((f for f in facts if f.index == index), key=lambda f: f.created, reverse=True)


def _ended(facts: PodFacts) -> str | None:
    """Why the session in this pod is over, or None while it may hold."""
    if facts.deleting:
        return f"its pod {facts.name} is being deleted"
    if facts.phase in (v.PodPhase.SUCCEEDED, v.PodPhase.FAILED):
        return f"its pod {facts.name} ended ({facts.phase})"
    if facts.agent is not None and facts.agent.state == "terminated":
        return (f"its agent container in pod {facts.name} ended (end() was called, or its deadline, "
                "episodeTimeoutSeconds, stopped it)")
    return None


def session_state(pods: Sequence[Mapping], index: int) -> tuple[str, PodFacts | None, str]:
    """(``ready`` | ``wait`` | ``over``, the pod, what was seen) for episode ``index`` among the
    batch's pods. A pod that ended without its episode (evicted before the delivery) is retried
    by the Job: its index waits for the next pod."""
    seen = "no pod yet"
    over = None
    for facts in _of_index(pods, index):
        if facts.disrupted or is_infrastructure_failure(facts):
            continue     # evicted (still ending, too), lost its node: the Job runs the index again on a new pod
        why = _ended(facts)
        if why is None:
            if facts.delivered_at is not None and facts.phase == v.PodPhase.RUNNING:
                return "ready", facts, ""
            seen = f"pod {facts.name} is {facts.phase}, not yet handed its episode"
            return "wait", facts, seen
        if facts.delivered_at is not None and over is None:
            over = (facts, why)
    if over is not None:
        return "over", over[0], over[1]
    return "wait", None, seen


def _pods(batch: Mapping, namespace: str) -> Op:
    meta = batch["metadata"]
    selector = naming.label_selector(BatchRef(meta["namespace"], meta["name"], meta.get("uid", "")))
    try:
        found = yield Call("get", (resources.collection_path("Pod", namespace), f"list Pods in {namespace}"),
                           {"labelSelector": selector})
    except Forbidden as exc:
        raise ExecForbidden(f"{exc}: a trainer needs get and list on pods, and get and create on pods/exec, in "
                            f"the pool's namespace {namespace}", status=exc.status, reason=exc.reason) from None
    return found.get("items") or []


def open_session(batch: Mapping, index: int, *, timeout: float, opened_at: float,
                 interval: float | None = None) -> Op:
    """Wait (at most ``timeout`` s) until episode ``index``'s pod runs and holds its episode; its
    SessionCore. SessionOver when its session already ended or the batch did."""
    meta, spec = batch["metadata"], batch.get("spec") or {}
    episodes = int(spec.get("episodes") or 0)
    if not (isinstance(index, int) and 0 <= index < episodes):
        raise ValueError(f"episode index {index!r} is not in 0..{episodes - 1}")
    namespace = pool_namespace(batch)
    where = f"episode {index} of RolloutBatch {meta['namespace']}/{meta['name']}"
    deadline = time.monotonic() + timeout
    while True:
        state, facts, seen = yield from session_state_of(batch, namespace, index)
        if state == "ready":
            assert facts is not None and facts.delivered_at is not None
            target = SessionTarget(batch=f"{meta['namespace']}/{meta['name']}", namespace=namespace, pod=facts.name,
                                   index=index, env=episode_env(batch, index),
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


def session_state_of(batch: Mapping, namespace: str, index: int) -> Op:
    return session_state((yield from _pods(batch, namespace)), index)


# -- commands in a session -----------------------------------------------------------------------------
def _over(target: SessionTarget) -> Op:
    """Why the target's session is over (its pod read now), or None while it holds. SessionLost
    when its pod was lost: that is no end of the episode, which runs again on another pod."""
    try:
        pod = yield Call("get", (resources.object_path("Pod", target.pod, target.namespace),
                                 f"get Pod {target.namespace}/{target.pod}"))
    except NotFound:
        return f"its pod {target.pod} is gone"
    facts = pod_facts(pod)
    if facts.disrupted or is_infrastructure_failure(facts):
        why = (f"its pod {facts.name} was lost (evicted, or its node lost): nothing of it is graded, and the Job "
               f"runs episode {target.index} again on a new pod; open that with session({target.index})")
        raise SessionLost(f"the session of episode {target.index} of RolloutBatch {target.batch} is lost: {why}",
                          why=why)
    return _ended(facts)


def _exec(target: SessionTarget, argv: list[str], what: str, *, stdin: bytes = b"", timeout: float,
          limit_bytes: int, on_output: OnOutput | None = None) -> Op:
    """One exec in the session's agent container, its refusals made plain: Forbidden names the
    Role a trainer needs; a pod that ended is SessionOver."""
    where = f"{what} in episode {target.index} of RolloutBatch {target.batch}"
    try:
        result = yield Call("exec_in_pod", (target.namespace, target.pod, naming.AGENT_CONTAINER, argv),
                            {"stdin": stdin, "timeout": timeout, "limit_bytes": limit_bytes,
                             "on_output": on_output})
    except Forbidden as exc:
        raise ExecForbidden(f"{where}: {exc}: a trainer needs get and create on pods/exec (and get, list on "
                            f"pods) in the pool's namespace {target.namespace}", status=exc.status,
                            reason=exc.reason) from None
    except (NotFound, BadRequest, Unavailable) as exc:
        why = yield from _over(target)
        if why is not None:
            raise SessionOver(f"{where}: the session is over: {why}", why=why) from None
        raise type(exc)(f"{where}: {exc}", status=exc.status, reason=exc.reason) from None
    if result.exit_code is None:
        why = yield from _over(target)
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

    def _check(self) -> None:
        if self.ended is not None:
            raise SessionOver(f"the session of episode {self.target.index} of RolloutBatch {self.target.batch} "
                              f"is over: {self.ended}", why=self.ended)

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
        return self._guarded(self._run(argv, stdin, timeout or self.target.default_timeout, on_output, limit_bytes))

    def _run(self, argv: list[str], stdin: bytes, timeout: float, on_output: OnOutput | None,
             limit_bytes: int) -> Op:
        started = time.monotonic()
        result = yield from _exec(self.target, argv, "a command", stdin=stdin, timeout=timeout,
                                  limit_bytes=limit_bytes, on_output=on_output)
        seconds = time.monotonic() - started
        self.stats.commands += 1
        self.stats.command_seconds = round(self.stats.command_seconds + seconds, 6)
        return CommandResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                             seconds=seconds, stdout_truncated=result.stdout_truncated,
                             stderr_truncated=result.stderr_truncated)

    def write_file(self, path: str, data: bytes, *, timeout: float = 60) -> Op:
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"write_file takes bytes, not {type(data).__name__}")
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"{path}: {len(data)} bytes, more than one exec carries ({MAX_FILE_BYTES})")
        return self._guarded(self._write(path, bytes(data), timeout))

    def _write(self, path: str, data: bytes, timeout: float) -> Op:
        result = yield from _exec(self.target, sessions.write_file_command(path, len(data)), f"writing {path}",
                                  stdin=data, timeout=timeout, limit_bytes=4096)
        if result.exit_code == sessions.IS_A_DIRECTORY:
            raise IsADirectoryError(f"a directory, not a file: {path} in episode {self.target.index}'s sandbox")
        if result.exit_code != 0:
            raise SessionError(f"writing {path} in episode {self.target.index} failed (exit code "
                               f"{result.exit_code}): {result.stderr.decode(errors='replace').strip()}")

    def read_file(self, path: str, *, max_bytes: int = MAX_FILE_BYTES, timeout: float = 60) -> Op:
        return self._guarded(self._read(path, max_bytes, timeout))

    def _read(self, path: str, max_bytes: int, timeout: float) -> Op:
        result = yield from _exec(self.target, sessions.read_file_command(path, max_bytes), f"reading {path}",
                                  timeout=timeout, limit_bytes=max_bytes)
        where = f"{path} in episode {self.target.index}'s sandbox"
        if result.exit_code == sessions.NO_SUCH_FILE:
            raise FileNotFoundError(f"no such file: {where}")
        if result.exit_code == sessions.IS_A_DIRECTORY:
            raise IsADirectoryError(f"a directory, not a file: {where}")
        if result.exit_code != 0:
            raise SessionError(f"reading {where} failed (exit code {result.exit_code}): "
                               f"{result.stderr.decode(errors='replace').strip()}")
        if result.stdout_truncated:
            raise SessionError(f"{where} is larger than max_bytes ({max_bytes})")
        return result.stdout

    def end(self) -> Op:
        """End the session (its verifier then grades the workspace); a session that has ended,
        by end() or otherwise, is left as it is. Its stats go into its row first."""
        if self.ended is None:
            yield from self._record_stats()
            try:
                yield from end_target(self.target)
            except SessionLost as exc:   # reported once, here; a later end() is quiet
                self.ended = exc.why
                raise
            self.ended = "end() was called"

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
    """Write the hold's line. The launcher kills every process left once the hold exited, the end's
    own exec among them at times (exit 137, or no exit code), before the kubelet reports the agent
    container ended: such an end is taken as done once the pod says so, within END_SETTLE_SECONDS."""
    said = ""
    try:
        result = yield from _exec(target, sessions.end_command(), "ending the session", timeout=END_TIMEOUT,
                                  limit_bytes=4096)
        code, said = result.exit_code, result.stderr.decode(errors="replace").strip()
    except SessionLost:
        raise            # not an end: the episode runs again elsewhere
    except SessionOver:
        return
    except (SessionError, Unavailable) as exc:
        code, said = None, str(exc)
    if code == sessions.NOT_HOLDING and (yield from _over(target)) is None:
        raise SessionError(f"episode {target.index} of RolloutBatch {target.batch} cannot be ended: its session's "
                           "end FIFO is gone (its own commands removed it, or it runs something other than the "
                           "hold); it holds until episodeTimeoutSeconds")
    # Confirmed by the pod, whatever the end said: the session's own commands can take the FIFO's
    # line or forge the hold's marker.
    settle = time.monotonic() + END_SETTLE_SECONDS
    while (yield from _over(target)) is None:
        if time.monotonic() >= settle:
            if code in (sessions.ENDED, sessions.ALREADY_ENDED):
                raise SessionError(f"the session of episode {target.index} of RolloutBatch {target.batch} did not "
                                   "end: its own commands took the end's line or forged its marker; it holds "
                                   "until episodeTimeoutSeconds")
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
        core = yield from open_session(batch, index, timeout=timeout, opened_at=self.opened_at)
        self.opened[index] = core
        return core

    def end_all(self, batch: Mapping) -> Op:
        """End every session of the batch that still holds: those opened here, and those no one
        opened (so none waits for its deadline). Episodes not started yet are not stopped."""
        meta = batch["metadata"]
        ops = [core.end() for core in self.opened.values()]
        ended = {core.target.pod for core in self.opened.values()}
        for pod in (yield from _pods(batch, self.namespace)):
            facts = pod_facts(pod)
            if facts.name in ended or facts.index is None or facts.delivered_at is None or _ended(facts):
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
