"""The operator's Prometheus metric families: each one's name, help text, labels and buckets,
defined once. :class:`rolloutbatch.metrics.Metrics` decides when each changes; the dashboard's and
the alerts' tests read :data:`METRIC_NAMES`.

Naming follows the Prometheus conventions: prefix ``rolloutbatch_``, base units in the names
(``_seconds``, ``_bytes``), ``_total`` on counters. The only per-object label is ``namespace``
(and ``batch`` with ``batch_label``; ``pool`` for the pools' families, which serve many batches).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rolloutbatch import __version__
from rolloutbatch.core import vocabulary
from rolloutbatch.metric_buckets import (
    DEFAULT_BATCH_BUCKETS,
    DEFAULT_CLAIM_BUCKETS,
    DEFAULT_DURATION_BUCKETS,
    DEFAULT_HANDLER_BUCKETS,
    DEFAULT_LOG_READ_BUCKETS,
)

PREFIX = "rolloutbatch"

# The result label: a terminal phase (lowercase) or an episode outcome, as core names them.
BATCH_RESULTS: tuple[str, ...] = tuple(phase.lower() for phase in vocabulary.TERMINAL_PHASES)
EPISODE_RESULTS: tuple[str, ...] = vocabulary.OUTCOMES
# The sign label of episode_reward_magnitude_total.
REWARD_SIGNS: tuple[str, ...] = ("positive", "negative")

# Every metric family this module exports (names as Prometheus shows them, without the
# `_bucket`/`_sum`/`_count` suffixes of histograms). Tests use it to check dashboards and alerts.
METRIC_NAMES: frozenset[str] = frozenset(
    f"{PREFIX}_{n}"
    for n in (
        "episodes_total", "batches_total", "batches_active", "episodes_running",
        "episodes_retried_total", "episode_startup_seconds", "episode_duration_seconds",
        "episode_reward", "batch_ready_seconds", "batch_rewards_seconds",
        "batch_complete_seconds", "log_read_seconds", "log_read_bytes_total",
        "handler_duration_seconds", "handler_errors_total", "build_info", "reward_extras_dropped_total",
        "episode_reward_magnitude_total", "leader", "queue_wait_seconds", "queue_evictions_total",
        "claim_seconds", "pool_claims_total",
    )
)
HISTOGRAM_NAMES: frozenset[str] = frozenset(
    f"{PREFIX}_{n}"
    for n in (
        "episode_startup_seconds", "episode_duration_seconds", "episode_reward",
        "batch_ready_seconds", "batch_rewards_seconds", "batch_complete_seconds",
        "log_read_seconds", "handler_duration_seconds", "queue_wait_seconds", "claim_seconds",
    )
)


class Collectors:
    """Every family, registered on ``registry``; ``batch_label`` adds a ``batch`` label to the
    per-batch ones."""

    def __init__(self, registry: CollectorRegistry, batch_label: bool, startup_buckets: Sequence[float],
                 reward_buckets: Sequence[float]) -> None:
        per_batch = ("namespace", "batch") if batch_label else ("namespace",)

        def name(n: str) -> str:
            return f"{PREFIX}_{n}"

        r = registry
        self.episodes_total = Counter(
            name("episodes"), "Episodes final, by result (succeeded, failed, lost, stopped).",
            [*per_batch, "result"], registry=r)
        self.batches_total = Counter(
            name("batches"), "RolloutBatches finished, by result (succeeded, failed, stopped).",
            [*per_batch, "result"], registry=r)
        self.batches_active = Gauge(
            name("batches_active"), "RolloutBatches started and not yet finished.",
            list(per_batch), registry=r)
        self.episodes_running = Gauge(
            name("episodes_running"), "Episode pods currently running.",
            list(per_batch), registry=r)
        self.episodes_retried_total = Counter(
            name("episodes_retried"),
            "Episodes re-run after an infrastructure failure (eviction, preemption, node loss).",
            list(per_batch), registry=r)
        self.reward_extras_dropped_total = Counter(
            name("reward_extras_dropped"),
            "Episodes whose reward event had extra fields left out of their row (over the extras budget, "
            "or not JSON); each row is flagged RewardExtrasDropped.",
            list(per_batch), registry=r)
        self.episode_startup_seconds = Histogram(
            name("episode_startup_seconds"),
            "Episode pod created -> its ready event, in seconds.",
            list(per_batch), buckets=tuple(startup_buckets), registry=r)
        self.episode_duration_seconds = Histogram(
            name("episode_duration_seconds"),
            "Episode ready event -> its reward event, in seconds.",
            list(per_batch), buckets=DEFAULT_DURATION_BUCKETS, registry=r)
        self.episode_reward = Histogram(
            name("episode_reward"), "Rewards reported by episodes.",
            list(per_batch), buckets=tuple(reward_buckets), registry=r)
        # A mean reward needs a sum, and the histogram exports none while a bucket is below zero
        # (its _sum could decrease, which rate() would take for a counter reset). A sum per sign
        # never decreases: mean = (positive - negative) / episode_reward_count.
        self.episode_reward_magnitude_total = Counter(
            name("episode_reward_magnitude"),
            "Sum of the magnitudes of the rewards graded episodes count with, by sign; their mean is "
            "(positive - negative) / rolloutbatch_episode_reward_count.",
            [*per_batch, "sign"], registry=r)
        def batch_histogram(n: str, text: str) -> Histogram:
            return Histogram(name(n), text, list(per_batch), buckets=DEFAULT_BATCH_BUCKETS, registry=r)

        self.batch_ready_seconds = batch_histogram(
            "batch_ready_seconds", "RolloutBatch start -> every episode ready, in seconds.")
        self.batch_rewards_seconds = batch_histogram(
            "batch_rewards_seconds", "RolloutBatch start -> every episode's reward, in seconds.")
        self.batch_complete_seconds = batch_histogram(
            "batch_complete_seconds", "Job created -> the operator saw the Job finish, in seconds.")
        self.queue_wait_seconds = batch_histogram(
            "queue_wait_seconds", "spec.queueName: the batch's Job created -> Kueue first admitted it, in seconds.")
        self.queue_evictions_total = Counter(
            name("queue_evictions"),
            "Times Kueue evicted a batch's running Job (preemption, a stopped queue); its running episodes "
            "end EvictedByQueue.",
            list(per_batch), registry=r)
        # Warm pools (core.pools): per pool, not per batch (a pool serves many batches).
        self.claim_seconds = Histogram(
            name("claim_seconds"),
            "spec.poolRef: an episode's claim (a warm pod) or its cold pod's creation -> the pod was handed "
            "its episode, in seconds.",
            ["namespace", "pool", "result"], buckets=DEFAULT_CLAIM_BUCKETS, registry=r)
        self.pool_claims_total = Counter(
            name("pool_claims"),
            "Episodes of pooled batches by result: hit (a warm pod of the pool) or miss (a cold pod).",
            ["namespace", "pool", "result"], registry=r)
        self.log_read_seconds = Histogram(
            name("log_read_seconds"), "Time to read one episode pod's log, in seconds.",
            buckets=DEFAULT_LOG_READ_BUCKETS, registry=r)
        self.log_read_bytes_total = Counter(
            name("log_read_bytes"), "Bytes of episode pod logs read.", registry=r)
        self.handler_duration_seconds = Histogram(
            name("handler_duration_seconds"), "Operator handler run time, in seconds.",
            ["handler"], buckets=DEFAULT_HANDLER_BUCKETS, registry=r)
        self.handler_errors_total = Counter(
            name("handler_errors"), "Operator handler runs that raised.",
            ["handler"], registry=r)
        self.build_info = Gauge(
            name("build_info"), "Always 1; the operator's version is in the labels.",
            ["version"], registry=r)
        self.build_info.labels(version=__version__).set(1)
        self.leader = Gauge(
            name("leader"), "1 while this process holds the leader-election Lease and reconciles; "
            "0 as a standby. Summed over the operator's pods: 1, or 0 for a takeover's few seconds.",
            registry=r)

        self.batch_histograms = (
            self.batch_ready_seconds, self.batch_rewards_seconds, self.batch_complete_seconds,
            self.queue_wait_seconds,
        )
        self.episode_histograms = (
            self.episode_startup_seconds, self.episode_duration_seconds, self.episode_reward,
        )
