"""What every user-facing subcommand shares: the client, file loading, and one-line errors."""

from __future__ import annotations

import argparse
import math
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

import yaml

from rolloutbatch import GROUP, KIND, VERSION


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
    ``value: 2024-01-01`` a datetime.date, which no request can carry."""


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)
# Numbers are read as kubectl's reader (go-yaml, sigs.k8s.io/yaml/goyaml.v2) reads them: never in
# base 60 (YAML 1.1's `1:30` is 90 there, "purposefully not supported" here: the text `1:30`).
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_Loader.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT)]
                                   for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(_INT, re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)
                                                |[-+]?0x[0-9a-fA-F_]+)$""", re.X), list("-+0123456789"))
# go-yaml's floats: an exponent needs no dot nor sign (`1e3` is 1000.0, which YAML 1.1 keeps as text)
_Loader.add_implicit_resolver(_FLOAT, re.compile(r"""^(?:[-+]?(?:\.[0-9_]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?
                                                  |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
                              list("-+0123456789."))
_SCALARS = (str, int, float, bool, type(None))


# YAML aliases make a graph of a document: one that contains itself never ends as JSON, and a
# "billion laughs" one is 10**8 values from a few lines. kubectl's YAML reader refuses both
# (go-yaml: "anchor ... value contains itself", "excessive aliasing"); so does this walk, by depth
# and by the values it met.
MAX_DEPTH = 256
MAX_VALUES = 1_000_000


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
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, _SCALARS) or isinstance(key, float) and not math.isfinite(key):
                    raise CLIError(f"{where}: {path or 'the object'}: the key {key!r} is not a JSON object key")
                stack.append((f"{path}.{key}" if path else str(key), item, depth + 1))
        elif isinstance(value, (list, tuple)):   # tuples: !!omap and !!pairs entries
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        elif not isinstance(value, _SCALARS):
            tag = {bytes: "!!binary", set: "!!set"}.get(type(value), type(value).__name__)
            raise CLIError(f"{where}: {path}: {tag} is not a JSON value")


def load_documents(path: str) -> list[dict]:
    """RolloutBatch objects from a YAML/JSON file (``-`` = stdin), multi-document or a List."""
    try:
        text = sys.stdin.read() if path == "-" else pathlib.Path(path).read_text()
    except FileNotFoundError:
        raise CLIError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: cannot read: {one_line(exc)}") from None
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise CLIError(f"{path}: not valid YAML{where}: {one_line(problem)}") from None
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


def guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a subcommand; every expected failure becomes one line on stderr and an exit code."""
    from rolloutbatch.core.model import SpecError
    from rolloutbatch.kube.errors import KubeError, NotFound, Unavailable
    from rolloutbatch.sdk import CRDNotInstalled, InvalidName

    prog = "rolloutbatch"
    try:
        return func(args)
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
