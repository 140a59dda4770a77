"""The leader-election Lease (coordination.k8s.io/v1) and its namespace: the API calls, by name.

Plain functions of an ``Api`` like ``kube.resources``; the elector (``service.leadership``) calls
them from its own thread, so they block. Errors are the ``kube.errors`` types the ``Api`` raises:
``Conflict`` when an update's resourceVersion is no longer the live one, or a create finds the
Lease already made (another candidate won that race), ``NotFound`` when the namespace is missing.
"""

from __future__ import annotations

from rolloutbatch.kube import resources
from rolloutbatch.kube.errors import Conflict, Forbidden, NotFound


def _path(namespace: str, name: str | None = None) -> str:
    return resources.object_path("Lease", name, namespace) if name else resources.collection_path("Lease", namespace)


def get_lease(api, namespace: str, name: str) -> dict | None:
    """The Lease, or None when there is none."""
    try:
        return api.get(_path(namespace, name), f"get Lease {namespace}/{name}")
    except NotFound:
        return None


def create_lease(api, namespace: str, name: str, spec: dict, labels: dict | None = None) -> dict:
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}
    return api.create(_path(namespace), body, f"create Lease {namespace}/{name}")


def update_lease(api, lease: dict, spec: dict) -> dict:
    """PUT ``spec`` over ``lease`` as read: ``Conflict`` when it changed since (its resourceVersion)."""
    meta = lease["metadata"]
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion", "labels") if k in meta},
            "spec": spec}
    return api.replace(_path(meta["namespace"], meta["name"]), body,
                       f"update Lease {meta['namespace']}/{meta['name']}")


def ensure_namespace(api, name: str, labels: dict) -> bool:
    """Create the namespace when it is missing; True when this call created it. A kubeconfig
    that may not read namespaces leaves it unchecked (False): it may well exist, and the Lease's
    own requests say so if it does not. ``Forbidden`` on the create is the caller's to explain."""
    try:
        api.get(resources.object_path("Namespace", name), f"get namespace {name}")
        return False
    except Forbidden:
        return False
    except NotFound:
        pass
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}
    try:
        api.create(resources.collection_path("Namespace"), body, f"create namespace {name}")
    except Conflict:   # created meanwhile by another operator starting
        return False
    return True
