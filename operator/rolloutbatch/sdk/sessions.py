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
loop. This module: what a session is (its target, stats, errors), how a session batch is built
and where a session's pod stands; ``sdk.session_commands`` opens one and runs its commands
(``SessionCore``, ``SessionsCore``: what both clients' session objects share). The classes in
``sdk.client`` and ``sdk.aio`` only run their ops.

A trainer needs, beside the rights on RolloutBatches, ``get``/``list`` on pods and ``get`` and
``create`` on ``pods/exec`` in the pool's namespace (``rp-<digest>``): an exec is a GET upgraded
to a WebSocket, authorized as both verbs.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rolloutbatch.core import naming, sessions
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.pool_delivery import episode_variables
from rolloutbatch.core.model import BatchRef, PodFacts, SpecError
from rolloutbatch.core.verdict import is_infrastructure_failure
from rolloutbatch.core.pod_reading import pod_facts
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Forbidden, KubeError
from rolloutbatch.sdk.build import _env_entries, _mapping, build_batch
from rolloutbatch.sdk.ops import Call, Op

SESSION_TIMEOUT = 600        # session(index): the pod's claim (or cold start) and its delivery
POLL_SECONDS = 0.5
RUN_LIMIT_BYTES = 1 << 20    # what run() keeps of each stream (on_output hears all of it)
MAX_FILE_BYTES = 16 << 20    # write_file / read_file: one exec's stdin or stdout
FILE_TIMEOUT = 60            # write_file / read_file: their exec's default time
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
    verifier = _mapping(verifier, "spec.verifier")
    if "command" in spec or "args" in spec:
        raise ValueError("a session batch's command is the hold (core.sessions): run commands with Session.run")
    if "task" in spec:
        raise SpecError("spec.task", f"is the pool's with pool={pool!r}: set it in the RolloutPool")
    options = dict(spec)
    parallelism = options.pop("parallelism", None)   # build_batch's positional parameter
    if episode_timeout_seconds is not None:
        options["episode_timeout_seconds"] = episode_timeout_seconds
    entries = _env_entries(env)
    if entries:
        options["env"] = entries
    return build_batch(name, None, episodes, parallelism, inputs, namespace, samples_per_input, pool=pool,
                       command=sessions.hold_command(), verifier=copy.deepcopy(verifier), **options)


def pool_namespace(batch: Mapping) -> str:
    """Where the batch's pods run: its pool's namespace, from its spec (no read)."""
    meta, spec = batch["metadata"], batch.get("spec") or {}
    pool = (spec.get("poolRef") or {}).get("name")
    if not pool or not sessions.is_hold_command(spec.get("command")):
        raise ValueError(f"RolloutBatch {meta['namespace']}/{meta['name']} is not a session batch "
                         "(open one with open_sessions)")
    return naming.pool_namespace(meta["namespace"], pool)


def episode_env(batch: Mapping, index: int, pod: str | None = None) -> tuple[tuple[str, str], ...]:
    """The variables episode ``index``'s command would see beside the container's, as its
    delivery hands them over (core.pool_delivery.episode_variables): its identity, its input's
    file (the operator wrote it into the claim directory), the batch's plain env, expanded
    (``pod``: its pod's name, for ``$(EPISODE_ID)``)."""
    spec = batch.get("spec") or {}
    has_input = bool(spec.get("inputs") or spec.get("inputsFrom"))   # submit() moves large inputs to inputsFrom
    env = [(e["name"], str(e.get("value", ""))) for e in spec.get("env") or [] if "valueFrom" not in e]
    return tuple(episode_variables(batch["metadata"]["name"], index, int(spec.get("samplesPerInput") or 1), env,
                                   f"{naming.CLAIM_MOUNT_PATH}/input.json" if has_input else None, pod))


def exec_argv(target: SessionTarget, command: str | Sequence[str]) -> list[str]:
    """A string runs under ``/bin/sh -c``, a list as it is; both under env(1) with the episode's
    variables."""
    if isinstance(command, str):
        argv = ["/bin/sh", "-c", command]
    else:
        argv = list(command)
        if not argv:
            raise ValueError("an empty command")
        if not all(isinstance(word, str) for word in argv):
            raise TypeError(f"a command's words must be strings, got {argv!r}"[:300])
        if "=" in argv[0]:
            raise ValueError(f"the command's first word {argv[0]!r} holds '=': env(1) would read it as a "
                             "variable; run it through a shell (a string) instead")
    for word in argv:
        if (why := sessions.unspellable(word)) is not None:
            raise ValueError(f"a command cannot hold {why} (no exec argument can carry it): {word!r}"[:300])
    return ["env", *(f"{name}={value}" for name, value in target.env), *argv]


# -- finding a session's pod -------------------------------------------------------------------------
def _of_index(pods: Sequence[Mapping], index: int) -> list[PodFacts]:
    facts = [pod_facts(p) for p in pods]
    return sorted((f for f in facts if f.index == index), key=lambda f: f.created, reverse=True)


def over_reason(facts: PodFacts) -> str | None:
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
    unconfirmed = {(p.get("metadata") or {}).get("name") for p in pods
                   if naming.ANNOTATION_UNCONFIRMED_AT in ((p.get("metadata") or {}).get("annotations") or {})}
    for facts in _of_index(pods, index):
        if facts.disrupted or is_infrastructure_failure(facts):
            continue     # evicted (still ending, too), lost its node: the Job runs the index again on a new pod
        why = over_reason(facts)
        if why is None:
            if facts.delivered_at is not None and facts.phase == v.PodPhase.RUNNING:
                return "ready", facts, ""
            seen = f"pod {facts.name} is {facts.phase}, not yet handed its episode"
            if facts.name in unconfirmed:
                seen = (f"pod {facts.name}: its hand-over was sent but never confirmed, so the operator left it to "
                        "its deadline; if it never got its episode, the index runs again on another pod")
            return "wait", facts, seen
        if facts.delivered_at is not None and over is None:
            over = (facts, why)
    if over is not None:
        return "over", over[0], over[1]
    return "wait", None, seen


def batch_pods(batch: Mapping, namespace: str) -> Op:
    meta = batch["metadata"]
    selector = naming.label_selector(BatchRef(meta["namespace"], meta["name"], meta.get("uid", "")))
    try:
        found = yield Call("get", (resources.collection_path("Pod", namespace), f"list Pods in {namespace}"),
                           {"labelSelector": selector})
    except Forbidden as exc:
        raise pods_forbidden(exc, namespace) from None
    return found.get("items") or []


def pods_forbidden(exc: Forbidden, namespace: str) -> ExecForbidden:
    """A refused read of the pool's pods, naming the rights a trainer needs."""
    return ExecForbidden(f"{exc}: a trainer needs get and list on pods, and get and create on pods/exec, in the "
                         f"pool's namespace {namespace}", status=exc.status, reason=exc.reason)


def session_state_of(batch: Mapping, namespace: str, index: int) -> Op:
    return session_state((yield from batch_pods(batch, namespace)), index)
