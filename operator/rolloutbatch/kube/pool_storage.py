"""Every API call of the warm pools (``core.pools``): the pool's children, its pods, its claims.

A pool's objects carry its uid label (``naming.LABEL_POOL_UID``), checked before anything found
under one of its names is changed or deleted, as ``kube.resources`` does for a batch's. Calls run
in worker threads (the ``Api`` is synchronous), like ``kube.storage.Storage``'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rolloutbatch import POOL_KIND
from rolloutbatch.core import pool_children, pools
from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Conflict, Invalid, NotFound, NotOurs


def _ensure(api: Any, obj: dict, pool_uid: str) -> dict:
    """Create, or bring an existing object of ours to ``obj`` (a NetworkPolicy's spec: one an
    older operator made differently must say what the pool's policies say now)."""
    meta = obj["metadata"]
    path = resources.collection_path(obj["kind"], meta.get("namespace"))
    try:
        return api.create(path, obj, f"create {obj['kind']} {meta['name']}")
    except Conflict:
        if obj["kind"] == "ServiceAccount":
            return obj
        existing = api.get(f"{path}/{meta['name']}", f"get {obj['kind']} {meta['name']}")
        if not pool_children.owned_by_pool(existing, pool_uid):
            raise NotOurs(f"{obj['kind']} {meta['name']} exists and is not this RolloutPool's") from None
        if obj["kind"] == "NetworkPolicy" and existing.get("spec") != obj.get("spec"):
            body = dict(obj, metadata=dict(meta, resourceVersion=existing["metadata"]["resourceVersion"]))
            return api.replace(f"{path}/{meta['name']}", body, f"replace NetworkPolicy {meta['name']}")
        return existing   # a task ConfigMap is named by its content: one of that name is the same


def _delete_owned(api: Any, kind: str, namespace: str, name: str, pool_uid: str) -> None:
    """Delete the pool's object of that name, as read now (its uid as precondition); one gone, or
    not the pool's, is left."""
    live = resources.get_or_none(api, kind, name, namespace)
    if live is None or not pool_children.owned_by_pool(live, pool_uid):
        return
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": live["metadata"].get("uid")}}
    try:
        api.delete(resources.object_path(kind, name, namespace), f"delete {kind} {namespace}/{name}", body)
    except (NotFound, Conflict):
        pass


def _merge_patch_pod(api: Any, namespace: str, name: str, patch: dict, what: str) -> dict | None:
    try:
        return api.merge_patch(resources.object_path("Pod", name, namespace), patch, f"{what} pod {namespace}/{name}")
    except (Conflict, NotFound):
        return None


def _claim(api: Any, namespace: str, name: str, patch: dict) -> dict | None:
    """The claimed pod, or None when it was claimed, changed or deleted meanwhile (409/404)."""
    return _merge_patch_pod(api, namespace, name, patch, "claim")


def _enrol(api: Any, namespace: str, name: str, patch: dict) -> dict | None:
    """The claimed pod with its batch's labels, or None when it is gone (404)."""
    return _merge_patch_pod(api, namespace, name, patch, "enrol")


def _delete_pod(api: Any, namespace: str, name: str, uid: str, resource_version: str | None) -> bool:
    """Delete the pod as it was listed: a pod changed since (claimed by a batch meanwhile) is left
    alone (409). False when it was not deleted."""
    preconditions = {"uid": uid, **({"resourceVersion": resource_version} if resource_version else {})}
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions}
    try:
        api.delete(resources.object_path("Pod", name, namespace), f"delete pod {namespace}/{name}", body)
    except (NotFound, Conflict):
        return False   # gone, changed since (a claim), or a namesake
    return True


def _delete_namespace(api: Any, name: str, pool_uid: str) -> bool:
    """True when the pool's namespace is deleted or being deleted; False when it is gone, or is
    not the pool's (another pool's: left to its owner, not an error a deletion retries for ever)."""
    live = resources.get_or_none(api, "Namespace", name)
    if live is None or not pool_children.owned_by_pool(live, pool_uid):
        return False
    if not (live.get("metadata") or {}).get("deletionTimestamp"):
        api.delete(resources.object_path("Namespace", name), f"delete namespace {name}")
    return True


def _list_jobs(api: Any, namespace: str) -> list[dict]:
    try:
        return api.get(resources.collection_path("Job", namespace), f"list jobs in {namespace}").get("items") or []
    except NotFound:
        return []


class PoolStorage:
    """The pools' API calls, each awaited. ``writer`` (``kube.async_writes.AsyncWriter``): the
    claims, the hand-overs' annotations and the refill's pods go out on the event loop through
    it, not through the API threads."""

    def __init__(self, api: Any, writer: Any = None) -> None:
        self.api, self.writer = api, writer

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, self.api, *args)

    async def get_pool(self, namespace: str, name: str) -> dict | None:
        def get(api: Any) -> dict | None:
            try:
                return api.get(resources.object_path(POOL_KIND, name, namespace),
                               f"get RolloutPool {namespace}/{name}")
            except NotFound:
                return None
        return await self._run(get)

    async def patch_pool_status(self, namespace: str, name: str, status: dict) -> None:
        path = resources.object_path(POOL_KIND, name, namespace) + "/status"
        what = f"patch status of RolloutPool {namespace}/{name}"
        if self.writer is not None:   # a round's one write, on the loop as the claims are
            await self.writer.merge_patch(path, {"status": status}, what)
            return
        await self._run(lambda api: api.merge_patch(path, {"status": status}, what))

    async def ensure(self, obj: dict, pool_uid: str) -> dict:
        return await self._run(_ensure, obj, pool_uid)

    async def get_network_policy(self, namespace: str, name: str) -> dict | None:
        return await self._run(resources.get_or_none, "NetworkPolicy", name, namespace)

    async def delete_network_policy(self, namespace: str, name: str, pool_uid: str) -> None:
        await self._run(_delete_owned, "NetworkPolicy", namespace, name, pool_uid)

    async def label_pod(self, namespace: str, name: str, labels: dict) -> dict | None:
        """Labels added to a pod (no precondition: a label another write races with is kept by
        both), or None when it is gone."""
        return await self._run(_merge_patch_pod, namespace, name, {"metadata": {"labels": labels}}, "label")

    async def list_pods(self, namespace: str, selector: str) -> list[dict]:
        return await self._run(resources.list_pods, namespace, selector)

    async def get_namespace(self, name: str) -> dict | None:
        return await self._run(resources.get_or_none, "Namespace", name)

    async def resource_quotas(self, namespace: str) -> list[dict]:
        return await self._run(resources.resource_quotas, namespace)

    async def runtime_class(self, name: str) -> dict | None:
        return await self._run(resources.runtime_class, name)

    async def priority_class(self, name: str) -> dict | None:
        def get(api: Any) -> dict | None:
            try:
                return api.get(resources.object_path("PriorityClass", name), f"get PriorityClass {name}")
            except NotFound:
                return None
        return await self._run(get)

    async def create_pod(self, pod: dict) -> dict:
        ns = pod["metadata"]["namespace"]
        path, what = resources.collection_path("Pod", ns), f"create pod in {ns}"
        if self.writer is not None:   # a refill is twenty or more at once
            return await self.writer.create(path, pod, what)
        return await self._run(lambda api: api.create(path, pod, what))

    async def delete_pod(self, pod: dict) -> bool:
        """Delete a pod as listed (its uid and resourceVersion as preconditions)."""
        meta = pod.get("metadata") or {}
        return await self._run(_delete_pod, meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""),
                               meta.get("resourceVersion"))

    async def claim_pod(self, namespace: str, name: str, patch: dict) -> dict | None:
        """The claimed pod, or None when it was claimed, changed or deleted meanwhile (409/404)."""
        return await self._patch_pod(namespace, name, patch, "claim")

    async def enrol_pod(self, namespace: str, name: str, patch: dict) -> dict | None:
        """A claimed pod given its batch's labels (core.pools.enrol_patch), or None when it is gone."""
        return await self._patch_pod(namespace, name, patch, "enrol")

    async def _patch_pod(self, namespace: str, name: str, patch: dict, what: str) -> dict | None:
        if self.writer is None:
            return await self._run(_claim if what == "claim" else _enrol, namespace, name, patch)
        try:
            return await self.writer.merge_patch(resources.object_path("Pod", name, namespace), patch,
                                                 f"{what} pod {namespace}/{name}")
        except (Conflict, NotFound):
            return None

    async def ungate_pod(self, namespace: str, name: str, ops: list[dict]) -> bool:
        """Apply ``core.pools.ungate_patch``'s patch. False when the pod is gone or a ``test`` of
        the patch failed (another pod of that name, its gates changed since it was read)."""
        def ungate(api: Any) -> bool:
            try:
                api.json_patch(resources.object_path("Pod", name, namespace), ops, f"ungate pod {namespace}/{name}")
            except (NotFound, Invalid):
                return False
            return True
        return await self._run(ungate)

    async def keep_claims_open(self, connections: int) -> None:
        """Connections for the next ``connections`` claims, opened ahead when they go out on the
        loop (``kube.async_writes.AsyncWriter.warm``); the API threads keep their own."""
        if self.writer is not None:
            await self.writer.warm(connections)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict,
                           active_deadline_seconds: int | None = None) -> None:
        """Annotations on a pod, and a lower ``activeDeadlineSeconds`` in the same patch when given."""
        patch = pools.record_patch(annotations, active_deadline_seconds)

        path, what = resources.object_path("Pod", name, namespace), f"annotate pod {namespace}/{name}"
        if self.writer is not None:   # on the loop as the claim was: twenty come in its burst
            try:
                await self.writer.merge_patch(path, patch, what)
            except NotFound:
                pass
            return

        def annotate(api: Any) -> None:
            try:
                api.merge_patch(path, patch, what)
            except NotFound:
                pass
        await self._run(annotate)

    async def open_channel(self, namespace: str, pod: str, container: str, *, ack: bytes, timeout: float,
                           hello: tuple[bytes, bytes], keepalive: float | None = None) -> Any:
        """An attach to a warm pod's container, kept open for its hand-over (``kube.pod_attach``);
        on the event loop, as every attach."""
        return await self.api.open_attach(namespace, pod, container, ack=ack, timeout=timeout, hello=hello,
                                          keepalive=keepalive)

    async def list_configmaps(self, namespace: str, selector: str) -> list[dict]:
        return await self._run(resources.list_configmaps, namespace, selector)

    async def delete_configmap(self, configmap: dict) -> None:
        meta = configmap.get("metadata") or {}

        def delete(api: Any) -> None:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta.get("uid")}}
            try:
                api.delete(resources.object_path("ConfigMap", meta["name"], meta["namespace"]),
                           f"delete ConfigMap {meta['namespace']}/{meta['name']}", body)
            except (NotFound, Conflict):
                pass
        await self._run(delete)

    async def list_jobs(self, namespace: str) -> list[dict]:
        return await self._run(_list_jobs, namespace)

    async def delete_namespace(self, name: str, pool_uid: str) -> bool:
        return await self._run(_delete_namespace, name, pool_uid)
