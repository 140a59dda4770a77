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
from collections.abc import Mapping

from rolloutbatch.core import defaults as d
from rolloutbatch.core import vocabulary as v
# The spec's fields and its one mutable field are the CRD definition's; the bounds other modules
# read through this module are core.defaults'.
from rolloutbatch.core.crd_spec import SPEC_FIELDS, STOP_FIELD  # noqa: F401
from rolloutbatch.core.defaults import (MAX_BATCH_NAME_LENGTH, MAX_CONFIG_BYTES, MAX_EPISODES,  # noqa: F401
                                        MAX_INPUT_CONFIGMAPS, MAX_INPUT_IMAGES_BYTES, MAX_SAMPLES_PER_INPUT)
from rolloutbatch.core.egress import parse_egress
from rolloutbatch.core.env_expansion import references
from rolloutbatch.core.groups import group_count
from rolloutbatch.core.k8s_rules import is_dns_label, is_dns_subdomain
from rolloutbatch.core.model import BatchSpec, SpecError, VerifierSpec
from rolloutbatch.core import strictjson
from rolloutbatch.core.strictjson import deeper_than
from rolloutbatch.core.naming import INPUTS_MOUNT_PATH
from rolloutbatch.core.spec_env import check_argv_strings, check_shell_names, checked_env
from rolloutbatch.core.spec_fields import (checked_bool, checked_choice, checked_files, checked_image, checked_int,
                                           checked_object, checked_path, checked_resources, checked_runtime_class,
                                           checked_strings, declared_object, only_declared, overlapping,
                                           workspace_size_limit)
from rolloutbatch.core.spec_pod_template import checked_pod_template

LAUNCHER_ENV = ("EPISODE_GROUP", "EPISODE_SAMPLE", "EPISODE_INPUT")   # set by the k > 1 launcher
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
    return checked_int(cleanup, "ttlSecondsAfterFinished", None, maximum=d.MAX_INT32, prefix="spec.cleanup.")


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
    count = checked_int(raw, "count", None, minimum=1, maximum=MAX_EPISODES, prefix="spec.inputsFrom.")
    if count is None:
        raise SpecError("spec.inputsFrom.count", "is required: the number of inputs across the ConfigMaps")
    return tuple(names), count


# With spec.poolRef the sandbox is the pool's (core.pools): these fields would say otherwise.
POOL_EXCLUSIVE = ("task", "runtimeClassName", "podTemplate", "inputImages", "queueName")
# ... and of the verifier, what its container is made of (the pool's spec.verifier).
POOL_VERIFIER_EXCLUSIVE = ("image", "resources")


def _pool(raw: Mapping) -> tuple[str | None, str]:
    """(spec.poolRef.name or None, spec.poolRef.whenEmpty)."""
    name = _pool_name(raw)
    if name is None:
        return None, v.POOL_COLD
    return name, checked_choice(raw["poolRef"], "whenEmpty", v.POOL_WHEN_EMPTY, "spec.poolRef.whenEmpty")


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
    command = checked_strings(part, "command", f"{where}.command")
    args = checked_strings(part, "args", f"{where}.args")
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
        command=checked_strings(ver, "command", "spec.verifier.command")
        or d.default_command(mount, d.VERIFIER_SCRIPT),
        args=checked_strings(ver, "args", "spec.verifier.args"), env=tuple(checked_env(ver, "spec.verifier.env")),
        files=files,
        mount_path=mount, resources=checked_resources(ver, "spec.verifier.resources", resources),
        timeout_seconds=checked_int(ver, "timeoutSeconds", d.VERIFIER_TIMEOUT_SECONDS, minimum=1,
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
    episodes = checked_int(raw, "episodes", None, minimum=1, maximum=MAX_EPISODES)
    if episodes is None:
        raise SpecError("spec.episodes", "is required")
    parallelism = checked_int(raw, "parallelism", episodes, minimum=1)
    if parallelism > episodes:
        raise SpecError("spec.parallelism", f"must not exceed spec.episodes ({episodes}), got {parallelism}")
    min_ok = checked_int(raw, "minSuccessfulEpisodes", episodes)
    if min_ok > episodes:
        raise SpecError("spec.minSuccessfulEpisodes", f"must not exceed spec.episodes ({episodes}), got {min_ok}")

    pool, when_empty = _pool(raw)
    task = declared_object(raw, "task")
    files = checked_files(task, "spec.task.files", required=pool is None)
    mount = checked_path(task.get("mountPath") or d.TASK_MOUNT_PATH, "spec.task.mountPath")

    samples = checked_int(raw, "samplesPerInput", d.SAMPLES_PER_INPUT, minimum=1, maximum=MAX_SAMPLES_PER_INPUT)
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

    timeout = checked_int(raw, "episodeTimeoutSeconds", d.EPISODE_TIMEOUT_SECONDS, minimum=1,
                          maximum=d.MAX_EPISODE_TIMEOUT_SECONDS)
    deadline = checked_int(raw, "activeDeadlineSeconds", d.ACTIVE_DEADLINE_SECONDS, minimum=1,
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
            if overlapping(mounts[a], mounts[b]):
                raise SpecError(a, f"{mounts[a]} overlaps {b} {mounts[b]}")

    retries = checked_int(declared_object(raw, "retries"), "infrastructure", d.INFRASTRUCTURE_RETRIES,
                          maximum=d.MAX_INFRASTRUCTURE_RETRIES, prefix="spec.retries.")
    isolation = declared_object(raw, "isolation")
    network = checked_choice(isolation, "network", ISOLATION_NETWORK, "spec.isolation.network")
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
    command = checked_strings(raw, "command") or (() if pool else d.default_command(mount, d.EPISODE_SCRIPT))
    check_argv_strings("spec", command, checked_strings(raw, "args"), env)
    if verifier is not None:
        check_argv_strings("spec.verifier", verifier.command, verifier.args, list(verifier.env))
    if samples > 1:
        # With k > 1 a shell launcher sets these at run time, after Kubernetes expanded $(...)
        # references: such a reference would reach the episode unexpanded ($$(NAME) is none).
        texts = [*command, *checked_strings(raw, "args"), *(e.get("value", "") for e in env)]
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
        image=image, command=command, args=checked_strings(raw, "args"), env=tuple(env),
        task_mount_path=mount, task_files=dict(files), inputs=inputs,
        samples_per_input=samples, inputs_from=inputs_from, inputs_count=inputs_count,
        workspace_mount_path=workspace_mount, workspace_size_limit=size_limit,
        resources=resources, verifier=verifier,
        episode_timeout_seconds=timeout, active_deadline_seconds=deadline, min_successful_episodes=min_ok,
        infrastructure_retries=retries,
        isolation_namespace=checked_choice(isolation, "namespace", ISOLATION_NAMESPACE, "spec.isolation.namespace"),
        isolation_network=network, isolation_network_written=isolation.get("network") is not None,
        egress=egress,
        sandbox_quota=checked_bool(isolation, "resourceQuota", "spec.isolation.resourceQuota", d.SANDBOX_QUOTA),
        cleanup_sandbox=checked_choice(cleanup, "sandbox", CLEANUP_SANDBOX, "spec.cleanup.sandbox"),
        cleanup_results=checked_choice(cleanup, "results", CLEANUP_RESULTS, "spec.cleanup.results"),
        stop=checked_bool(raw, STOP_FIELD, f"spec.{STOP_FIELD}"),
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
