"""Pure builders of every object a batch creates. Plain dicts, checked by golden files.

Security defaults (docs/design.md §8): episode pods mount no service-account token, run as
UID/GID 1000 with RuntimeDefault seccomp, drop all capabilities, cannot escalate, see the task
read-only and write only their size-limited workspace. Dedicated sandboxes enforce PSA
``restricted`` and deny all network traffic by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rolloutbatch.core import launchers, naming, queueing
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.egress import dns_rule
from rolloutbatch.core.model import BatchRef, BatchSpec
from rolloutbatch.core.result_shards import shard_configmap_name
from rolloutbatch.core.results import encode_results
from rolloutbatch.core.k8s_rules import QUOTA_REQUIRED, admitted, format_quantity, quota_usage, unset_by_containers
from rolloutbatch.core.secret_env import key_names
from rolloutbatch.core.spec import INPUT_KEY, input_text
from rolloutbatch.core.defaults import INPUT_COPY_SIZE_LIMIT
from rolloutbatch.core.vocabulary import COMPLETION_INDEX_KEY

NODE_LOSS_TOLERATION_SECONDS = 30


def owner_reference(api_version: str, kind: str, name: str, uid: str, controller: bool = True) -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": controller, "blockOwnerDeletion": True}


def _meta(ref: BatchRef, name: str, namespace: str | None, owner: Mapping | None = None, **labels: str) -> dict:
    meta: dict = {"name": name, "labels": {**naming.owner_labels(ref), **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def namespace(ref: BatchRef, spec: BatchSpec) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": _meta(ref, naming.sandbox_namespace(ref), None, **naming.POD_SECURITY_LABELS)}


def local_queue(ref: BatchRef, spec: BatchSpec, cluster_queue: str) -> dict:
    """The LocalQueue of a Dedicated sandbox (core.queueing): Kueue files a Job under a queue of
    the Job's own namespace, so the sandbox gets one of the batch's queue name, pointing at the
    ClusterQueue the batch's own LocalQueue points at."""
    return {"apiVersion": queueing.API_VERSION, "kind": "LocalQueue",
            "metadata": _meta(ref, spec.queue_name, naming.sandbox_namespace(ref)),
            "spec": {"clusterQueue": cluster_queue}}


def service_account(ref: BatchRef, spec: BatchSpec) -> dict:
    """The sandbox's ``default`` ServiceAccount, created with the namespace: pods cannot be
    admitted before it exists, and waiting for the controller that would create it delays the
    first episodes. Its token is never mounted (the pods also say so)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
            "metadata": _meta(ref, "default", naming.sandbox_namespace(ref))}


def network_policy(ref: BatchRef, spec: BatchSpec, owner: Mapping | None = None,
                   dns_cidrs: Sequence[str] = ()) -> dict:
    """Default deny: no ingress and (DenyAll) no egress, for the episode pods.

    A policy type listed without rules denies that direction; AllowEgress simply leaves Egress out;
    declared egress (spec.isolation.egress) allows exactly its rules plus cluster DNS (core.egress).
    In a Dedicated sandbox the policy selects every pod of the namespace; in a Shared namespace
    it selects only this batch's pods, never the user's other workloads, and carries the batch's
    own name (so batches sharing a namespace do not collide) and its ownerReference.
    """
    types = ["Ingress"] if spec.isolation_network == v.NETWORK_ALLOW_EGRESS else ["Ingress", "Egress"]
    dedicated = spec.isolation_namespace == v.ISOLATION_DEDICATED
    selector: dict = {}
    if not dedicated:
        selector = {"matchLabels": {naming.LABEL_BATCH_UID: ref.uid}}
    body: dict = {"podSelector": selector, "policyTypes": types}
    if spec.egress:
        body["egress"] = [*(dict(r) for r in spec.egress), dns_rule(dns_cidrs)]
    name = naming.DEDICATED_POLICY if dedicated else naming.shared_network_policy_name(ref)
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(ref, name, naming.child_namespace(ref, spec), owner), "spec": body}


# Pods a batch may hold at once against a quota: its parallelism and as many terminating ones,
# whose usage the quota controller releases asynchronously while their replacements start.
TERMINATING_SLACK = 2


def batch_pods(spec: BatchSpec) -> int:
    """The pods a batch may charge at once: what a Dedicated sandbox's ResourceQuota holds, and
    what must fit the submitter namespace's quotas when the pods run outside it (core.admission)."""
    return spec.parallelism + TERMINATING_SLACK


def resource_quota(ref: BatchRef, spec: BatchSpec, overhead: Mapping[str, str] | None) -> dict:
    """Room for ``parallelism`` episode pods (resources plus RuntimeClass overhead), no more.

    Meant for the Dedicated sandbox only (in a Shared namespace it would cap the user's other
    pods). Every request and limit the Job's pod is charged (k8s_rules.quota_usage: a limit
    standing in for a missing request, the verifier's phase, the overhead) is multiplied by
    :func:`batch_pods`, parallelism + 2:
    the quota controller releases a finished pod's usage asynchronously, so a replacement (an
    infrastructure retry, or the next index) created in that window would otherwise be refused
    and the Job would back off, slowing the batch. The slack is two pods, not a fraction, so a
    huge batch does not get a huge loophole.
    """
    pods = batch_pods(spec)
    pod = admitted(job(ref, spec, None)["spec"]["template"]["spec"], overhead)
    # Not cpu or memory that a container leaves unset (only the overhead, or one phase, sets it):
    # the quota admission would refuse every pod here ("must specify requests.cpu").
    unset = unset_by_containers(pod, set(QUOTA_REQUIRED))
    hard = {"pods": str(pods)}
    for resource, per_pod in sorted(quota_usage(pod).items()):
        if resource.startswith(("requests.", "limits.")) and resource not in unset:
            hard[resource] = format_quantity(per_pod * pods)
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": _meta(ref, "episodes", naming.child_namespace(ref, spec)), "spec": {"hard": hard}}


def task_configmap(ref: BatchRef, spec: BatchSpec, owner: Mapping | None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": _meta(ref, naming.task_configmap_name(ref), naming.child_namespace(ref, spec), owner),
            "data": dict(spec.task_files)}


def verifier_configmap(ref: BatchRef, spec: BatchSpec, owner: Mapping | None) -> dict | None:
    """spec.verifier.files, mounted only into the verifier container: the agent never sees them."""
    if spec.verifier is None or not spec.verifier.files:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": _meta(ref, naming.verifier_configmap_name(ref), naming.child_namespace(ref, spec), owner),
            "data": dict(spec.verifier.files)}


def inputs_configmap(ref: BatchRef, spec: BatchSpec, owner: Mapping | None) -> dict | None:
    if not spec.inputs:
        return None
    # the text parse_spec measured (core.spec.input_text): what fits there fits here
    data = {INPUT_KEY.format(i): input_text(value, i) for i, value in enumerate(spec.inputs)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": _meta(ref, naming.inputs_configmap_name(ref), naming.child_namespace(ref, spec), owner),
            "data": data}


def inputs_shard_configmap(ref: BatchRef, spec: BatchSpec, shard: int, data: Mapping[str, str],
                           owner: Mapping | None) -> dict:
    """The sandbox's immutable copy of one spec.inputsFrom ConfigMap: the user may change or
    delete the original mid-batch without changing what the episodes read."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": _meta(ref, naming.inputs_shard_name(ref, shard), naming.child_namespace(ref, spec), owner),
            "data": dict(data)}


def env_secret(ref: BatchRef, spec: BatchSpec, data: Mapping[str, str] | None, owner: Mapping | None) -> dict | None:
    """The operator's immutable copy of the Secret keys the env references (core.secret_env):
    only those keys, under the names the pods' secretKeyRefs use; never mounted as a volume."""
    if not data:
        return None
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
            "metadata": _meta(ref, naming.env_secret_name(ref), naming.child_namespace(ref, spec), owner),
            "data": dict(data)}


def _inputs_volume(ref: BatchRef, spec: BatchSpec) -> dict | None:
    """The inputs ConfigMap(s), mounted only into the inputs init container (_inputs_container)."""
    if spec.inputs:
        return {"name": "inputs-source", "configMap": {"name": naming.inputs_configmap_name(ref)}}
    if spec.inputs_from:
        # One directory for every shard's keys (input-<g>.json are unique across shards).
        return {"name": "inputs-source", "projected": {"sources": [
            {"configMap": {"name": naming.inputs_shard_name(ref, j)}} for j in range(len(spec.inputs_from))]}}
    return None


# The inputs init container's script: it copies only the episode's own input (group = index // k)
# into the emptyDir the episode's containers mount read-only, so no episode sees another's input.
# A missing input fails the pod loudly (stderr and the termination message), never silently.
_INPUTS_COPY = ('case "$${{EPISODE_INDEX}}" in ""|*[!0-9]*) '
                'm="rolloutbatch: no completion index (EPISODE_INDEX=$${{EPISODE_INDEX}})";; *) '
                'f="{key_prefix}$$((EPISODE_INDEX / {k})){key_suffix}"; '
                'cp "{src}/$$f" "{dst}/$$f" && exit 0; '
                'm="rolloutbatch: episode $$EPISODE_INDEX: its input $$f could not be copied from the inputs '
                'ConfigMaps";; esac; '
                "printf '%s\\n' \"$$m\" >&2; printf '%s' \"$$m\" > {log} 2>/dev/null; exit 1")


def _inputs_container(spec: BatchSpec, container: Mapping) -> dict:
    """The first init container of a batch with inputs: the agent's image (no extra pull), its
    resources (an init container is charged max(init, containers): the pod's totals, quotas and
    scheduling stay as they were) and security context."""
    prefix, suffix = INPUT_KEY.split("{}")
    script = _INPUTS_COPY.format(k=spec.samples_per_input, key_prefix=prefix, key_suffix=suffix,
                                 src=naming.INPUTS_SOURCE_MOUNT_PATH, dst=naming.INPUTS_MOUNT_PATH,
                                 log=naming.TERMINATION_MESSAGE_PATH)
    return {
        "name": naming.INPUTS_CONTAINER, "image": container["image"], "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script, "rolloutbatch-inputs"],
        "env": [_index_env()],   # no user env (nor Secret) here: it needs none
        "resources": {k: dict(v) for k, v in container["resources"].items()},
        "volumeMounts": [{"name": "inputs-source", "mountPath": naming.INPUTS_SOURCE_MOUNT_PATH, "readOnly": True},
                         {"name": "inputs", "mountPath": naming.INPUTS_MOUNT_PATH}],
        "securityContext": container_security_context(),
        "terminationMessagePath": naming.TERMINATION_MESSAGE_PATH, "terminationMessagePolicy": "File",
    }


# With k > 1 samples per input, the group and sample of an episode are its index divided by k
# (core.groups.group_and_sample), which no Kubernetes field can compute: a POSIX shell does, then
# execs the episode's command.
# `$$` is Kubernetes' escape for `$` (otherwise `$(...)` would be read as a variable reference).
_GROUP_LAUNCHER = ('EPISODE_GROUP=$$((EPISODE_INDEX / {k})) EPISODE_SAMPLE=$$((EPISODE_INDEX % {k})); '
                   'export EPISODE_GROUP EPISODE_SAMPLE; {input}exec "$$@"')


def _group_setup(spec: BatchSpec) -> str:
    """Shell that sets EPISODE_GROUP/EPISODE_SAMPLE (and EPISODE_INPUT) for k > 1; '' for k = 1."""
    if spec.samples_per_input == 1:
        return ""
    set_input = (f'EPISODE_INPUT="{naming.INPUTS_MOUNT_PATH}/input-$${{EPISODE_GROUP}}.json"; export EPISODE_INPUT; '
                 if spec.inputs_count else "")
    return _GROUP_LAUNCHER.format(k=spec.samples_per_input, input=set_input).removesuffix('exec "$$@"')


def _command(spec: BatchSpec) -> tuple[list[str], list[str]]:
    """(command, args) of the episode container (the agent's, with spec.verifier)."""
    if spec.verifier is not None:
        script = launchers.agent_launcher(_group_setup(spec), spec.episode_timeout_seconds,
                                          oom_exit=v.AGENT_OOM_KILLED_EXIT)
        return ["/bin/sh", "-c", script, "rolloutbatch-agent"], [*spec.command, *spec.args]
    if spec.samples_per_input == 1:
        return list(spec.command), list(spec.args)
    return ["/bin/sh", "-c", _group_setup(spec) + 'exec "$$@"', "rolloutbatch-episode"], [*spec.command, *spec.args]


def _verifier_command(spec: BatchSpec) -> tuple[list[str], list[str]]:
    ver = spec.verifier
    assert ver is not None
    script = launchers.verifier_launcher(_group_setup(spec), ver.timeout_seconds)
    return ["/bin/sh", "-c", script, "rolloutbatch-verifier"], [*ver.command, *ver.args]


def _index_env() -> dict:
    """A new object each call, as every piece of a manifest is: a caller may edit what it gets."""
    return {"name": "EPISODE_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_KEY}']"}}}


def _env(ref: BatchRef, spec: BatchSpec, extra: tuple[dict, ...] | None = None) -> list[dict]:
    """The operator's variables, then the container's own (``extra``: the verifier's; else
    spec.env); a Secret key is read from the operator's copy (core.secret_env)."""
    env = [
        {"name": "EPISODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        _index_env(),
        {"name": "BATCH_NAME", "value": ref.name},
    ]
    if spec.samples_per_input == 1:
        # $(EPISODE_INDEX) expands because EPISODE_INDEX is defined earlier in the list.
        env.append({"name": "EPISODE_GROUP", "value": "$(EPISODE_INDEX)"})
        env.append({"name": "EPISODE_SAMPLE", "value": "0"})
        if spec.inputs_count:
            env.append({"name": "EPISODE_INPUT",
                        "value": f"{naming.INPUTS_MOUNT_PATH}/{INPUT_KEY.format('$(EPISODE_INDEX)')}"})
    keys = key_names(spec)
    for e in spec.env if extra is None else extra:
        if "valueFrom" in e:
            source = e["valueFrom"]["secretKeyRef"]
            env.append({"name": e["name"], "valueFrom": {"secretKeyRef": {
                "name": naming.env_secret_name(ref), "key": keys[(source["name"], source["key"])]}}})
        else:
            env.append({"name": e["name"], "value": str(e.get("value", ""))})
    return env


def container_security_context() -> dict:
    """Every episode container's (a batch's and a pool's): Pod Security's restricted profile."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": False, "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"}}


def job(ref: BatchRef, spec: BatchSpec, owner: Mapping | None) -> dict:
    """The Indexed Job: one completion index per episode.

    ``podFailurePolicy`` tells infrastructure failures from task failures: a pod with the
    DisruptionTarget condition (evicted, preempted, its node lost) counts against
    ``backoffLimitPerIndex`` = retries.infrastructure and is retried; any non-zero exit of the
    episode (with a verifier, of its agent's phase or of the verifier) fails its index at once. The Job then runs every other index to the end, so one bad
    episode fails only itself. With inputs, so does a non-zero exit of the inputs init container
    (core.verdict judges that episode lost: nothing of the agent ran).
    """
    ns = naming.child_namespace(ref, spec)
    volumes = [
        {"name": "task", "configMap": {"name": naming.task_configmap_name(ref)}},
        {"name": "workspace", "emptyDir": {"sizeLimit": spec.workspace_size_limit}},
    ]
    mounts = [
        {"name": "task", "mountPath": spec.task_mount_path, "readOnly": True},
        {"name": "workspace", "mountPath": spec.workspace_mount_path},
    ]
    inputs = _inputs_volume(ref, spec)
    if inputs is not None:
        # The episode's containers see only the init container's copy of their own input, read-only
        # (the agent cannot change what the verifier later reads).
        volumes += [inputs, {"name": "inputs", "emptyDir": {"sizeLimit": INPUT_COPY_SIZE_LIMIT}}]
        mounts.append({"name": "inputs", "mountPath": naming.INPUTS_MOUNT_PATH, "readOnly": True})
    command, args = _command(spec)
    container = {
        "name": naming.CONTAINER_NAME if spec.verifier is None else naming.AGENT_CONTAINER,
        "image": spec.image, "imagePullPolicy": "IfNotPresent",
        "command": command, "env": _env(ref, spec), "workingDir": spec.workspace_mount_path,
        "resources": {k: dict(v) for k, v in spec.resources.items()}, "volumeMounts": mounts,
        # readOnlyRootFilesystem stays false on purpose: episode programs are model-written code
        # and their test runners write to /tmp, ~/.cache and the like; a read-only root would
        # fail them for reasons unrelated to the task. The root filesystem is per container and
        # discarded with it; its size can be capped with resources.limits.ephemeral-storage.
        "securityContext": container_security_context(),
        # File, not FallbackToLogsOnError: the message is then only ever what the program wrote,
        # so events found there are the program's own (a log tail in it would look the same).
        "terminationMessagePath": naming.TERMINATION_MESSAGE_PATH, "terminationMessagePolicy": "File",
    }
    if args:
        container["args"] = args
    containers, init_containers = [container], []
    main = naming.CONTAINER_NAME
    if spec.verifier is not None:
        ver = spec.verifier
        vmounts = list(mounts)
        if ver.files:
            volumes.append({"name": "verifier", "configMap": {"name": naming.verifier_configmap_name(ref)}})
            vmounts.append({"name": "verifier", "mountPath": ver.mount_path, "readOnly": True})
        vcommand, vargs = _verifier_command(spec)
        verifier = {
            "name": naming.VERIFIER_CONTAINER, "image": ver.image, "imagePullPolicy": "IfNotPresent",
            "command": vcommand, "workingDir": spec.workspace_mount_path,
            "env": _env(ref, spec, ver.env),
            "resources": {k: dict(v) for k, v in ver.resources.items()}, "volumeMounts": vmounts,
            "securityContext": container_security_context(),
            "terminationMessagePath": naming.TERMINATION_MESSAGE_PATH, "terminationMessagePolicy": "File",
        }
        if vargs:
            verifier["args"] = vargs
        # The agent is an init container: it ends (and its launcher kills what it left) before
        # the verifier starts, as a kubelet runs init containers.
        containers, init_containers, main = [verifier], [container], naming.VERIFIER_CONTAINER
    if inputs is not None:
        init_containers.insert(0, _inputs_container(spec, container))
    tolerations = list(spec.pod_template.get("tolerations") or [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                            "tolerationSeconds": NODE_LOSS_TOLERATION_SECONDS})
    pod_spec: dict = {
        "restartPolicy": v.RestartPolicy.NEVER,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # With a verifier the pod holds both phases; the launchers enforce each phase's own limit
        # (this deadline is only the outer bound).
        "activeDeadlineSeconds": spec.episode_timeout_seconds + (
            spec.verifier.timeout_seconds + launchers.VERIFIER_SLACK_SECONDS if spec.verifier else 0),
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": containers,
        "volumes": volumes,
        "tolerations": tolerations,
    }
    if init_containers:
        pod_spec["initContainers"] = init_containers
    if spec.input_images:
        # Each pod waits, unscheduled, for the operator to give it its input's image (core.episode_images).
        pod_spec["schedulingGates"] = [{"name": naming.IMAGE_GATE}]
    if spec.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.runtime_class_name
    for key in ("nodeSelector", "affinity", "priorityClassName"):
        if spec.pod_template.get(key):
            pod_spec[key] = spec.pod_template[key]
    labels = {**naming.owner_labels(ref), naming.LABEL_EPISODE_ROLE: "episode"}
    # With a verifier the agent's init container is judged first (a rule may name an init
    # container): a failed one (its launcher's AGENT_OVERRAN_EXIT, AGENT_OOM_KILLED_EXIT or 120,
    # the deadline's kill)
    # leaves the verifier never run, which no rule on it matches, and the Job would count that
    # against backoffLimitPerIndex: a re-roll.
    judged = (naming.AGENT_CONTAINER, main) if spec.verifier is not None else (main,)
    # The inputs init container first: its failure (its input missing, no /bin/sh in the image)
    # would fail every retry alike, and no rule on a later container sees it (they never ran).
    if inputs is not None:
        judged = (naming.INPUTS_CONTAINER, *judged)
    # spec.queueName: created suspended, under Kueue's label; Kueue unsuspends it once admitted
    queue = {queueing.QUEUE_LABEL: spec.queue_name} if spec.queue_name else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _meta(ref, naming.job_name(ref), ns, owner, **queue),
        "spec": {
            **({"suspend": True} if spec.queue_name else {}),
            "completions": spec.episodes,
            "parallelism": spec.parallelism,
            "completionMode": "Indexed",
            "backoffLimitPerIndex": spec.infrastructure_retries,
            "activeDeadlineSeconds": spec.active_deadline_seconds,
            "podFailurePolicy": {"rules": [
                {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": v.CONDITION_TRUE}]},
                *({"action": "FailIndex", "onExitCodes": {"containerName": name, "operator": "NotIn", "values": [0]}}
                  for name in judged),
            ]},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def results_configmap(ref: BatchRef, document: Mapping, owner: Mapping | None, shard: int | None = None,
                      sanitized: bool = False, row_texts: Sequence[str] | None = None,
                      retained: bool = False) -> dict:
    """The head results ConfigMap, or (``shard``) one of its shards, found by the role label
    (``row_texts``: see ``core.results.encode_results``). ``retained`` (spec.cleanup.results
    Retain): no ownerReference, so deleting the batch leaves it, and the retained label."""
    data, binary = encode_results(document, sanitized=sanitized, row_texts=row_texts)
    name = naming.results_configmap_name(ref)
    labels = {naming.LABEL_RESULTS_RETAINED: naming.RESULTS_RETAINED} if retained else {}
    owner = None if retained else owner
    if shard is None:
        meta = _meta(ref, name, ref.namespace, owner, **{naming.LABEL_EPISODE_ROLE: naming.ROLE_RESULTS}, **labels)
    else:
        meta = _meta(ref, shard_configmap_name(name, shard), ref.namespace, owner,
                     **{naming.LABEL_EPISODE_ROLE: naming.ROLE_RESULTS_SHARD}, **labels)
    cm: dict = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data:
        cm["data"] = data
    if binary:
        cm["binaryData"] = binary
    return cm
