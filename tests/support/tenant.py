"""A hostile neighbour: a user with only namespace rights, for tests of what such a user can do.

``Tenant(namespace)`` binds the built-in ``edit`` ClusterRole (which aggregates the project's
``rolloutbatch-edit``) to a ServiceAccount of that namespace through a RoleBinding, and runs
kubectl impersonating it (``--as``). What it creates is created under its own identity, never
the operator's or the admin's, so a test proves what a neighbour with those rights can forge.
"""
from __future__ import annotations

import json
import subprocess

from tests.support.operator import kubectl


class Tenant:
    def __init__(self, namespace: str, name: str = "neighbour") -> None:
        self.namespace, self.name = namespace, name
        self.user = f"system:serviceaccount:{namespace}:{name}"
        kubectl("create", "serviceaccount", name, "-n", namespace, check=False)
        kubectl("create", "rolebinding", f"{name}-edit", "--clusterrole=edit", f"--serviceaccount={namespace}:{name}",
                "-n", namespace, check=False)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        return kubectl(f"--as={self.user}", *args, input=input, check=check, timeout=timeout)

    def create(self, obj: dict, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """``kubectl create`` of one object as this tenant, in its namespace unless told."""
        return self.kubectl("create", "-n", namespace or self.namespace, "-f", "-", input=json.dumps(obj),
                            check=check)

    def can(self, verb: str, resource: str, namespace: str | None = None) -> bool:
        """``kubectl auth can-i``; a subresource as ``pods/exec`` (kubectl reads ``pods/exec``
        itself as the pod named exec)."""
        resource, _, sub = resource.partition("/")
        extra = [f"--subresource={sub}"] if sub else []
        out = self.kubectl("auth", "can-i", verb, resource, *extra, "-n", namespace or self.namespace, check=False)
        return out.stdout.strip() == "yes"
