"""Typed operations on the objects the operator owns: create-or-adopt, logs, status, deletion.

Every function takes the shared :class:`~rolloutbatch.kube.client.Api` and plain dicts. Ownership
is checked by the batch-UID label before anything found under one of our deterministic names is
used or deleted: a restarted operator adopts what it created, and never touches what it did not
(docs/design.md §5).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rolloutbatch import GROUP, PLURAL, POOL_KIND, POOL_PLURAL, VERSION
from rolloutbatch.core import queueing
from rolloutbatch.core.k8s_rules import check_namespace_name
from rolloutbatch.core.naming import ANNOTATION_STOPPED, LABEL_BATCH_UID
from rolloutbatch.kube.client import Api
from rolloutbatch.kube.errors import Conflict, NotFound, NotOurs, OwnerGone

log = logging.getLogger(__name__)

# API paths of the kinds we touch: (collection path for a namespace or None, kind label for messages)
_COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ResourceQuota": "/api/v1/namespaces/{ns}/resourcequotas",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "RolloutBatch": f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}",
    POOL_KIND: f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{POOL_PLURAL}",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "Event": "/api/v1/namespaces/{ns}/events",
    "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    "LocalQueue": f"/apis/{queueing.API_VERSION}/namespaces/{{ns}}/localqueues",
    "Workload": f"/apis/{queueing.API_VERSION}/namespaces/{{ns}}/workloads",
}


def collection_path(kind: str, namespace: str | None = None) -> str:
    """The kind's objects in ``namespace`` (a kind of no namespace: None). A namespace that is no
    DNS label (a caller's ``../x`` or ``a/b``) is refused (InvalidName) before it names another path."""
    path = _COLLECTIONS[kind]
    return path.format(ns=check_namespace_name(namespace)) if "{ns}" in path else path


def object_path(kind: str, name: str, namespace: str | None = None) -> str:
    if kind == "Namespace":   # a namespace's name is checked as any namespace a path holds
        check_namespace_name(name)
    return f"{collection_path(kind, namespace)}/{name}"


def _describe(obj: dict) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', 'object')} {where}{meta.get('name')}"


def owned_by(obj: dict, batch_uid: str) -> bool:
    """Ours: it carries the batch-UID label, or an ownerReference to the batch.

    Either is enough, so a user removing the label from the results ConfigMap mid-batch does
    not orphan it; the next write puts the label back.
    """
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_BATCH_UID) == batch_uid:
        return True
    return any(isinstance(o, dict) and o.get("uid") == batch_uid for o in meta.get("ownerReferences") or [])


def create_or_adopt(api: Api, obj: dict, batch_uid: str,
                    same: Callable[[dict, dict], bool] | None = None) -> dict:
    """Create ``obj``; on 409 return the existing object if it carries our batch-UID label and
    (``same(existing, obj)``) is what we would have created.

    Raises :class:`NotOurs` when the name is taken by an object of another owner, or by one that
    claims to be ours and is not what we create.
    """
    meta = obj["metadata"]
    path = collection_path(obj["kind"], meta.get("namespace"))
    what = f"create {_describe(obj)}"
    try:
        return api.create(path, obj, what)
    except Conflict:
        if obj["kind"] == "ServiceAccount":
            return obj   # the controller made "default" first: it exists, which is all we need
        existing = api.get(f"{path}/{meta['name']}", f"get {_describe(obj)}")
        if not owned_by(existing, batch_uid):
            raise NotOurs(f"{_describe(obj)} already exists and is not owned by this RolloutBatch") from None
        if same is not None and not same(existing, obj):
            raise NotOurs(f"{_describe(obj)} already exists, labelled as this RolloutBatch's, and is not what the "
                          "operator creates: not adopting it") from None
        return existing


def dry_run_create(api: Api, obj: dict) -> None:
    """Let the API server validate ``obj`` as a create (schema, admission) and store nothing.
    An existing namesake (409) means it passed validation."""
    meta = obj["metadata"]
    try:
        api.create(collection_path(obj["kind"], meta.get("namespace")), obj, f"validate {_describe(obj)}",
                   dry_run=True)
    except Conflict:
        pass


def get_or_none(api: Api, kind: str, name: str, namespace: str | None = None) -> dict | None:
    try:
        return api.get(object_path(kind, name, namespace), f"get {kind} {name}")
    except NotFound:
        return None


def events_of(api: Api, namespace: str, uid: str) -> list[dict]:
    """The Events about one object (by UID), oldest first."""
    page = api.get(collection_path("Event", namespace), "list Events", fieldSelector=f"involvedObject.uid={uid}")
    return sorted(page.get("items") or [], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


def configmap_versions(api: Api, namespace: str, selector: str) -> dict[str, str]:
    """Name -> resourceVersion of the ConfigMaps matching ``selector``, metadata only: listing
    a 30,000-episode batch's shards in full moved ~20 MB and peaked the operator at ~220 MiB."""
    versions: dict[str, str] = {}
    params: dict[str, Any] = {"labelSelector": selector, "limit": 500}
    while True:
        page = api.request_json("GET", collection_path("ConfigMap", namespace), "list ConfigMaps", params=params,
                                headers={"Accept": METADATA_ONLY})
        for item in page.get("items") or []:
            meta = item.get("metadata") or {}
            versions[str(meta.get("name"))] = str(meta.get("resourceVersion"))
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return versions
        params["continue"] = cont


def list_labelled(api: Api, kind: str, namespace: str, selector: str) -> list[dict]:
    """Every object of ``kind`` in ``namespace`` matching ``selector``, page by page."""
    items: list[dict] = []
    params: dict[str, Any] = {"labelSelector": selector, "limit": 500}
    while True:
        page = api.get(collection_path(kind, namespace), f"list {kind}s", **params)
        items.extend(page.get("items") or [])
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return items
        params["continue"] = cont


def list_configmaps(api: Api, namespace: str, selector: str) -> list[dict]:
    return list_labelled(api, "ConfigMap", namespace, selector)


def list_pods(api: Api, namespace: str, selector: str) -> list[dict]:
    return list_labelled(api, "Pod", namespace, selector)


def node_allocatables(api: Api) -> list[dict]:
    """status.allocatable of every node (what a pod's requests are scheduled against)."""
    page = api.get("/api/v1/nodes", "list Nodes")
    return [(item.get("status") or {}).get("allocatable") or {} for item in page.get("items") or []]


def dns_endpoint_slices(api: Api, timeout: float = 5.0) -> list[dict]:
    """The cluster DNS Service's EndpointSlices (kube-system/kube-dns, the conventional name).

    Read at startup before the operator serves anything: a short ``timeout`` bounds the delay a
    hanging API server causes (with the client's 30 s, six tries took three minutes)."""
    answer = api.request_json("GET", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
                              "list EndpointSlices", params={"labelSelector": "kubernetes.io/service-name=kube-dns"},
                              timeout=timeout)
    return answer.get("items") or []


def service_cidrs(api: Api) -> list[str]:
    """The CIDRs every ServiceCIDR object (networking.k8s.io/v1, Kubernetes 1.33+) allocates
    ClusterIPs from. NotFound when the API is not served, Forbidden when not ours to read."""
    page = api.get("/apis/networking.k8s.io/v1/servicecidrs", "list ServiceCIDRs")
    return [c for item in page.get("items") or [] for c in (item.get("spec") or {}).get("cidrs") or []
            if isinstance(c, str)]


def namespace_names(api: Api, selector: str, limit: int) -> list[str]:
    """Names of at most ``limit`` namespaces matching the label ``selector``."""
    page = api.get(collection_path("Namespace"), "list Namespaces", labelSelector=selector, limit=limit)
    return [str((item.get("metadata") or {}).get("name")) for item in page.get("items") or []][:limit]


def has_live_pod(api: Api, namespace: str, selector: str) -> bool:
    """Whether ``namespace`` has a pod matching the label ``selector`` that has not ended (one
    pod is asked for, not listed)."""
    page = api.get(collection_path("Pod", namespace), "list Pods", labelSelector=selector, limit=1,
                   fieldSelector="status.phase!=Succeeded,status.phase!=Failed")
    return bool(page.get("items"))


def runtime_class(api: Api, name: str) -> dict | None:
    try:
        return api.get(f"/apis/node.k8s.io/v1/runtimeclasses/{name}", f"get RuntimeClass {name}")
    except NotFound:
        return None


def resource_quotas(api: Api, namespace: str) -> list[dict]:
    return api.get(collection_path("ResourceQuota", namespace), "list ResourceQuotas").get("items", [])


def read_log(api: Api, namespace: str, pod: str, container: str, limit_bytes: int) -> tuple[bytes, bool]:
    """Read at most ``limit_bytes`` of a container's log; returns (data, truncated).

    The server-side ``limitBytes`` bounds what the apiserver sends; reading the stream in chunks
    and stopping at the limit bounds what we hold even if a server ignored it: an episode's
    output is hostile input (docs/design.md §4).
    """
    response = api.raw(
        object_path("Pod", pod, namespace) + "/log",
        f"read log of pod {namespace}/{pod}",
        container=container,
        limitBytes=limit_bytes + 1,
    )
    chunks, size = [], 0
    try:
        for chunk in response.iter_content(chunk_size=65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit_bytes:
                break
    finally:
        response.close()
    data = b"".join(chunks)
    return data[:limit_bytes], size > limit_bytes


def batch_status_patch(namespace: str, name: str, patch: dict) -> tuple[str, dict, str]:
    """(path, body, what) of a merge patch of a RolloutBatch's status."""
    return (object_path("RolloutBatch", name, namespace) + "/status", {"status": patch},
            f"patch status of RolloutBatch {namespace}/{name}")


def patch_batch_status(api: Api, namespace: str, name: str, patch: dict) -> dict:
    return api.merge_patch(*batch_status_patch(namespace, name, patch))


PUT_TRIES = 3   # a ConfigMap someone keeps deleting and creating under our name: the policy retries later


def batch_alive(api: Api, namespace: str, name: str, uid: str) -> bool:
    """Whether the RolloutBatch of that uid exists and is not being deleted."""
    live = get_or_none(api, "RolloutBatch", name, namespace)
    meta = (live or {}).get("metadata") or {}
    return meta.get("uid") == uid and not meta.get("deletionTimestamp")


def put_configmap(api: Api, obj: dict, batch_uid: str, resource_version: str | None = None,
                  also_ours: Callable[[dict], bool] | None = None, *, batch: tuple[str, str] | None = None) -> dict:
    """Create or replace a ConfigMap we own (the results document); returns the live object.

    With the ``resource_version`` of our last write the replace is one PUT; otherwise (first
    write, or someone else changed it) a create, or a read, an ownership check and a PUT.

    ``batch`` (namespace, name): the RolloutBatch the ConfigMap belongs to. It is created only
    while that batch lives: a write still in flight when the batch was deleted (a worker thread
    outlives its cancelled task) would otherwise make the ConfigMap again after the garbage
    collector or the finalizer removed it, an orphan left for the collector to find. OwnerGone then.
    """
    meta = obj["metadata"]
    path = object_path("ConfigMap", meta["name"], meta["namespace"])
    if resource_version:
        body = dict(obj, metadata=dict(meta, resourceVersion=resource_version))
        try:
            return api.replace(path, body, f"replace {_describe(obj)}")
        except (Conflict, NotFound) as exc:
            # Someone else wrote it (a second operator on the cluster, a user): worth a look.
            log.warning("%s changed since our last write (%s): reading it again", _describe(obj), exc)
    if batch is not None and not batch_alive(api, batch[0], batch[1], batch_uid):
        raise OwnerGone(f"not creating {_describe(obj)}: its RolloutBatch {batch[0]}/{batch[1]} is gone or being "
                       "deleted")
    for _ in range(PUT_TRIES):
        try:
            return api.create(collection_path("ConfigMap", meta["namespace"]), obj, f"create {_describe(obj)}")
        except Conflict:
            existing = get_or_none(api, "ConfigMap", meta["name"], meta["namespace"])
        if existing is None:
            continue   # deleted between the create's 409 and the read: create it again
        if not owned_by(existing, batch_uid) and not (also_ours is not None and also_ours(existing)):
            raise NotOurs(f"{_describe(obj)} already exists and is not owned by this RolloutBatch")
        body = dict(obj, metadata=dict(meta, resourceVersion=existing["metadata"]["resourceVersion"]))
        return api.replace(path, body, f"replace {_describe(obj)}")
    raise Conflict(f"create {_describe(obj)}: created and deleted by someone else {PUT_TRIES} times in a row")


def delete_owned(api: Api, kind: str, name: str, namespace: str | None, batch_uid: str,
                 *, propagation: str = "Background") -> bool:
    """Delete an object after checking our label; UID precondition so a namesake is never hit.

    Returns True when the object is gone or going, False when it was never there.
    """
    live = get_or_none(api, kind, name, namespace)
    if live is None:
        return False
    if not owned_by(live, batch_uid):
        raise NotOurs(f"{_describe(live)} is not owned by this RolloutBatch; not deleting it")
    if (live.get("metadata") or {}).get("deletionTimestamp"):
        return True  # already going: a second DELETE would only be answered 409
    body: dict[str, Any] = {
        "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation,
        "preconditions": {"uid": live["metadata"]["uid"]},
    }
    try:
        api.delete(object_path(kind, name, namespace), f"delete {_describe(live)}", body)
    except (NotFound, Conflict):
        pass  # gone meanwhile, or replaced by a namesake we must not touch
    return True


def suspend_job(api: Api, name: str, namespace: str, batch_uid: str, job_uid: str | None = None) -> bool:
    """Suspend the batch's Job (spec.stop): the Job controller deletes its active pods, each with
    its grace period, and starts none. The uid in the patch is a precondition, so a namesake
    made since is never touched. False when there is no such Job of ours (nothing to stop)."""
    live = get_or_none(api, "Job", name, namespace)
    if live is None or not owned_by(live, batch_uid):
        return False
    uid = live["metadata"]["uid"]
    if job_uid is not None and uid != job_uid:
        return False
    if (live.get("spec") or {}).get("suspend") is True and \
            ((live.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_STOPPED) == "true":
        return True
    patch = {"metadata": {"uid": uid, "annotations": {ANNOTATION_STOPPED: "true"}}, "spec": {"suspend": True}}
    try:
        api.merge_patch(object_path("Job", name, namespace), patch, f"suspend Job {namespace}/{name}")
    except (NotFound, Conflict):
        return False   # gone meanwhile, or replaced by a namesake we must not touch
    return True


def job_workload(api: Api, namespace: str, job_uid: str) -> dict | None:
    """The Workload Kueue made for our Job (its job-uid label and its controller, the Job); the
    newest when Kueue made several. None before Kueue made one, or when Kueue is not installed."""
    try:
        page = api.get(collection_path("Workload", namespace), "list Workloads",
                       labelSelector=f"{queueing.JOB_UID_LABEL}={job_uid}")
    except NotFound:
        return None   # no Workload kind: Kueue is not installed
    ours = [w for w in page.get("items") or []
            if any(isinstance(o, dict) and o.get("uid") == job_uid
                   for o in (w.get("metadata") or {}).get("ownerReferences") or [])]
    return max(ours, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "", default=None)


def deactivate_workload(api: Api, namespace: str, job_uid: str) -> bool:
    """spec.stop of a queued batch: its Workload's spec.active false, so Kueue neither admits it
    nor unsuspends the Job the stop suspended (core.queueing). False when there is none."""
    workload = job_workload(api, namespace, job_uid)
    if workload is None:
        return False
    meta = workload["metadata"]
    try:
        api.merge_patch(object_path("Workload", meta["name"], namespace),
                        {"metadata": {"uid": meta["uid"]}, "spec": {"active": False}},
                        f"deactivate Workload {namespace}/{meta['name']}")
    except (NotFound, Conflict):
        return False
    return True


def patch_pod(api: Api, namespace: str, name: str, ops: list[dict]) -> bool:
    """Apply a JSON patch to a pod (core.episode_images). False when the pod is gone; a failed
    ``test`` of the patch raises Invalid (the API answers 422)."""
    try:
        api.json_patch(object_path("Pod", name, namespace), ops, f"set the image of pod {namespace}/{name}")
    except NotFound:
        return False
    return True


def evict_pod(api: Api, namespace: str, name: str, uid: str | None = None) -> None:
    """Evict a pod (policy/v1 Eviction): the API server marks it with the ``DisruptionTarget``
    condition (reason ``EvictionByEvictionAPI``) and deletes it with its grace period, as a drain
    does; unlike a delete, a PodDisruptionBudget may refuse it for now (``TooManyRequests``,
    429). ``uid`` is a precondition (Conflict when the pod of that name is another one).
    NotFound when there is no such pod; evicting a pod already terminating succeeds."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    api.create(object_path("Pod", name, namespace) + "/eviction", body, f"evict pod {namespace}/{name}")


def delete_batch(api: Api, namespace: str, name: str, uid: str) -> None:
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
    try:
        api.delete(object_path("RolloutBatch", name, namespace), f"delete RolloutBatch {namespace}/{name}", body)
    except (NotFound, Conflict):
        pass
