"""The RolloutPool CustomResourceDefinition: a pool of warm sandbox pods that RolloutBatches claim.

A RolloutBatch starts cold: its Job creates the episode pods, each pulls its image, mounts its task
and prepares its workspace before the agent runs. A RolloutPool keeps ``spec.size`` such pods
ready ahead of time in a namespace of its own (``rp-<digest>``); a batch naming it
(``spec.poolRef``) takes warm pods instead of starting cold ones (docs/design.md §5.17).

``build_pool_crd()`` returns the whole CRD as a plain dict, as ``core.crd.build_crd()`` does for
the batch, and ``python -m rolloutbatch.crdgen`` writes it to
crds/rl.agentruntime.io_rolloutpools.yaml (and the chart's copy); a unit test fails when the
committed file differs from what this module builds.

The pool's pods are the batch's episode pods made early, so what they are made of is stated by
the batch's own schema builders (``core.crd_spec``, ``core.crd_sandbox``, ``core.crd_status``) and
bounds (``core.defaults``): a pool accepts an image, resources, task or pod template exactly when a
batch would. Only the descriptions are the pool's own, since they say what a field does here.
Two deliberate differences from the batch:

- env is plain name/value pairs only. A batch's Secret keys (``valueFrom.secretKeyRef``) are
  copied into its sandbox for that batch alone; a pool's pods wait before any batch exists and
  serve batches of whoever may name the pool, so no Secret of anyone is baked into them.
- every field may change after creation (the batch's spec is immutable): a changed template
  applies to the pods made after it, and ``status.observedGeneration`` says which generation the
  counts describe. ``kubectl scale rp/NAME --replicas=N`` sets ``spec.size`` (the scale
  subresource).

Pure, like all of core: no YAML, no I/O.
"""

from __future__ import annotations

import copy

from rolloutbatch import GROUP, POOL_KIND, POOL_PLURAL, VERSION
from rolloutbatch.core import crd_sandbox
from rolloutbatch.core import defaults as d
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.crd import _column, crd_object
from rolloutbatch.core.crd_sandbox import listing
from rolloutbatch.core.crd_spec import _env, _image, _mount_path, _properties, _resources, _strings
from rolloutbatch.core.spec_env import SHELL_NAME_PATTERN
from rolloutbatch.core.crd_status import _condition, _count
from rolloutbatch.core.openapi import Schema, array, integer, obj, rule, string

POOL_SHORT_NAMES = ["rp"]
# `kubectl scale rp/NAME --replicas=N` writes spec.size; its READY is the warm pods.
SCALE = {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.readyPods"}

# The RolloutBatch spec fields that say what a sandbox pod is made of: a batch with spec.poolRef
# runs in its pool's pods, so the pool's spec decides these and the batch leaves them out.
POOL_OWNED_BATCH_FIELDS = ("image", "runtimeClassName", "resources", "task", "workspace", "isolation",
                           "podTemplate")

_RESERVED = d.RESERVED_ENV
_CONFIG_KIB = d.MAX_CONFIG_BYTES // 1024

# What `kubectl get rp` prints; priority 1 only with `-o wide`.
POOL_PRINTER_COLUMNS = [
    _column("Size", "integer", ".spec.size"),
    _column("Ready", "integer", ".status.readyPods"),
    _column("Starting", "integer", ".status.startingPods"),
    _column("Claimed", "integer", ".status.claimedPods"),
    # Ready's reason: PoolWarm, PoolFilling, or why the pool is stalled (a stalled pool's counts
    # alone look like a quiet one: its broken pods are deleted)
    _column("Status", "string", '.status.conditions[?(@.type=="Ready")].reason',
            description="PoolWarm, PoolFilling, or the reason the pool is stalled."),
    _column("Age", "date", ".metadata.creationTimestamp"),
    # Not "Namespace": `kubectl get -A` adds its own NAMESPACE column (the pool's).
    _column("Sandbox", "string", ".status.sandboxNamespace", priority=1,
            description="Namespace of the pool's pods: rp-<digest of its namespace and name>."),
    _column("Message", "string", ".status.message", priority=1),
]


def _reworded(node: Schema, description: str) -> Schema:
    """A batch field's schema (type, bounds, default, rules) with the pool's description."""
    return {**copy.deepcopy(node), "description": description}


def _pool_pod_template() -> Schema:
    """A batch's spec.podTemplate schema, said of the pool: its PriorityClass stalls the pool, not a batch."""
    node = _reworded(crd_sandbox.pod_template(), "Scheduling fields copied to every warm pod (only these four), "
                                                 "as a RolloutBatch's spec.podTemplate.")
    node["properties"]["priorityClassName"] = _reworded(
        node["properties"]["priorityClassName"],
        (f"PriorityClass of the pool's pods (so of the episodes that claim them). Default none. It must exist (else "
         f"the pool stalls with {v.PoolReason.PRIORITY_CLASS}) and be of the user range: "
         f"{d.SYSTEM_PRIORITY_PREFIX}* names are refused, and a class whose value is above {d.MAX_USER_PRIORITY} "
         f"stalls the pool with {v.PoolReason.PRIORITY_CLASS_DENIED}; either way no pod is made."))
    return node


def _plain_env(batch_env: Schema) -> Schema:
    """The batch's env schema (its name and value fields, bound and reserved-name rule) without
    valueFrom, and so without the rule that value and valueFrom exclude each other: nothing is
    left for it to say."""
    env = _env(
        (f"Environment of the warm pods' container: at most {d.MAX_ENV_ITEMS} plain name/value pairs (no "
         "valueFrom: a pool's pods are made before any batch claims them, so no batch's Secret is copied into "
         f"them). {listing(_RESERVED, 'and')} are reserved: the operator sets them."),
        ("Variable name: letters, digits and '_', not starting with a digit (the pods' containers start under "
         "/bin/sh, and a shell such as dash drops any other name)."),
        rules=batch_env["x-kubernetes-validations"])
    env["items"]["properties"]["name"]["pattern"] = SHELL_NAME_PATTERN
    del env["items"]["properties"]["valueFrom"]
    del env["items"]["x-kubernetes-validations"]
    return env


def _prepare() -> Schema:
    max_timeout = d.MAX_PREPARE_TIMEOUT_SECONDS
    return obj(
        ("Optional: a command run once in each new pod, in its workspace and with its task files, before the "
         "pod counts as warm (install dependencies, clone a repository, warm a cache). One that exits non-zero "
         f"or outlives timeoutSeconds is reported as {v.PoolReason.PREPARE_FAILED} (the Stalled condition, "
         "quoting how it ended and the end of its output). "
         "Default: none (a pod is warm once it runs)."), {
            "command": {**_strings(
                f"The command and its arguments, 1..{d.MAX_COMMAND_ITEMS} strings (required), run without a "
                "shell (give [sh, -c, ...] for one).", d.MAX_COMMAND_ITEMS), "minItems": 1},
            "timeoutSeconds": integer(
                (f"Seconds the command may run, 1..{max_timeout}. Default {d.PREPARE_TIMEOUT_SECONDS}."),
                minimum=1, maximum=max_timeout, default=d.PREPARE_TIMEOUT_SECONDS),
        }, required=["command"])


def _properties_of_pool() -> dict[str, Schema]:
    """The pool's spec fields, in the YAML's order."""
    batch = _properties()
    max_pool, requests, limits = d.MAX_POOL_SIZE, d.RESOURCES["requests"], d.RESOURCES["limits"]
    deny_all, allow_egress = v.NETWORK_MODES
    return {
        "size": integer(
            ("Warm pods to keep ready, 0..maxSize (required); the operator makes new ones as batches claim "
             "them. 0 keeps the pool with no pod. `kubectl scale rp/NAME --replicas=N` sets it."),
            minimum=0, maximum=max_pool),
        "maxSize": integer(
            (f"The most spec.size may be, 1..{max_pool}: a bound a scaling script cannot exceed by mistake. "
             f"Default {d.POOL_MAX_SIZE}."),
            minimum=1, maximum=max_pool, default=d.POOL_MAX_SIZE),
        "image": _image(
            (f"Container image of the warm pods (at most {d.MAX_IMAGE_LENGTH} characters), and so of the "
             f"episodes that claim them. Default {d.IMAGE}."),
            default=d.IMAGE),
        "runtimeClassName": _reworded(
            batch["runtimeClassName"],
            ("RuntimeClass of the warm pods (e.g. cube). Default: none (the cluster's default runtime). One that "
             f"does not exist stalls the pool ({v.PoolReason.RUNTIME_CLASS}).")),
        "resources": _resources(
            ("Compute resources of each warm pod's container (requests and limits only), held while it waits. "
             f"Default requests cpu {requests['cpu']}, memory {requests['memory']}; limits cpu {limits['cpu']}, "
             f"memory {limits['memory']}; {{}} is none (no requests, no limits)."),
            "Resource name -> quantity the scheduler reserves per pod.",
            "Resource name -> quantity a pod may use at most.", default=d.RESOURCES),
        "env": _plain_env(batch["env"]),
        "task": obj(
            ("The static files every warm pod gets, in a ConfigMap mounted read-only (required): what prepare "
             "reads to set up the workspace, and what the episodes that claim the pods find there."), {
                "mountPath": _mount_path(
                    ("Where the task files appear: an absolute path without ':', not overlapping "
                     f"workspace.mountPath. Default {d.TASK_MOUNT_PATH}."),
                    default=d.TASK_MOUNT_PATH),
                # As the batch's: key syntax is left to the operator (a CEL rule over map keys has
                # no length bound, so its estimated cost exceeds the budget).
                "files": obj(
                    (f"File name -> content (text), 1..{d.MAX_FILES} files, at most {_CONFIG_KIB} KiB in all. "
                     "Names are ConfigMap keys: letters, digits, '-', '_', '.', not '.' or '..'."),
                    values=string(), min_properties=1, max_properties=d.MAX_FILES),
            }, required=["files"]),
        "workspace": _reworded(
            batch["workspace"],
            ("Each warm pod's writable scratch directory (an emptyDir): prepare fills it, and the episode that "
             "claims the pod finds it as prepare left it.")),
        "prepare": _prepare(),
        "network": string(
            (f"The NetworkPolicy of every pod in the pool's namespace (warm, and the episodes that run there). "
             f"{deny_all} (default): all traffic denied, cluster DNS too. {allow_egress}: outgoing connections "
             "allowed (e.g. prepare downloads, a model), incoming denied. A change applies to the pods made after it: "
             "a pod keeps the network it was made and claimed under until it ends (warm pods are replaced)."),
            enum=v.NETWORK_MODES, default=v.NETWORK_MODES[0]),
        "podTemplate": _pool_pod_template(),
        "verifier": _pool_verifier(batch["verifier"]),
    }


def _pool_verifier(batch_verifier: Schema) -> Schema:
    fields = batch_verifier["properties"]
    return obj(
        ("Optional: a verifier container in every warm pod, for batches with spec.verifier (only those can claim "
         "the pool's pods, and a batch with spec.verifier only such a pool's). It waits beside the episode's "
         "container, which then runs the agent phase; once that container has ended, the operator hands the "
         "verifier its phase (the batch's verifier command, env, files and timeout). The verifier's files and "
         "input are written by a third small container (verifier-files: requests 10m CPU and 16Mi, limits "
         "100m and 64Mi, both at the limits when the other two containers are Guaranteed), the "
         "verifier's mount of them read-only; every container holds its resources for the pod's life. "
         "Default: none."), {
            "image": _image(f"Image of the verifier container. Default spec.image (at most {d.MAX_IMAGE_LENGTH} "
                            "characters)."),
            "resources": _reworded(fields["resources"], "Compute resources of the verifier container. Default "
                                                        "spec.resources; {} is none."),
            "mountPath": _reworded(fields["mountPath"], (
                "Where the batch's verifier files appear in the verifier container, not overlapping the task or "
                f"workspace; a batch's spec.verifier.mountPath must be the same. Default {d.VERIFIER_MOUNT_PATH}.")),
        })


def _overlap(a: str, b: str) -> str:
    """CEL: one mount path is the other or lies under it ('/task' and '/task/x', '/' and anything;
    not '/task' and '/tasks'), as core.spec reads a batch's mounts."""
    def under(path: str) -> str:
        return f"({path}.endsWith('/') ? {path} : {path} + '/')"
    return f"({a} == {b} || {a}.startsWith({under(b)}) || {b}.startsWith({under(a)}))"


def _pool_rules() -> list[dict]:
    task, workspace, verifier = "self.task.mountPath", "self.workspace.mountPath", "self.verifier.mountPath"
    return [
        # maxSize has a default, so the API server always has one here; the fallback reads an object
        # stored without it the same way.
        rule(f"self.size <= (has(self.maxSize) ? self.maxSize : {d.POOL_MAX_SIZE})",
             "spec.size must be less than or equal to spec.maxSize"),
        rule(f"!has(self.task.mountPath) || !has(self.workspace) || !has(self.workspace.mountPath) || "
             f"!{_overlap(task, workspace)}",
             "spec.task.mountPath and spec.workspace.mountPath must not overlap"),
        rule(f"!has(self.verifier) || !has(self.verifier.mountPath) || ((!has(self.task.mountPath) || "
             f"!{_overlap(task, verifier)}) && (!has(self.workspace) || !has(self.workspace.mountPath) || "
             f"!{_overlap(workspace, verifier)}))",
             "spec.verifier.mountPath must not overlap spec.task.mountPath or spec.workspace.mountPath"),
    ]


def pool_spec_schema() -> Schema:
    """The openAPIV3Schema node of RolloutPool.spec."""
    return obj(
        ("Warm sandbox pods for RolloutBatches: the pods a batch would start, made ahead of time and kept "
         "ready. A batch in the same namespace names the pool in spec.poolRef and claims warm pods instead of "
         "starting cold ones. Every field may change; a changed template applies to the pods made after it. "
         "Unknown fields are refused by clients that ask for strict field validation (kubectl, the rolloutbatch "
         "CLI and SDK)."),
        _properties_of_pool(), required=["size", "task"], rules=_pool_rules())


def _pool_condition() -> Schema:
    node = _condition()
    node["properties"]["type"] = _reworded(
        node["properties"]["type"],
        (f"{v.CONDITION_READY} (readyPods >= spec.size), {v.CONDITION_RECONCILING} (filling: pods are starting "
         f"or preparing) or {v.CONDITION_STALLED} (the template cannot run: no pod will become warm until the "
         "spec or the cluster changes)."))
    node["properties"]["reason"] = _reworded(
        node["properties"]["reason"], f"CamelCase reason: {listing(v.POOL_REASONS, 'or')}.")
    return node


def pool_status_schema() -> Schema:
    """The openAPIV3Schema node of RolloutPool.status."""
    return obj("Written by the operator.", {
        "observedGeneration": integer("The metadata.generation the counts and conditions describe.",
                                      format="int64"),
        "sandboxNamespace": string(
            "Namespace of the pool's pods: rp-<digest of the pool's namespace and name>, deleted with the pool."),
        "readyPods": _count("Warm pods: running, prepared and not claimed by any batch."),
        "startingPods": _count("Pods created and not yet warm (scheduling, pulling, preparing)."),
        "claimedPods": _count("Pods of the pool's namespace that batches hold now: claimed warm pods and the "
                              "cold ones of their Jobs, until they end."),
        "message": string("Human summary of the pool's state, or what to fix when it is stalled."),
        "conditions": array(
            ("kstatus-style conditions: Ready=True once readyPods >= spec.size; Reconciling=True while it fills; "
             "Stalled=True when the template cannot run (its reason says why)."),
            _pool_condition(), list_type="map", map_keys=["type"]),
    })


def pool_openapi_schema() -> Schema:
    """The version's openAPIV3Schema: the object, its spec and its status."""
    return obj(
        "RolloutPool keeps warm sandbox pods ready for the RolloutBatches of its namespace that name it.", {
            "apiVersion": string(f"{GROUP}/{VERSION}."),
            "kind": string(f"{POOL_KIND}."),
            "metadata": obj(),
            "spec": pool_spec_schema(),
            "status": pool_status_schema(),
        }, required=["spec"])


def build_pool_crd() -> dict:
    """The whole RolloutPool CustomResourceDefinition object."""
    return crd_object(POOL_KIND, POOL_PLURAL, POOL_SHORT_NAMES, POOL_PRINTER_COLUMNS, pool_openapi_schema(),
                      {"status": {}, "scale": dict(SCALE)})
