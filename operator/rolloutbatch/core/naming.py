"""Deterministic names and labels of everything a batch creates.

Names derive from the batch's UID, so an operator restarted at any point finds what it created
instead of creating it twice (docs/design.md §5), and two batches never collide.
"""

from __future__ import annotations

import hashlib
import re

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.k8s_rules import is_label_value
from rolloutbatch.core.model import BatchRef, BatchSpec

LABEL_BATCH_UID = "rl.agentruntime.io/batch-uid"
LABEL_BATCH_NAME = "rl.agentruntime.io/batch-name"
LABEL_EPISODE_ROLE = "rl.agentruntime.io/role"
ROLE_RESULTS, ROLE_RESULTS_SHARD = "results", "results-shard"
# spec.cleanup.results: Retain. Such results ConfigMaps have no ownerReference (they outlive the
# batch) and carry this label beside the batch's name and uid, so they can be found and removed.
LABEL_RESULTS_RETAINED, RESULTS_RETAINED = "rl.agentruntime.io/results-retained", "true"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "rolloutbatch"
FINALIZER = "rl.agentruntime.io/cleanup"
CONTAINER_NAME = "episode"
# With spec.verifier the pod runs two phases: the agent (an init container) then the verifier.
AGENT_CONTAINER, VERIFIER_CONTAINER = "agent", "verifier"
# Names of the containers whose logs are an episode's (one, or the two phases of spec.verifier).
EPISODE_CONTAINERS = (CONTAINER_NAME, AGENT_CONTAINER, VERIFIER_CONTAINER)
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# The scheduling gate of a batch with spec.inputImages: lifted by the operator once the pod has
# its input's image (core.episode_images).
IMAGE_GATE = "rl.agentruntime.io/input-image"
# The gate on the cold pods of a pooled Job with later waves (core.pools.pooled_job): each is
# answered by a claim for its index, or ungated to start cold (service.later_claims).
CLAIM_GATE = "rl.agentruntime.io/pool-claim"
INPUTS_MOUNT_PATH = "/rollout/inputs"
# A batch with inputs (Job mode): this first init container alone mounts the inputs ConfigMap(s),
# at INPUTS_SOURCE_MOUNT_PATH, and copies the episode's own input into the emptyDir the episode's
# containers mount read-only at INPUTS_MOUNT_PATH: no episode can read another's input.
INPUTS_CONTAINER = "inputs"
INPUTS_SOURCE_MOUNT_PATH = "/rollout/inputs-source"
# spec.inputsFrom reads only ConfigMaps carrying this label: set by whoever may write the
# ConfigMap, never by a submitter who holds rights on RolloutBatches alone (docs/design.md §8.1).
LABEL_INPUTS, INPUTS_OPT_IN = "rl.agentruntime.io/inputs", "true"
# A Secret of the batch's namespace is read for an env secretKeyRef only with this label, for the
# same reason (core.secret_env): its writer hands it to the batches of the namespace.
LABEL_EPISODE_ENV, EPISODE_ENV_OPT_IN = "rl.agentruntime.io/episode-env", "true"
# Warm pools (core.pools): a pool's pods carry its uid until a batch claims one; the claim marks the
# pod the batch's (annotations), a second write moves it to the batch (its labels) before the
# batch's Job adopts it.
LABEL_POOL_UID = "rl.agentruntime.io/pool-uid"
LABEL_POOL_NAME = "rl.agentruntime.io/pool-name"
# A pool pod's network (v.NETWORK_MODES): the pool's spec.network when it was made, which a claim
# never changes; the pool's policies select by it (core.pool_children.network_policies).
LABEL_NETWORK = "rl.agentruntime.io/network"
POOL_EGRESS_POLICY = "allow-egress"     # a pool's policy that opens egress to its AllowEgress pods
# a pool's policy that keeps open the egress of the pods an operator made before LABEL_NETWORK
# (core.pool_children.unlabelled_egress_policy)
POOL_UNLABELLED_EGRESS_POLICY = "allow-egress-unlabelled"
ROLE_WARM = "warm"                                               # LABEL_EPISODE_ROLE of an unclaimed pool pod
ANNOTATION_CLAIMED_AT = "rl.agentruntime.io/claimed-at"          # unix seconds, written by the claim
ANNOTATION_CLAIMED_BY = "rl.agentruntime.io/claimed-by"          # the batch's uid, written by the claim
ANNOTATION_DELIVERED_AT = "rl.agentruntime.io/delivered-at"      # unix seconds, once the episode was handed over
# unix seconds: a hand-over that sent every byte and heard nothing back (it may have arrived); the
# pod is left to its deadline, and a trainer's session on it is told so, not left waiting unsaid
ANNOTATION_UNCONFIRMED_AT = "rl.agentruntime.io/unconfirmed-at"
# unix seconds, on a pooled batch's Job: when its first claim was made. The claims come before the
# Job, so the batch's clock (its timings' origin) starts there, not at the Job's creation.
ANNOTATION_CLAIMS_BEGAN_AT = "rl.agentruntime.io/claims-began-at"
# On a pooled batch's Job: the operator run (a reconciler's random id) that made it, which alone
# counts the batch's claims (the pool_claims metric, the ClaimedFromPool Event), even when the
# answer to its create was lost and its retry adopted the Job; a later run adopts it silently.
ANNOTATION_MADE_BY = "rl.agentruntime.io/made-by"
# On a pooled batch's Job whose cold pods carry CLAIM_GATE: the template digest of the warm pods
# its later indexes may claim (core.pool_children.template_digest, as the first wave's were).
ANNOTATION_POOL_TEMPLATE = "rl.agentruntime.io/pool-template"
POOLED_ANNOTATION = "rl.agentruntime.io/pooled"                # "true" on every pod of a pool's template
# "true" on a Job the operator suspended for spec.stop (Kueue suspends Jobs too): it runs nothing again
ANNOTATION_STOPPED = "rl.agentruntime.io/stopped"
# + the episode index, on a pooled batch: that session's stats as the trainer's SDK measured them
# (core.sessions.stats_annotation), copied into the episode's row. Under kopf's storage prefix on
# purpose: kopf leaves the annotations of a prefix marked `<prefix>/kopf-managed` out of its
# diff-base, so writing them makes kopf write nothing back.
SESSION_STATS_ANNOTATION_PREFIX = "rl.agentruntime.io/session-"
CLAIM_MOUNT_PATH = "/rollout/claim"                              # the pod's own emptyDir the episode arrives in
# A pool with a verifier: its pods' verifier container gets its phase the same way, in an emptyDir
# of its own (the agent's container mounts neither it nor the verifier's files).
VERIFIER_CLAIM_MOUNT_PATH = "/rollout/verifier-claim"
# ... and its files and input are written by a third container, which alone mounts them writable
# (the verifier's are read-only mounts, as a Job pod's ConfigMap is): the agent's code the verifier
# runs shares the verifier's UID, and could otherwise rewrite what grades it.
VERIFIER_FILES_CONTAINER = "verifier-files"
VERIFIER_FILES_CLAIM_MOUNT_PATH = "/rollout/verifier-files-claim"
# The directories a pool's pods keep for themselves: no mount of a pool's spec may overlap one.
POOL_RESERVED_MOUNT_PATHS = (CLAIM_MOUNT_PATH, VERIFIER_CLAIM_MOUNT_PATH, VERIFIER_FILES_CLAIM_MOUNT_PATH)
ANNOTATION_VERIFIER_DELIVERED_AT = "rl.agentruntime.io/verifier-delivered-at"

# The Pod Security Admission labels of every namespace the operator makes (a sandbox, a pool's).
POD_SECURITY_LABELS = {**{f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")},
                       **{f"pod-security.kubernetes.io/{mode}-version": "latest" for mode in ("enforce", "audit", "warn")}}
# What the Job controller labels every pod of a Job with (an Indexed Job's also with
# v.COMPLETION_INDEX_KEY).
JOB_CONTROLLER_LABELS = ("batch.kubernetes.io/job-name", "job-name", "batch.kubernetes.io/controller-uid",
                         "controller-uid")
# Every label the operator (or the Job controller for it) puts on the episodes' pods and on the
# namespaces it makes. They name nothing a submitter chose: a selector pinned only by them matches
# every episode, or every sandbox and pool namespace (core.egress refuses it as it refuses `{}`).
STAMPED_LABELS = frozenset({LABEL_MANAGED_BY, LABEL_BATCH_UID, LABEL_BATCH_NAME, LABEL_EPISODE_ROLE, LABEL_POOL_UID,
                            LABEL_POOL_NAME, LABEL_NETWORK, v.COMPLETION_INDEX_KEY, *JOB_CONTROLLER_LABELS, *POD_SECURITY_LABELS})


def short_uid(uid: str) -> str:
    return uid.replace("-", "").lower()[:10]


def sandbox_namespace(ref: BatchRef) -> str:
    return f"rb-{short_uid(ref.uid)}"


POOL_NAMESPACE_PREFIX, POOL_NAMESPACE_DIGITS = "rp-", 10


def pool_namespace(namespace: str, name: str) -> str:
    """A RolloutPool's own namespace, where its warm pods wait and its pooled batches' Jobs run.
    From the pool's namespace and name, not its uid: a batch's spec (poolRef) then names its
    sandbox without a read, also when the batch is deleted after its pool."""
    digest = hashlib.sha256(f'{namespace}/{name}'.encode()).hexdigest()[:POOL_NAMESPACE_DIGITS]
    return f"{POOL_NAMESPACE_PREFIX}{digest}"


_POOL_NAMESPACE = re.compile(f"{POOL_NAMESPACE_PREFIX}[0-9a-f]{{{POOL_NAMESPACE_DIGITS}}}")


def looks_like_pool_namespace(namespace: object) -> bool:
    """A name :func:`pool_namespace` could have made (a user's namespace may look so too). Asked
    of every pod event the operator's watch sees: a prefix test first, then one match."""
    return isinstance(namespace, str) and namespace.startswith(POOL_NAMESPACE_PREFIX) \
        and _POOL_NAMESPACE.fullmatch(namespace) is not None


def job_name(ref: BatchRef) -> str:
    return f"rb-{short_uid(ref.uid)}"


def task_configmap_name(ref: BatchRef) -> str:
    return f"rb-{short_uid(ref.uid)}-task"


def verifier_configmap_name(ref: BatchRef) -> str:
    """spec.verifier.files: mounted into the verifier container only."""
    return f"rb-{short_uid(ref.uid)}-verifier"


def inputs_configmap_name(ref: BatchRef) -> str:
    return f"rb-{short_uid(ref.uid)}-inputs"


def inputs_shard_name(ref: BatchRef, shard: int) -> str:
    """The sandbox's copy of the ``shard``-th ConfigMap of spec.inputsFrom."""
    return f"rb-{short_uid(ref.uid)}-inputs-{shard}"


def env_secret_name(ref: BatchRef) -> str:
    """The operator's copy of the Secret keys that spec.env / spec.verifier.env reference."""
    return f"rb-{short_uid(ref.uid)}-env"


def shared_network_policy_name(ref: BatchRef) -> str:
    """The per-batch default-deny policy of Shared isolation (Dedicated uses DEDICATED_POLICY)."""
    return f"rb-{short_uid(ref.uid)}-deny"


DEDICATED_POLICY = "default-deny"


# Room left in the results head's name for a shard's "-<number>" (core.result_shards: about
# MAX_SHARDS = 1000 of them, a few more when bytes fill some first): five digits.
SHARD_SUFFIX_ROOM = len("-99999")


def results_configmap_name(ref: BatchRef) -> str:
    """The results head's name; its shards' (``<head>-<n>``) stay within 253 characters too."""
    limit = 253 - SHARD_SUFFIX_ROOM
    name = f"{ref.name}-results"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(ref.name.encode()).hexdigest()[:8]
    tail = f"-{digest}-results"
    return f"{ref.name[:limit - len(tail)]}{tail}"


def child_namespace(ref: BatchRef, spec: BatchSpec) -> str:
    """Where the Job and its ConfigMaps live: the sandbox namespace, the batch's own, or its pool's."""
    if spec.pool_name:
        return pool_namespace(ref.namespace, spec.pool_name)
    return sandbox_namespace(ref) if spec.isolation_namespace == v.ISOLATION_DEDICATED else ref.namespace


def label_value(text: str) -> str:
    """``text`` made a valid label value (≤ 63 chars, alphanumeric at both ends)."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63].strip("-_.")
    return value if is_label_value(value) else ""


def owner_labels(ref: BatchRef) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_BATCH_UID: ref.uid, LABEL_BATCH_NAME: label_value(ref.name)}


MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"   # everything the operator made in a namespace


def label_selector(ref: BatchRef) -> str:
    return f"{LABEL_BATCH_UID}={ref.uid}"


def retained_results_selector(name: str) -> str:
    """The retained results ConfigMaps (head and shards) of batches named ``name``."""
    return f"{LABEL_BATCH_NAME}={label_value(name)},{LABEL_RESULTS_RETAINED}={RESULTS_RETAINED}"


def episode_containers(pod: dict) -> list[str]:
    """The containers of an episode pod whose logs are the episode's, in the order they ran: the
    agent's then the verifier's (spec.verifier), else the one episode container."""
    spec = pod.get("spec") or {}
    names = [c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
             if isinstance(c, dict)]
    return [n for n in names if n in EPISODE_CONTAINERS] or [CONTAINER_NAME]
