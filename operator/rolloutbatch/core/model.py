"""Typed values the core passes around. Frozen dataclasses: facts do not change once read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


class SpecError(ValueError):
    """A spec the operator cannot run; ``field`` names the culprit.

    A ValueError, so the SDK's documented "raises ValueError before any network call" holds
    while it validates through :func:`rolloutbatch.core.spec.parse_spec`.
    """

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class BatchRef:
    namespace: str
    name: str
    uid: str
    generation: int = 1


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
    isolation_network: str
    cleanup_sandbox: str
    ttl_seconds_after_finished: int | None
    pod_template: dict


@dataclass(frozen=True)
class PodFacts:
    """What the operator needs of one episode pod, read from its API object."""

    name: str
    namespace: str
    uid: str
    index: int | None
    created: float
    phase: str
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


@dataclass(frozen=True)
class Event:
    kind: str                  # "ready" | "reward"
    at: float | None           # None when absent or not a finite number
    episode_id: str | None
    reward: Any                # kept raw: the verdict decides what is a valid reward
    extra: dict


@dataclass(frozen=True)
class ParsedLog:
    ready: tuple[Event, ...]
    reward: tuple[Event, ...]
    problems: tuple[str, ...]
    bytes_read: int
    truncated: bool


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class EpisodeResult:
    index: int
    pod: str
    node: str | None
    image_id: str | None
    outcome: str               # "succeeded" | "failed" | "lost"
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

    def to_row(self, origin: float | None) -> dict:
        """The guide's per-pod row, plus what a failure needs to be understood."""
        def since(ts: float | None) -> float | None:
            return _r(ts - origin) if ts is not None and origin is not None else None
        row = {
            "pod": self.pod, "index": self.index, "node": self.node, "image_id": self.image_id,
            "reward": self.reward, "pod_to_ready_seconds": _r(self.pod_to_ready_seconds),
            "batch_to_ready_seconds": since(self.ready_at), "batch_to_reward_seconds": since(self.reward_at),
            "outcome": self.outcome, "reason": self.reason, "message": self.message,
            "attempts": self.attempts, "pod_created": self.pod_created, "ready_at": self.ready_at,
            "reward_at": self.reward_at,
        }
        if self.extra:
            row["extra"] = self.extra
        if self.flags:
            row["flags"] = list(self.flags)
        if self.log_tail is not None:
            row["log_tail"] = self.log_tail
        return row

    @classmethod
    def from_row(cls, row: dict) -> EpisodeResult:
        return cls(
            index=int(row["index"]), pod=row.get("pod") or "", node=row.get("node"), image_id=row.get("image_id"),
            outcome=row.get("outcome") or "lost", reason=row.get("reason"), message=row.get("message") or "",
            reward=row.get("reward"), pod_created=row.get("pod_created"), ready_at=row.get("ready_at"),
            reward_at=row.get("reward_at"), pod_to_ready_seconds=row.get("pod_to_ready_seconds"),
            attempts=int(row.get("attempts") or 1), log_tail=row.get("log_tail"), extra=dict(row.get("extra") or {}),
            flags=tuple(row.get("flags") or ()),
        )

    def replace(self, **changes: Any) -> EpisodeResult:
        return dataclasses.replace(self, **changes)


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

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.lost
