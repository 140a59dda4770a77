"""What of an episode's log its results row keeps: the end, within its outcome's budget.

Every episode's row keeps the last bytes of the log that was read for it (``log_tail``):
``vocabulary.LOG_TAIL_BYTES`` for a failed or lost episode, ``SUCCESS_LOG_TAIL_BYTES`` for a
succeeded one. An episode judged from its termination message had no log read, so a success
there keeps none (reading one would cost the request that channel saves); a failure gets its
log read for the tail (``service.episode_judge``). Past a results ConfigMap's budget the tails
are the first thing shed, succeeded rows' before the others (``core.results.SHED_STAGES``).
"""

from __future__ import annotations

from rolloutbatch.core import vocabulary as v


def budget(outcome: str) -> int:
    """Bytes of its log's end that a row of this outcome keeps."""
    return v.SUCCESS_LOG_TAIL_BYTES if outcome == v.OUTCOME_SUCCEEDED else v.LOG_TAIL_BYTES


def tail_of(data: bytes | None, limit: int = v.LOG_TAIL_BYTES) -> str | None:
    """The last ``limit`` bytes of ``data`` as text (None for no data). A character cut by the
    limit is dropped rather than shown as a replacement mark; other invalid UTF-8 (the episode's
    bytes are anything) is replaced."""
    if not data or limit <= 0:
        return None
    end = data[-limit:]
    if len(end) < len(data):
        skip = 0
        while skip < min(3, len(end)) and 0x80 <= end[skip] <= 0xBF:   # continuation bytes of a cut character
            skip += 1
        end = end[skip:]
    return end.decode("utf-8", "replace")


def kept(tail: str | None, outcome: str) -> str | None:
    """``tail`` cut to what a row of ``outcome`` keeps (its end)."""
    if tail is None:
        return None
    limit = budget(outcome)
    data = tail.encode("utf-8", "replace")
    return tail if len(data) <= limit else tail_of(data, limit)
