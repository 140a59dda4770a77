"""Creating a batch's sandbox: every check first, then the children in order (core.children).

Validate everything before creating anything: the RuntimeClass and PriorityClass must exist
(the PriorityClass in the user range), the API server must accept the episodes' Job (a
server-side dry run in the batch's own namespace: a Dedicated sandbox does not exist yet), no
declared ipBlock may hold only ClusterIPs (``service.egress_checks``), the namespace's quotas
must hold one episode pod of a Shared batch and everything a Dedicated batch may hold at once
(core.admission.check_quota_outside; its sandbox then gets a ResourceQuota of that size), and
a named Kueue queue must exist (:func:`resolve_queue`). Then, first in :func:`create` (they are
read for copying anyway), every ConfigMap of spec.inputsFrom must be opted in by its label and
hold exactly the inputs it promises, and every Secret an env secretKeyRef names must be opted in and hold its
key (``core.secret_env``); only then are the children created or adopted. Every refusal is a
``Stalled`` with its reason.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable

from rolloutbatch.core import manifests, naming, queueing, secret_env
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.admission import (Stalled, check_priority_class, check_quota_fits, check_quota_outside,
                                         input_shards, quotas_bound, runtime_overhead)
from rolloutbatch.core.children import provisioning_plan
from rolloutbatch.core.model import BatchRef, BatchSpec
from rolloutbatch.core.scope import CLUSTERWIDE, Scope, priority_class_unreadable_message
from rolloutbatch.kube.storage import Storage
from rolloutbatch.kube.errors import Forbidden, KubeError, NotOurs
from rolloutbatch.service import egress_checks, policy

log = logging.getLogger(__name__)


async def _dry_run(storage: Storage, obj: dict, what: str) -> None:
    try:
        await storage.dry_run_create(obj)
    except KubeError as exc:
        if policy.is_transient(exc):
            raise
        if exc.status in (400, 422):
            raise Stalled(v.STALL_INVALID_SPEC, f"the API server refuses {what}: {exc}") from None
        raise Stalled(v.STALL_REFUSED, str(exc)) from None


async def check(storage: Storage, ref: BatchRef, spec: BatchSpec, owner: dict, dns_cidrs: tuple[str, ...] = (),
                *, service_cidrs: tuple[str, ...] = (), scope: Scope = CLUSTERWIDE,
                logger: logging.Logger = log) -> tuple[BatchSpec, dict | None]:
    """Everything that can refuse the spec, before anything exists. Returns ``spec``, with
    sandbox_quota set when the namespace's quotas bound a Dedicated sandbox's pods, and the
    RuntimeClass overhead.
    ``service_cidrs``: the operator's --service-cidr, where the cluster's cannot be read;
    ``scope``: a namespaced install refuses what it cannot do and reads what it may (core.scope)."""
    scope.refuse(spec)
    overhead: dict | None = None
    if spec.runtime_class_name:
        try:
            rc = await storage.runtime_class(spec.runtime_class_name)
        except Forbidden:
            if scope.clusterwide:
                raise
            # Not a refusal: the Job controller says so if it is missing (PodsNotCreated).
            logger.info("RuntimeClass %r not checked: this namespaced operator may not read RuntimeClasses",
                        spec.runtime_class_name)
            rc = {}
        if rc is None:
            raise Stalled(v.STALL_RUNTIME_CLASS, f"RuntimeClass {spec.runtime_class_name!r} does not exist in the cluster")
        overhead = runtime_overhead(rc)
    priority = spec.pod_template.get("priorityClassName")
    if priority:
        # The live class, not its name: the submitter may not borrow the cluster's critical range.
        try:
            live_priority = await storage.get("PriorityClass", priority)
        except Forbidden:
            if scope.clusterwide:
                raise
            raise Stalled(v.STALL_CLUSTER_RIGHTS, priority_class_unreadable_message(priority)) from None
        if live_priority is None:
            raise Stalled(v.STALL_PRIORITY_CLASS, f"PriorityClass {priority!r} does not exist in the cluster")
        problem = check_priority_class(live_priority)
        if problem:
            raise Stalled(v.STALL_PRIORITY_CLASS_DENIED, problem)
    job = manifests.job(ref, spec, owner)
    job["metadata"]["namespace"] = ref.namespace
    await _dry_run(storage, job, "the episodes' Job")
    if spec.egress:
        # The API server's reading of the declared rules (selectors, CIDRs, ports), before anything exists.
        policy_ = manifests.network_policy(ref, spec, owner, dns_cidrs)
        policy_["metadata"]["namespace"] = ref.namespace
        await _dry_run(storage, policy_, "the declared egress")
        await egress_checks.refuse_service_ips(storage, spec, service_cidrs, logger)
    quotas = await storage.resource_quotas(ref.namespace)
    if spec.isolation_namespace == v.ISOLATION_SHARED:
        # the namespace's quota holds the pods themselves: the batch needs room for one to start
        problem = check_quota_fits(quotas, spec, overhead)
    else:
        problem = check_quota_outside(quotas, spec, overhead)
        if problem is None and quotas_bound(quotas, spec, overhead):
            spec = dataclasses.replace(spec, sandbox_quota=True)   # the sandbox carries the bound
    if problem:
        raise Stalled(v.STALL_QUOTA, problem)
    return spec, overhead



async def resolve_queue(storage: Storage, ref: BatchRef, spec: BatchSpec, *, scope: Scope = CLUSTERWIDE,
                        logger: logging.Logger = log) -> tuple[BatchSpec, str | None]:
    """The batch's Kueue queue (core.queueing): ``spec`` with the queue it goes to (spec.queueName,
    else the namespace's LocalQueue named default when there is one), and that queue's
    ClusterQueue. A named queue that is missing stalls the batch before anything is created."""
    name = spec.queue_name or queueing.DEFAULT_QUEUE
    try:
        live = await storage.get("LocalQueue", name, ref.namespace)
    except Forbidden:
        if spec.queue_name:
            raise Stalled(v.STALL_REFUSED, f"the operator may not read LocalQueue {ref.namespace}/{name} "
                                           "(its role needs get on localqueues.kueue.x-k8s.io)") from None
        logger.info("LocalQueues of %s not read (no right): the batch is not queued", ref.namespace)
        return spec, None
    if live is None:
        if spec.queue_name:
            raise Stalled(v.STALL_QUEUE_NOT_FOUND,
                          f"LocalQueue {name!r} does not exist in namespace {ref.namespace} (spec.queueName; is "
                          f"Kueue installed?)")
        return spec, None
    cluster_queue = queueing.cluster_queue_of(live)
    if cluster_queue is None:
        raise Stalled(v.STALL_QUEUE_NOT_FOUND, f"LocalQueue {ref.namespace}/{name} names no ClusterQueue")
    return dataclasses.replace(spec, queue_name=name), cluster_queue


async def _secret_data(storage: Storage, ref: BatchRef, spec: BatchSpec) -> dict[str, str] | None:
    """The referenced keys of the env's Secrets, checked (core.secret_env); None without any."""
    names = secret_env.secret_names(spec)
    if not names:
        return None
    secrets = {}
    for name in names:
        try:
            secrets[name] = await storage.get("Secret", name, ref.namespace)
        except Forbidden:
            raise Stalled(v.STALL_REFUSED, secret_env.forbidden_message(ref.namespace)) from None
    return secret_env.copied_data(secrets, spec)


async def create(storage: Storage, create_one: Callable[[dict], Awaitable[dict]], ref: BatchRef, spec: BatchSpec,
                 owner: dict, overhead: dict | None, dns_cidrs: tuple[str, ...] = (),
                 cluster_queue: str | None = None) -> dict:
    """Create or adopt every child; returns the live Job (``cluster_queue``: resolve_queue's)."""
    shards: list = []
    if spec.inputs_from:
        shards = input_shards([await storage.get("ConfigMap", name, ref.namespace)
                               for name in spec.inputs_from], spec.inputs_from, spec.inputs_count)
    secret_data = await _secret_data(storage, ref, spec)
    namespace = naming.child_namespace(ref, spec)
    job: dict = {}
    try:
        for obj in provisioning_plan(ref, spec, owner, overhead, shards, dns_cidrs, secret_data, cluster_queue):
            live = await create_one(obj)
            if obj["kind"] == "Namespace" and (live.get("metadata") or {}).get("deletionTimestamp"):
                raise Stalled(v.STALL_NAMESPACE_TERMINATING, f"sandbox namespace {namespace} is being deleted")
            if obj["kind"] == "Job":
                job = live
    except NotOurs as exc:
        raise Stalled(v.STALL_NAMESPACE_CONFLICT if "Namespace" in str(exc) else v.STALL_NAME_CONFLICT,
                      str(exc)) from None
    except KubeError as exc:
        if policy.is_transient(exc):
            raise
        raise Stalled(v.STALL_REFUSED, str(exc)) from None
    return job
