"""Typed values the core passes around. Frozen dataclasses: facts do not change once read."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutbatch.core import vocabulary
from rolloutbatch.core.groups import group_and_sample
from rolloutbatch.core.outcomes import FAILURE_REWARD, MAX_ABS_REWARD, usable_reward  # noqa: F401 - model's API
from rolloutbatch.core.strictjson import finite, sanitize



class SpecError(ValueError):
    """A spec the operator cannot run; ``field`` names the culprit.

    A ValueError, so the SDK's documented "raises ValueError before any network call" holds
    while it validates through :func:`rolloutbatch.core.spec.parse_spec`.
    """

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


class Stalled(Exception):
    """The batch cannot proceed; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class BatchRef:
    namespace: str
    name: str
    uid: str
    generation: int = 1


@dataclass(frozen=True)
class VerifierSpec:
    """spec.verifier: a second phase of every episode pod that grades the agent's work."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[dict, ...]
    files: dict[str, str]
    mount_path: str
    resources: dict
    timeout_seconds: int
    # No image of its own with spec.inputImages: the verifier runs in its episode's image (the
    # tests of a task need the task's environment).
    follows_episode_image: bool = False


@dataclass(frozen=True)
class BatchSpec:
    episodes: int
    parallelism: int
    runtime_class_name: str | None
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[dict, ...]
    task_mount_path: str
    task_files: dict[str, str]
    inputs: tuple[Any, ...]
    workspace_mount_path: str
    workspace_size_limit: str
    resources: dict
    episode_timeout_seconds: int
    active_deadline_seconds: int
    min_successful_episodes: int
    infrastructure_retries: int
    isolation_namespace: str
    isolation_network: str              # spec.isolation.network, DenyAll when unset
    cleanup_sandbox: str
    ttl_seconds_after_finished: int | None
    pod_template: dict
    samples_per_input: int = 1
    inputs_from: tuple[str, ...] = ()   # ConfigMaps of the batch's namespace (spec.inputsFrom)
    inputs_count: int = 0               # inputs in all, inline or by reference
    sandbox_quota: bool = False         # spec.isolation.resourceQuota (Dedicated only)
    egress: tuple[dict, ...] = ()       # spec.isolation.egress: NetworkPolicy egress rules
    verifier: VerifierSpec | None = None
    cleanup_results: str = vocabulary.RESULTS_DELETE   # spec.cleanup.results: Retain outlives the batch
    stop: bool = False                  # spec.stop as parsed; the operator reads the live field
    input_images: tuple[str, ...] = ()  # spec.inputImages resolved: one image per group, or () for spec.image
    queue_name: str | None = None       # spec.queueName: a Kueue LocalQueue of the batch's namespace (core.queueing)
    pool_name: str | None = None        # spec.poolRef.name: a RolloutPool of the batch's namespace (core.pools)
    pool_when_empty: str = vocabulary.POOL_COLD   # spec.poolRef.whenEmpty
    isolation_network_written: bool = False       # the spec names isolation.network (a pool's must match)

    @property
    def retains_results(self) -> bool:
        return self.cleanup_results == vocabulary.RESULTS_RETAIN


@dataclass(frozen=True)
class PodFacts:
    """What the operator needs of one episode pod, read from its API object."""

    name: str
    namespace: str
    uid: str
    index: int | None
    created: float
    phase: str          # status.phase; Succeeded once every container exited 0 (core.pod_reading.settled_phase)
    node: str | None
    image_id: str | None
    exit_code: int | None
    restart_count: int
    terminated_reason: str | None
    pod_reason: str | None
    pod_message: str | None
    disrupted: bool
    deleting: bool
    ready: bool
    started_at: float | None
    finished_at: float | None
    waiting_reason: str | None
    waiting_message: str | None
    termination_message: str | None = None   # state.terminated.message of the judged container
    agent: AgentFacts | None = None           # the agent's container (init, or a pool's), with spec.verifier
    owner_uid: str | None = None              # uid of its controller ownerReference (the Job)
    unschedulable: str | None = None          # the scheduler's message while it cannot place the pod
    scheduling_gates: tuple[str, ...] = ()    # spec.schedulingGates names (core.episode_images)
    containers_reported: bool = True          # the status lists any container (init or regular)
    delete_requested_at: float | None = None  # deletionTimestamp less its grace period: when it was deleted
    own_deadline_at: float | None = None      # status.startTime + spec.activeDeadlineSeconds
    active_deadline_seconds: int | None = None  # spec.activeDeadlineSeconds
    # warm pools (core.pools): a pod of a pool's template, whether its episode's container passed
    # its startupProbe (prepared, waiting for its episode), and when the operator handed it its
    # episode; with a verifier, the same of the verifier's container
    pooled: bool = False
    container_started: bool = False
    delivered_at: float | None = None
    claimed_at: float | None = None           # a warm pod's claim; None for a cold one
    verifier_started: bool = False
    verifier_delivered_at: float | None = None
    # the verifier's files writer (naming.VERIFIER_FILES_CONTAINER): the pod has one (a pool's pod
    # made before it came has not), and its exit code once it ended (0: the files are written)
    has_files_writer: bool = False
    files_writer_started: bool = False
    files_writer_exit: int | None = None
    # where a pool's pod mounts the task (core.pool_spec.task_mount_path_in): its default command
    # names it, and a pod claimed before its pool's task.mountPath moved keeps the old one
    task_mount_path: str | None = None
    # a Job pod's agent init container the runtime reported OOMKilled (core.pod_reading.agent_init_oom_killed)
    agent_oom_killed: bool = False
    # why the inputs init container (core.manifests, Job mode with inputs) did not copy the
    # episode's input; None when it did, or the pod has none
    inputs_error: str | None = None
    # the pod's init containers by name, in order: where each is (core.episode_images), which a
    # pod of a Job an earlier operator made may have laid out otherwise
    init_containers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentFacts:
    """The agent phase of a pod with a verifier: its container (a Job's init container, or a
    pool pod's ``agent``) as the API reports it."""

    state: str                       # "waiting" | "running" | "terminated"
    exit_code: int | None = None     # the launcher's (0 once it recorded the agent's own)
    message: str | None = None       # the agent's termination message plus the launcher's record
    finished_at: float | None = None


@dataclass(frozen=True)
class Event:
    kind: str                  # "ready" | "reward"
    at: float | None           # None when absent or not a finite number
    episode_id: str | None
    reward: Any                # kept raw: the verdict decides what is a valid reward
    extra: dict
    line: int = 0              # 1-based line of the log; one episode's events are ordered by it
    dropped: tuple[str, ...] = ()   # extra fields left out: over their budget, or not JSON
    wraps_event: bool = False  # it holds another ready or reward object (core.events.parse_line)


@dataclass(frozen=True)
class ParsedLog:
    ready: tuple[Event, ...]
    reward: tuple[Event, ...]
    problems: tuple[str, ...]
    bytes_read: int
    truncated: bool
    # lines that hold a ready or reward event without being one (something was written into the
    # line), or that hold one past the line limit: core.events.parse_log
    garbled: int = 0
    # events past MAX_EVENTS_PER_KIND were not kept (nor, once both kinds were past it, read)
    capped: bool = False


def _r(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 3)


def _text(row: Mapping, key: str, default: str | None = None) -> str | None:
    """A string field of a row (absent or null: ``default``); ValueError for anything else."""
    value = row.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _time(row: Mapping, key: str) -> float | None:
    """A timestamp or duration of a row: absent/null or a finite number; ValueError otherwise."""
    value = row.get(key)
    if value is None:
        return None
    number = finite(value)
    if number is None:
        raise ValueError(f"{key} must be a finite number")
    return number


def pool_claim(hit: bool, seconds: object) -> dict | None:
    """A pooled episode's claim as its row holds it: a warm pod claimed (a hit) or a cold pod made
    (a miss), and the seconds from that to its episode's hand-over (never below 0: the two times
    are two writers' clocks); None for seconds that are no finite number."""
    value = finite(seconds)
    return None if value is None else {"hit": bool(hit), "claim_seconds": _r(max(0.0, value))}


def valid_pool_claim(value: object) -> dict | None:
    """``value`` if it is exactly what pool_claim makes (a row read back), else None."""
    if not isinstance(value, Mapping) or set(value) != {"hit", "claim_seconds"}:
        return None
    hit, seconds = value["hit"], value["claim_seconds"]
    if type(hit) is not bool or isinstance(seconds, bool) or finite(seconds) is None or seconds < 0:
        return None
    return pool_claim(hit, float(seconds))


def _agent(value: object) -> dict:
    """The ``agent`` object of a row, checked field by field (a restart reads it back)."""
    if not isinstance(value, Mapping):
        raise ValueError("agent must be an object")
    code = value.get("exit_code")
    if code is not None and type(code) is not int:
        raise ValueError("agent.exit_code must be an integer")
    if type(value.get("timed_out", False)) is not bool:
        raise ValueError("agent.timed_out must be a boolean")
    out = {"exit_code": code, "timed_out": value.get("timed_out", False)}
    for key in ("output_tail", "channel"):
        text = _text(value, key)
        if text is not None:
            out[key] = text
    return out


@dataclass(frozen=True)
class EpisodeResult:
    index: int
    pod: str
    node: str | None
    image_id: str | None
    outcome: str               # one of vocabulary.OUTCOMES
    reason: str | None
    message: str
    reward: float | None
    pod_created: float | None
    ready_at: float | None
    reward_at: float | None
    pod_to_ready_seconds: float | None
    attempts: int = 1
    log_tail: str | None = None
    extra: dict = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    channel: str | None = None       # where the reward came from: vocabulary.CHANNELS
    agent: dict | None = None        # with spec.verifier: exit_code, timed_out, output_tail, channel
    session: dict | None = None      # a trainer-driven session's stats (valid_session_stats)
    pool: dict | None = None         # spec.poolRef: {hit, claim_seconds} (pool_claim), once handed over

    def __post_init__(self) -> None:
        # Held as its row holds it, the one rounding: the live summary's percentiles must be
        # those rebuilt from the rows after a restart.
        object.__setattr__(self, "pod_to_ready_seconds", _r(finite(self.pod_to_ready_seconds)))

    @property
    def graded_reward(self) -> float | None:
        """The reward this episode counts with (core.outcomes): its own when it succeeded,
        FAILURE_REWARD when it failed (the agent's doing), None when it was lost."""
        if self.outcome == vocabulary.OUTCOME_SUCCEEDED:
            return usable_reward(self.reward)
        return FAILURE_REWARD if self.outcome == vocabulary.OUTCOME_FAILED else None

    @property
    def valid(self) -> bool:
        """Its reward enters sums and group statistics: a graded attempt, succeeded or failed."""
        return self.graded_reward is not None

    @property
    def timings_trusted(self) -> bool:
        """Durations from its events mean something: not when its clock was found wrong."""
        return self.reason != vocabulary.EP_CLOCK_SKEW and vocabulary.FLAG_SKEW_BEYOND not in self.flags

    def batch_offsets(self, origin: float | None) -> tuple[float | None, float | None]:
        """Seconds from the batch's origin to its ready and its reward, as its row holds them (the
        summary's batch_to_all_* are the largest of these: the guide's max over the rows)."""
        def since(ts: float | None) -> float | None:
            # a clock within the skew tolerance may put an event a moment before the origin: a
            # duration is never negative (the metrics clamp alike)
            return _r(max(0.0, ts - origin)) if ts is not None and origin is not None and self.timings_trusted else None
        return since(finite(self.ready_at)), since(finite(self.reward_at))

    def to_row(self, origin: float | None, samples_per_input: int = 1) -> dict:
        """The guide's per-pod row, plus what a failure needs to be understood.

        ``reward`` is :attr:`graded_reward`: a failed episode's is FAILURE_REWARD, a lost one's
        null; what a failed episode printed stays visible as ``claimed_reward``, so a trainer
        reading ``row["reward"]`` never trains on it. A row whose clock was found wrong
        (:attr:`timings_trusted`) reports no durations.
        """
        to_ready, to_reward = self.batch_offsets(origin)
        group, sample = group_and_sample(self.index, samples_per_input)
        row = {
            "pod": self.pod, "index": self.index, "group": group, "sample": sample, "valid": self.valid,
            "node": self.node, "image_id": self.image_id, "reward": self.graded_reward,
            "pod_to_ready_seconds": self.pod_to_ready_seconds if self.timings_trusted else None,
            "batch_to_ready_seconds": to_ready, "batch_to_reward_seconds": to_reward,
            "outcome": self.outcome, "reason": self.reason, "message": self.message,
            "attempts": self.attempts, "pod_created": self.pod_created, "ready_at": self.ready_at,
            "reward_at": self.reward_at,
        }
        if self.reward is not None and self.outcome != vocabulary.OUTCOME_SUCCEEDED:
            row["claimed_reward"] = self.reward
        if self.extra:
            row["extra"] = self.extra
        if self.flags:
            row["flags"] = list(self.flags)
        if self.log_tail is not None:
            row["log_tail"] = self.log_tail
        if self.channel is not None:
            row["channel"] = self.channel
        if self.agent is not None:
            row["agent"] = dict(self.agent)
        if self.session is not None:
            row["session"] = dict(self.session)
        if self.pool is not None:
            row["pool"] = dict(self.pool)
        return row

    @classmethod
    def from_row(cls, row: Mapping) -> EpisodeResult:
        """The result a row written by :meth:`to_row` records; ValueError for any row that is not
        well typed (a hand-edited results ConfigMap must neither crash a restart nor be misread).
        Derived fields (``batch_to_*``) are not read back."""
        if not isinstance(row, Mapping):
            raise ValueError("a row must be an object")
        index = row.get("index")
        if type(index) is not int or index < 0:
            raise ValueError(f"index must be a non-negative integer, got {index!r}"[:200])
        outcome = row.get("outcome")
        if outcome not in vocabulary.OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(vocabulary.OUTCOMES)}")
        for key in ("reward", "claimed_reward"):
            if row.get(key) is not None and usable_reward(row.get(key)) is None:
                raise ValueError(f"{key} must be a finite number within +-{MAX_ABS_REWARD:g}")
        # a failed row's ``reward`` is FAILURE_REWARD (derived); what it printed is its claim
        reward = usable_reward(row.get("reward" if outcome == vocabulary.OUTCOME_SUCCEEDED else "claimed_reward"))
        attempts = row.get("attempts", 1)
        # 0 is honest for an index whose pod never existed (the Job ended first).
        if type(attempts) is not int or attempts < 0:
            raise ValueError("attempts must be a non-negative integer")
        extra = row.get("extra", {})
        if not isinstance(extra, Mapping):
            raise ValueError("extra must be an object")
        flags = row.get("flags", [])
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise ValueError("flags must be a list of strings")
        channel = _text(row, "channel")
        if channel is not None and channel not in vocabulary.CHANNELS:
            raise ValueError(f"channel must be one of {', '.join(vocabulary.CHANNELS)}")
        agent = row.get("agent")
        if agent is not None:
            agent = _agent(agent)
        session = row.get("session")
        if session is not None:
            session = valid_session_stats(session)
            if session is None:
                raise ValueError("session must be {commands, command_seconds} within their bounds")
        pool = row.get("pool")
        if pool is not None:
            pool = valid_pool_claim(pool)
            if pool is None:
                raise ValueError("pool must be {hit, claim_seconds}: a boolean and a non-negative number")
        return cls(
            channel=channel, agent=agent, session=session, pool=pool,
            index=index, pod=_text(row, "pod", ""), node=_text(row, "node"), image_id=_text(row, "image_id"),
            outcome=outcome, reason=_text(row, "reason"), message=_text(row, "message", ""), reward=reward,
            pod_created=_time(row, "pod_created"), ready_at=_time(row, "ready_at"),
            reward_at=_time(row, "reward_at"), pod_to_ready_seconds=_time(row, "pod_to_ready_seconds"),
            attempts=attempts, log_tail=_text(row, "log_tail"), extra=sanitize(dict(extra)), flags=tuple(flags),
        )

    def replace(self, **changes: Any) -> EpisodeResult:
        return dataclasses.replace(self, **changes)


#: A row's ``session``: what a trainer-driven session's SDK measured (core.sessions).
SESSION_STATS_KEYS = ("commands", "command_seconds")
MAX_SESSION_COMMANDS = 10 ** 9
MAX_SESSION_COMMAND_SECONDS = 10.0 ** 8


def valid_session_stats(value: object) -> dict | None:
    """``value`` as a row's ``session``, or None when it is not exactly {commands, command_seconds}
    with a count in 0..MAX_SESSION_COMMANDS and finite seconds in 0..MAX_SESSION_COMMAND_SECONDS."""
    if not isinstance(value, Mapping) or set(value) != set(SESSION_STATS_KEYS):
        return None
    commands, seconds = value["commands"], value["command_seconds"]
    if type(commands) is not int or not 0 <= commands <= MAX_SESSION_COMMANDS:
        return None
    if type(seconds) is int:    # compared as it is: a huge int has no float
        if not 0 <= seconds <= MAX_SESSION_COMMAND_SECONDS:
            return None
    elif type(seconds) is not float or not math.isfinite(seconds) or not 0 <= seconds <= MAX_SESSION_COMMAND_SECONDS:
        return None
    return {"commands": commands, "command_seconds": float(seconds)}


@dataclass(frozen=True)
class Summary:
    episodes: int
    succeeded: int
    failed: int
    lost: int
    retried: int
    reward_sum: float
    reward_mean: float | None
    batch_to_all_ready_seconds: float | None
    batch_to_all_rewards_seconds: float | None
    pod_to_ready_p50: float | None
    pod_to_ready_p95: float | None
    pod_to_ready_max: float | None
    nodes: dict[str, int]
    image_ids: tuple[str, ...]
    stopped: int = 0           # cut off by spec.stop: final, but not finished (core.stopping)
    # spec.poolRef: episodes handed over on a claimed warm pod (hits) or a cold one (misses), and
    # the hits' claim -> hand-over seconds
    pool_hits: int = 0
    pool_misses: int = 0
    claim_p50: float | None = None
    claim_p95: float | None = None

    @property
    def finished(self) -> int:
        """Episodes that ran to a verdict; a stopped one did not."""
        return self.succeeded + self.failed + self.lost
