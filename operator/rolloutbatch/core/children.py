"""What a batch creates, in which order, who owns each child, and how deletion removes them.

Provisioning (:func:`provisioning_plan`) needs the parsed spec. Deletion
(:func:`deletion_plan`) needs only the batch's identity: a batch whose spec the operator refused
must still be deletable, so the plan lists every place a child of either
isolation mode could be, and the storage layer deletes only what carries the batch's UID.

Ownership rules:
- Dedicated: the sandbox namespace is the unit of cleanup; nothing inside it carries an
  ownerReference (an owner in another namespace is invalid), and creating the ConfigMaps before
  the Job means no pod ever starts before its volumes exist. Its ``default`` ServiceAccount is
  created with it (pods are not admitted before it exists); a ResourceQuota only when asked
  (spec.isolation.resourceQuota: the Job's parallelism already bounds the pods).
- Shared: every child lives in the batch's namespace and is owned by the batch, so the garbage
  collector removes what a crashed operator left; the NetworkPolicy selects only this batch's pods.
- The copy of the env's Secret keys (core.secret_env), when the spec references any, is created
  before the ConfigMaps and the Job and is removed with the sandbox like them.
- The results ConfigMap lives beside the batch in both modes and is owned by it.
Order of deletion: the Job first, with foreground propagation, and only once its pods are gone
the namespace and the NetworkPolicy, so the policy holds while any episode still runs
(namespace deletion removes objects in no defined order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rolloutbatch.core import egress, manifests, naming
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.model import BatchRef, BatchSpec


def adoptable(live: Mapping, desired: Mapping, *, shared: bool, job_uid: str | None) -> bool:
    """Whether an object found under a child's deterministic name may be adopted as the one the
    operator created before a crash (the caller has checked its batch label or ownerReference).

    Labels and ownerReferences prove nothing in a Shared namespace: any user with edit rights
    there can make a Job or ConfigMap under the name, labelled as ours, before the operator does
    (while it is down). So what decides is what the object would run or open:
    - a ConfigMap (task, inputs, verifier files) only with exactly our data; so is the Secret
      holding the env's Secret keys (a neighbour's values there would reach the agent);
    - a NetworkPolicy only with exactly our selector, policy types and rules;
    - the Job only when it is the one the status records (``status.jobUID``); without a record,
      only in a Dedicated sandbox, whose namespace only the operator writes. A Shared batch that
      crashed between creating its Job and recording it stalls (NameConflict): running a Job
      nobody can vouch for would let a neighbour's code earn its rewards.
    """
    kind = desired.get("kind")
    if kind == "Secret":
        return (live.get("data") or {}) == (desired.get("data") or {}) and live.get("type") == desired.get("type")
    if kind == "ConfigMap":
        return ((live.get("data") or {}) == (desired.get("data") or {})
                and (live.get("binaryData") or {}) == (desired.get("binaryData") or {}))
    if kind == "NetworkPolicy":
        have, want = live.get("spec") or {}, desired.get("spec") or {}
        return all(_policy_part(have, key) == _policy_part(want, key)
                   for key in ("podSelector", "policyTypes", "ingress", "egress"))
    if kind == "Job":
        uid = (live.get("metadata") or {}).get("uid")
        return uid == job_uid if job_uid else not shared
    if kind == "LocalQueue":
        # only in a Dedicated sandbox; the queue it feeds decides
        return (live.get("spec") or {}).get("clusterQueue") == (desired.get("spec") or {}).get("clusterQueue")
    return True


def _policy_part(spec: Mapping, key: str) -> object:
    """A policy field as the API server stores it (core.egress.canonical_rule: no null or empty
    fields, ports default to TCP), so that how the rules were spelt does not decide."""
    value = spec.get(key)
    if key in ("ingress", "egress"):
        return [egress.canonical_rule(rule) if isinstance(rule, Mapping) else rule for rule in value or []]
    if key == "podSelector":
        return {k: v for k, v in (value or {}).items() if v}
    return value or []


def provisioning_plan(ref: BatchRef, spec: BatchSpec, owner: Mapping, overhead: Mapping[str, str] | None,
                      input_shards: Sequence[Mapping[str, str]] = (), dns_cidrs: Sequence[str] = (),
                      env_secret: Mapping[str, str] | None = None, cluster_queue: str | None = None) -> list[dict]:
    """The child objects in creation order (the Job last: its pods need everything else).
    ``input_shards``: the checked data of spec.inputsFrom's ConfigMaps, copied into the sandbox;
    ``env_secret``: the referenced Secret keys (core.secret_env.copied_data), copied likewise;
    ``cluster_queue``: with spec.queueName, the ClusterQueue of the batch's LocalQueue, which a
    Dedicated sandbox's own LocalQueue points at (core.queueing)."""
    if spec.isolation_namespace == v.ISOLATION_DEDICATED:
        objects = [manifests.namespace(ref, spec), manifests.service_account(ref, spec),
                   manifests.network_policy(ref, spec, dns_cidrs=dns_cidrs)]
        if spec.sandbox_quota:
            objects.append(manifests.resource_quota(ref, spec, overhead))
        if spec.queue_name and cluster_queue:
            objects.append(manifests.local_queue(ref, spec, cluster_queue))
        child_owner = None
    else:
        objects = [manifests.network_policy(ref, spec, owner, dns_cidrs)]
        child_owner = owner
    secret = manifests.env_secret(ref, spec, env_secret, child_owner)
    if secret is not None:
        objects.append(secret)
    objects.append(manifests.task_configmap(ref, spec, child_owner))
    verifier = manifests.verifier_configmap(ref, spec, child_owner)
    if verifier is not None:
        objects.append(verifier)
    inputs = manifests.inputs_configmap(ref, spec, child_owner)
    if inputs is not None:
        objects.append(inputs)
    objects.extend(manifests.inputs_shard_configmap(ref, spec, j, data, child_owner)
                   for j, data in enumerate(input_shards))
    objects.append(manifests.job(ref, spec, child_owner))
    return objects


@dataclass(frozen=True)
class Removal:
    """One object deletion of the sandbox; ``wait`` = it must be gone before the next step;
    ``guards_pods`` = episode pods rely on it (their network policy): never deleted while the
    Job may still have pods, the batch's garbage collection removes it then. ``rights_optional``
    = the operator may lack the rights to it (Secrets, manifests/rbac/secrets_role.yaml): a
    refusal skips the step, and the garbage collector removes it with the batch."""

    kind: str
    name: str
    namespace: str | None
    wait: bool = False
    propagation: str = "Background"
    guards_pods: bool = False
    rights_optional: bool = False


def deletion_plan(ref: BatchRef, input_shards: int = 0, pool_namespace: str | None = None) -> tuple[Removal, ...]:
    """Every child a batch of either isolation mode may have, in a safe order. Shared-mode
    copies of spec.inputsFrom are owned by the batch, so the garbage collector removes any the
    plan does not name (``input_shards`` unknown without the spec). ``pool_namespace``: a pooled
    batch's Job runs in its pool's namespace (core.pools), which is the pool's to remove."""
    sandbox, job = naming.sandbox_namespace(ref), naming.job_name(ref)
    shards = tuple(Removal("ConfigMap", naming.inputs_shard_name(ref, j), ref.namespace) for j in range(input_shards))
    pooled = (Removal("Job", job, pool_namespace, wait=True, propagation="Foreground"),) if pool_namespace else ()
    return shards + pooled + (
        Removal("Job", job, sandbox, wait=True, propagation="Foreground"),
        Removal("Job", job, ref.namespace, wait=True, propagation="Foreground"),
        Removal("Namespace", sandbox, None, wait=True, propagation="Foreground"),
        Removal("Secret", naming.env_secret_name(ref), ref.namespace, rights_optional=True),
        Removal("ConfigMap", naming.task_configmap_name(ref), ref.namespace),
        Removal("ConfigMap", naming.inputs_configmap_name(ref), ref.namespace),
        Removal("ConfigMap", naming.verifier_configmap_name(ref), ref.namespace),
        Removal("NetworkPolicy", naming.shared_network_policy_name(ref), ref.namespace, guards_pods=True),
    )


def removes_sandbox(policy: str, phase: str | None) -> bool:
    """Whether spec.cleanup.sandbox ``policy`` removes the sandbox (the Job, its pods and with them
    their logs) of a batch that ended in ``phase``: Always does, DeleteOnSuccess after a success
    only, Never does not (deleting the batch still does). The operator acts on it; the CLI's
    hints say it."""
    return policy == v.CLEANUP_ALWAYS or (policy == v.CLEANUP_DELETE_ON_SUCCESS and phase == v.SUCCEEDED)
