"""Strict JSON: everything the operator writes (status, results, events) parses anywhere.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which JSON does not have: the API
server refuses such a patch (a batch once retried one forever) and other readers choke on such a
document. :func:`sanitize` replaces every non-finite float with None;
:func:`dumps` refuses what would not be strict JSON, so a new path that forgets to sanitize
fails loudly in tests instead of writing ``Infinity``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 64
# Half of a UTF-16 surrogate pair in a Python string: no character. No UTF-8 request can carry it
# (the API server's Go decoder makes it U+FFFD), and a JSON text that escapes it is not I-JSON.
SURROGATE = re.compile("[\ud800-\udfff]")


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (bools, strings, NaN, infinities, ints past a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def text(value: str) -> str:
    """``value`` without lone surrogates (``"\\ud800"`` parses in Python, but is not I-JSON:
    Go replaces it, serde_json refuses it, and the string cannot be encoded to UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


def sanitize(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` that is strict JSON: non-finite floats become None, ints too big for
    a float become None, keys become strings, tuples become lists, lone surrogates become
    ``?``; past ``MAX_DEPTH`` levels, None."""
    if _depth > MAX_DEPTH:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if finite(value) is not None else None
    if isinstance(value, dict):
        return {text(str(k)): sanitize(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v, _depth + 1) for v in value]
    return str(value)


def holds_surrogate(value: Any) -> bool:
    """Whether a string or key in ``value`` holds a :data:`SURROGATE` (walked without recursion,
    as :func:`deeper_than`)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects or arrays more than ``limit`` levels deep. Walked without
    recursion: the API server takes JSON nested 10000 levels deep, and Python's ``json`` (and
    every recursive walk) raises RecursionError at about a thousand."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


COMPACT = (",", ":")   # json.dumps separators of what we write compactly (results; the extras budget sizes by them)


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN/Infinity (raises ValueError instead)."""
    return json.dumps(value, allow_nan=False, **kwargs)


def _not_json(token: str) -> float:
    raise ValueError(f"{token} is not JSON")


def _finite_float(token: str) -> float:
    number = float(token)     # 1e999 is JSON, but no double: Python reads it as infinity
    if not math.isfinite(number):
        raise ValueError(f"{token} is past a double's range")
    return number


def _finite_int(token: str) -> int:
    number = int(token)
    if finite(number) is None:   # 10**400 is JSON too, and no double either
        raise ValueError(f"{token[:20]}... is past a double's range")
    return number


_NUMBERS = {"parse_constant": _not_json, "parse_float": _finite_float, "parse_int": _finite_int}


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and numbers past a double, written with a
    fraction, an exponent or as a whole number (ValueError): Python reads them, JSON has none,
    and no reader of ours may be handed a number that is not finite."""
    return json.loads(text, **_NUMBERS)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"the key {key!r} is in one object twice")
        obj[key] = value
    return obj


_SPACE = re.compile(r"[ \t\n\r]*")   # JSON's whitespace


def load_all(text: str) -> list[Any]:
    """The JSON values of ``text``, one after another (``{...} {...}``: kubectl reads a file of
    several so), each read as :func:`loads` reads one. A file people write may name a key twice
    in one object: refused (ValueError), as kubectl's strict decoding refuses a duplicate field,
    rather than one of the two silently kept. A syntax error is a ``json.JSONDecodeError``."""
    return [value for value, _end in iter_values(text)]


def iter_values(text: str, at: int = 0) -> Iterator[tuple[Any, int]]:
    """Each JSON value of ``text`` from ``at`` with where it ends, as :func:`load_all` reads them:
    a reader that meets an error after some values knows how far they went."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, **_NUMBERS)
    while (at := _SPACE.match(text, at).end()) < len(text):
        value, at = decoder.raw_decode(text, at)
        yield value, at
