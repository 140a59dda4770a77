"""A container's environment in a spec (spec.env, spec.verifier.env, a pool's): its entries'
shapes (a value, or a key of an opted-in Secret), names, the operator's reserved ones, and what
execve and the image's shell take (each string's size once $(NAME) is expanded, names a POSIX
shell keeps). Shared by core.spec, core.pool_spec and core.secret_env.

Pure; each check raises core.model.SpecError naming the entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rolloutbatch.core import defaults as d
from rolloutbatch.core.crd_spec import ENV_NAME_PATTERN
from rolloutbatch.core.env_expansion import expanded_size, expanded_sizes
from rolloutbatch.core.k8s_rules import check_configmap_key, is_dns_subdomain
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.naming import EPISODE_ENV_OPT_IN, LABEL_EPISODE_ENV
from rolloutbatch.core.spec_fields import NUL, NUL_REFUSED

_ENV_NAME = re.compile(ENV_NAME_PATTERN)
RESERVED_ENV = frozenset(d.RESERVED_ENV)
# A name /bin/sh passes on to the program it execs: dash (Debian's and Ubuntu's /bin/sh) drops
# a variable whose name is no shell identifier (MY-VAR), which the env pattern allows.
SHELL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"   # a name every /bin/sh keeps in the environment
_SHELL_NAME = re.compile(SHELL_NAME_PATTERN)

# An env entry is {name, value} or {name, valueFrom: {secretKeyRef: {name, key}}}: the one
# valueFrom kind, a key of a Secret of the batch's namespace that its writer opted in by label
# (core.secret_env, docs/design.md §8.1). fieldRef and resourceFieldRef would read the pod (the
# operator sets what an episode needs of it), configMapKeyRef the namespace's ConfigMaps;
# ``optional`` would run episodes without the key instead of stalling. The CRD says the same.
ENV_FIELDS = ("name", "value", "valueFrom")
SECRET_REF_FIELDS = ("name", "key")
ENV_SHAPES = "{name, value} or {name, valueFrom: {secretKeyRef: {name, key}}}"


def _secret_ref(value: object, where: str) -> dict:
    """``valueFrom`` of an env entry: a secretKeyRef naming a Secret and one of its keys."""
    if not isinstance(value, Mapping):
        raise SpecError(where, f"must be an object, got {type(value).__name__}")
    other = sorted(str(k) for k in value if k != "secretKeyRef")
    if other:
        raise SpecError(f"{where}.{other[0]}"[:200], "only valueFrom.secretKeyRef is allowed (a key of a Secret of "
                        f"the batch's namespace labelled {LABEL_EPISODE_ENV}={EPISODE_ENV_OPT_IN}); the operator "
                        "sets EPISODE_ID and the other pod facts itself, and a ConfigMap value belongs in `value`")
    ref = value.get("secretKeyRef")
    if not isinstance(ref, Mapping):
        raise SpecError(f"{where}.secretKeyRef", "must be an object {name, key}")
    unknown = sorted(str(k) for k in ref if k not in SECRET_REF_FIELDS)
    if unknown:
        hint = (": a missing Secret or key stalls the batch before anything runs, it never runs episodes without it"
                if unknown == ["optional"] else "; secretKeyRef takes name and key")
        raise SpecError(f"{where}.secretKeyRef.{unknown[0]}"[:200], f"is not allowed{hint}")
    name, key = ref.get("name"), ref.get("key")
    if not is_dns_subdomain(name):
        raise SpecError(f"{where}.secretKeyRef.name", f"must be a Secret name (lowercase DNS subdomain), got {name!r}"[:200])
    problem = check_configmap_key(key)
    if problem:
        raise SpecError(f"{where}.secretKeyRef.key", f"{key!r}"[:100] + f" is not a Secret key: {problem}")
    return {"secretKeyRef": {"name": name, "key": key}}


def env_string_problem(name: str, value_bytes: int) -> str | None:
    """Why variable ``name`` with a value of ``value_bytes`` bytes can be given to no process
    (``NAME=value`` and its NUL past d.MAX_ARG_STRLEN), or None: inline values and Secret keys
    (core.secret_env) alike."""
    size = len(name.encode()) + 1 + value_bytes + 1
    if size <= d.MAX_ARG_STRLEN:
        return None
    return (f"{name}=<value> takes {size} bytes with its NUL; Linux gives a process at most {d.MAX_ARG_STRLEN} "
            "for one environment string (MAX_ARG_STRLEN): no container could start with it")


def check_argv_strings(field: str, command: tuple[str, ...], args: tuple[str, ...], env: list[dict]) -> None:
    """Each argument within what execve takes once the kubelet expanded its $(NAME) references
    over ``env`` (d.MAX_ARG_STRLEN, its NUL included): else no container could start. A Secret's
    value counts 0 here (unknown until provisioning)."""
    sizes = dict(expanded_sizes((e["name"], e.get("value", 0)) for e in env))
    for key, words in (("command", command), ("args", args)):
        for i, word in enumerate(words):
            size = expanded_size(word, sizes) + 1
            if size > d.MAX_ARG_STRLEN:
                raise SpecError(f"{field}.{key}[{i}]", f"takes {size} bytes with its NUL once $(NAME) is expanded; "
                                                       f"Linux gives a process at most {d.MAX_ARG_STRLEN} for one "
                                                       "argument (MAX_ARG_STRLEN): no container could start with it")


def checked_env(raw: Mapping, field: str) -> list[dict]:
    """Name/value pairs or Secret keys (``ENV_SHAPES``), valid names, none reserved (``field``:
    spec.env or spec.verifier.env)."""
    raw_env = raw.get("env") or ()
    if not isinstance(raw_env, (list, tuple)):
        raise SpecError(field, f"must be a list of {ENV_SHAPES}")
    env = []
    for item in raw_env:
        if not isinstance(item, Mapping):
            raise SpecError(field, f"entries must be objects with name and value, got {item!r}"[:200])
        name = item.get("name")
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name) or len(name) > d.MAX_ENV_NAME_LENGTH:
            raise SpecError(field, f"{name!r} is not a valid environment variable name")
        if name in RESERVED_ENV:
            raise SpecError(field, f"{name} is set by the operator")
        unknown = sorted(str(k) for k in item if k not in ENV_FIELDS)
        if unknown:
            raise SpecError(f"{field}[{name}]", f"unsupported fields: {', '.join(unknown)}; an entry is {ENV_SHAPES}"[:300])
        if item.get("valueFrom") is not None:
            if item.get("value") is not None:
                raise SpecError(f"{field}[{name}]", "sets both value and valueFrom: give one")
            env.append({"name": name, "valueFrom": _secret_ref(item["valueFrom"], f"{field}[{name}].valueFrom")})
            continue
        value = item.get("value", "")
        if not isinstance(value, str):
            raise SpecError(f"{field}[{name}]", f"value must be a string, got {type(value).__name__}")
        if NUL in value:
            raise SpecError(f"{field}[{name}]", NUL_REFUSED)
        env.append({"name": name, "value": value})
    # as the kubelet gives them, $(NAME) expanded (a Secret's value counts 0 here: core.secret_env
    # checks it, and what refers to it, once the Secret is read)
    for (name, size), item in zip(expanded_sizes((e["name"], e.get("value", 0)) for e in env), env):
        if "value" in item and (problem := env_string_problem(name, size)):
            raise SpecError(f"{field}[{name}]", problem)
    return env


def check_shell_names(env: Iterable[Mapping], field: str, why: str = "samplesPerInput > 1, or a verifier") -> None:
    """A container that runs under the operator's /bin/sh launcher (``why``: a batch's with
    samplesPerInput > 1 or a verifier, every pool's) passes its program only the variables the
    image's shell keeps (``_SHELL_NAME``): any other would be gone from every episode."""
    for item in env:
        if not _SHELL_NAME.fullmatch(item["name"]):
            raise SpecError(f"{field}[{item['name']}]", f"runs under /bin/sh here ({why}), and a shell such as dash "
                                                        "drops a variable whose name is not letters, digits and '_': "
                                                        "rename it")
