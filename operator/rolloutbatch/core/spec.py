"""Spec defaults and the checks a schema cannot express, plus Kubernetes quantities.

The CRD schema already applies most defaults and rejects most bad specs at ``kubectl apply``;
this module is the operator's own reading of the spec, so it works the same whether or not the
API server defaulted a field (e.g. objects stored before a CRD upgrade).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from rolloutbatch.core.model import BatchSpec, SpecError

DEFAULT_IMAGE = "python:3.12-alpine"
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
MAX_CONFIG_BYTES = 900 * 1024   # ConfigMaps are capped at 1 MiB; keep a margin
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
RESERVED_ENV = {"EPISODE_ID", "EPISODE_INDEX", "EPISODE_INPUT", "BATCH_NAME"}

_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity ("500m", "128Mi", "1.5") as a Decimal in base units."""
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {text!r}")
    try:
        return Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2)])
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {text!r}") from exc


def format_quantity(value: float | Decimal) -> str:
    """Shortest readable form: milli for fractions, binary suffixes for large whole numbers."""
    value = Decimal(str(value))
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    whole = int(value)
    for suffix in ("Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if whole >= unit and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def _int(raw: Mapping, key: str, default: int | None, *, minimum: int = 0) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"spec.{key}", f"must be an integer, got {value!r}")
    if value < minimum:
        raise SpecError(f"spec.{key}", f"must be at least {minimum}, got {value}")
    return value


def parse_spec(raw: Mapping) -> BatchSpec:
    """Read a RolloutBatch spec with defaults (DESIGN section 3); raise SpecError when unusable."""
    episodes = _int(raw, "episodes", None, minimum=1)
    if episodes is None:
        raise SpecError("spec.episodes", "is required")
    parallelism = _int(raw, "parallelism", episodes, minimum=1)
    if parallelism > episodes:
        raise SpecError("spec.parallelism", f"must not exceed spec.episodes ({episodes}), got {parallelism}")
    min_ok = _int(raw, "minSuccessfulEpisodes", episodes)
    if min_ok > episodes:
        raise SpecError("spec.minSuccessfulEpisodes", f"must not exceed spec.episodes ({episodes})")
    task = raw.get("task") or {}
    files = task.get("files") or {}
    if not files:
        raise SpecError("spec.task.files", "must name at least one file")
    for key in files:
        if not _CONFIGMAP_KEY.match(key) or key in (".", "..") or len(key) > 253:
            raise SpecError("spec.task.files", f"{key!r} is not a valid file name (letters, digits, '-', '_', '.')")
    mount = task.get("mountPath") or "/task"
    inputs = tuple(raw.get("inputs") or ())
    if inputs and len(inputs) != episodes:
        raise SpecError("spec.inputs", f"must have exactly {episodes} entries (one per episode), got {len(inputs)}")
    size = sum(len(k) + len(v.encode()) for k, v in files.items())
    size += sum(len(json.dumps(value)) for value in inputs)
    if size > MAX_CONFIG_BYTES:
        raise SpecError("spec.task", f"task files and inputs take {size} bytes; at most {MAX_CONFIG_BYTES} fit")
    env = tuple(dict(item) for item in raw.get("env") or ())
    for item in env:
        name = item.get("name", "")
        if not _ENV_NAME.match(name):
            raise SpecError("spec.env", f"{name!r} is not a valid environment variable name")
        if name in RESERVED_ENV:
            raise SpecError("spec.env", f"{name} is set by the operator")
    timeout = _int(raw, "episodeTimeoutSeconds", 600, minimum=1)
    deadline = _int(raw, "activeDeadlineSeconds", 3600, minimum=1)
    if timeout > deadline:
        raise SpecError("spec.episodeTimeoutSeconds", f"({timeout}) must not exceed activeDeadlineSeconds ({deadline})")
    resources = raw.get("resources") or DEFAULT_RESOURCES
    for kind in ("requests", "limits"):
        for name, value in (resources.get(kind) or {}).items():
            try:
                parse_quantity(str(value))
            except ValueError as exc:
                raise SpecError(f"spec.resources.{kind}.{name}", str(exc)) from None
    workspace = raw.get("workspace") or {}
    isolation = raw.get("isolation") or {}
    cleanup = raw.get("cleanup") or {}
    command = tuple(raw.get("command") or ("python", "-B", f"{mount.rstrip('/')}/episode.py"))
    return BatchSpec(
        episodes=episodes, parallelism=parallelism, runtime_class_name=raw.get("runtimeClassName") or None,
        image=raw.get("image") or DEFAULT_IMAGE, command=command, args=tuple(raw.get("args") or ()), env=env,
        task_mount_path=mount, task_files=dict(files), inputs=inputs,
        workspace_mount_path=workspace.get("mountPath") or "/workspace",
        workspace_size_limit=str(workspace.get("sizeLimit") or "1Gi"),
        resources={k: dict(v) for k, v in resources.items()},
        episode_timeout_seconds=timeout, active_deadline_seconds=deadline, min_successful_episodes=min_ok,
        infrastructure_retries=_int(raw.get("retries") or {}, "infrastructure", 2),
        isolation_namespace=isolation.get("namespace") or "Dedicated",
        isolation_network=isolation.get("network") or "DenyAll",
        cleanup_sandbox=cleanup.get("sandbox") or "DeleteOnSuccess",
        ttl_seconds_after_finished=cleanup.get("ttlSecondsAfterFinished"),
        pod_template=dict(raw.get("podTemplate") or {}),
    )
