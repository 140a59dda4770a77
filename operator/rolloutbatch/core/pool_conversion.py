"""A batch written to run cold, run on a warm pool instead (`rolloutbatch submit --pool`).

The conversion (sdk.with_pool) leaves out what is the pool's: image, task files, resources,
workspace, isolation, runtimeClassName, podTemplate, the verifier's image and resources. The
pool's pods then run the episodes, so each such field the manifest *wrote* must be what the pool
has; otherwise the episodes would run another task, on another image, with other limits or
another network, and the user would never know. :func:`manifest_conflict` says which field
differs. Unlike the operator's own check of a pooled batch (core.pool_spec.sandbox_conflict,
which sees the CRD's defaults and cannot tell them from a value), it reads the manifest as
written: a field it names counts, even when it names the default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rolloutbatch.core import pool_spec
from rolloutbatch.core.model import SpecError

def _as_is(value: object) -> object:
    return value


def _path(value: object) -> object:
    return pool_spec.same_path(str(value))


def _map(raw: Mapping, key: str) -> Mapping:
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def _differs(field: str, written: object, pools_own: object, why: str) -> str:
    return (f"{field} {json.dumps(written, sort_keys=True, default=str)} is not the pool's "
            f"({json.dumps(pools_own, sort_keys=True, default=str)}): {why}")


def manifest_conflict(batch: Mapping, pool: Mapping) -> str | None:
    """Why ``batch`` (a RolloutBatch spec as written, for a cold run) would not run as written on
    the pool whose spec is ``pool``, or None; None too when the pool's spec cannot be read (its
    batches stall with its reason). The batch is compared as written, valid or not: the pool's
    fields are what sdk.with_pool drops, so an invalid one (requests above limits) would go
    unrefused, and its episodes run the pool's task without a word."""
    try:
        own = pool_spec.parse_pool_spec(pool)
    except SpecError:
        return None
    pods = "a pooled batch runs in its pool's pods"
    task, workspace, isolation = _map(batch, "task"), _map(batch, "workspace"), _map(batch, "isolation")
    files = _map(task, "files")
    if files and dict(files) != own.task_files:
        differ = sorted(set(files) ^ set(own.task_files)) or \
            sorted(k for k in files if files[k] != own.task_files.get(k))
        return (f"spec.task.files are not the pool's ({', '.join(differ)[:200]} differ): a pooled batch runs its "
                "pool's task")
    written = [
        ("spec.image", batch.get("image"), own.image, pool_spec.same_image),
        ("spec.runtimeClassName", batch.get("runtimeClassName"), own.runtime_class_name, _as_is),
        ("spec.task.mountPath", task.get("mountPath"), own.task_mount_path, _path),
        ("spec.workspace.mountPath", workspace.get("mountPath"), own.workspace_mount_path, _path),
        ("spec.workspace.sizeLimit", workspace.get("sizeLimit"), own.workspace_size_limit, pool_spec.amount),
        ("spec.isolation.network", isolation.get("network"), own.network, _as_is),
    ]
    for field, value, pools_own, same in written:   # same: the two spellings of one value made equal
        if value is not None and same(value) != same(pools_own):
            return _differs(field, value, pools_own, pods)
    if batch.get("resources") is not None and pool_spec.amounts(batch["resources"]) != pool_spec.amounts(own.resources):
        return _differs("spec.resources", batch["resources"], own.resources, pods)
    if isolation.get("egress") is not None:
        return (f"spec.isolation.egress cannot apply: a pooled batch's network is its pool's (spec.network "
                f"{own.network}), for every episode of every batch it serves")
    template = {k: val for k, val in _map(batch, "podTemplate").items() if val not in (None, "", [], {})}
    pools_template = {k: val for k, val in own.pod_template.items() if val not in (None, "", [], {})}
    if template and template != pools_template:
        return _differs("spec.podTemplate", template, pools_template, pods)
    verifier = _map(batch, "verifier")
    if isinstance(batch.get("verifier"), Mapping) and own.verifier is not None:   # {}: a verifier of defaults
        # Cold, a verifier without its own image or resources runs the batch's (core.spec): those
        # the manifest wrote for the agent are the verifier's too.
        grading = "a pooled batch's verifier runs in its pool's verifier container"
        image, field = (verifier["image"], "spec.verifier.image") if verifier.get("image") is not None else \
            (batch.get("image"), "spec.image (the verifier's: it names none of its own)")
        if image is not None and pool_spec.same_image(image) != pool_spec.same_image(own.verifier.image):
            return _differs(field, image, own.verifier.image, grading)
        if verifier.get("resources") is not None:   # a null is absent, as core.spec reads it
            resources, field = verifier["resources"], "spec.verifier.resources"
        else:
            resources, field = batch.get("resources"), "spec.resources (the verifier's: it names none of its own)"
        if resources is not None and pool_spec.amounts(resources) != pool_spec.amounts(own.verifier.resources):
            return _differs(field, resources, own.verifier.resources, grading)
    return None
