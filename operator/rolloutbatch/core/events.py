"""Parse an episode's log into its `ready` and `reward` events. Every byte is hostile input.

Lines are split on ``\n`` only, as the kubelet does (a ``\r`` progress bar stays inside its
line). Lines that are not JSON objects with an ``event`` of ``ready``/``reward`` are ignored
(tests print what they like; only lines naming ``"event"`` plainly, as JSON libraries write it,
are decoded at all). Overlong lines are skipped without being parsed, invalid UTF-8 is
replaced, NaN/Infinity tokens and absurd nesting cannot raise, and extra fields of a reward
event are kept only up to a small budget, as strict JSON (a NaN inside becomes null: the results
document must parse anywhere). Each event keeps its line number: one episode's events share one
clock and one order.
Nothing in here can raise on any input.
"""

from __future__ import annotations

import dataclasses
import json
import re

from rolloutbatch.core import strictjson
from rolloutbatch.core.escapes import escaped
from rolloutbatch.core.model import Event, ParsedLog

READY, REWARD = "ready", "reward"
# The agent launcher's own record, the last line of the agent's termination message (spec.verifier).
AGENT_EXIT = "agent_exit"
# The kubelet keeps at most this much of a termination message (its end, when the file is larger).
MAX_TERMINATION_MESSAGE_BYTES = 4096

MAX_LINE_BYTES = 64 * 1024
MAX_EXTRA_FIELD_BYTES = 4 * 1024
MAX_EXTRA_BYTES = 16 * 1024
MAX_PROBLEMS = 20
MAX_INT_DIGITS = 4000       # below sys.get_int_max_str_digits()'s default of 4,300
MAX_EVENTS_PER_KIND = 100   # more than one is already a Duplicate* verdict; keep memory flat


MAX_DROPPED_NAMES = 20      # names of dropped extras kept for the row's message


def _extra(record: dict) -> tuple[dict, tuple[str, ...]]:
    """The reward's extra fields within budget, and the names of those left out (said in the
    row: a trainer must not find fields missing without a word)."""
    # Sized as written compactly (escaped): `"key":value` per field, a comma between fields and the
    # braces around them; thousands of one-letter fields counted without their ':' and ',' were
    # written 17 % past the budget.
    kept, dropped, budget = {}, [], MAX_EXTRA_BYTES - 1
    for key, value in record.items():
        if key in ("event", "at", "episode_id", "reward") or not isinstance(key, str):
            continue
        # written as strict JSON writes it (a lone surrogate as '?'): two keys that become one would
        # lose a field without a word
        name = strictjson.text(key)
        if name in kept or name in ("event", "at", "episode_id", "reward"):
            if len(dropped) < MAX_DROPPED_NAMES:
                dropped.append(escaped(key[:64]))
            continue
        key = name
        try:
            value = strictjson.sanitize(value)
            size = len(strictjson.dumps(value, separators=strictjson.COMPACT)) + len(strictjson.dumps(key)) + 1
        except (TypeError, ValueError, RecursionError):
            size = None
        if size is None or size > MAX_EXTRA_FIELD_BYTES or size + 1 > budget:
            if len(dropped) < MAX_DROPPED_NAMES:
                # quoted into the row's message and an Event: the episode's bytes, escaped
                dropped.append(escaped(key[:64]))
            continue
        kept[key] = value
        budget -= size + 1
    return kept, tuple(dropped)


def _int(digits: str) -> int | float:
    """An integer token: past Python's int conversion bound (4,300 digits) int() raises, and the
    whole event would be lost for one field; as a float it is infinite, and read as no number."""
    return int(digits) if len(digits) <= MAX_INT_DIGITS else float(digits)


def _shallow(text: str, depth: int) -> str:
    """``text`` (JSON) with every array or object nested deeper than ``depth`` written as null;
    strings are copied whole, whatever brackets they hold."""
    out: list[str] = []
    level, skipping, in_string, escaped_char = 0, False, False, False
    for ch in text:
        if in_string:
            if escaped_char:
                escaped_char = False
            elif ch == "\\":
                escaped_char = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            if level == depth + 1 and not skipping:
                skipping = True
                out.append("null")
                continue
        elif ch in "]}":
            level -= 1
            if skipping and level == depth:
                skipping = False
                continue
        if not skipping:
            out.append(ch)
    return "".join(out)


def parse_line(line: bytes, number: int = 0) -> Event | None:
    """One log line (the ``number``-th) as an Event, or None when it is not one of ours."""
    text = line.decode("utf-8", errors="replace").strip()
    # Only a whole object naming "event" is parsed: a log of a million "{" lines made json.loads
    # raise a million times (seconds of the event loop for one hostile pod).
    if not (text.startswith("{") and text.endswith("}") and '"event"' in text):
        return None
    events = 0   # ready and reward objects decoded in the line, at any depth, repeated keys' too

    def pairs(items: list) -> dict:
        nonlocal events
        events += any(k == "event" and val in (READY, REWARD) for k, val in items)
        return dict(items)
    # counted (a Python call per object) only where a second event could be: a second "event", or
    # an escape that could spell one
    hook = pairs if text.count('"event"') > 1 or "\\u" in text else None
    shallow = False
    try:
        try:
            record = json.loads(text, parse_constant=lambda token: float(token), parse_int=_int,
                                object_pairs_hook=hook)
        except RecursionError:
            # nesting past the decoder's depth (a few KB of brackets): the event still counts,
            # its too-deep values read as null, as strictjson keeps them
            kept = _shallow(text, strictjson.MAX_DEPTH)
            # an event key in what was cut away: an object there could be another event (its
            # writer's own, wrapped), its kind unseen
            shallow, events = len(_EVENT_KEY.findall(kept.encode())) != len(_EVENT_KEY.findall(text.encode())), 0
            record = json.loads(kept, parse_constant=lambda token: float(token), parse_int=_int,
                                object_pairs_hook=hook)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") not in (READY, REWARD):
        return None
    episode_id = record.get("episode_id")
    extra, dropped = _extra(record) if record["event"] == REWARD else ({}, ())
    return Event(
        kind=record["event"],
        at=strictjson.finite(record.get("at")),
        episode_id=episode_id if isinstance(episode_id, str) else None,
        reward=record.get("reward"),
        extra=extra,
        line=number,
        dropped=dropped,
        # another event inside it (decoded, or as its writer spelt it: past the depth kept, or
        # hidden by a repeated key), or nesting no event of ours ever has: written around
        wraps_event=(hook is not None and events > 1) or shallow or len(_EVENT_KEY.findall(line)) > 1,
    )


# How many objects :func:`holds_event` decodes in one line beyond the one that ends it, and how
# many of them end at one "event" key: a line of a million "{" or "event" costs no more.
MAX_EMBEDDED_TRIES = 32
MAX_TRIES_PER_KEY = 8


# An event's key and kind as a program's JSON writer spells them (no escapes in the key or its
# value): found anywhere in a line in one linear pass, however many braces and keys surround it.
_EVENT_KEY = re.compile(rb'"event"\s*:\s*"(?:ready|reward)"')


def holds_event(line: bytes) -> bool:
    """Whether a line that is not an event holds one: a ready or reward object after a stray
    prefix, or inside other text. A container's stdout is a pipe every process in it can write
    (``/proc/1/fd/1``): bytes written just before a program's event line, without a newline, make
    that line unreadable, and a verifier's own reward would be lost unseen.

    A program's writer spells the event's key and kind plainly: found anywhere in the line in one
    linear pass (``_EVENT_KEY``), whatever bytes surround the object, before or after it (a program
    that wrote its newline apart). An object whose kind is escaped is also found: whole, by matching
    its braces from the line's end (:func:`_object_ending`), and from each ``"event"`` key back to
    the braces before it and at the line's first brace, a bounded number of times."""
    if b'"event"' not in line:
        return False
    if _EVENT_KEY.search(line):
        # bytes around the program's own event, however many (a bounded search of the objects in
        # the line was exhausted by 32 '{"event"' written after it)
        return True
    text = line.decode("utf-8", errors="replace").rstrip()
    decoder = json.JSONDecoder()

    def is_event_at(start: int) -> bool:
        try:
            record, _end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            return False
        return isinstance(record, dict) and record.get("event") in (READY, REWARD)

    last = _object_ending(text)
    if last >= 0 and is_event_at(last):
        return True
    first = text.find("{")
    if first >= 0 and first != last and is_event_at(first):
        return True
    tries = 0
    key = text.rfind('"event"')
    while key >= 0 and tries < MAX_EMBEDDED_TRIES:
        start = text.rfind("{", 0, key)
        for _ in range(MAX_TRIES_PER_KEY):
            if start < 0 or tries >= MAX_EMBEDDED_TRIES:
                break
            tries += 1
            if is_event_at(start):
                return True
            start = text.rfind("{", 0, start)
        key = text.rfind('"event"', 0, key)
    return False


def _object_ending(text: str) -> int:
    """Where the JSON object that ends ``text`` begins (its braces matched from the end, outside
    its strings), or -1. Within valid JSON a quote belongs to a string's edge when an even number
    of backslashes precede it; the scan stops at the object's first brace, so a prefix written
    before the object is never read."""
    if not text.endswith("}"):
        return -1
    depth, in_string = 0, False
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch == '"':
            slashes = 0
            while i - slashes - 1 >= 0 and text[i - slashes - 1] == "\\":
                slashes += 1
            if slashes % 2 == 0:
                in_string = not in_string
        elif not in_string:
            if ch == "}":
                depth += 1
            elif ch == "{":
                depth -= 1
                if depth == 0:
                    return i
    return -1


def parse_log(data: bytes, *, truncated: bool = False, max_line_bytes: int = MAX_LINE_BYTES,
              shared: bool = False) -> ParsedLog:
    """The events of a container's output. ``shared``: a channel other programs write into (a
    verifier's: the agent's code it runs): an event holding another is the program's own wrapped,
    not read (counted ``garbled``); elsewhere it is read as any event."""
    ready: list[Event] = []
    reward: list[Event] = []
    problems: list[str] = []
    garbled = 0
    capped = False
    for number, line in enumerate(data.split(b"\n"), start=1):
        if len(line) > max_line_bytes:
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {number}: {len(line)} bytes, longer than {max_line_bytes}: skipped")
            garbled += b'"event"' in line
            continue
        try:
            event = parse_line(line, number)
        except Exception as exc:  # noqa: BLE001 - last line of defence: hostile bytes must not raise
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {number}: unparseable ({type(exc).__name__}): skipped")
            continue
        if event is None or (shared and event.wraps_event):
            if event is not None or holds_event(line):
                garbled += 1
                if len(problems) < MAX_PROBLEMS:
                    problems.append(f"line {number}: holds an event behind other bytes: not read")
            continue
        kept = ready if event.kind == READY else reward
        if len(kept) < MAX_EVENTS_PER_KIND:
            kept.append(event)
        elif len(kept) == MAX_EVENTS_PER_KIND:
            kept.append(event)
            problems.append(f"more than {MAX_EVENTS_PER_KIND} {event.kind} events; the rest were not kept")
        else:
            capped = True
        if len(ready) > MAX_EVENTS_PER_KIND and len(reward) > MAX_EVENTS_PER_KIND:
            capped = True
            break   # nothing later can change this log's own verdict (a cross-check: core.events.cross_checked)
    if truncated:
        problems.append("log truncated at the read limit")
    return ParsedLog(ready=tuple(ready), reward=tuple(reward), problems=tuple(problems),
                     bytes_read=len(data), truncated=truncated, garbled=garbled, capped=capped)


def has_events(log: ParsedLog) -> bool:
    return bool(log.ready or log.reward)


def parse_termination_message(text: str | None, *, whole_bytes: int | None = None,
                              shared: bool = False) -> ParsedLog | None:
    """The events of a termination message, or None when it holds none, nor any written into (then
    stdout is read).

    A message of MAX_TERMINATION_MESSAGE_BYTES or more (``whole_bytes``: the size of the message
    it was cut from) may have lost its beginning: the kubelet keeps a larger file's end. It is
    parsed as truncated, events or not, so it can never yield success and never defers to
    stdout, whose events the cut part might contradict.
    """
    if not text:
        return None
    data = text.encode("utf-8", errors="replace")
    truncated = max(len(data), whole_bytes or 0) >= MAX_TERMINATION_MESSAGE_BYTES
    parsed = parse_log(data[:MAX_TERMINATION_MESSAGE_BYTES], truncated=truncated, shared=shared)
    # ``shared`` (a verifier's): a line written into is the verifier's own event, unread: the
    # message stays its channel (and fails it), never handing the verdict to stdout alone, where
    # a forged reward may wait. An agent's message that only mentions an event defers to stdout.
    return parsed if truncated or has_events(parsed) or (shared and parsed.garbled) else None


def cross_checked(message: ParsedLog, stdout: ParsedLog | None) -> ParsedLog:
    """A verifier's termination message's events, with each reward of its stdout whose reward no
    event of the message has. Everything in the verifier's container, the agent's code it runs
    included, can write the message file (the kubelet makes it world-writable): a reward written
    there must not silence the verifier's own on stdout. Rewards that agree are one (a verifier
    may write both channels); rewards that disagree are two, which fails the verifier. A stdout
    read only up to the read limit is ``truncated`` here too: what that code printed could have
    pushed the verifier's own reward past the limit, so the message's cannot be proven (the verdict
    fails a truncated verifier, as it fails one reporting on stdout alone). So is a stdout line
    holding an event behind other bytes (``garbled``): the verifier's own, written into."""
    if stdout is None:
        return message
    known = {_reward_key(e.reward) for e in message.reward}
    more = tuple(e for e in stdout.reward if _reward_key(e.reward) not in known)
    if not more and not stdout.truncated and not stdout.garbled and not stdout.capped:
        return message
    # a stdout whose events were not all kept (a flood of copies of the message's reward) may hide
    # the verifier's own reward past them: not read whole, as a truncated one
    return dataclasses.replace(message, reward=message.reward + more,
                               truncated=message.truncated or stdout.truncated or stdout.capped,
                               garbled=message.garbled + stdout.garbled)


def _reward_key(reward: object) -> str:
    """Rewards compared as JSON writes them (1 and 1.0 alike; a NaN, a str, an int past a
    float kept apart: ``float(10**400)`` raises)."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return repr(reward)
    number = strictjson.finite(reward)
    return repr(reward if number is None else number)


def split_agent_record(text: str | None) -> tuple[str, dict | None]:
    """(what the agent wrote, the launcher's record) of an agent container's termination message.

    The launcher appends its record after every process of the agent is dead, so the last line
    is its own; the record is None when that line is not a well-formed record.
    """
    text = text or ""
    body, _, last = text.rstrip("\n").rpartition("\n")
    try:
        record = json.loads(last) if len(last) <= 200 else None
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("event") != AGENT_EXIT or type(record.get("exit_code")) is not int \
            or type(record.get("timed_out")) is not bool:
        return text, None
    return body, {"exit_code": record["exit_code"], "timed_out": record["timed_out"]}
