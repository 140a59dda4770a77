"""Building RolloutBatch and RolloutPool objects, and moving inputs too large for one object into
ConfigMaps.

Pure: no network. ``build_batch`` validates with the operator's own ``core.spec.parse_spec``,
``build_pool`` with its ``core.pools.parse_pool_spec``; ``plan_inputs`` decides whether the
inputs go inline (``spec.inputs``) or by reference (``spec.inputsFrom``) and cuts them into
ConfigMaps of at most ``core.spec.MAX_CONFIG_BYTES``.

A batch run on a warm pool (``pool=``, ``spec.poolRef``) leaves out the fields that say what its
sandbox pods are made of (``core.crd_pool.POOL_OWNED_BATCH_FIELDS``: image, task, resources, ...):
the pool's pods are already made. :func:`with_pool` drops them from any batch, so a trainer can
build one batch and submit it cold or warm (``Client.submit(batch, pool=)`` first checks that what
the batch names is the pool's: ``ops.submit_on_pool``).
"""

from __future__ import annotations

import copy
import inspect
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolloutbatch import GROUP, KIND, POOL_KIND, VERSION
from rolloutbatch.core import defaults
from rolloutbatch.core.crd_pool import POOL_OWNED_BATCH_FIELDS
from rolloutbatch.core.k8s_rules import is_dns_subdomain
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS, LABEL_MANAGED_BY, MANAGED_BY
from rolloutbatch.core.pool_spec import parse_pool_spec
from rolloutbatch.core.spec import (INLINE_AND_REFERENCE, INPUT_KEY, MAX_CONFIG_BYTES, MAX_INPUT_CONFIGMAPS,
                                    POOL_VERIFIER_EXCLUSIVE, SPEC_FIELDS, check_batch_name, inline_inputs, input_bytes,
                                    input_text, parse_spec)
from rolloutbatch.core.spec_fields import checked_object

API_VERSION = f"{GROUP}/{VERSION}"
# Inline inputs above this go by reference: the RolloutBatch object (inputs, task files, the
# managedFields of every apply) must stay far below etcd's ~1.5 MiB and the 256 KiB annotation
# kubectl apply adds (300 inputs of 4 KiB inline were refused).
INLINE_INPUTS_MAX = 128 * 1024
LABEL_INPUTS_OF = "rl.agentruntime.io/inputs-of"      # the batch name (or generateName) they were made for
# The random token of one submit's input ConfigMaps (their names hold it), on them and on the batch:
# a batch whose create went unanswered is found by it (a generateName has no name to look up).
LABEL_INPUTS_TOKEN = "rl.agentruntime.io/inputs-token"
LABEL_ROLE = "rl.agentruntime.io/role"
ROLE_INPUTS = "inputs"


def _mapping(value: object, field: str) -> dict:
    """A caller's mapping argument, copied; anything else a ``SpecError`` naming it (not the
    TypeError of dict())."""
    if not isinstance(value, Mapping):
        raise SpecError(field, f"must be a mapping, got {type(value).__name__}")
    return dict(value)


def _items(value: object, field: str) -> list:
    """A caller's list argument, copied: a string is refused, not read as its characters (a
    command ``"python episode.py"`` would run ``p``)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise SpecError(field, f"must be a list, got {type(value).__name__}")
    return list(value)


def secret_env(refs: Mapping[str, tuple[str, str]]) -> list[dict]:
    """Env entries reading Secret keys: ``{"OPENAI_API_KEY": ("my-secret", "key")}`` becomes
    ``[{"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "my-secret", "key": "key"}}}]``.
    The Secret lives in the batch's namespace, labelled ``rl.agentruntime.io/episode-env=true``
    (docs/design.md §8.1). Also for a verifier's env: ``verifier={"env": secret_env({...})}``."""
    entries = []
    for name, ref in _mapping(refs, "secret_env").items():
        if not (isinstance(ref, tuple) and len(ref) == 2):
            raise SpecError(f"secret_env[{name}]", "must be a (Secret name, key) pair")
        entries.append({"name": str(name), "valueFrom": {"secretKeyRef": {"name": ref[0], "key": ref[1]}}})
    return entries


@dataclass
class Task:
    """The episode program: files mounted read-only at ``mount_path`` and the command to run.
    ``secret_env``: variable -> (Secret, key) of the batch's namespace, for the agent only
    (see :func:`secret_env`); the value never appears in the spec."""

    files: dict[str, str]
    command: list[str]
    image: str = defaults.IMAGE
    env: Mapping[str, str] | Sequence[Mapping[str, str]] = field(default_factory=dict)
    resources: dict | None = None
    mount_path: str = defaults.TASK_MOUNT_PATH
    args: list[str] | None = None
    secret_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def env_list(self) -> list[dict]:
        return _env_entries(self.env) + secret_env(self.secret_env)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def by_reference(spec: Mapping) -> bool:
    """Whether ``spec.inputs`` is too large to travel inside the object, measured as parse_spec
    measures it (``core.spec.input_text``). The shapes it reads are the operator's to refuse
    (``SpecError``), as parse_spec would, before any call: every input, inline or by reference,
    is checked here (depth, plain JSON, finite numbers)."""
    inputs = inline_inputs(spec)
    if not inputs:
        return False
    if spec.get("inputsFrom"):
        raise SpecError("spec.inputsFrom", INLINE_AND_REFERENCE)
    files = checked_object(checked_object(spec, "task", "spec.task"), "files", "spec.task.files")
    files = sum(len(k.encode()) + len(v.encode()) for k, v in files.items() if isinstance(k, str) and isinstance(v, str))
    total = sum(input_bytes(i, input_text(value, i)) for i, value in enumerate(inputs))
    return total > INLINE_INPUTS_MAX or total + files > MAX_CONFIG_BYTES


def _shards(inputs: Sequence[Any]) -> list[dict[str, str]]:
    """``input-<g>.json`` -> JSON text, cut in order into ConfigMaps of at most MAX_CONFIG_BYTES."""
    shards: list[dict[str, str]] = [{}]
    size = 0
    for g, value in enumerate(inputs):
        text = input_text(value, g)
        item = input_bytes(g, text)
        if item > MAX_CONFIG_BYTES:
            raise SpecError(f"spec.inputs[{g}]", f"takes {item} bytes; one input must fit a ConfigMap "
                                                 f"({MAX_CONFIG_BYTES} bytes)")
        if size + item > MAX_CONFIG_BYTES and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][INPUT_KEY.format(g)] = text
        size += item
    if len(shards) > MAX_INPUT_CONFIGMAPS:
        raise SpecError("spec.inputs", f"need {len(shards)} ConfigMaps of {MAX_CONFIG_BYTES} bytes; at most "
                                       f"{MAX_INPUT_CONFIGMAPS} can be referenced")
    return shards


def _check(spec: dict) -> None:
    """parse_spec, reading large inline inputs as the reference they will become."""
    if by_reference(spec):
        inputs = spec["inputs"]
        shards = _shards(inputs)
        probe = {k: v for k, v in spec.items() if k != "inputs"}
        probe["inputsFrom"] = {"configMaps": [f"inputs-{n}" for n in range(len(shards))], "count": len(inputs)}
        parse_spec(probe)
    else:
        parse_spec(spec)


def _check_pool_name(pool: str) -> None:
    if not is_dns_subdomain(pool):
        raise SpecError("spec.poolRef.name", f"{pool!r} is not a RolloutPool name (a lowercase DNS subdomain)")


def _pooled(spec: Mapping, pool: str) -> dict:
    """``spec`` run on the warm pool ``pool``: spec.poolRef set, the pool's own fields left out. A
    poolRef the spec has already keeps what else it says (``whenEmpty``); one naming another pool
    is refused, not overwritten."""
    _check_pool_name(pool)
    out = {k: copy.deepcopy(val) for k, val in spec.items() if k not in POOL_OWNED_BATCH_FIELDS}
    if isinstance(out.get("verifier"), dict):   # its container is the pool's too
        out["verifier"] = {k: val for k, val in out["verifier"].items() if k not in POOL_VERIFIER_EXCLUSIVE}
    written = out.get("poolRef")
    written = dict(written) if isinstance(written, Mapping) else {}
    if written.get("name") not in (None, pool):
        raise ValueError(f"spec.poolRef names RolloutPool {written['name']!r}, not {pool!r}: name one pool")
    out["poolRef"] = {**written, "name": pool}
    return out


def with_pool(batch: Mapping, pool: str) -> dict:
    """A copy of ``batch`` that runs on the RolloutPool ``pool`` of its namespace: ``spec.poolRef``
    set, and the fields that are the pool's (``POOL_OWNED_BATCH_FIELDS``: image, runtimeClassName,
    resources, task, workspace, isolation, podTemplate, and the verifier's image and resources)
    left out, whatever the batch said: the pool's pods are already made of its own. What a pooled
    batch may not have at all (inputImages, Secret env values, ...) is kept, for the API to refuse
    with its reason."""
    if not isinstance(batch, Mapping) or not isinstance(batch.get("spec") or {}, Mapping):
        raise ValueError("a RolloutBatch object (a mapping whose spec is a mapping) is needed to run it on a pool")
    body = copy.deepcopy(dict(batch))
    body["spec"] = _pooled(body.get("spec") or {}, pool)
    return body


def build_batch(name_or_prefix: str, task: Task | None, episodes: int, parallelism: int | None = None,
                inputs: Sequence[Mapping[str, Any]] | None = None, namespace: str | None = None,
                samples_per_input: int | None = None, *, pool: str | None = None, **spec_overrides: Any) -> dict:
    """A RolloutBatch object (plain dict) ready for :meth:`Client.submit` or ``kubectl create``.

    ``name_or_prefix`` ending in ``-`` becomes ``metadata.generateName`` (a fresh name per
    submit, the natural choice for a training loop). ``inputs``: one JSON object per group;
    with ``samples_per_input=k`` (GRPO's group size), ``episodes`` must be ``len(inputs) * k``
    and episode i works on input ``i // k`` as sample ``i % k``. Inputs too large for the object
    (JSON above ``INLINE_INPUTS_MAX``) stay in ``spec.inputs`` here; :meth:`Client.submit` moves
    them into ConfigMaps (``spec.inputsFrom``) owned by the batch (``kubectl create`` of such an
    object would be refused as too large). ``spec_overrides`` are further spec fields, in
    camelCase or snake_case (``episode_timeout_seconds=300``, ``isolation={...}``), one spelling a
    field (both is a SpecError, as the CLI refuses a key given twice).

    ``pool``: run the episodes in the warm pods of that RolloutPool (same namespace):
    ``spec.poolRef``, and none of the pool's fields (see :func:`with_pool`). ``task`` may then
    be None; a Task given brings its command, args and env, and its files, image, resources and
    mount path are the pool's. Without ``pool`` the task is required.

    Raises ``ValueError`` (a ``SpecError`` naming the field) before any network call for an
    unknown spec field and for what the operator would refuse: the spec is read by the
    operator's own ``core.spec.parse_spec``, the name checked by ``core.spec.check_batch_name``.
    """
    check_batch_name(name_or_prefix)
    spec: dict[str, Any] = {"episodes": episodes}
    if task is not None and not isinstance(task, Task):   # a mapping: the YAML's `task` is another shape
        raise SpecError("task", f"must be a rolloutbatch.sdk.Task, got {type(task).__name__}")
    if task is None:
        if pool is None:
            raise SpecError("spec.task", "is required, unless pool names the RolloutPool whose task runs")
    else:
        if not task.command:
            raise SpecError("task.command", "must not be empty")
        spec.update({"image": task.image, "command": _items(task.command, "task.command"),
                     "task": {"mountPath": task.mount_path, "files": _mapping(task.files, "task.files")}})
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if samples_per_input is not None:
        spec["samplesPerInput"] = samples_per_input
    if task is not None and task.args:
        spec["args"] = _items(task.args, "task.args")
    env = task.env_list() if task is not None else []
    if env:
        spec["env"] = env
    if task is not None and task.resources is not None:   # {} is no requests and no limits
        spec["resources"] = copy.deepcopy(task.resources)
    if inputs is not None:
        inputs = _items(inputs, "spec.inputs")
        # The CRD's items are objects (so a CEL rule can count them); parse_spec takes any JSON.
        if not all(isinstance(i, Mapping) for i in inputs):
            raise SpecError("spec.inputs", "every input must be a JSON object (a dict)")
        spec["inputs"] = [copy.deepcopy(dict(i)) for i in inputs]
    # Each field in one spelling only, as the CLI refuses a key given twice: spec[name] = value
    # would keep the last of episodeTimeoutSeconds=5, episode_timeout_seconds=6 silently.
    given = {"samplesPerInput": "samples_per_input"} if samples_per_input is not None else {}
    for key, value in spec_overrides.items():
        name = _camel(key)
        if name in given:
            raise SpecError(f"spec.{name}", f"given twice, as {given[name]!r} and as {key!r}: give one")
        given[name] = key
        if name not in SPEC_FIELDS:
            raise SpecError(f"spec.{name}", f"unknown field (keyword {key!r}); spec fields are "
                                            f"{', '.join(sorted(SPEC_FIELDS))}")
        if pool is not None and name in POOL_OWNED_BATCH_FIELDS:
            # asked for in so many words, it would be dropped without one: refused instead
            raise SpecError(f"spec.{name}", f"is the pool's with pool={pool!r}: set it in the RolloutPool")
        if pool is not None and name == "verifier" and isinstance(value, Mapping) \
                and (owned := sorted(set(value) & set(POOL_VERIFIER_EXCLUSIVE))):   # its container is the pool's
            raise SpecError(f"spec.verifier.{owned[0]}", f"is the pool's with pool={pool!r}: set it in the "
                                                         f"RolloutPool's verifier")
        spec[name] = copy.deepcopy(value)
    if pool is not None:
        spec = _pooled(spec, pool)
    _refuse_empty(spec)
    _check(spec)

    metadata: dict[str, Any] = {"generateName" if name_or_prefix.endswith("-") else "name": name_or_prefix}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _env_entries(env: Mapping[str, str] | Sequence[Mapping[str, str]] | None) -> list[dict]:
    if env is None:
        return []
    if isinstance(env, Mapping):
        for key, val in env.items():
            # a value is its text: None or a bool would arrive as "None" or "True", which no caller meant
            if val is None or isinstance(val, bool):
                raise SpecError(f"env[{key}]", f"must be text (a string, a number, a path), not {val!r}")
        return [{"name": str(k), "value": str(val)} for k, val in env.items()]
    return [_mapping(e, "env[]") for e in _items(env, "env")]


def build_pool(name: str, size: int, *, task_files: Mapping[str, str], image: str = defaults.IMAGE,
               namespace: str | None = None, max_size: int | None = None,
               env: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None, resources: Mapping | None = None,
               runtime_class_name: str | None = None, task_mount_path: str | None = None,
               prepare: Sequence[str] | None = None, prepare_timeout_seconds: int | None = None,
               network: str | None = None, workspace: Mapping | None = None,
               pod_template: Mapping | None = None, verifier: Mapping | None = None) -> dict:
    """A RolloutPool object (plain dict) ready for :meth:`Client.create_pool` or ``kubectl create``:
    ``size`` warm pods of ``image`` with ``task_files`` at ``task_mount_path`` (default /task),
    each made warm by running ``prepare`` (a command list, run without a shell) in its workspace.

    ``env`` is plain values only (a mapping, or name/value entries): a pool's pods wait before any
    batch claims them, so no Secret is read for them. ``verifier`` (``{}``, or its ``image``,
    ``resources``, ``mountPath``) gives every pod a verifier container, for batches with a verifier. Left out, a field takes the CRD's default
    (``core.defaults``: max_size 100, the batch's image, resources and workspace, network DenyAll).
    Raises ``ValueError`` (a ``SpecError``) for what the operator would refuse, read by its own
    ``core.pools.parse_pool_spec``; the API's schema checks the rest when the pool is created.
    """
    if not is_dns_subdomain(name):
        raise SpecError("metadata.name", f"{name!r} is not a RolloutPool name (a lowercase DNS subdomain)")
    spec: dict[str, Any] = {"size": size, "image": image}
    if max_size is not None:
        spec["maxSize"] = max_size
    if runtime_class_name is not None:
        spec["runtimeClassName"] = runtime_class_name
    if resources is not None:
        spec["resources"] = copy.deepcopy(_mapping(resources, "spec.resources"))
    entries = _env_entries(env)
    if entries:
        spec["env"] = entries
    spec["task"] = {"files": _mapping(task_files, "spec.task.files")}
    if task_mount_path is not None:
        spec["task"]["mountPath"] = task_mount_path
    if workspace is not None:
        spec["workspace"] = copy.deepcopy(_mapping(workspace, "spec.workspace"))
    if prepare is not None:
        spec["prepare"] = {"command": _items(prepare, "spec.prepare.command")}
        if prepare_timeout_seconds is not None:
            spec["prepare"]["timeoutSeconds"] = prepare_timeout_seconds
    elif prepare_timeout_seconds is not None:
        raise SpecError("spec.prepare.timeoutSeconds", "bounds a prepare command: give prepare too")
    if network is not None:
        spec["network"] = network
    if pod_template is not None:
        spec["podTemplate"] = copy.deepcopy(_mapping(pod_template, "spec.podTemplate"))
    if verifier is not None:
        spec["verifier"] = copy.deepcopy(_mapping(verifier, "spec.verifier"))
    _refuse_empty(spec)
    parse_pool_spec(spec)
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": POOL_KIND, "metadata": metadata, "spec": spec}


# The options Client.create_pool passes on to build_pool (its keywords but those it sets itself).
POOL_OPTIONS = frozenset(inspect.signature(build_pool).parameters) - {"name", "size", "task_files", "namespace"}
# Fields the operator reads as their default when empty, and the API's schema refuses so (an
# image, a RuntimeClass name, a mount path), in a batch's spec and a pool's alike.
_NOT_EMPTY = (("image",), ("runtimeClassName",), ("task", "mountPath"), ("workspace", "mountPath"),
              ("verifier", "image"), ("verifier", "mountPath"))


def _refuse_empty(spec: Mapping) -> None:
    """SpecError for an empty :data:`_NOT_EMPTY` field, before the call (an unset shell variable)."""
    for path in _NOT_EMPTY:
        value: object = spec
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value == "":
            raise SpecError("spec." + ".".join(path), "may not be empty: leave it out for its default")


def pool_options(options: Mapping[str, Any]) -> Mapping[str, Any]:
    """``options`` of :meth:`Client.create_pool`, refused (SpecError) when one is no keyword of
    :func:`build_pool`'s, as build_batch refuses a field it does not know."""
    unknown = sorted(set(options) - POOL_OPTIONS)
    if unknown:
        raise SpecError(unknown[0], f"is no option of a pool; they are {', '.join(sorted(POOL_OPTIONS))}")
    return options


def checked_batch(batch: object) -> Mapping:
    """``batch`` when it is an object whose metadata and spec are objects (a YAML file can hold
    anything), else a ``SpecError`` naming the part."""
    if not isinstance(batch, Mapping):
        raise SpecError("RolloutBatch", f"must be an object, got {type(batch).__name__}")
    for key in ("metadata", "spec"):
        checked_object(batch, key, key)
    return batch


def plan_inputs(batch: Mapping, namespace: str) -> tuple[dict, list[dict]]:
    """``(batch, configmaps)``: the batch as it will be created and the input ConfigMaps to create
    first (none when the inputs fit inline), labelled ``rl.agentruntime.io/inputs=true`` so the
    operator may read them. Names are ``<name>-in-<random>-<n>``: the batch's final name is
    unknown before it is created (generateName). The random token labels the ConfigMaps and the
    batch alike (``LABEL_INPUTS_TOKEN``)."""
    checked_batch(batch)
    body = copy.deepcopy(dict(batch))
    spec = body.get("spec") or {}
    if not by_reference(spec):
        return body, []
    meta = body.setdefault("metadata", {})
    stem = (meta.get("name") or meta.get("generateName") or "batch").rstrip("-")
    token = secrets.token_hex(4)
    inputs = spec.pop("inputs")
    shards = _shards(inputs)
    names = [f"{stem}-in-{token}-{n}" for n in range(len(shards))]
    spec["inputsFrom"] = {"configMaps": names, "count": len(inputs)}
    meta["labels"] = {**(meta.get("labels") or {}), LABEL_INPUTS_TOKEN: token}
    # LABEL_INPUTS opts them in: the operator reads no unlabelled ConfigMap as inputs.
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: ROLE_INPUTS, LABEL_INPUTS_OF: stem[:63].rstrip("-._"),
              LABEL_INPUTS_TOKEN: token, LABEL_INPUTS: INPUTS_OPT_IN}
    configmaps = [{"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
                   "data": data} for name, data in zip(names, shards)]
    return body, configmaps


def owner_reference(batch: Mapping) -> dict:
    """Makes the input ConfigMaps garbage when the batch is deleted (never blocks its deletion)."""
    meta = batch["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": False, "controller": False}
