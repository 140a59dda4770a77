"""Checks of one spec field each, shared by a batch's spec (core.spec) and a pool's
(core.pool_spec): whole numbers, objects of the fields the CRD declares, strings, choices, mount
paths as the runtime reads them, quantities and container resources, images and task files.

Pure. Each raises core.model.SpecError naming the field, as the API server would name it, with a
message that says what is wrong; a null is read as absent, as the API server prunes it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from decimal import Decimal

from rolloutbatch.core import defaults as d
from rolloutbatch.core.crd_spec import SPEC_OBJECT_FIELDS
from rolloutbatch.core.image_reference import image_reference_problem
from rolloutbatch.core.k8s_rules import (check_configmap_key, container_resource_name_problem,
                                         container_resources_problem, is_dns_subdomain, parse_quantity)
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.naming import TERMINATION_MESSAGE_PATH

# No process can be given a NUL in an argument, its environment or a path: the runtime refuses
# the container, and the API server (which checks no such thing) would have taken the Job.
NUL = "\0"
NUL_REFUSED = "may not hold a NUL byte: no process can be given one"


def checked_int(raw: Mapping, key: str, default: int | None, *, minimum: int = 0, maximum: int | None = None,
                prefix: str = "spec.") -> int | None:
    """raw[key], a whole number within bounds, ``default`` when absent (``prefix``: the field's parent)."""
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


def checked_strings(raw: Mapping, key: str, field_name: str | None = None) -> tuple[str, ...]:
    """raw[key], a list of strings without NUL bytes (() when absent)."""
    value = raw.get(key) or ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(item, str) for item in value):
        raise SpecError(field_name or f"spec.{key}", "must be a list of strings")
    if any(NUL in item for item in value):
        raise SpecError(field_name or f"spec.{key}", NUL_REFUSED)
    return tuple(value)


def checked_bool(raw: Mapping, key: str, field_name: str, default: bool = False) -> bool:
    """raw[key], true or false, ``default`` when absent."""
    value = raw.get(key)
    value = default if value is None else value   # a null is absent (the API server prunes it)
    if not isinstance(value, bool):
        raise SpecError(field_name, f"must be true or false, got {value!r}"[:200])
    return value


def checked_choice(raw: Mapping, key: str, choices: tuple[str, ...], field_name: str) -> str:
    """raw[key], one of ``choices``; the first when absent, as the CRD's default."""
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
    return next((s for s in SYSTEM_PATHS if overlapping(path, s)), None)


def overlapping(path: str, other: str) -> bool:
    """Whether two cleaned paths are one, or one is inside the other."""
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
