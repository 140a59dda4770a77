"""What every user-facing subcommand shares: the client, file loading, and one-line errors."""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import re
import select
import signal
import sys
from collections.abc import Callable
from typing import Any

import yaml

from rolloutbatch import GROUP, KIND, VERSION
from rolloutbatch.core import strictjson


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit code ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def make_client(args: argparse.Namespace):
    """An SDK client for ``--kubeconfig`` / ``-n``; kubeconfig problems become CLIError."""
    from rolloutbatch.sdk import Client, ConfigError

    try:
        client = Client(getattr(args, "global_kubeconfig", None))
    except ConfigError as exc:
        raise CLIError(one_line(exc)) from None
    if getattr(args, "namespace", None):
        client.namespace = args.namespace
    args._server = client.api.url
    return client


def make_console(stderr: bool = False):
    from rich.console import Console

    return Console(highlight=False, stderr=stderr)


def positive(text: str) -> float:
    """argparse type of --timeout: the SDK's timeout (sdk.timeouts), refused as a bad argument
    before any call: ``inf``, ``1e400`` and ``nan`` passed a bare ``> 0`` and the SDK then refused
    them after the stop or delete had been sent."""
    from rolloutbatch.sdk.timeouts import checked_timeout

    try:
        return checked_timeout(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a finite number of seconds above 0: {text!r}") from None


def at_least(minimum: int) -> Callable[[str], int]:
    """argparse type of a whole number of at least ``minimum`` (a pool's size, a byte limit, an episode index)."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
        return value
    return whole


def network_reason(exc: BaseException) -> str:
    """A short reason for a failed connection, instead of urllib3's nested retry message."""
    import requests

    cause = exc.__cause__
    text = str(cause or exc)
    if isinstance(cause, requests.exceptions.SSLError):
        return "TLS error: " + one_line(text.split("(Caused by")[-1], 160)
    if isinstance(cause, requests.exceptions.Timeout):
        return "timed out"
    for needle, reason in (("Connection refused", "connection refused"),
                           ("Name or service not known", "unknown host"),
                           ("No route to host", "no route to host"),
                           ("Network is unreachable", "network unreachable")):
        if needle in text:
            return reason
    return one_line(text, 200)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading a timestamp as the text written, as kubectl does
    (sigs.k8s.io/yaml converts YAML to JSON, which has no date type): safe_load made
    ``value: 2024-01-01`` a datetime.date, which no request can carry. A key written twice in one
    mapping is refused, as the JSON reader (core.strictjson.load_all) and kubectl's strict
    decoding refuse it; PyYAML kept the last silently. A merge (``<<: *base``) may still be
    overridden: only the mapping's own keys are compared."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, tuple[int, Any]] = {}
            for number, (key_node, _) in enumerate(node.value):
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    at, first = seen.setdefault(key, (number, key))
                except TypeError:
                    continue   # unhashable: PyYAML refuses it below
                if at != number:   # also 1 and true, which one dict cannot hold apart
                    twice = repr(key) if repr(first) == repr(key) else f"{first!r} (as {key!r})"
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"the key {twice} is in one mapping twice",
                                                            key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)
# Numbers are read as kubectl's reader (go-yaml v2, go.yaml.in/yaml/v2 resolve.go) reads them:
# never in base 60 (YAML 1.1's `1:30` is 90 there, "purposefully not supported" here: the text
# `1:30`). A plain scalar that starts with a sign or a digit loses its `_`s and is an integer if
# Go's strconv.ParseInt(text, 0, 64) (or ParseUint) takes it (`0x1F`, `0X1F`, `0o17`, `010` octal,
# `0b101`, `1_000`), else a float if it is a "YAML-style" float Go parses finitely (`1e3`, `1e1_0`);
# one that starts with `.` is a float if Go parses it (`.5`); the rest is text.
_INT, _FLOAT, _BOOL = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_GO_BASES = {"x": 16, "o": 8, "b": 2}


# go-yaml's map of spellings (resolveMap): infinities and NaN, which a request cannot carry
_GO_YAML_SPECIAL = {f"{sign}.{word}": float(f"{sign}inf") for sign in ("", "+", "-") for word in ("inf", "Inf", "INF")}
_GO_YAML_SPECIAL.update({f".{word}": math.nan for word in ("nan", "NaN", "NAN")})


def go_yaml_number(text: str) -> int | float | None:
    """The number kubectl's YAML reader makes of a plain scalar, or None when it reads text."""
    if text in _GO_YAML_SPECIAL:
        return _GO_YAML_SPECIAL[text]
    if text[:1] == ".":
        if not _YAML_STYLE_FLOAT.fullmatch(text):
            return None
        number = float(text)
        return number if math.isfinite(number) else None
    if text[:1] not in tuple("+-0123456789"):
        return None
    plain = text.replace("_", "")
    if (match := _GO_INT.fullmatch(plain)) is not None:
        sign, digits = match.groups()
        if len(digits) > 1 and digits[0] == "0":
            base = _GO_BASES.get(digits[1].lower(), 8)
            value = int(digits[2:] if base != 8 or digits[1] in "oO" else digits[1:], base)
        else:
            value = int(digits)
        value = -value if sign == "-" else value
        if -2**63 <= value < 2**64 and not (sign and value >= 2**63):   # ParseInt, else ParseUint (no sign)
            return value
    if _YAML_STYLE_FLOAT.fullmatch(plain):
        number = float(plain)
        return number if math.isfinite(number) else None
    return None


def _go_yaml_resolve(resolve: Callable[..., str], *, only_go: bool) -> Callable[..., str]:
    """A YAML resolver's resolve() taking for a number what :func:`go_yaml_number` takes; with
    ``only_go`` (the loader), nothing else (PyYAML's YAML 1.1 numbers are text), else (the dumper,
    which quotes whatever any reader could take for no string) PyYAML's too."""
    def resolved(self: Any, kind: Any, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode and implicit[0] and isinstance(value, str) and value:
            number = go_yaml_number(value)
            if number is not None:
                return _FLOAT if isinstance(number, float) else _INT
        tag = resolve(self, kind, value, implicit)
        return yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG if only_go and tag in (_INT, _FLOAT) else tag
    return resolved


def _construct_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    number = go_yaml_number(node.value) if node.value else None
    if number is not None:
        return number
    base = yaml.SafeLoader.construct_yaml_int if node.tag == _INT else yaml.SafeLoader.construct_yaml_float
    return base(loader, node)   # an explicit !!int or !!float tag on what go-yaml reads as text


_Loader.resolve = _go_yaml_resolve(yaml.SafeLoader.resolve, only_go=True)   # type: ignore[method-assign]
_Loader.add_constructor(_INT, _construct_number)
_Loader.add_constructor(_FLOAT, _construct_number)


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string that a reader of the document would read as
    something else: PyYAML quotes what YAML 1.1 reads as a number, a boolean, null or a date, and
    wrote ``1e-3``, ``+2E5`` plain, which this CLI's loader (``submit -f``), kubectl's and YAML
    1.2's read as numbers: an env value saved with ``get -o yaml`` came back a float. Quoted
    besides: every number :func:`go_yaml_number` finds (``0X1F``, ``1e1_0``: kubectl's and the
    loader's), and the spellings go-yaml hands to Go's number parsers (``+Inf``, ``-nan``,
    ``0x1p-2``) or reads as booleans (``y``, ``N``). A resolver only decides quoting here: the
    values written are the same."""


_Dumper.resolve = _go_yaml_resolve(yaml.SafeDumper.resolve, only_go=False)   # type: ignore[method-assign]
_Dumper.add_implicit_resolver(_FLOAT, re.compile(r"""(?i)^[-+]?(?:0o[0-7_]+|0b[01_]+
                                                  |0x[0-9a-f_]*\.?[0-9a-f_]*p[-+]?[0-9_]+|inf|infinity|nan)$""", re.X),
                              list("-+0iInN"))
_Dumper.add_implicit_resolver(_BOOL, re.compile(r"^[yYnN]$"), list("yYnN"))


def dump_yaml(data: Any) -> str:
    """``data`` as the YAML document ``-o yaml`` prints: keys in their order, read back by
    :func:`load_documents` (and kubectl) as ``data``."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


_SCALARS = (str, int, float, bool, type(None))


# YAML aliases make a graph of a document: one that contains itself never ends as JSON, and a
# "billion laughs" one is 10**8 values from a few lines. kubectl's YAML reader refuses both
# (go-yaml: "anchor ... value contains itself", "excessive aliasing"); so does this walk, by depth
# and by the values it met.
MAX_DEPTH = 256
MAX_VALUES = 1_000_000
# A YAML escape of a UTF-16 half (``"\\ud83d"``; a pair is two, which YAML does not join) or a
# lone one in JSON: no character, and no UTF-8 request can carry it.
_SURROGATE = strictjson.SURROGATE
_HALF = "half of a UTF-16 surrogate pair, which is no character"


def _check_json(obj: Any, where: str) -> None:
    """Refuse a value a JSON request cannot carry, naming where it is: NaN and infinities
    (``.nan``, ``.inf``: kubectl refuses them too), and what other YAML tags make (``!!binary``
    bytes, ``!!set``); a document that contains itself or that its aliases make huge."""
    stack: list[tuple[str, Any, int]] = [("", obj, 0)]
    met = 0
    while stack:
        path, value, depth = stack.pop()
        met += 1
        if depth > MAX_DEPTH:
            raise CLIError(f"{where}: {path[:200]}...: nested more than {MAX_DEPTH} deep (an alias to itself?)")
        if met > MAX_VALUES:
            raise CLIError(f"{where}: more than {MAX_VALUES:,} values: excessive aliasing")
        if isinstance(value, float) and not math.isfinite(value):
            raise CLIError(f"{where}: {path}: {value} is not a number JSON can carry")
        if isinstance(value, str) and (half := _SURROGATE.search(value)):
            raise CLIError(f"{where}: {path}: {_HALF} ({ascii(half.group())})")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, _SCALARS) or isinstance(key, float) and not math.isfinite(key):
                    raise CLIError(f"{where}: {path or 'the object'}: the key {key!r} is not a JSON object key")
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise CLIError(f"{where}: {path or 'the object'}: the key {ascii(key)}: {_HALF}")
                stack.append((f"{path}.{key}" if path else str(key), item, depth + 1))
        elif isinstance(value, (list, tuple)):   # tuples: !!omap and !!pairs entries
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        elif not isinstance(value, _SCALARS):
            tag = {bytes: "!!binary", set: "!!set"}.get(type(value), type(value).__name__)
            raise CLIError(f"{where}: {path}: {tag} is not a JSON value")


def _parse(text: str, path: str) -> list[Any]:
    """The documents of a file, read as kubectl reads one (apimachinery's YAMLOrJSONDecoder).

    Text that starts with ``{`` is read as JSON values one after another: so a file written with
    tabs (YAML refuses them), or with a character past U+FFFF as its two escaped UTF-16 halves
    (``json.dump``'s ``"\\ud83d\\ude00"``; YAML reads two lone surrogates), is read as written.
    After two JSON values the file is JSON, and a syntax error is said as one; before that, the
    rest from where JSON stopped is read as YAML (a JSON object then ``---`` or a comment; a flow
    mapping ``{kind: RolloutBatch, ...}``), and if YAML cannot read it either, JSON's error is
    said. Values JSON read but a request may not carry (a key twice, NaN, 1e999) are refused."""
    start = len(text) - len(text.lstrip())
    if text[start:start + 1] != "{":
        return _parse_yaml(text, path)
    docs: list[Any] = []
    at = start
    try:
        for value, at in strictjson.iter_values(text, start):
            docs.append(value)
    except json.JSONDecodeError as exc:
        json_error = CLIError(f"{path}: not valid JSON (line {exc.lineno}): {one_line(exc.msg)}")
        if len(docs) > 1:
            raise json_error from None
        try:
            return docs + _parse_yaml(text[at:], path)
        except CLIError:
            raise json_error from None
    except ValueError as exc:   # JSON, but not what a request may carry: a key twice, NaN, 1e999
        raise CLIError(f"{path}: not valid JSON: {one_line(exc)}") from None
    return docs


def _parse_yaml(text: str, path: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise CLIError(f"{path}: not valid YAML{where}: {one_line(problem)}") from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        # PyYAML's own converters of an explicit tag (`!!int abc`, `!!bool maybe`) raise these
        raise CLIError(f"{path}: not valid YAML: a tagged value that is not of its tag "
                       f"({type(exc).__name__}: {one_line(exc)})") from None


def load_documents(path: str) -> list[dict]:
    """RolloutBatch objects from a YAML/JSON file (``-`` = stdin), multi-document or a List."""
    try:
        text = sys.stdin.read() if path == "-" else pathlib.Path(path).read_text()
    except FileNotFoundError:
        raise CLIError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: cannot read: {one_line(exc)}") from None
    try:
        docs = [d for d in _parse(text, path) if d is not None]
    except RecursionError:   # before the walk below counts: the parsers recurse per level
        raise CLIError(f"{path}: nested too deep (more than {MAX_DEPTH} levels are refused)") from None
    objects: list[dict] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            objects.extend(doc["items"])
        else:
            objects.append(doc)
    if not objects:
        raise CLIError(f"{path}: no objects in the file")
    for number, obj in enumerate(objects, 1):
        check_object(obj, f"{path}: object {number}")
        _check_json(obj, f"{path}: object {number}")
    return objects


def check_object(obj: Any, where: str) -> None:
    if not isinstance(obj, dict):
        raise CLIError(f"{where} is a {type(obj).__name__}, not a Kubernetes object")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind != KIND or api_version != f"{GROUP}/{VERSION}":
        raise CLIError(f"{where} is {api_version or '?'} {kind or '?'}, not {GROUP}/{VERSION} {KIND}")
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for field in ("name", "generateName", "namespace"):   # keys of the twins check and the pool's look-up
            if meta.get(field) is not None and not isinstance(meta[field], str):
                raise CLIError(f"{where}: metadata.{field} must be a string, got {type(meta[field]).__name__}")
    if not isinstance(meta, dict) or not (meta.get("name") or meta.get("generateName")):
        raise CLIError(f"{where} has no metadata.name or metadata.generateName")
    if not isinstance(obj.get("spec"), dict):
        raise CLIError(f"{where} has no spec")


def sandbox_forbidden(namespace: str, exc: BaseException, works: str) -> str:
    """Why a user with rights in the batch's namespace only (the README's editor and viewer roles,
    manifests/rbac/user_roles.yaml) cannot read its pods, Job or events; ``works``: what does."""
    user = re.search(r'User "([^"]*)"', str(exc))   # the API's refusal names who asked
    who = f"{user.group(1)} has no right" if user else "no right"
    return (f"{who} to read namespace {namespace}: an episode's pods, logs and Job need get and list on "
            f"pods, pods/log, jobs and events there, which no edit or view role of the batch's namespace gives; "
            f"{works}")


def os_error(exc: OSError) -> str:
    """``path: reason`` of a failed file operation (both paths of a rename), in one line."""
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    reason = exc.strerror or str(exc)
    return one_line(f"{paths}: {reason}" if paths else reason)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader went away (poll says POLLERR for its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):   # no fileno (a test's StringIO), or closed
        return False


def guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a subcommand; every expected failure becomes one line on stderr and an exit code."""
    from rolloutbatch.core.model import SpecError
    from rolloutbatch.kube.errors import KubeError, NotFound, Unavailable
    from rolloutbatch.sdk import CRDNotInstalled, InvalidName

    prog = "rolloutbatch"
    try:
        code = func(args)
        sys.stdout.flush()   # a reader gone is found here, not at the interpreter's exit
        return code
    except BrokenPipeError as exc:
        if not _stdout_gone():   # a pipe of the user's (--output into a FIFO): said as any file's
            print(f"{prog}: error: {os_error(exc)}", file=sys.stderr)
            return 1
        # The reader of stdout went away (`... | head`): stop quietly, with the status of a tool
        # that SIGPIPE ended, and keep Python from writing to the closed pipe again at its exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    except CLIError as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return exc.code
    except CRDNotInstalled as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except Unavailable as exc:
        if exc.status is None:
            server = getattr(args, "_server", None) or "the cluster"
            print(f"{prog}: error: cannot reach {server}: {network_reason(exc)}", file=sys.stderr)
        else:
            print(f"{prog}: error: the API server answered {exc.status}: {one_line(exc)}", file=sys.stderr)
        return 1
    except NotFound as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KubeError as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    # Refused before any call (a name; one input larger than a ConfigMap). Other ValueErrors are
    # bugs: their traceback shows.
    except (InvalidName, SpecError) as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except TimeoutError as exc:
        # Timed out is not failed: the batch may still succeed (see cli.follow's exit codes).
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 3
    except OSError as exc:
        # A file of the user's (--output under a file, a read-only directory, a full disk): the
        # path and the reason. After TimeoutError, an OSError too.
        print(f"{prog}: error: {os_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
