"""Typed rows and groups: what ``results()``, ``stream()`` and ``groups()`` return.

TypedDicts, so a row is still the plain dict the results ConfigMap holds (JSON in, JSON out)
while a type checker knows its fields.

The fields some rows lack are declared in a ``total=False`` subclass rather than with
``typing.NotRequired`` (Python 3.11): the SDK supports Python 3.10, and the two spellings mean
the same to a type checker.
"""

from __future__ import annotations

from typing import Any, TypedDict


class _RowFields(TypedDict):
    """The fields every row has."""

    pod: str
    index: int                 # episode index 0..episodes-1
    group: int                 # index // samplesPerInput: the input it worked on
    sample: int                # index % samplesPerInput
    valid: bool                # True iff ``reward`` is usable for training (succeeded, or failed: 0.0)
    reward: float | None       # its reward, 0.0 when it failed (the agent's failure), null when lost
    outcome: str               # succeeded | failed | lost | stopped (vocabulary.OUTCOMES)
    reason: str | None         # why it failed or was lost (vocabulary.REASONS)
    message: str
    attempts: int
    node: str | None
    image_id: str | None
    pod_to_ready_seconds: float | None
    batch_to_ready_seconds: float | None
    batch_to_reward_seconds: float | None
    pod_created: float | None
    ready_at: float | None
    reward_at: float | None    # wall-clock time of the episode's reward event


class Row(_RowFields, total=False):
    """One episode's final result (``core.model.EpisodeResult.to_row``): the fields above, and these when present."""

    claimed_reward: float      # what a failed episode printed: never train on it
    channel: str               # where its reward was read: terminationMessage or log
    agent: dict[str, Any]      # with spec.verifier: exit_code, timed_out, output_tail, channel
    extra: dict[str, Any]
    flags: list[str]
    log_tail: str
    session: dict[str, Any]    # a session's commands, command_seconds; Sessions.wait() adds the SDK's SessionStats
    pool: dict[str, Any]       # spec.poolRef, once handed over: hit (a claimed warm pod), claim_seconds


class Group(TypedDict):
    """One input's k samples, once all are final (``core.groups.group_entry`` plus the rows)."""

    group: int
    episodes: int              # k
    succeeded: int
    valid: int                 # rows whose reward entered the statistics (succeeded and failed)
    reward_mean: float | None  # over valid rewards only; None when no sample is valid
    reward_std: float | None   # population standard deviation, as GRPO normalises
    final: bool                # every sample has a row (False only for a batch that ended short)
    rows: list[Row]            # by sample
