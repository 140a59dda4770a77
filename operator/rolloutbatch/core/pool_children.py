"""A warm pool's children and pods (``RolloutPool``; docs/design.md §5.17): its namespace, service
account and network policies, its task ConfigMap, the warm pod (containers, volumes, probe) and
the labels that say whose a pod is. core.pools claims these pods for a batch and makes its Job.

Pure: every builder returns a plain object, checked by golden files (tests/unit/core/golden).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from rolloutbatch.core import naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.k8s_rules import guaranteed
from rolloutbatch.core.manifests import container_security_context
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.pool_delivery import files_writer_launcher, launcher, verifier_launcher
from rolloutbatch.core.pool_spec import PoolRef, PoolSpec

CLAIM_DIR_LIMIT = "16Mi"          # the emptyDir the episode script (with its input) arrives in
VERIFIER_FILES_LIMIT = "4Mi"      # the verifier's files (a ConfigMap's worth in the Job form)
# The verifier's files writer's: it waits, then writes at most the verifier's files and input
# (their memory-backed volumes' pages are charged to it) and ends. Limits set, so that a quota
# bounding limits admits its pods; small, as a quota charges them for as long as the pod lives.
FILES_WRITER_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
# ... and its requests at its limits when the pod's other containers are all so: a pod is
# Guaranteed (its QoS class: evicted last under node pressure, exclusive CPUs under the static CPU
# manager) only when every container is (upstream: pkg/apis/core/v1/helper/qos, GetPodQOS).
FILES_WRITER_GUARANTEED = {"requests": dict(FILES_WRITER_RESOURCES["limits"]),
                           "limits": dict(FILES_WRITER_RESOURCES["limits"])}


def files_writer_resources(spec: PoolSpec) -> dict:
    """The verifier's files writer's resources in the pods of ``spec`` (a pool with a verifier)."""
    assert spec.verifier is not None
    chosen = FILES_WRITER_GUARANTEED if guaranteed({"resources": spec.resources}) \
        and guaranteed({"resources": spec.verifier.resources}) else FILES_WRITER_RESOURCES
    return {kind: dict(amounts) for kind, amounts in chosen.items()}
STARTUP_PERIOD_SECONDS = 1


# -- names and labels ---------------------------------------------------------------------------
def task_configmap_name(ref: PoolRef, spec: PoolSpec) -> str:
    """Named by its content: a pool whose task changes gets a new ConfigMap (and new pods), and a
    running episode's files never change under it (a kubelet syncs a ConfigMap's updates into the
    pods that mount it)."""
    digest = hashlib.sha256(json.dumps(spec.task_files, sort_keys=True).encode()).hexdigest()[:10]
    return f"rp-{naming.short_uid(ref.uid)}-task-{digest}"


def pool_labels(ref: PoolRef) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_POOL_UID: ref.uid,
            naming.LABEL_POOL_NAME: naming.label_value(ref.name)}


def owned_by_pool(obj: Mapping, pool_uid: str) -> bool:
    """Whether ``obj`` is the pool's (its uid label): checked before the pool changes or deletes
    an object found under one of its names, and before a batch uses the pool's namespace (two
    pools' names may map to one namespace: naming.pool_namespace)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(naming.LABEL_POOL_UID) == pool_uid


def _warm_labels(ref: PoolRef) -> dict[str, str]:
    return {naming.LABEL_POOL_UID: ref.uid, naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM}


def warm_selector(ref: PoolRef) -> str:
    """The pool's pods not enrolled in a batch: warm, starting, dead, and claimed but not yet
    relabelled (:func:`claimed_by`)."""
    return ",".join(f"{key}={value}" for key, value in _warm_labels(ref).items())


def not_enrolled(pod: Mapping, ref: PoolRef) -> bool:
    """The pod is one :func:`warm_selector` selects."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in _warm_labels(ref).items())


def claimed_by(pod: Mapping) -> str | None:
    """The uid of the batch that claimed the pod (:func:`claim_patch`), or None: the one mark of a
    claim until the batch's labels are written (:func:`enrol_patch`)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(naming.ANNOTATION_CLAIMED_BY)
    return value if isinstance(value, str) and value else None


def batch_pod_labels(ref: BatchRef) -> dict[str, str]:
    """What a pod of a pooled batch carries, warm-claimed or cold: the Job's selector matches it."""
    return {**naming.owner_labels(ref), naming.LABEL_EPISODE_ROLE: "episode"}


# -- the pool's children ---------------------------------------------------------------------------
def namespace(ref: PoolRef) -> dict:
    labels = {**pool_labels(ref), **naming.POD_SECURITY_LABELS}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": naming.pool_namespace(ref.namespace, ref.name),
                                                                 "labels": labels}}


def service_account(ref: PoolRef) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
            "metadata": {"name": "default", "namespace": naming.pool_namespace(ref.namespace, ref.name), "labels": pool_labels(ref)}}


def network_policies(ref: PoolRef) -> tuple[dict, dict]:
    """The pool's two policies, the same whatever its spec.network: every pod of its namespace
    (warm pods and the batches' episodes) gets no ingress and no egress; the pods made under
    AllowEgress (naming.LABEL_NETWORK, which a claim never changes) get all egress. So a pod keeps
    the network it was made and claimed under until it ends: a pool switched to AllowEgress
    opens nothing for the episodes of a batch that claimed under DenyAll, and switched back
    closes nothing under a running AllowEgress batch; its warm pods of the old network are stale
    (template_digest) and replaced. Pods of different batches share the namespace, never a path."""
    namespace, labels = naming.pool_namespace(ref.namespace, ref.name), pool_labels(ref)
    return ({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": naming.DEDICATED_POLICY, "namespace": namespace, "labels": labels},
             "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
            {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": naming.POOL_EGRESS_POLICY, "namespace": namespace, "labels": labels},
             "spec": {"podSelector": {"matchLabels": {naming.LABEL_NETWORK: str(v.NETWORK_ALLOW_EGRESS)}},
                      "policyTypes": ["Egress"], "egress": [{}]}})


def unlabelled_egress_policy(ref: PoolRef) -> dict:
    """All egress for the pool's pods without naming.LABEL_NETWORK: those an operator made before
    the label, whose one policy (``podSelector: {}``) opened egress to every pod of an AllowEgress
    pool. A running Job's template cannot be changed, so the cold pods such a Job still makes come
    without the label; this policy keeps them, from their first instant, under the network their
    batch ran under. Made only at the upgrade of a pool that was AllowEgress then
    (:func:`network_before_labels`), deleted once no Job of that time runs (:func:`unlabelled_jobs`)."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": naming.POOL_UNLABELLED_EGRESS_POLICY,
                         "namespace": naming.pool_namespace(ref.namespace, ref.name), "labels": pool_labels(ref)},
            "spec": {"podSelector": {"matchExpressions": [{"key": naming.LABEL_NETWORK, "operator": "DoesNotExist"}]},
                     "policyTypes": ["Egress"], "egress": [{}]}}


def network_before_labels(base: Mapping | None, unlabelled: Mapping | None, network: str) -> str:
    """The network the pool's pods without naming.LABEL_NETWORK run under, from the live policies:
    ``base`` (naming.DEDICATED_POLICY) and ``unlabelled`` (:func:`unlabelled_egress_policy`).
    Before the upgrade ``base`` is the earlier operator's one policy over every pod, whose
    policyTypes say the network it applied (no Egress: AllowEgress); after it, the unlabelled
    policy is there exactly when that was AllowEgress. So a restart at any point of the upgrade
    reads the same answer, and a spec.network changed meanwhile opens or closes nothing under a
    running episode. ``network`` (the pool's spec.network) only when neither policy is there."""
    if unlabelled is not None:
        return str(v.NETWORK_ALLOW_EGRESS)
    if base is not None:
        types = (base.get("spec") or {}).get("policyTypes") or []
        return str(v.NETWORK_DENY_ALL if "Egress" in types else v.NETWORK_ALLOW_EGRESS)
    return str(network)


def network_of(obj: Mapping) -> str | None:
    """A pool pod's naming.LABEL_NETWORK, or None (made by an operator before the label)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_NETWORK)


def task_configmap(ref: PoolRef, spec: PoolSpec) -> dict:
    """Immutable, named by its content (task_configmap_name)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": task_configmap_name(ref, spec),
                         "namespace": naming.pool_namespace(ref.namespace, ref.name), "labels": pool_labels(ref)},
            "data": dict(spec.task_files)}


def mounted_configmaps(obj: Mapping) -> set[str]:
    """The ConfigMaps a pod (or a Job's template) mounts."""
    spec = obj.get("spec") or {}
    spec = (spec.get("template") or {}).get("spec") or spec
    return {vol["configMap"]["name"] for vol in spec.get("volumes") or []
            if isinstance(vol, Mapping) and isinstance(vol.get("configMap"), Mapping) and vol["configMap"].get("name")}


def episode_container(spec: PoolSpec) -> str:
    """The container a pool's pod runs its episode in (the agent's, with a verifier)."""
    return naming.CONTAINER_NAME if spec.verifier is None else naming.AGENT_CONTAINER


# A container's phase comes on its stdin (core.pool_delivery), through an attach. No stdinOnce: an
# attach that ends without delivering (the pool's channel to a warm pod closed, service.warm_channels)
# must leave the stdin open for the next; the launcher stops reading it once it has its script, so
# nothing written after reaches anything.
_HANDED_OVER_ON_STDIN = {"stdin": True, "stdinOnce": False}


# The container is started (its pod warm, claimable) once its launcher waits: the file `warm`, and
# the launcher's (PID 1's) stdin turned to /dev/null, which it does only past the prepare and the
# kill of everything the prepare left (core.pool_delivery). The file alone was the prepare's to
# write: a prepare made it at once, its pod was claimed while it still ran, and it read the
# delivery from /proc/1/fd/0 and failed the draws it did not like (a hostile review's attack). No
# other process can change PID 1's files (what one wrote into its stdin before is dropped). Shell
# builtins only (`test -ef`: dash, bash, busybox): a tool found on the PATH could be one the
# prepare planted.
_WAITING = "test -e {claim}/warm && test /proc/1/fd/0 -ef /dev/null"


def waiting_check(claim_dir: str) -> list[str]:
    """The command that succeeds once the launcher waiting in ``claim_dir`` waits (_WAITING)."""
    return ["/bin/sh", "-c", _WAITING.format(claim=claim_dir)]


def _probe(claim_dir: str, spec: PoolSpec) -> dict:
    """Probed only until it first succeeds: a warm pod costs no probe while it waits or runs."""
    return {"exec": {"command": waiting_check(claim_dir)},
            "periodSeconds": STARTUP_PERIOD_SECONDS, "failureThreshold": spec.prepare_timeout_seconds + 60}


def pod_spec(ref: PoolRef, spec: PoolSpec, active_deadline_seconds: int | None = None) -> dict:
    """The pod of a pool: warm in the pool, or cold from a pooled batch's Job template. With a
    verifier, a second container waits beside the episode's for the verifier phase, and a third
    (naming.VERIFIER_FILES_CONTAINER) for the verifier's files and input; the agent's container
    mounts none of their volumes, and the verifier's mounts the writer's read-only. Once the
    agent's container has ended, the writer is handed the files, then the verifier its phase
    (service.episode_delivery)."""
    # as written: the runtime cleans them, and the pods' digest stays what it was
    mounts = [
        {"name": "task", "mountPath": spec.task_mount_written, "readOnly": True},
        {"name": "workspace", "mountPath": spec.workspace_mount_written},
    ]
    volumes = [
        {"name": "task", "configMap": {"name": task_configmap_name(ref, spec)}},
        {"name": "workspace", "emptyDir": {"sizeLimit": spec.workspace_size_limit}},
        {"name": "claim", "emptyDir": {"sizeLimit": CLAIM_DIR_LIMIT}},
    ]
    script = launcher(naming.CLAIM_MOUNT_PATH, spec.prepare_timeout_seconds, verified=spec.verifier is not None)
    env = [{"name": "EPISODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    env += [{"name": name, "value": value} for name, value in spec.env]
    container = {
        "name": episode_container(spec), "image": spec.image, "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script, "rolloutbatch-warm"], "env": env,
        "workingDir": spec.workspace_mount_written,
        "resources": {k: dict(val) for k, val in spec.resources.items()},
        "volumeMounts": [*mounts, {"name": "claim", "mountPath": naming.CLAIM_MOUNT_PATH}],
        "securityContext": container_security_context(),
        "terminationMessagePath": naming.TERMINATION_MESSAGE_PATH, "terminationMessagePolicy": "File",
        "startupProbe": _probe(naming.CLAIM_MOUNT_PATH, spec),
        **_HANDED_OVER_ON_STDIN,
    }
    if spec.prepare_command:
        container["args"] = list(spec.prepare_command)
    tolerations = list(spec.pod_template.get("tolerations") or [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30})
    body: dict = {
        "restartPolicy": v.RestartPolicy.NEVER, "automountServiceAccountToken": False, "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container], "volumes": volumes, "tolerations": tolerations,
    }
    if spec.verifier is not None:
        ver = spec.verifier
        # In memory: the agent's code can fill the node's disk through its workspace before its
        # phase ends, and the verifier's phase must still arrive whole (a write refused there
        # would read as a pod that never got its episode: a re-rolled attempt).
        volumes += [{"name": "verifier-claim", "emptyDir": {"medium": "Memory", "sizeLimit": CLAIM_DIR_LIMIT}},
                    {"name": "verifier", "emptyDir": {"medium": "Memory", "sizeLimit": VERIFIER_FILES_LIMIT}},
                    {"name": "verifier-files-claim", "emptyDir": {"medium": "Memory", "sizeLimit": CLAIM_DIR_LIMIT}}]
        written = [{"name": "verifier", "mountPath": ver.mount_path},
                   {"name": "verifier-files-claim", "mountPath": naming.VERIFIER_FILES_CLAIM_MOUNT_PATH}]
        body["containers"].append({
            "name": naming.VERIFIER_CONTAINER, "image": ver.image, "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", verifier_launcher(naming.VERIFIER_CLAIM_MOUNT_PATH), "rolloutbatch-verifier"],
            "env": env, "workingDir": spec.workspace_mount_written,
            "resources": {k: dict(val) for k, val in ver.resources.items()},
            "volumeMounts": [*mounts, {"name": "verifier-claim", "mountPath": naming.VERIFIER_CLAIM_MOUNT_PATH},
                             *({**mount, "readOnly": True} for mount in written)],
            "securityContext": container_security_context(),
            "terminationMessagePath": naming.TERMINATION_MESSAGE_PATH, "terminationMessagePolicy": "File",
            "startupProbe": _probe(naming.VERIFIER_CLAIM_MOUNT_PATH, spec),
            **_HANDED_OVER_ON_STDIN,
        })
        # The verifier's files and input are written by this container alone (naming.
        # VERIFIER_FILES_CONTAINER): read-only in the verifier's, as a Job pod's ConfigMap is.
        body["containers"].append({
            "name": naming.VERIFIER_FILES_CONTAINER, "image": ver.image, "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", files_writer_launcher(naming.VERIFIER_FILES_CLAIM_MOUNT_PATH),
                        "rolloutbatch-verifier-files"],
            "resources": files_writer_resources(spec),
            "volumeMounts": written, "securityContext": container_security_context(),
            **_HANDED_OVER_ON_STDIN,
        })
    if active_deadline_seconds is not None:
        body["activeDeadlineSeconds"] = active_deadline_seconds
    if spec.runtime_class_name:
        body["runtimeClassName"] = spec.runtime_class_name
    for key in ("nodeSelector", "affinity", "priorityClassName"):
        if spec.pod_template.get(key):
            body[key] = spec.pod_template[key]
    return body


def template_digest(ref: PoolRef, spec: PoolSpec) -> str:
    """What a warm pod is made of, as a short digest: a pod of another digest is stale (replaced).
    Not the pool's generation: ``kubectl scale`` changes that and must not recycle warm pods. The
    task files count through their ConfigMap's name: a pod prepared its workspace from them; the
    network too: a warm pod keeps the one it was made under (network_policies)."""
    text = json.dumps([pod_spec(ref, spec), spec.network], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def warm_pod(ref: PoolRef, spec: PoolSpec, template: str | None = None) -> dict:
    """One warm pod of the pool: no owner (ownerReferences cannot cross namespaces, and the Job
    that claims it must find it an orphan to adopt it); the pool's finalizer removes them.
    ``template``: the pool's :func:`template_digest`, when the caller has it (a refill makes many)."""
    labels = {**pool_labels(ref), naming.LABEL_EPISODE_ROLE: naming.ROLE_WARM, naming.LABEL_NETWORK: str(spec.network)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": warm_pod_prefix(ref.name),
                         "namespace": naming.pool_namespace(ref.namespace, ref.name), "labels": labels,
                         "annotations": {TEMPLATE_ANNOTATION: template or template_digest(ref, spec),
                                         naming.POOLED_ANNOTATION: "true"}},
            "spec": pod_spec(ref, spec)}


TEMPLATE_ANNOTATION = "rl.agentruntime.io/pool-template"
WARM_POD_PREFIX_CHARS = 40   # of the pool's name, in its pods' names (a label value too: at most 63)


def warm_pod_prefix(pool_name: str) -> str:
    """The pool's pods' generateName: its name cut short, never ending in '.' or '-' (a pod name
    is a DNS subdomain: `a.-x` is refused, and every pod with it, so the pool never filled)."""
    return f"{naming.label_value(pool_name)[:WARM_POD_PREFIX_CHARS].rstrip('.-_') or 'pool'}-"
