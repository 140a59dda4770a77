"""Parse an episode's log into its `ready` and `reward` events. Every byte is hostile input.

Lines that are not JSON objects with an ``event`` of ``ready``/``reward`` are ignored (tests
print what they like). Overlong lines are skipped without being parsed, invalid UTF-8 is
replaced, NaN/Infinity tokens and absurd nesting cannot raise, and extra fields of a reward
event are kept only up to a small budget. Nothing in here can raise on any input.
"""

from __future__ import annotations

import json
import math

from rolloutbatch.core.model import Event, ParsedLog

MAX_LINE_BYTES = 64 * 1024
MAX_EXTRA_FIELD_BYTES = 4 * 1024
MAX_EXTRA_BYTES = 16 * 1024
MAX_PROBLEMS = 20
MAX_EVENTS_PER_KIND = 100   # more than one is already a Duplicate* verdict; keep memory flat


def _number(value: object) -> float | None:
    """A finite float, or None: bools, strings, NaN/Infinity and ints too big for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:       # a 400-digit integer is valid JSON
        return None
    return number if math.isfinite(number) else None


def _extra(record: dict) -> dict:
    kept, budget = {}, MAX_EXTRA_BYTES
    for key, value in record.items():
        if key in ("event", "at", "episode_id", "reward") or not isinstance(key, str):
            continue
        try:
            size = len(json.dumps(value, allow_nan=True)) + len(key)
        except (TypeError, ValueError, RecursionError):
            continue
        if size > MAX_EXTRA_FIELD_BYTES or size > budget:
            continue
        kept[key] = value
        budget -= size
    return kept


def parse_line(line: bytes) -> Event | None:
    """One log line as an Event, or None when it is not one of ours."""
    text = line.decode("utf-8", errors="replace").strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text, parse_constant=lambda token: float(token))
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("event") not in ("ready", "reward"):
        return None
    episode_id = record.get("episode_id")
    return Event(
        kind=record["event"],
        at=_number(record.get("at")),
        episode_id=episode_id if isinstance(episode_id, str) else None,
        reward=record.get("reward"),
        extra=_extra(record) if record["event"] == "reward" else {},
    )


def parse_log(data: bytes, *, truncated: bool = False, max_line_bytes: int = MAX_LINE_BYTES) -> ParsedLog:
    ready: list[Event] = []
    reward: list[Event] = []
    problems: list[str] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if len(line) > max_line_bytes:
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {number}: {len(line)} bytes, longer than {max_line_bytes}: skipped")
            continue
        try:
            event = parse_line(line)
        except Exception as exc:  # noqa: BLE001 - last line of defence: hostile bytes must not raise
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {number}: unparseable ({type(exc).__name__}): skipped")
            continue
        if event is None:
            continue
        kept = ready if event.kind == "ready" else reward
        if len(kept) < MAX_EVENTS_PER_KIND:
            kept.append(event)
        elif len(kept) == MAX_EVENTS_PER_KIND:
            kept.append(event)
            problems.append(f"more than {MAX_EVENTS_PER_KIND} {event.kind} events; the rest were not kept")
        if len(ready) > MAX_EVENTS_PER_KIND and len(reward) > MAX_EVENTS_PER_KIND:
            break   # nothing later can change the verdict
    if truncated:
        problems.append("log truncated at the read limit")
    return ParsedLog(ready=tuple(ready), reward=tuple(reward), problems=tuple(problems),
                     bytes_read=len(data), truncated=truncated)
