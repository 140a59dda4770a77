"""The warm pools' rights (docs/design.md §5.17), wherever the operator's and the users' rights are
written: the kustomize ClusterRole and the namespaced Role (tests/unit/test_chart.py shows the
chart renders the same objects), and the users' aggregated edit and view roles."""
from __future__ import annotations

import pathlib

import pytest
import yaml

from rolloutbatch.core import pool_children
from rolloutbatch.core.pool_spec import PoolRef
from rolloutbatch.kube import pool_storage
from rolloutbatch.kube.errors import Conflict

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP = "rl.agentruntime.io"
# Both installs watch pools and write their status (a namespaced one says it cannot keep them).
OPERATOR = {
    (GROUP, "rolloutpools"): {"get", "list", "watch", "patch", "update"},
    (GROUP, "rolloutpools/status"): {"get", "patch", "update"},
}
# Only the cluster-wide install keeps pools (core.scope: a pool's namespace is its own).
CLUSTERWIDE = {
    ("", "pods"): {"get", "list", "watch", "patch", "create", "delete"},   # a pool's warm pods, read one by one too
    ("", "pods/attach"): {"get", "create"},  # a claimed pod gets its episode: a WebSocket attach is both
    ("", "pods/eviction"): {"create"},     # one that cannot get it is evicted
}


def granted(rules: list[dict]) -> dict[tuple[str, str], set[str]]:
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    return verbs


def role(path: str, kind: str, name: str) -> dict:
    (doc,) = [d for d in yaml.safe_load_all((ROOT / path).read_text())
              if d and d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("path, kind", [("manifests/rbac/role.yaml", "ClusterRole"),
                                        ("manifests/namespaced/role.yaml", "Role")])
def test_the_operator_may_run_pools(path, kind):
    verbs = granted(role(path, kind, "rolloutbatch-operator")["rules"])
    clusterwide = kind == "ClusterRole"
    for resource, wanted in OPERATOR.items():
        assert verbs.get(resource) == wanted, (resource, verbs.get(resource))
    for resource, wanted in CLUSTERWIDE.items():
        if clusterwide:
            assert verbs.get(resource) == wanted, (resource, verbs.get(resource))
        else:
            assert not verbs.get(resource, set()) & {"create", "delete"}, (resource, verbs.get(resource))
    # what the contract does not grant stays out: the pools' objects are not the operator's to create
    assert "create" not in verbs[(GROUP, "rolloutpools")] and (GROUP, "rolloutpools/finalizers") not in verbs


def test_users_manage_pools_as_they_manage_batches():
    edit = granted(role("manifests/rbac/user_roles.yaml", "ClusterRole", "rolloutbatch-edit")["rules"])
    view = granted(role("manifests/rbac/user_roles.yaml", "ClusterRole", "rolloutbatch-view")["rules"])
    assert edit[(GROUP, "rolloutpools")] == edit[(GROUP, "rolloutbatches")]
    assert edit[(GROUP, "rolloutpools/status")] == edit[(GROUP, "rolloutbatches/status")] == {"get"}
    assert edit[(GROUP, "rolloutpools/scale")] == {"get", "patch", "update"}     # kubectl scale rp/NAME
    for resource in ("rolloutpools", "rolloutpools/status", "rolloutpools/scale"):
        assert view[(GROUP, resource)] == view[(GROUP, "rolloutbatches")] == {"get", "list", "watch"}


class PolicyApi:
    """An API server where the pool's NetworkPolicy exists with the other network mode: records
    the verbs the operator's calls need."""

    VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

    def __init__(self, existing: dict) -> None:
        self.existing, self.verbs = existing, set()

    def create(self, path, body, what, **_):
        self.verbs.add("create")
        raise Conflict("exists")

    def get(self, path, what, **_):
        self.verbs.add("get")
        return self.existing

    def replace(self, path, body, what):
        self.verbs.add("update")
        return body


def test_a_pools_network_change_is_a_verb_the_operator_has():
    """A pool's policy made otherwise (by an older operator: its one policy followed spec.network)
    is replaced (an update), which the cluster-wide role must grant (it granted create and delete
    only: a 403)."""
    ref = PoolRef(name="warm", namespace="team-a", uid="pool-uid-1")
    wanted, _ = pool_children.network_policies(ref)
    api = PolicyApi({"metadata": {**wanted["metadata"], "resourceVersion": "7"},
                     "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})
    pool_storage._ensure(api, wanted, ref.uid)
    assert "update" in api.verbs
    granted_verbs = granted(role("manifests/rbac/role.yaml", "ClusterRole", "rolloutbatch-operator")["rules"])
    assert api.verbs <= granted_verbs[("networking.k8s.io", "networkpolicies")]
