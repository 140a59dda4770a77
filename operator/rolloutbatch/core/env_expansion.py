"""Kubernetes' ``$(NAME)`` references, expanded as the kubelet expands them in a container's
command, args and env values (the API reference of ``Container.command``/``args``/``EnvVar.value``):
``$(NAME)`` becomes the value of a variable defined earlier (in env values) or anywhere in the
container's env (in command and args); a reference to an unknown name is kept as written; ``$$``
is one ``$`` (so ``$$(NAME)`` is the text ``$(NAME)``); any other ``$`` is kept.

A Job's pod gets this from the kubelet. A pooled episode is handed its command and env in a
script (core.pool_delivery), where nothing would expand them: the operator expands them the same
way first, so a batch means the same warm or cold (``submit --pool`` converts cold manifests).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping


def _pieces(text: str) -> Iterator[tuple[str | None, str]]:
    """``text`` as the kubelet reads it: (None, literal text) and (name, its reference as written)."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 == n:
            yield None, ch
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":             # an escaped operator
            yield None, "$"
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:          # an unclosed reference is kept, and so is the rest
                yield None, "$("
                i += 2
                continue
            yield text[i + 2:close], text[i:close + 1]
            i = close + 1
        else:                      # a '$' that opens nothing is kept with what follows it
            yield None, "$" + nxt
            i += 2


def expand(text: str, known: Mapping[str, str]) -> str:
    """``text`` with its references to ``known`` names replaced, as the kubelet does."""
    return "".join(piece if name is None else known.get(name, piece) for name, piece in _pieces(text))


def references(text: str, names: Iterable[str]) -> list[str]:
    """The names of ``names`` that ``text`` refers to (``$$(NAME)`` is the text, no reference)."""
    plain = expand(text, {})
    return [name for name in names if expand(text, {name: "\0"}) != plain]


def expand_env(env: Iterable[tuple[str, str]], known: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each value expanded with ``known`` and the variables before it (a later definition of a
    name replaces an earlier one for the values after it)."""
    seen = dict(known)
    done = []
    for name, value in env:
        value = expand(value, seen)
        seen[name] = value
        done.append((name, value))
    return done


def expanded_sizes(env: Iterable[tuple[str, str | int]]) -> list[tuple[str, int]]:
    """The UTF-8 size of each variable's value once the kubelet expanded it, without building it
    (references can multiply a value's size at each step). A value given as a number is one of
    that size that is not expanded (a Secret's: valueFrom values are taken as they are)."""
    sizes: dict[str, int] = {}
    out = []
    for name, value in env:
        size = value if isinstance(value, int) else expanded_size(value, sizes)
        sizes[name] = size
        out.append((name, size))
    return out


def expanded_size(text: str, sizes: Mapping[str, int]) -> int:
    """The UTF-8 size of ``text`` once its references to the names of ``sizes`` (their values'
    sizes) are expanded."""
    return sum(len(piece.encode()) if ref is None or ref not in sizes else sizes[ref] for ref, piece in _pieces(text))
