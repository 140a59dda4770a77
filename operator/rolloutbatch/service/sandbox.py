"""Removing a batch's sandbox: the deletion plan of ``core.children`` carried out step by step.

Needs no spec (a batch refused as InvalidSpec must still be deletable): every place a child
could be is tried, and ``kube.resources.delete_owned`` deletes only what carries the batch's UID
(a namesake of someone else's is left alone). A step marked ``wait`` must be gone before the
next one starts: the Job goes first with foreground propagation, so the namespace (and its
NetworkPolicy) outlive every episode pod.
"""

from __future__ import annotations

import asyncio
import logging
import time

from rolloutbatch.core import naming, pool_children
from rolloutbatch.core.children import deletion_plan
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.scope import CLUSTERWIDE, Scope
from rolloutbatch.core.result_shards import is_results_configmap_name
from rolloutbatch.faults import crash_point
from rolloutbatch.kube.errors import Forbidden, KubeError, NotOurs
from rolloutbatch.kube.storage import Storage

async def remove_once(storage: Storage, ref: BatchRef, log: logging.Logger, *, finalizer: bool = False,
                      wait: bool = True, scope: Scope = CLUSTERWIDE, pool_namespace: str | None = None) -> bool:
    """One pass over the plan; True when nothing of the sandbox is left. ``finalizer``: called
    for the batch's deletion (where the chaos tests crash the operator), not its cleanup policy.
    ``wait=False``: every step is issued, none waited for (the last resort of :func:`remove`).
    ``scope``: a namespaced operator skips the places outside its namespaces (core.scope): it
    made nothing there, and may not even look."""
    for step in deletion_plan(ref, pool_namespace=pool_namespace):
        if not scope.reaches(step.namespace):
            continue
        if not wait and step.guards_pods:
            log.info("Leaving %s %s/%s (if any) to the garbage collector: the Job's pods may still run",
                     step.kind, step.namespace, step.name)
            continue
        try:
            going = await storage.delete_owned(step.kind, step.name, step.namespace, ref.uid,
                                               propagation=step.propagation)
        except NotOurs as exc:
            log.warning("Leaving alone what is not ours: %s", exc)
            continue
        except Forbidden as exc:
            if not step.rights_optional:
                raise
            log.info("Not removing %s %s/%s (%s): the garbage collector removes it with the batch",
                     step.kind, step.namespace, step.name, exc)
            continue
        if finalizer and going and step.kind == "Namespace":
            crash_point("cleanup:namespace")
        if wait and going and step.wait and await storage.get(step.kind, step.name, step.namespace):
            return False
    if pool_namespace and scope.reaches(pool_namespace):
        await evict_unowned_claims(storage, ref, pool_namespace, log)
    return wait   # issued without waiting: nothing is known to be gone yet


async def evict_unowned_claims(storage: Storage, ref: BatchRef, pool_namespace: str, log: logging.Logger) -> None:
    """Warm pods the batch claimed that no Job adopted (its Job was refused, or the batch was
    deleted between the claims and the Job): handed their episodes at the claim, they would run
    on, and the pool counts them no more. The Job's own pods went with it (foreground). Evicted:
    the operator may not delete pods; eviction is its one way to end one."""
    # One list: a claim enrolled between two lists (the batch's labels, then the warm ones) would
    # be in neither. The batch's pods, and those claimed whose labels were not written yet.
    claims = [p for p in await storage.list_pods(pool_namespace, naming.MANAGED_SELECTOR)
              if ((p.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_BATCH_UID) == ref.uid
              or pool_children.claimed_by(p) == ref.uid]
    for pod in claims:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or ()):
            continue
        log.info("Evicting pod %s/%s: claimed for the batch, never adopted by its Job", pool_namespace, meta.get("name"))
        try:
            await storage.evict_pod(pool_namespace, meta.get("name", ""), meta.get("uid"))
        except KubeError as exc:   # gone meanwhile, or a disruption budget: the next pass tries again
            log.warning("Evicting pod %s/%s failed: %s", pool_namespace, meta.get("name"), exc)


async def remove(storage: Storage, ref: BatchRef, log: logging.Logger, timeout: float, *, finalizer: bool = False,
                 interval: float = 1.0, scope: Scope = CLUSTERWIDE, pool_namespace: str | None = None) -> bool:
    """Repeat :func:`remove_once` until the sandbox is gone or ``timeout`` passed.

    At the timeout every remaining step is issued without waiting, so nothing is left behind
    when the caller gives up: a Job of 30,000 pods was still being deleted after 120 s, the
    namespace delete was never sent, and the sandbox namespace outlived its batch (bench,
    2026-12-01). A namespace's own deletion removes its pods first on Kubernetes 1.33+; on older
    clusters the last pods may lose their NetworkPolicy during their grace period (logged). A
    Shared batch's NetworkPolicy is not deleted in that pass: its pods are not in a namespace
    being deleted, and the policy goes with the batch (ownerReference)."""
    deadline = time.monotonic() + timeout
    while True:
        if await remove_once(storage, ref, log, finalizer=finalizer, scope=scope, pool_namespace=pool_namespace):
            return True
        if time.monotonic() >= deadline:
            log.warning("The Job's pods were not gone after %.0fs: deleting the rest of the sandbox without "
                        "waiting for them", timeout)
            await remove_once(storage, ref, log, finalizer=finalizer, wait=False, scope=scope,
                              pool_namespace=pool_namespace)
            return False
        await asyncio.sleep(interval)


async def remove_results(storage: Storage, ref: BatchRef, log: logging.Logger) -> None:
    """The batch's results ConfigMaps (head and shards), unless retained: deleted by the
    finalizer, so they are gone when ``kubectl delete --wait`` returns rather than whenever the
    garbage collector gets to them (seconds later on a loaded cluster). Only what the collector
    would take: the names the batch writes, with the batch as owner. A retained set has no owner,
    and a user's copy (another name, or its ownerReference dropped) is theirs."""
    head = naming.results_configmap_name(ref)
    for cm in await storage.list_configmaps(ref.namespace, naming.label_selector(ref)):
        meta = cm.get("metadata") or {}
        name = str(meta.get("name"))
        ours = is_results_configmap_name(head, name)
        owned = any(isinstance(o, dict) and o.get("uid") == ref.uid for o in meta.get("ownerReferences") or [])
        if ours and owned:
            try:
                await storage.delete_owned("ConfigMap", name, ref.namespace, ref.uid)
            except NotOurs as exc:
                log.warning("Leaving alone what is not ours: %s", exc)
