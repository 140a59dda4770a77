"""Histogram buckets of the operator's metrics (``rolloutbatch.metrics``), each chosen for what it measures."""

from __future__ import annotations

# Pod created -> ready. Sandboxed pods start in well under a second on a warm node and in
# minutes when an image must be pulled or a node scaled up: 0.25 s ... 600 s.
DEFAULT_STARTUP_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0,
    180.0, 300.0, 450.0, 600.0,
)
# Rewards are usually in [-1, 1] (pass/fail tests: 0 or 1; shaped rewards: fractions). With a
# negative bucket prometheus-client exports no `_sum` (it could decrease); pass non-negative
# buckets if every reward is >= 0 and a mean-reward series (`_sum / _count`) is wanted.
DEFAULT_REWARD_BUCKETS: tuple[float, ...] = (
    -1.0, -0.5, -0.25, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
)
# Ready -> reward: an agent's attempt plus the tests; the default episode timeout is 600 s.
DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)
# Whole-batch durations (batch created -> all ready / all rewards / Job complete).
DEFAULT_BATCH_BUCKETS: tuple[float, ...] = (
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
    14400.0, 28800.0,
)
# A pooled episode's claim -> hand-over: a warm pod's in well under a second (the target is
# 0.3 s p50), a cold pod's (a miss: counted from its creation) as long as any pod start.
DEFAULT_CLAIM_BUCKETS: tuple[float, ...] = (
    0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, *(b for b in DEFAULT_STARTUP_BUCKETS if b >= 1.0),
)
# One bounded pod-log read.
DEFAULT_LOG_READ_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
DEFAULT_HANDLER_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)
