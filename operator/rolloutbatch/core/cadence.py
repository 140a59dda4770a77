"""When a running batch writes its progress: the rule that bounds API requests per episode.

A running batch writes two things: its status (one PATCH) and its results checkpoint (a PUT of
the results ConfigMap, or of the open shard and the head). Written at a fixed interval, their
count grows with the batch's wall time, not its episodes: at ~1 round per second the operator
spent 0.157 requests per termination-message episode, which read no log at all (the
target is 0.1). So a write is due once a share of the batch has finished since the last one
(``1 / steps`` of its episodes), or once the longest interval has passed with anything new;
never sooner than the shortest interval. A batch smaller than ``steps`` episodes writes every
change, as soon as the shortest interval allows.

Nothing is lost by waiting: until it is checkpointed, a final result is still in its pod (its
status, or its log), which a restarted operator judges again; and every phase change, the final
write and a stall are written at once (the caller forces them).
"""

from __future__ import annotations

import dataclasses

STATUS_STEPS = 40       # at most ~40 status patches for the episodes finishing, plus the time-based ones
RESULTS_STEPS = 20      # at most ~20 checkpoints for the episodes finishing, plus the time-based ones


@dataclasses.dataclass(frozen=True)
class Cadence:
    """How often one kind of write may happen (seconds) and how much progress makes it due."""

    min_interval: float
    max_interval: float
    steps: int

    def step(self, episodes: int) -> int:
        """Finished episodes that make a write due before ``max_interval``."""
        return max(1, episodes // max(1, self.steps))

    def due(self, *, elapsed: float, changed: bool, finished_since: int, episodes: int) -> bool:
        """Whether to write now, ``elapsed`` seconds after the last write of this kind.

        ``changed``: anything differs from what was written; ``finished_since``: episodes that
        became final since then."""
        if not changed or elapsed < self.min_interval:
            return False
        step = self.step(episodes)
        return step == 1 or elapsed >= self.max_interval or finished_since >= step
