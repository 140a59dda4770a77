"""What of an episode's log its results row keeps: the end, within its outcome's budget.

Every episode's row keeps the last bytes of the log that was read for it (``log_tail``):
``vocabulary.LOG_TAIL_BYTES`` for a failed or lost episode, ``SUCCESS_LOG_TAIL_BYTES`` for a
succeeded one. With ``spec.verifier`` the agent's tail on the row (``agent.output_tail``) has the
same budget, by the row's outcome: successes are most rows, and a graded attempt's own output is
what a failure is read for. An episode judged from its termination message had no log read, so a success
there keeps none (reading one would cost the request that channel saves); a failure gets its
log read for the tail (``service.episode_judge``). Past a results ConfigMap's budget the tails
are the first thing shed, succeeded rows' before the others (``core.results.SHED_STAGES``).
"""

from __future__ import annotations

import re

from rolloutbatch.core import vocabulary as v


def budget(outcome: str) -> int:
    """Bytes of its log's end that a row of this outcome keeps."""
    return v.SUCCESS_LOG_TAIL_BYTES if outcome == v.OUTCOME_SUCCEEDED else v.LOG_TAIL_BYTES


def written_size(char: str) -> int:
    """Bytes one character takes in the results document (strict JSON, ASCII only): a control
    byte is six (\\u0001), so a tail's budget counts what is written, not what was read; a log of
    control bytes would otherwise take six times its share."""
    code = ord(char)
    if char in '"\\\n\r\t\b\f':
        return 2
    if 0x20 <= code < 0x7F:
        return 1
    return 12 if code > 0xFFFF else 6


# Characters written as themselves: one byte each in the results document.
_PLAIN = re.compile(r'[\x20\x21\x23-\x5b\x5d-\x7e]*')


def _end_within(text: str, limit: int) -> str:
    """The longest end of ``text`` whose written size is at most ``limit``."""
    end = text[-limit:] if limit > 0 else ""
    if _PLAIN.fullmatch(end):
        return end   # (most logs) each character one byte: no longer end fits
    size, start = 0, len(text)
    while start > 0:
        more = written_size(text[start - 1])
        if size + more > limit:
            break
        start -= 1
        size += more
    return text[start:]


def tail_of(data: bytes | None, limit: int = v.LOG_TAIL_BYTES) -> str | None:
    """The end of ``data`` as text, at most ``limit`` bytes as written (None for no data). A
    character cut by the limit is dropped rather than shown as a replacement mark; other invalid
    UTF-8 (the episode's bytes are anything) is replaced."""
    if not data or limit <= 0:
        return None
    end = data[-limit:]
    if len(end) < len(data):
        skip = 0
        while skip < min(3, len(end)) and 0x80 <= end[skip] <= 0xBF:   # continuation bytes of a cut character
            skip += 1
        end = end[skip:]
    return _end_within(end.decode("utf-8", "replace"), limit) or None


def kept(tail: str | None, outcome: str) -> str | None:
    """``tail`` cut to what a row of ``outcome`` keeps (its end, counted as written)."""
    if tail is None:
        return None
    return _end_within(tail, budget(outcome)) or None
