"""Spec defaults and the checks a schema cannot express (Kubernetes' own rules: ``core.k8s_rules``).

The CRD schema (generated from ``core.crd_spec``) already applies most defaults and rejects most
bad specs at ``kubectl apply``; this module is the operator's own reading of the spec, so it works
the same whether or not the API server defaulted a field (e.g. objects stored before a CRD
upgrade). Both take their defaults and bounds from ``core.defaults``, so they cannot disagree on
a number (tests/unit/test_crd_schema.py checks that they agree on what they accept). It also
checks what the API server would refuse only later, in the children ``core.manifests`` builds
from the spec (ConfigMap keys, pod-template shapes, label syntax, quantities), and what a
submitter may not ask of the cluster through the operator (system priorities, protected taints):
a spec is refused as a whole before anything is created.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal

from rolloutbatch.core import defaults as d
from rolloutbatch.core import vocabulary as v
# The spec's fields and its one mutable field are the CRD definition's; the bounds other modules
# read through this module are core.defaults'.
from rolloutbatch.core.crd_spec import ENV_NAME_PATTERN, SPEC_FIELDS, SPEC_OBJECT_FIELDS, STOP_FIELD  # noqa: F401
from rolloutbatch.core.defaults import (MAX_BATCH_NAME_LENGTH, MAX_CONFIG_BYTES, MAX_EPISODES,  # noqa: F401
                                        MAX_INPUT_CONFIGMAPS, MAX_INPUT_IMAGES_BYTES, MAX_SAMPLES_PER_INPUT,
                                        MAX_TOLERATIONS, MAX_USER_PRIORITY, SYSTEM_PRIORITY_PREFIX)
from rolloutbatch.core.egress import parse_egress
from rolloutbatch.core.env_expansion import expanded_size, expanded_sizes, references
from rolloutbatch.core.groups import group_count
from rolloutbatch.core.image_reference import image_reference_problem
from rolloutbatch.core.k8s_rules import (affinity_problem, check_configmap_key, container_resource_name_problem,
                                         container_resources_problem, is_dns_label, is_dns_subdomain, is_label_value,
                                         is_qualified_name, labels_problem, parse_quantity)
from rolloutbatch.core.model import BatchSpec, SpecError, VerifierSpec
from rolloutbatch.core import strictjson
from rolloutbatch.core.strictjson import deeper_than
from rolloutbatch.core.naming import EPISODE_ENV_OPT_IN, INPUTS_MOUNT_PATH, LABEL_EPISODE_ENV, TERMINATION_MESSAGE_PATH

TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS = ("", "Equal", "Exists")
TAINT_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_FIELDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
# The submitter may hold rights on RolloutBatches only, and the operator cannot tell who submitted
# a batch: the pod template may ask for nothing of the cluster's own (docs/design.md §8.1). The CRD
# refuses the same taints (core.defaults.PROTECTED_TAINTS, with why each is protected).
PROTECTED_TAINT_KEYS = frozenset(d.PROTECTED_TAINTS)
_ENV_NAME = re.compile(ENV_NAME_PATTERN)
RESERVED_ENV = frozenset(d.RESERVED_ENV)
LAUNCHER_ENV = ("EPISODE_GROUP", "EPISODE_SAMPLE", "EPISODE_INPUT")   # set by the k > 1 launcher
# No process can be given a NUL in an argument, its environment or a path: the runtime refuses
# the container, and the API server (which checks no such thing) would have taken the Job.
NUL = "\0"
NUL_REFUSED = "may not hold a NUL byte: no process can be given one"
# A name /bin/sh passes on to the program it execs: dash (Debian's and Ubuntu's /bin/sh) drops
# a variable whose name is no shell identifier (MY-VAR), which the env pattern allows.
_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INPUT_KEY = "input-{}.json"        # the key (and file name) of input g, inline or by reference
ISOLATION_NAMESPACE = v.ISOLATION_MODES       # first = default
ISOLATION_NETWORK = v.NETWORK_MODES
CLEANUP_SANDBOX = v.CLEANUP_POLICIES
CLEANUP_RESULTS = v.RESULTS_POLICIES
# spec.inputs and spec.inputsFrom together: refused, whatever the inputs' size (sdk.build moves
# large inline inputs into ConfigMaps, and must not replace the ones a user named)
INLINE_AND_REFERENCE = "give inputs inline (spec.inputs) or by reference, not both"


def stop_requested(raw: object) -> bool:
    """Whether a RolloutBatch spec (as stored, maybe never parsed) asks the batch to stop. Read
    from the live object each round: the rest of the spec is read once, this field can change."""
    return isinstance(raw, Mapping) and raw.get(STOP_FIELD) is True


def check_batch_name(name_or_prefix: str) -> None:
    """A RolloutBatch name, or a generateName prefix ending in '-'; raise SpecError when unusable."""
    prefix = isinstance(name_or_prefix, str) and name_or_prefix.endswith("-")
    stem = name_or_prefix[:-1] if prefix else name_or_prefix
    # the CRD bounds the name the API server makes, a prefix and its generated suffix
    limit = MAX_BATCH_NAME_LENGTH - d.GENERATED_NAME_SUFFIX if prefix else MAX_BATCH_NAME_LENGTH
    if not isinstance(stem, str) or not stem or not is_dns_label(stem) or len(name_or_prefix) > limit:
        raise SpecError("metadata.name", f"{name_or_prefix!r} must be lowercase letters, digits and '-', "
                                         f"at most {limit} characters"
                                         + (f" (a generateName prefix: the API server adds "
                                            f"{d.GENERATED_NAME_SUFFIX})" if prefix else ""))


def ttl_seconds_after_finished(raw: Mapping) -> int | None:
    """spec.cleanup.ttlSecondsAfterFinished alone: a batch whose spec was refused (InvalidSpec)
    ends by its TTL too (docs/design.md §5.11), and the rest of its spec is not read for it."""
    cleanup = checked_object(raw, "cleanup", "spec.cleanup")
    return _int(cleanup, "ttlSecondsAfterFinished", None, maximum=d.MAX_INT32, prefix="spec.cleanup.")


def _int(raw: Mapping, key: str, default: int | None, *, minimum: int = 0, maximum: int | None = None,
         prefix: str = "spec.") -> int | None:
    value = raw.get(key)
    if value is None:   # a null is absent, as the API server reads it (it prunes the field)
        value = default
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{prefix}{key}", f"must be an integer, got {value!r}")
    if value < minimum:
        raise SpecError(f"{prefix}{key}", f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{prefix}{key}", f"must be at most {maximum}, got {value}")
    return value


def checked_object(raw: Mapping, key: str, field_name: str) -> Mapping:
    """raw[key], an object ({} when absent)."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field_name, f"must be an object, got {type(value).__name__}")
    return value


def only_declared(value: Mapping, key: str) -> Mapping:
    """``value``, the spec's object ``key``, when it holds only the fields the CRD declares for it
    (``SPEC_OBJECT_FIELDS``): a misspelt ``infrastucture`` would otherwise be read as absent and
    its default silently used."""
    unknown = sorted(str(k) for k in value if k not in SPEC_OBJECT_FIELDS[key])
    if unknown:
        raise SpecError(f"spec.{key}", f"unsupported fields: {', '.join(unknown)}; its fields are "
                                       f"{', '.join(sorted(SPEC_OBJECT_FIELDS[key]))}"[:300])
    return value


def declared_object(raw: Mapping, key: str) -> Mapping:
    """spec[key], an object ({} when absent) of the fields the CRD declares for it."""
    return only_declared(checked_object(raw, key, f"spec.{key}"), key)


def _strings(raw: Mapping, key: str, field_name: str | None = None) -> tuple[str, ...]:
    value = raw.get(key) or ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(item, str) for item in value):
        raise SpecError(field_name or f"spec.{key}", "must be a list of strings")
    if any(NUL in item for item in value):
        raise SpecError(field_name or f"spec.{key}", NUL_REFUSED)
    return tuple(value)


def _bool(raw: Mapping, key: str, field_name: str, default: bool = False) -> bool:
    value = raw.get(key)
    value = default if value is None else value   # a null is absent (the API server prunes it)
    if not isinstance(value, bool):
        raise SpecError(field_name, f"must be true or false, got {value!r}"[:200])
    return value


def _choice(raw: Mapping, key: str, choices: tuple[str, ...], field_name: str) -> str:
    value = raw.get(key) or choices[0]
    if value not in choices:
        # Never guess: a misspelt "dedicated" silently becoming Shared would drop the sandbox.
        raise SpecError(field_name, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def checked_path(value: object, field_name: str) -> str:
    """An absolute mount path, as the container runtime reads it: the runtime cleans a path
    (``//a``, ``/a/./b/``, ``/x/../a`` are ``/a``, ``/a/b``, ``/a``) and the checks that mounts do
    not overlap compare strings, so they compare the cleaned path (a path spelled otherwise must
    not slip past them onto the launcher's own directories). Cleaned, not refused: the CRD admits
    such spellings, and a batch an earlier operator ran with one must still run after an upgrade.
    Not on or over the kernel's and the runtime's own (:func:`system_path`): no pod could start,
    or its launcher could not write its termination message."""
    if not isinstance(value, str) or not value.startswith("/") or ":" in value or len(value) > d.MAX_PATH_LENGTH:
        raise SpecError(field_name, f"must be an absolute path without ':', got {value!r}"[:300])
    if NUL in value:
        raise SpecError(field_name, NUL_REFUSED)
    path = posixpath.normpath("/" + value.lstrip("/"))
    if any(len(part.encode()) > d.MAX_NAME_BYTES for part in path.split("/")):
        raise SpecError(field_name, f"has a name longer than {d.MAX_NAME_BYTES} bytes, which no file system "
                                    "takes (the runtime could not make the mount point)")
    system = system_path(path)
    if system is not None:
        raise SpecError(field_name, f"{path} overlaps {system}, which the container runtime keeps for the system")
    return path


# The kernel's filesystems, the file the kubelet mounts for the termination message (the
# launchers' records), and /dev/null, which runc opens in the container before it starts it;
# /dev itself is the runtime's, though a mount under it (/dev/shm) is fine.
SYSTEM_PATHS = ("/proc", "/sys", TERMINATION_MESSAGE_PATH, "/dev/null")


def system_path(path: str) -> str | None:
    """The system directory a cleaned mount path lands on or over, or None."""
    if path == "/dev" or "/dev".startswith(path.rstrip("/") + "/"):
        return "/dev"
    return next((s for s in SYSTEM_PATHS if _inside(path, s)), None)


def _inside(path: str, other: str) -> bool:
    return path == other or path.startswith(other.rstrip("/") + "/") or other.startswith(path.rstrip("/") + "/")


def checked_runtime_class(value: object, field_name: str = "spec.runtimeClassName") -> str | None:
    """A RuntimeClass's name, or None when unset (empty: none). The CRD's pattern admits names the
    API never would (``a..b``): refused here, not by a pod made with it."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not is_dns_subdomain(value):
        raise SpecError(field_name, f"must be a RuntimeClass name (lowercase DNS subdomain), got {value!r}"[:200])
    return value


def checked_quantity(value: object, field_name: str) -> Decimal:
    """A non-negative quantity (string or plain number, never a bool), or SpecError."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(field_name, f"must be a quantity such as '500m' or '1Gi', got {value!r}"[:200])
    try:
        amount = parse_quantity(str(value))
    except ValueError as exc:
        raise SpecError(field_name, str(exc)[:200]) from None
    if amount < 0:
        raise SpecError(field_name, f"must be a non-negative quantity, got {value!r}"[:200])
    return amount


def _toleration(item: object, i: int) -> dict:
    """One toleration as the API server validates it (ValidateTolerations' rules)."""
    field_name = f"spec.podTemplate.tolerations[{i}]"
    if not isinstance(item, Mapping):
        raise SpecError(field_name, f"must be an object, got {type(item).__name__}")
    unknown = set(item) - set(TOLERATION_FIELDS)
    if unknown:
        raise SpecError(field_name, f"unsupported fields: {', '.join(sorted(map(str, unknown)))}"[:200])
    key, operator = item.get("key") or "", item.get("operator") or ""
    value, effect = item.get("value") or "", item.get("effect") or ""
    if key and not is_qualified_name(key):
        raise SpecError(f"{field_name}.key", f"{key!r} is not a valid label key"[:200])
    if operator not in TOLERATION_OPERATORS:
        raise SpecError(f"{field_name}.operator", f"must be Equal or Exists, got {operator!r}"[:200])
    if not key and operator != "Exists":
        raise SpecError(f"{field_name}.operator", "must be Exists when the key is empty")
    if not key:
        raise SpecError(f"{field_name}.key", "must name a taint: an empty key with operator Exists tolerates "
                                             "every taint, also those that keep pods off the control plane and "
                                             "off cordoned or failing nodes")
    if key in PROTECTED_TAINT_KEYS:
        raise SpecError(f"{field_name}.key", f"{key} keeps pods off nodes for the cluster's own safety and cannot "
                                             f"be tolerated (refused: {', '.join(sorted(PROTECTED_TAINT_KEYS))}; "
                                             "the operator itself tolerates not-ready and unreachable nodes briefly)")
    if operator == "Exists" and value:
        raise SpecError(f"{field_name}.value", "must be empty when the operator is Exists")
    if not is_label_value(value):
        raise SpecError(f"{field_name}.value", f"{value!r} is not a valid label value"[:200])
    if effect not in TAINT_EFFECTS:
        raise SpecError(f"{field_name}.effect", f"must be one of {', '.join(TAINT_EFFECTS[1:])}, got {effect!r}"[:200])
    seconds = item.get("tolerationSeconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise SpecError(f"{field_name}.tolerationSeconds", f"must be an integer, got {seconds!r}"[:200])
        if effect != "NoExecute":
            raise SpecError(f"{field_name}.tolerationSeconds", "is only allowed with the effect NoExecute")
    return dict(item)


def checked_pod_template(template: Mapping) -> dict:
    """The podTemplate fields the Job's pods get (see core.manifests.job), in the shapes the API
    server accepts; absent or null fields are left out."""
    only_declared(template, "podTemplate")
    checked: dict = {}
    selector = template.get("nodeSelector")
    if selector is not None:
        if found := labels_problem(selector, "spec.podTemplate.nodeSelector"):
            raise SpecError(*found)
        checked["nodeSelector"] = dict(selector)
    tolerations = template.get("tolerations")
    if tolerations is not None:
        if isinstance(tolerations, (str, bytes)) or not isinstance(tolerations, (list, tuple)):
            raise SpecError("spec.podTemplate.tolerations", "must be a list of tolerations")
        if len(tolerations) > MAX_TOLERATIONS:
            raise SpecError("spec.podTemplate.tolerations", f"at most {MAX_TOLERATIONS} tolerations, "
                                                            f"got {len(tolerations)}")
        checked["tolerations"] = [_toleration(item, i) for i, item in enumerate(tolerations)]
    affinity = template.get("affinity")
    if affinity is not None:
        if not isinstance(affinity, Mapping):
            raise SpecError("spec.podTemplate.affinity", f"must be an object, got {type(affinity).__name__}")
        if deeper_than(affinity, d.MAX_JSON_DEPTH):
            raise SpecError("spec.podTemplate.affinity", f"nests more than {d.MAX_JSON_DEPTH} levels deep")
        for key, value in affinity.items():
            if key not in AFFINITY_FIELDS:
                raise SpecError("spec.podTemplate.affinity", f"unsupported field {key!r}; "
                                                             f"allowed: {', '.join(AFFINITY_FIELDS)}"[:200])
            if value is not None and not isinstance(value, Mapping):
                raise SpecError(f"spec.podTemplate.affinity.{key}", "must be an object")
        # What the API server refuses in every pod (a pool's pods have no dry run to say it);
        # the rest of the terms it checks itself.
        found = affinity_problem(affinity)
        if found:
            raise SpecError(f"spec.podTemplate.affinity.{found[0]}"[:300], found[1][:300])
        checked["affinity"] = dict(affinity)
    priority = template.get("priorityClassName")
    if priority:   # "" is no class, to a Pod as to a pool (core.pool_spec)
        if not is_dns_subdomain(priority):
            raise SpecError("spec.podTemplate.priorityClassName",
                            f"must be a PriorityClass name (lowercase DNS subdomain), got {priority!r}"[:200])
        if priority.startswith(SYSTEM_PRIORITY_PREFIX):
            raise SpecError("spec.podTemplate.priorityClassName",
                            f"{priority!r} is a system PriorityClass ({SYSTEM_PRIORITY_PREFIX}* is reserved for "
                            "the cluster's critical pods): use a PriorityClass of the user range"[:300])
        checked["priorityClassName"] = priority
    return checked


def _inputs_from(raw: Mapping) -> tuple[tuple[str, ...], int]:
    """``spec.inputsFrom``: ConfigMaps of the batch's namespace holding ``input-<g>.json`` keys
    for g in 0..count-1 between them (read, checked and copied by the operator before any
    episode starts)."""
    if not raw:
        return (), 0
    only_declared(raw, "inputsFrom")
    names = raw.get("configMaps")
    if not isinstance(names, (list, tuple)) or not names or len(names) > MAX_INPUT_CONFIGMAPS:
        raise SpecError("spec.inputsFrom.configMaps", f"must list 1 to {MAX_INPUT_CONFIGMAPS} ConfigMap names")
    for name in names:
        if not isinstance(name, str) or not is_dns_subdomain(name):
            raise SpecError("spec.inputsFrom.configMaps", f"{name!r} is not a ConfigMap name"[:200])
    if len(set(names)) != len(names):
        raise SpecError("spec.inputsFrom.configMaps", "names a ConfigMap twice")
    count = _int(raw, "count", None, minimum=1, maximum=MAX_EPISODES, prefix="spec.inputsFrom.")
    if count is None:
        raise SpecError("spec.inputsFrom.count", "is required: the number of inputs across the ConfigMaps")
    return tuple(names), count


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


def checked_resources(raw: Mapping, field: str, default: Mapping = d.RESOURCES) -> dict:
    """requests/limits as the API server takes them in a container (``k8s_rules``: names,
    non-negative quantities, requests within limits, extended resources and hugepages). An absent
    or null field is ``default``; ``{}`` is kept: no requests and no limits, as the API server
    stores it and as a pod reads it (its defaults fill only an absent field)."""
    resources = default if raw.get("resources") is None else checked_object(raw, "resources", field)
    for kind in resources:
        if kind not in ("requests", "limits"):
            raise SpecError(f"{field}.{kind}", "only requests and limits are allowed")
    amounts: dict[str, dict] = {}
    for kind in ("requests", "limits"):
        amounts[kind] = {}
        for name, value in checked_object(resources, kind, f"{field}.{kind}").items():
            field_name = f"{field}.{kind}.{name}"
            problem = container_resource_name_problem(name)
            if problem:
                raise SpecError(field_name, problem)
            amounts[kind][name] = checked_quantity(value, field_name)
    found = container_resources_problem(amounts["requests"], amounts["limits"])
    if found:
        where, problem = found
        raise SpecError(f"{field}.{where}" if where else field, problem)
    return {k: dict(v) for k, v in resources.items() if v is not None}   # a null is absent


def workspace_size_limit(workspace: Mapping) -> str:
    """spec.workspace.sizeLimit as the emptyDir gets it: the default when absent or null, else
    the quantity as written; 0 is 0 whether an integer or a string (one quantity, one meaning)."""
    value = workspace.get("sizeLimit")
    value = d.WORKSPACE_SIZE_LIMIT if value is None else value
    checked_quantity(value, "spec.workspace.sizeLimit")
    return str(value)


def checked_image(value: object, field: str) -> str:
    """An image the kubelet can parse (core.image_reference): else every pod would wait
    InvalidImageName."""
    if not isinstance(value, str) or len(value) > d.MAX_IMAGE_LENGTH:
        raise SpecError(field, f"is not an image reference: {value!r}"[:200])
    problem = image_reference_problem(value)
    if problem is not None:
        raise SpecError(field, f"{problem}: {value!r}"[:300])
    return value


# With spec.poolRef the sandbox is the pool's (core.pools): these fields would say otherwise.
POOL_EXCLUSIVE = ("task", "runtimeClassName", "podTemplate", "inputImages", "queueName")
# ... and of the verifier, what its container is made of (the pool's spec.verifier).
POOL_VERIFIER_EXCLUSIVE = ("image", "resources")


def _pool(raw: Mapping) -> tuple[str | None, str]:
    """(spec.poolRef.name or None, spec.poolRef.whenEmpty)."""
    name = _pool_name(raw)
    if name is None:
        return None, v.POOL_COLD
    return name, _choice(raw["poolRef"], "whenEmpty", v.POOL_WHEN_EMPTY, "spec.poolRef.whenEmpty")


def _pool_name(raw: Mapping) -> str | None:
    """spec.poolRef.name, or None; refuses what a pooled batch cannot have (the CRD says it too)."""
    ref = raw.get("poolRef")
    if ref is None:
        return None
    name = only_declared(ref, "poolRef").get("name") if isinstance(ref, Mapping) else None
    if not isinstance(name, str) or not is_dns_subdomain(name):
        raise SpecError("spec.poolRef.name", f"must be a RolloutPool name, got {name!r}"[:200])
    for field_name in POOL_EXCLUSIVE:
        if raw.get(field_name):
            raise SpecError(f"spec.{field_name}", "is the pool's with spec.poolRef: leave it out")
    if (checked_object(raw, "isolation", "spec.isolation")).get("egress"):
        raise SpecError("spec.isolation.egress", "is the pool's with spec.poolRef (its network): leave it out")
    verifier = raw.get("verifier")
    verifier = verifier if isinstance(verifier, Mapping) else {}
    for field_name in POOL_VERIFIER_EXCLUSIVE:
        if verifier.get(field_name):
            raise SpecError(f"spec.verifier.{field_name}", "is the pool's with spec.poolRef (its spec.verifier): "
                                                           "leave it out")
    for where, part in (("spec", raw), ("spec.verifier", verifier)):
        _pool_phase_words(where, part)
    return name


def _pool_phase_words(where: str, part: Mapping) -> None:
    """What a pool's pod is handed as a shell script (core.pool_delivery): plain env values only,
    no NUL byte (a script cannot hold one), and no '=' in the command's first word (it runs under
    env(1), which would read it as a variable)."""
    command = _strings(part, "command", f"{where}.command")
    args = _strings(part, "args", f"{where}.args")
    env = part.get("env") or []
    if not isinstance(env, list):
        raise SpecError(f"{where}.env", "must be a list of name/value entries")
    for item in env:
        if isinstance(item, Mapping) and "valueFrom" in item:
            raise SpecError(f"{where}.env", "with spec.poolRef only plain values reach a pool's pod (no Secret keys)")
    files = part.get("files") if isinstance(part.get("files"), Mapping) else {}
    words = [*command, *args, *files.values(),
             *(str(item.get("value", "")) for item in env if isinstance(item, Mapping))]
    if any("\0" in str(word) for word in words):
        raise SpecError(f"{where}.env", "with spec.poolRef no command, argument, file or env value may hold a NUL byte")
    if command and "=" in command[0]:
        raise SpecError(f"{where}.command", "with spec.poolRef the command's first word cannot hold '='")


def input_text(value: object, i: int) -> str:
    """Input ``i`` as the text of its key ``input-<i>.json``, in the operator's inputs ConfigMap
    (``core.manifests``) and in the SDK's ``inputsFrom`` ConfigMaps alike: one text, so one
    measure of what fits (:func:`input_bytes`), whoever writes it. SpecError for what the operator
    refuses in an ``inputsFrom`` ConfigMap (``core.admission.input_shards``): nesting past
    ``MAX_JSON_DEPTH``, what is not plain JSON, a number past a double's range; and half of a
    UTF-16 surrogate pair, which an inline input sent to the API server would reach its episode as
    U+FFFD, and one by reference as itself (``submit -f`` refuses it as well)."""
    where = f"spec.inputs[{i}]"
    if deeper_than(value, d.MAX_JSON_DEPTH):
        raise SpecError(where, f"nests objects or arrays more than {d.MAX_JSON_DEPTH} levels deep")
    if strictjson.holds_surrogate(value):
        raise SpecError(where, "holds half of a UTF-16 surrogate pair, which is no character")
    try:
        text = strictjson.dumps(value, separators=strictjson.COMPACT)
    except (TypeError, ValueError) as exc:
        raise SpecError(where, f"is not plain JSON: {exc}") from None
    try:
        strictjson.loads(text)   # the operator's rule: no episode is handed a number that is not finite (10**400)
    except ValueError as exc:
        raise SpecError(where, f"holds a number no episode can be handed: {exc}") from None
    return text


def input_bytes(i: int, text: str) -> int:
    """What input ``i`` of ``text`` (:func:`input_text`) takes of a ConfigMap: its key and value."""
    return len(text.encode()) + len(INPUT_KEY.format(i))


def inline_inputs(raw: Mapping) -> tuple:
    """spec.inputs, a list (of anything yet: each is checked where it is read)."""
    value = raw.get("inputs") or ()
    if not isinstance(value, (list, tuple)):
        raise SpecError("spec.inputs", f"must be a list, got {type(value).__name__}")
    return tuple(value)


def checked_files(raw: Mapping, field: str, required: bool) -> dict[str, str]:
    files = checked_object(raw, "files", field)
    if required and not files:
        raise SpecError(field, "must name at least one file")
    if len(files) > d.MAX_FILES:   # the CRD's maxProperties, for an object or a spec it has not checked
        raise SpecError(field, f"names {len(files)} files; at most {d.MAX_FILES} are allowed")
    for key, content in files.items():
        problem = check_configmap_key(key)
        if problem:
            raise SpecError(field, f"{key!r}"[:100] + f" is not a valid file name: {problem}")
        if not isinstance(content, str):
            raise SpecError(f"{field}[{key}]", f"must be a string, got {type(content).__name__}")
    return dict(files)


def _input_images(raw: Mapping, groups: int, image: str) -> tuple[str, ...]:
    """spec.inputImages: one image per group (per input), '' for spec.image; () when every group
    runs spec.image, so a batch of one image makes its pods exactly as before."""
    value = raw.get("inputImages")
    if value is None or value == []:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise SpecError("spec.inputImages", "must be a list of image references, one per input")
    if len(value) != groups:
        raise SpecError("spec.inputImages", f"has {len(value)} entries; one per input (group) is "
                                            f"{groups} (episodes / samplesPerInput)")
    size = sum(len(item.encode()) + 3 for item in value if isinstance(item, str))
    if size > MAX_INPUT_IMAGES_BYTES:
        raise SpecError("spec.inputImages", f"takes {size} bytes; at most {MAX_INPUT_IMAGES_BYTES} fit in the "
                                            "object: run the inputs of each image as their own batch")
    images = tuple(checked_image(item, f"spec.inputImages[{g}]") if item != "" else image for g, item in enumerate(value))
    return images if any(item != image for item in images) else ()


def check_shell_names(env: Iterable[Mapping], field: str, why: str = "samplesPerInput > 1, or a verifier") -> None:
    """A container that runs under the operator's /bin/sh launcher (``why``: a batch's with
    samplesPerInput > 1 or a verifier, every pool's) passes its program only the variables the
    image's shell keeps (``_SHELL_NAME``): any other would be gone from every episode."""
    for item in env:
        if not _SHELL_NAME.fullmatch(item["name"]):
            raise SpecError(f"{field}[{item['name']}]", f"runs under /bin/sh here ({why}), and a shell such as dash "
                                                        "drops a variable whose name is not letters, digits and '_': "
                                                        "rename it")


def _verifier(raw: Mapping, image: str, resources: dict) -> VerifierSpec | None:
    """spec.verifier: image and resources default to the agent's; command to
    ``python -B <mountPath>/verify.py``."""
    if raw.get("verifier") is None:
        return None
    ver = declared_object(raw, "verifier")
    files = checked_files(ver, "spec.verifier.files", required=False)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in files.items())
    if size > MAX_CONFIG_BYTES:
        raise SpecError("spec.verifier.files", f"take {size} bytes; at most {MAX_CONFIG_BYTES} fit in a ConfigMap")
    mount = checked_path(ver.get("mountPath") or d.VERIFIER_MOUNT_PATH, "spec.verifier.mountPath")
    return VerifierSpec(
        image=checked_image(ver.get("image") or image, "spec.verifier.image"),
        command=_strings(ver, "command", "spec.verifier.command") or d.default_command(mount, d.VERIFIER_SCRIPT),
        args=_strings(ver, "args", "spec.verifier.args"), env=tuple(checked_env(ver, "spec.verifier.env")), files=files,
        mount_path=mount, resources=checked_resources(ver, "spec.verifier.resources", resources),
        timeout_seconds=_int(ver, "timeoutSeconds", d.VERIFIER_TIMEOUT_SECONDS, minimum=1,
                             maximum=d.MAX_EPISODE_TIMEOUT_SECONDS, prefix="spec.verifier."),
    )


def parse_spec(raw: Mapping, *, provisioned: bool = False) -> BatchSpec:
    """Read a RolloutBatch spec with defaults (docs/design.md); raise SpecError when unusable.

    ``provisioned``: an earlier operator made the batch's children. The checks of what its pods
    would run (a default command's script, env names under the shell launcher) came after some
    such batches were accepted, and one that runs (an image whose shell keeps such names) must
    not stall mid-run after an upgrade: they are left to new batches.

    Checks, in order: episodes, parallelism, minSuccessfulEpisodes, task files (valid ConfigMap
    keys, string contents), inputs (a list of exactly ``episodes`` entries, or none), the combined
    size of task files and inputs, env (name/value or a Secret key, valid names, none reserved), timeouts,
    resources (known or domain-prefixed names, non-negative quantities, requests within limits)
    and workspace size, mount paths (absolute, not nested in each other), retries, the
    isolation/cleanup enums, the TTL, the podTemplate (nodeSelector labels, tolerations, none
    blanket or of a protected taint, affinity's shape, priorityClassName not a system one), the
    image and the RuntimeClass name, and inputImages (one valid image per group, bounded in size).
    """
    if not isinstance(raw, Mapping):
        raise SpecError("spec", "must be an object")
    unknown = sorted(str(k) for k in raw if k not in SPEC_FIELDS)
    if unknown:
        raise SpecError(f"spec.{unknown[0]}", f"unknown field; spec fields are {', '.join(sorted(SPEC_FIELDS))}"[:400])
    episodes = _int(raw, "episodes", None, minimum=1, maximum=MAX_EPISODES)
    if episodes is None:
        raise SpecError("spec.episodes", "is required")
    parallelism = _int(raw, "parallelism", episodes, minimum=1)
    if parallelism > episodes:
        raise SpecError("spec.parallelism", f"must not exceed spec.episodes ({episodes}), got {parallelism}")
    min_ok = _int(raw, "minSuccessfulEpisodes", episodes)
    if min_ok > episodes:
        raise SpecError("spec.minSuccessfulEpisodes", f"must not exceed spec.episodes ({episodes}), got {min_ok}")

    pool, when_empty = _pool(raw)
    task = declared_object(raw, "task")
    files = checked_files(task, "spec.task.files", required=pool is None)
    mount = checked_path(task.get("mountPath") or d.TASK_MOUNT_PATH, "spec.task.mountPath")

    samples = _int(raw, "samplesPerInput", d.SAMPLES_PER_INPUT, minimum=1, maximum=MAX_SAMPLES_PER_INPUT)
    if episodes % samples:
        raise SpecError("spec.samplesPerInput", f"({samples}) must divide spec.episodes ({episodes}): "
                                                "every group has the same number of samples")
    inputs = inline_inputs(raw)
    inputs_from, inputs_count = _inputs_from(checked_object(raw, "inputsFrom", "spec.inputsFrom"))
    if inputs and inputs_from:
        raise SpecError("spec.inputsFrom", INLINE_AND_REFERENCE)
    inputs_count = len(inputs) or inputs_count
    if inputs_count and inputs_count * samples != episodes:
        field_name = "spec.inputs" if inputs else "spec.inputsFrom.count"
        raise SpecError(field_name, f"{inputs_count} inputs x samplesPerInput {samples} = {inputs_count * samples}, "
                                    f"but spec.episodes is {episodes}")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in files.items())
    size += sum(input_bytes(i, input_text(value, i)) for i, value in enumerate(inputs))
    if size > MAX_CONFIG_BYTES:
        raise SpecError("spec.task", f"task files and inputs take {size} bytes; at most {MAX_CONFIG_BYTES} fit "
                                     "(ConfigMaps hold 1 MiB): pass large inputs by reference (spec.inputsFrom)")

    env = checked_env(raw, "spec.env")

    timeout = _int(raw, "episodeTimeoutSeconds", d.EPISODE_TIMEOUT_SECONDS, minimum=1,
                   maximum=d.MAX_EPISODE_TIMEOUT_SECONDS)
    deadline = _int(raw, "activeDeadlineSeconds", d.ACTIVE_DEADLINE_SECONDS, minimum=1,
                    maximum=d.MAX_ACTIVE_DEADLINE_SECONDS)
    if timeout > deadline:
        raise SpecError("spec.episodeTimeoutSeconds", f"({timeout}) must not exceed activeDeadlineSeconds ({deadline})")

    resources = checked_resources(raw, "spec.resources")
    image = checked_image(raw.get("image") or d.IMAGE, "spec.image")
    input_images = _input_images(raw, group_count(episodes, samples), image)
    verifier = _verifier(raw, image, resources)
    if verifier is not None and input_images and not checked_object(raw, "verifier", "spec.verifier").get("image"):
        verifier = dataclasses.replace(verifier, follows_episode_image=True)
    if verifier is not None and timeout + verifier.timeout_seconds > deadline:
        raise SpecError("spec.verifier.timeoutSeconds", f"episodeTimeoutSeconds ({timeout}) + verifier.timeoutSeconds "
                                                        f"({verifier.timeout_seconds}) must not exceed "
                                                        f"activeDeadlineSeconds ({deadline})")

    workspace = declared_object(raw, "workspace")
    workspace_mount = checked_path(workspace.get("mountPath") or d.WORKSPACE_MOUNT_PATH, "spec.workspace.mountPath")
    size_limit = workspace_size_limit(workspace)
    mounts = {"spec.task.mountPath": mount, "spec.workspace.mountPath": workspace_mount}
    if inputs_count:
        mounts["inputs (fixed)"] = INPUTS_MOUNT_PATH
    if verifier is not None and verifier.files:
        mounts["spec.verifier.mountPath"] = verifier.mount_path
    # A pooled batch's pods are its pool's: their mounts are checked with the pool (core.pool_spec)
    # and its verifier's path must be the pool's (verifier_conflict); the default /task is not there.
    names = list(mounts) if pool is None else []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if _inside(mounts[a], mounts[b]):
                raise SpecError(a, f"{mounts[a]} overlaps {b} {mounts[b]}")

    retries = _int(declared_object(raw, "retries"), "infrastructure", d.INFRASTRUCTURE_RETRIES,
                   maximum=d.MAX_INFRASTRUCTURE_RETRIES, prefix="spec.retries.")
    isolation = declared_object(raw, "isolation")
    network = _choice(isolation, "network", ISOLATION_NETWORK, "spec.isolation.network")
    egress = parse_egress(isolation.get("egress"))
    if egress and network != v.NETWORK_DENY_ALL:
        raise SpecError("spec.isolation.egress", "declares what DenyAll opens: with AllowEgress it would mean nothing")
    cleanup = declared_object(raw, "cleanup")
    ttl = ttl_seconds_after_finished(raw)
    template = checked_pod_template(checked_object(raw, "podTemplate", "spec.podTemplate"))
    runtime = checked_runtime_class(raw.get("runtimeClassName"))
    queue = raw.get("queueName") or None
    if queue is not None and not is_dns_label(queue):
        raise SpecError("spec.queueName", f"must be a LocalQueue name (a lowercase DNS label of at most 63 "
                                          f"characters), got {queue!r}"[:200])
    # A pooled batch's default command names the pool's task path, known once the pool is read
    # (service.pool_claims): () until then.
    command = _strings(raw, "command") or (() if pool else d.default_command(mount, d.EPISODE_SCRIPT))
    check_argv_strings("spec", command, _strings(raw, "args"), env)
    if verifier is not None:
        check_argv_strings("spec.verifier", verifier.command, verifier.args, list(verifier.env))
    if samples > 1:
        # With k > 1 a shell launcher sets these at run time, after Kubernetes expanded $(...)
        # references: such a reference would reach the episode unexpanded ($$(NAME) is none).
        texts = [*command, *_strings(raw, "args"), *(e.get("value", "") for e in env)]
        if verifier is not None:   # the verifier runs under the same launcher
            texts += [*verifier.command, *verifier.args, *(str(e.get("value", "")) for e in verifier.env)]
        for text in texts:
            if names := references(text, LAUNCHER_ENV):
                raise SpecError("spec.samplesPerInput", f"with samplesPerInput > 1, $({names[0]}) is set at run "
                                f"time: read the environment variable in the program instead of "
                                f"referencing it in command, args or env")
    if pool is None and not provisioned and (samples > 1 or verifier is not None):
        check_shell_names(env, "spec.env")
    if verifier is not None and pool is None and not provisioned:
        check_shell_names(verifier.env, "spec.verifier.env")
    spec = BatchSpec(
        episodes=episodes, parallelism=parallelism, runtime_class_name=runtime,
        image=image, command=command, args=_strings(raw, "args"), env=tuple(env),
        task_mount_path=mount, task_files=dict(files), inputs=inputs,
        samples_per_input=samples, inputs_from=inputs_from, inputs_count=inputs_count,
        workspace_mount_path=workspace_mount, workspace_size_limit=size_limit,
        resources=resources, verifier=verifier,
        episode_timeout_seconds=timeout, active_deadline_seconds=deadline, min_successful_episodes=min_ok,
        infrastructure_retries=retries,
        isolation_namespace=_choice(isolation, "namespace", ISOLATION_NAMESPACE, "spec.isolation.namespace"),
        isolation_network=network, isolation_network_written=isolation.get("network") is not None,
        egress=egress,
        sandbox_quota=_bool(isolation, "resourceQuota", "spec.isolation.resourceQuota", d.SANDBOX_QUOTA),
        cleanup_sandbox=_choice(cleanup, "sandbox", CLEANUP_SANDBOX, "spec.cleanup.sandbox"),
        cleanup_results=_choice(cleanup, "results", CLEANUP_RESULTS, "spec.cleanup.results"),
        stop=_bool(raw, STOP_FIELD, f"spec.{STOP_FIELD}"),
        ttl_seconds_after_finished=ttl,
        pod_template=template,
        input_images=input_images,
        queue_name=queue,
        pool_name=pool,
        pool_when_empty=when_empty,
    )
    if not provisioned and pool is None and spec.sandbox_quota and spec.isolation_namespace == v.ISOLATION_SHARED:
        # the quota is the sandbox namespace's: a Shared batch's namespace is the user's, where the
        # operator makes none (with spec.poolRef the pool's conflict says so instead)
        raise SpecError("spec.isolation.resourceQuota", "applies to a Dedicated sandbox only: "
                                                        "with isolation.namespace Shared no quota is made")
    if not provisioned:
        _default_scripts(raw, spec)
    return spec


def _default_scripts(raw: Mapping, spec: BatchSpec) -> None:
    """A default command runs a script of the files mounted over its directory (the image's own
    there is hidden): without the script every episode would fail, each counted with the worst
    reward. Checked last, so that any other error in the spec is said first."""
    if spec.pool_name is None and not raw.get("command") and d.EPISODE_SCRIPT not in spec.task_files:
        raise SpecError("spec.command", f"is not given, and the default ({' '.join(spec.command)}) runs a file "
                                        f"that is not among spec.task.files: add {d.EPISODE_SCRIPT} or give "
                                        "spec.command")
    verifier = spec.verifier   # without files nothing is mounted: the image's own script runs
    if verifier is not None and verifier.files and not checked_object(raw, "verifier", "spec.verifier").get("command") \
            and d.VERIFIER_SCRIPT not in verifier.files:
        raise SpecError("spec.verifier.command", f"is not given, and the default runs {verifier.mount_path}/"
                                                 f"{d.VERIFIER_SCRIPT}, which is not among spec.verifier.files: "
                                                 "add it or give spec.verifier.command")
