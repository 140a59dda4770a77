"""A warm pool's spec (``RolloutPool.spec``) as the operator reads it, and what a batch may ask of it.

:func:`parse_pool_spec` reads what the CRD checked (with the same defaults, for an object stored
without them) and refuses what the schema cannot say; :func:`sandbox_conflict` and
:func:`verifier_conflict` say why a batch cannot run in a pool's pods, before anything is
claimed. The pool's children and pods are ``core.pools``'; how a pod gets its episode is
``core.pool_delivery``'s.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from rolloutbatch.core import defaults as d
from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.k8s_rules import parse_quantity
from rolloutbatch.core.model import BatchSpec, SpecError
from rolloutbatch.core.spec_env import check_argv_strings, check_shell_names, checked_env
from rolloutbatch.core.spec_fields import (SYSTEM_PATHS, checked_files, checked_image, checked_path, checked_resources,
                                           checked_runtime_class, workspace_size_limit)
from rolloutbatch.core.spec_pod_template import checked_pod_template


@dataclasses.dataclass(frozen=True)
class PoolRef:
    name: str
    namespace: str
    uid: str


@dataclasses.dataclass(frozen=True)
class PoolVerifier:
    """spec.verifier of a pool: its pods get a second container, waiting for a batch's verifier
    phase (its files, command and time arrive with it, core.pool_delivery)."""
    image: str
    resources: dict
    mount_path: str


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    size: int
    max_size: int
    image: str
    runtime_class_name: str | None
    resources: dict
    env: tuple[tuple[str, str], ...]
    task_mount_path: str              # cleaned as the runtime reads it (core.spec_fields.checked_path)
    task_files: dict[str, str]
    workspace_mount_path: str         # cleaned, as task_mount_path
    workspace_size_limit: str
    # The two paths as written, which the pods mount (the runtime cleans them): cleaned, a pod's
    # digest (core.pool_children.template_digest) would change under a running pool at an upgrade.
    task_mount_written: str
    workspace_mount_written: str
    prepare_command: tuple[str, ...]
    prepare_timeout_seconds: int
    network: str
    pod_template: dict
    verifier: PoolVerifier | None = None


def pool_ref(body: Mapping) -> PoolRef:
    meta = body.get("metadata") or {}
    return PoolRef(name=meta.get("name", ""), namespace=meta.get("namespace", ""), uid=meta.get("uid", ""))


def _int(spec: Mapping, key: str, default: int, low: int, high: int, at: str = "spec") -> int:
    """spec[key], an integer in low..high; `at` is the path of `spec` itself (the message names
    the field the user wrote)."""
    value = spec.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise SpecError(f"{at}.{key}", f"must be an integer in {low}..{high}, not {value!r}")
    return value


def _strings(value: object, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise SpecError(field, "must be a list of strings")
    return tuple(value)


def parse_pool_spec(spec: Mapping) -> PoolSpec:
    """The pool's spec as the operator reads it: the CRD checked it; this reads it (with the same
    defaults, for an object stored without them) and refuses what the schema cannot say."""
    if not isinstance(spec, Mapping):
        raise SpecError("spec", "must be an object")
    max_size = _int(spec, "maxSize", d.POOL_MAX_SIZE, 1, d.MAX_POOL_SIZE)
    size = _int(spec, "size", 0, 0, d.MAX_POOL_SIZE)
    if size > max_size:
        default = "" if "maxSize" in spec else ", its default"
        raise SpecError("spec.size", f"{size} is above spec.maxSize ({max_size}{default}): raise maxSize as well")
    task = spec.get("task")
    if not isinstance(task, Mapping) or not isinstance(task.get("files"), Mapping) or not task["files"]:
        raise SpecError("spec.task.files", "a pool needs its task files (at least one)")
    files = checked_files(task, "spec.task.files", required=True)   # names and text, as a batch's
    task_bytes = sum(len(k.encode()) + len(val.encode()) for k, val in files.items())
    if task_bytes > d.MAX_CONFIG_BYTES:
        raise SpecError("spec.task.files", f"the task files take {task_bytes} bytes; at most {d.MAX_CONFIG_BYTES} fit")
    env: list[tuple[str, str]] = []
    checked = checked_env(spec, "spec.env")   # the batch's rules: valid names, none reserved
    for item in checked:
        if "valueFrom" in item:
            raise SpecError("spec.env", "a pool's env holds plain name/value pairs only")
        env.append((item["name"], item["value"]))
    # both containers of a pool's pod run /bin/sh -c <launcher> (core.pools), as a batch's do with
    # samplesPerInput > 1: a name the shell drops would be missing from every episode
    check_shell_names(checked, "spec.env", "a pool's pods start under a /bin/sh launcher")
    prepare = spec.get("prepare") or {}
    if not isinstance(prepare, Mapping):
        raise SpecError("spec.prepare", "must be an object")
    command = _strings(prepare.get("command"), "spec.prepare.command")
    if prepare and not command:
        raise SpecError("spec.prepare.command", "must name a command")
    check_argv_strings("spec.prepare", command, (), checked)
    # no process can be given a NUL in an argument or its environment: the runtime refuses the
    # container, and every pod of the pool would fail to start
    for field, texts in (("spec.env", [val for _, val in env]), ("spec.prepare.command", command)):
        if any("\0" in text for text in texts):
            raise SpecError(field, "may not hold a NUL byte")
    workspace = spec.get("workspace") or {}
    if not isinstance(workspace, Mapping):
        raise SpecError("spec.workspace", "must be an object")
    network = spec.get("network", v.NETWORK_MODES[0])
    if network not in v.NETWORK_MODES:
        raise SpecError("spec.network", f"must be one of {', '.join(v.NETWORK_MODES)}")
    runtime = checked_runtime_class(spec.get("runtimeClassName"))
    # The sandbox's fields checked by a batch's own rules (core.spec): a value a batch would be
    # refused is refused here, before the pool's namespace and objects are made, not by the API at
    # its first pod. What is kept is the spec as written (the pods' digest, template_digest, must
    # not change under the pool's running pods when the operator is upgraded); the mount paths are
    # also read cleaned, as a batch's, for every check and command.
    image = checked_image(spec.get("image") or d.IMAGE, "spec.image")
    resources = checked_resources(spec, "spec.resources")
    task_written = str(task.get("mountPath") or d.TASK_MOUNT_PATH)
    workspace_written = str(workspace.get("mountPath") or d.WORKSPACE_MOUNT_PATH)
    task_mount = checked_path(task_written, "spec.task.mountPath")
    workspace_mount = checked_path(workspace_written, "spec.workspace.mountPath")
    _own_paths({"spec.task.mountPath": task_mount, "spec.workspace.mountPath": workspace_mount})
    size_limit = workspace_size_limit(workspace)
    template = dict(spec.get("podTemplate") or {})
    # an empty class is none (the CRD lets it through, and pods were made without it)
    checked_pod_template({k: val for k, val in template.items() if not (k == "priorityClassName" and val == "")})
    return PoolSpec(
        size=size, max_size=max_size, image=image,
        runtime_class_name=runtime,
        resources=resources,
        env=tuple(env), task_mount_path=task_mount, task_files=files,
        workspace_mount_path=workspace_mount, workspace_size_limit=size_limit,
        task_mount_written=task_written, workspace_mount_written=workspace_written,
        prepare_command=command,
        prepare_timeout_seconds=_int(prepare, "timeoutSeconds", d.PREPARE_TIMEOUT_SECONDS, 1,
                                     d.MAX_PREPARE_TIMEOUT_SECONDS, at="spec.prepare")
        if prepare else d.PREPARE_TIMEOUT_SECONDS,
        network=network, pod_template=template,
        verifier=_verifier(spec, image, resources, (task_mount, workspace_mount)),
    )


def _own_paths(mounts: Mapping[str, str]) -> None:
    """Each mount of the pod apart from the others and from the launcher's own directories
    (naming.CLAIM_MOUNT_PATH): two mounts at one path make every pod refused, and a writable
    directory inside the read-only task files one the runtime cannot make."""
    names = list(mounts)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if _overlap(mounts[a], mounts[b]):
                raise SpecError(a, f"{mounts[a]} overlaps {b} {mounts[b]}")
        for reserved in naming.POOL_RESERVED_MOUNT_PATHS:
            if _overlap(mounts[a], reserved):
                raise SpecError(a, f"{mounts[a]} overlaps {reserved}, which the pool's pods keep for themselves")


def _verifier(spec: Mapping, image: str, resources: dict, taken: tuple[str, ...]) -> PoolVerifier | None:
    raw = spec.get("verifier")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError("spec.verifier", "must be an object")
    mount = checked_path(raw.get("mountPath") or d.VERIFIER_MOUNT_PATH, "spec.verifier.mountPath")
    if any(_overlap(mount, path) for path in (*_RESERVED_PATHS, *taken)):
        raise SpecError("spec.verifier.mountPath", f"must be an absolute path of its own, not {mount!r}"[:200])
    return PoolVerifier(image=checked_image(raw.get("image") or image, "spec.verifier.image"), mount_path=mount,
                        resources=checked_resources(raw, "spec.verifier.resources", default=resources))


# Paths a pool's pod mounts already or that hold the system: the verifier's files cannot go there.
_RESERVED_PATHS = (*naming.POOL_RESERVED_MOUNT_PATHS, "/dev", *SYSTEM_PATHS)


def _overlap(a: str, b: str) -> bool:
    """One path is the other or lies under it ('/' overlaps everything; '/task' not '/tasks')."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def verifier_conflict(spec: PoolSpec, batch_mount_path: str | None) -> str | None:
    """Why a batch with (``batch_mount_path`` set) or without a verifier cannot run in the pool's
    pods, or None: the pods have a verifier container exactly when the pool has spec.verifier."""
    if batch_mount_path is None and spec.verifier is not None:
        return ("its pods hold a verifier container, for batches with spec.verifier; give the batch one, or use a "
                "pool without spec.verifier")
    if batch_mount_path is not None and spec.verifier is None:
        return "its pods have no verifier container: a batch with spec.verifier needs a pool with spec.verifier"
    if spec.verifier is not None and same_path(batch_mount_path) != same_path(spec.verifier.mount_path):
        return (f"spec.verifier.mountPath {batch_mount_path!r} (its default is {d.VERIFIER_MOUNT_PATH}) is not the "
                f"pool's ({spec.verifier.mount_path!r}): set the batch's to the pool's")
    return None


def sandbox_conflict(batch: BatchSpec, spec: PoolSpec) -> str | None:
    """Why a batch's own word on what its pods are made of contradicts its pool's, or None. The
    pool's pods run the episodes, so such a field would be ignored: a memory limit the batch asked
    for and never got would fail its agents as their own. The CRD defaults these fields, so only
    a value other than the default (and other than the pool's) can be told from an unset one; not
    isolation.network, which it leaves unset: a DenyAll asked for is never run with a pool's egress."""
    ws = same_path(batch.workspace_mount_path)
    # (field, the batch's value, the pool's, whether it is the default, whether it is the pool's)
    asked = [("spec.image", batch.image, spec.image, batch.image == d.IMAGE,
              same_image(batch.image) == same_image(spec.image)),
             ("spec.resources", batch.resources, spec.resources, amounts(batch.resources) == amounts(d.RESOURCES),
              amounts(batch.resources) == amounts(spec.resources)),
             ("spec.workspace.mountPath", ws, same_path(spec.workspace_mount_path), ws == d.WORKSPACE_MOUNT_PATH,
              ws == same_path(spec.workspace_mount_path)),
             ("spec.workspace.sizeLimit", batch.workspace_size_limit, spec.workspace_size_limit,
              amount(batch.workspace_size_limit) == amount(d.WORKSPACE_SIZE_LIMIT),
              amount(batch.workspace_size_limit) == amount(spec.workspace_size_limit)),
             ("spec.isolation.network", batch.isolation_network, spec.network,
              batch.isolation_network == (None if batch.isolation_network_written else v.NETWORK_MODES[0]),
              batch.isolation_network == spec.network)]
    for field, value, pools_own, is_default, is_pools in asked:
        if not (is_default or is_pools):
            return (f"{field} {json.dumps(value, sort_keys=True)} is not the pool's "
                    f"({json.dumps(pools_own, sort_keys=True)}): a pooled batch runs in its pool's pods; leave it out")
    if batch.isolation_namespace != v.ISOLATION_MODES[0]:
        return (f"spec.isolation.namespace {batch.isolation_namespace} does not apply: a pooled batch runs in its "
                "pool's namespace; leave it out")
    if batch.sandbox_quota != d.SANDBOX_QUOTA:
        return "spec.isolation.resourceQuota does not apply: a pooled batch runs in its pool's namespace; leave it out"
    if not batch.command and d.EPISODE_SCRIPT not in spec.task_files:   # as a cold batch's (core.spec)
        return (f"spec.command is not given, and the default runs {spec.task_mount_path}/{d.EPISODE_SCRIPT}, which "
                "is not among the pool's task files: give spec.command")
    return None


_DOCKER_HUB = ("docker.io/", "index.docker.io/")


def same_image(ref: object) -> str:
    """An image reference as the runtime resolves it: Docker Hub's spellings of one name are one
    (``docker.io/library/python:3.11``, ``library/python:3.11``, ``python:3.11``), and a name
    without a tag or digest is its ``:latest``."""
    text = str(ref)
    for prefix in _DOCKER_HUB:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    text = text.removeprefix("library/")
    last = text.rsplit("/", 1)[-1]    # a registry's port is no tag (localhost:5000/img)
    return text if ":" in last or "@" in last else f"{text}:latest"


def same_path(path: str | None) -> str | None:
    """A mount path as the runtime reads it (core.spec_fields.checked_path: '/grade/', '//grade' and
    '/x/../grade' are one directory); one that is no mount path as written (a manifest's,
    unchecked: it compares unequal, it does not raise)."""
    if path is None:
        return None
    try:
        return checked_path(path, "mountPath")
    except SpecError:
        return path


def task_mount_path_in(pod_spec: Mapping) -> str | None:
    """Where a pool's pod (or its Job's template) mounts the task files: the pod is what the
    episode runs in, whatever its pool says now (a changed pool makes new pods; these keep theirs).
    Here, not in core.pools: core.pod_reading.pod_facts reads it, and core.pools imports core.pod_reading.
    Cleaned, as the runtime mounts it: the pod carries the pool's spelling ('/absent/../task'),
    which a command's path resolves only if /absent exists."""
    for container in pod_spec.get("containers") or ():
        if isinstance(container, Mapping) and container.get("name") in (naming.CONTAINER_NAME, naming.AGENT_CONTAINER):
            for mount in container.get("volumeMounts") or ():
                if isinstance(mount, Mapping) and mount.get("name") == "task" and isinstance(mount.get("mountPath"), str):
                    return same_path(mount["mountPath"])
    return None


def amount(text: object) -> object:
    """A quantity by amount ('2Gi' is '2048Mi'); as written when it does not parse."""
    try:
        return parse_quantity(str(text))
    except ValueError:
        return str(text)


def amounts(resources: Mapping) -> dict:
    """Resources by amount, not spelling (`cpu: 1`, "1" and "1000m" are one amount); anything but
    an object as written (a manifest's, unchecked: it compares unequal, it does not raise)."""
    if resources is not None and not isinstance(resources, Mapping):
        return {"": str(resources)}
    out: dict = {}
    for kind, entries in (resources or {}).items():
        for name, text in (entries or {}).items() if isinstance(entries, Mapping) else ():
            out[(kind, name)] = amount(text)
    return out
