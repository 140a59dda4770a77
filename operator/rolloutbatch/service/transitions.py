"""What each tracker transition means outside the batch: metrics, and Events said once per batch.

The tracker is the one place an episode becomes final (``core.tracker``): every final result
and every retry reaches :class:`TransitionReport`, whichever path caused it, so metrics and
Events cannot disagree with the status and the rows. Rows restored after a restart are not
transitions (the listener is attached after the restore), so nothing is counted twice.
"""

from __future__ import annotations

from typing import Any

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, EpisodeResult
from rolloutbatch.core.tracker import Transition
from rolloutbatch.service.context import Emit


EXTRAS_DROPPED_METRIC = "rolloutbatch_reward_extras_dropped_total"


def extras_dropped_message(result: EpisodeResult) -> str:
    """The Event of a batch's first episode whose reward extras were left out. One Event per batch:
    a policy that prints oversized extras does so in every episode, and the rows and the counter
    carry the rest."""
    return (f"episode {result.index} (pod {result.pod}): {result.message}. Every episode whose reward extras "
            f"are left out is flagged {v.FLAG_EXTRAS_DROPPED} in its results row and counted in "
            f"{EXTRAS_DROPPED_METRIC}; this Event is posted once per batch")[:1000]


class TransitionReport:
    """The tracker's listener for one batch."""

    def __init__(self, metrics: Any, ref: BatchRef, emit: Emit) -> None:
        self.metrics, self.ref, self.emit = metrics, ref, emit
        self.said_extras_dropped = False

    def __call__(self, change: Transition) -> None:
        ns, name = self.ref.namespace, self.ref.name
        if change.kind == "retried":
            self.metrics.episode_retried(ns, name)
            return
        result = change.result
        trusted = result.timings_trusted   # a ClockSkew episode's clock says nothing
        startup = result.pod_to_ready_seconds if trusted else None
        duration = (result.reward_at - result.ready_at) \
            if trusted and result.reward_at is not None and result.ready_at is not None else None
        # the reward it counts with: its own, FAILURE_REWARD for the agent's failures, none if lost
        self.metrics.episode_finished(ns, name, result.outcome, startup, duration, result.graded_reward)
        if v.FLAG_EXTRAS_DROPPED in result.flags:
            self.metrics.reward_extras_dropped(ns, name)
            if not self.said_extras_dropped:
                self.said_extras_dropped = True
                self.emit("Warning", v.EVENT_EXTRAS_DROPPED, extras_dropped_message(result))
