"""Whose failure is it? Every episode reason classified once, and what a failure is worth.

The adversary is the agent: it controls its workspace, its own process tree and (with
spec.verifier) everything the verifier runs of its code. It wants a higher group advantage, and
leaving a bad attempt out of its group would give it one (the others' mean rises, and a GRPO
trainer never sees the bad sample). So every failure the agent could have caused is its own:
outcome ``failed``, valid, counted with FAILURE_REWARD in sums, means and group statistics,
exactly like an honest attempt that scored it. Only what the agent cannot cause (the node, the
API, the image, the batch) loses the episode: outcome ``lost``, not valid, left out. The
verifier's author is trusted; a verifier that fails once the agent's work is in front of it
cannot be told from one the agent broke, so that too is the agent's. An index that never ran
is lost whatever its reason (nothing of the agent ran).

A third party can end an episode too: the batch's owner, by ``spec.stop``. An episode cut off by
the stop (running, or never started) is neither the agent's failure nor a loss of the
infrastructure: outcome ``stopped``, not valid, left out like a lost one, and counted apart
(``stoppedEpisodes``), so lost episodes keep meaning "the cluster lost them". The agent cannot
cause a stop; what it may gain from one (a bad attempt cut off is left out of its group) is
bounded by the owner stopping, and such a group is never final.
"""

from __future__ import annotations

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.strictjson import finite

AGENT, INFRASTRUCTURE, OWNER = "agent", "infrastructure", "owner"

# The reward a failed (valid) episode counts with: the lowest reward of the guide's [0, 1]
# rewards. The spec declares no reward range, so this is the one place it is decided.
FAILURE_REWARD = 0.0

# A usable reward's magnitude is at most this: sums of 100,000 of them stay exact enough and
# finite (two rewards of 1e308 sum to inf, which no JSON patch can carry).
MAX_ABS_REWARD = 1e12


def usable_reward(value: object) -> float | None:
    """``value`` as a reward that may be counted: a finite int/float (never a bool) of magnitude
    at most MAX_ABS_REWARD; None otherwise."""
    number = finite(value)
    return number if number is not None and abs(number) <= MAX_ABS_REWARD else None

# Every episode reason (vocabulary.EPISODE_REASONS), for an episode whose pod ran.
REASON_CLASS: dict[str, str] = {
    # retries.infrastructure used up on evictions, preemptions, lost nodes
    v.EP_INFRASTRUCTURE: INFRASTRUCTURE,
    # the API gave no log: a bounded read of bytes, which no content can make fail
    v.EP_LOG_UNAVAILABLE: INFRASTRUCTURE,
    v.EP_TIMEOUT: AGENT,                   # ran past episodeTimeoutSeconds
    v.EP_BATCH_TIMEOUT: AGENT,             # a pod that ran and was too slow for the batch's deadline
    v.EP_STORAGE_LIMIT: AGENT,             # filled its own workspace or ephemeral storage
    v.EP_IMAGE_PULL: INFRASTRUCTURE,       # the spec's image: nothing of the agent ran
    v.EP_VERIFIER_NOT_STARTED: INFRASTRUCTURE,   # the node never started the verifier
    v.EP_NON_ZERO_EXIT: AGENT,
    v.EP_RESTARTED: AGENT,
    v.EP_NO_READY: AGENT,
    v.EP_NO_REWARD: AGENT,
    v.EP_LOG_LIMIT: AGENT,                 # its own output flood
    v.EP_DUPLICATE_READY: AGENT,
    v.EP_DUPLICATE_REWARD: AGENT,
    v.EP_IDENTITY: AGENT,
    v.EP_INVALID_REWARD: AGENT,            # NaN, a string, 1e308: the worst, never a way out
    v.EP_MISSING_TIMESTAMP: AGENT,
    v.EP_CLOCK_SKEW: AGENT,                # a forged `at` looks exactly like a drifting clock
    v.EP_REWARD_BEFORE_READY: AGENT,
    v.EP_JOB_FAILED: INFRASTRUCTURE,       # only for indexes the Job ended without
    v.EP_BATCH_STALLED: INFRASTRUCTURE,    # the batch stopped: the spec, the API, the cluster
    # the verifier ran with the agent's work in front of it: killed, crashed, hung, no reward
    v.EP_VERIFIER_FAILED: AGENT,
    # spec.stop: the batch's owner ended it, running or before it started
    v.EP_BATCH_STOPPED: OWNER,
    # Kueue preempted or evicted the batch's Job: the cluster's decision, nothing of the agent's
    v.EP_EVICTED: INFRASTRUCTURE,
}
# The outcome of each class of reason.
CLASS_OUTCOME = {AGENT: v.OUTCOME_FAILED, INFRASTRUCTURE: v.OUTCOME_LOST, OWNER: v.OUTCOME_STOPPED}


def outcome_of(reason: str) -> str:
    """The outcome of an episode whose pod ran and failed with ``reason``."""
    return CLASS_OUTCOME[REASON_CLASS.get(reason or "", AGENT)]


def never_ran_outcome(reason: str) -> str:
    """The outcome of an index that produced no judgeable run: lost (nothing of the agent ran to
    cause it), or stopped when the owner's stop is why."""
    return v.OUTCOME_STOPPED if REASON_CLASS.get(reason) == OWNER else v.OUTCOME_LOST

