"""manifests/manager and the leader-election RBAC: two replicas that hand over (docs/design.md §5.15)."""
from __future__ import annotations

import pathlib

import yaml

from rolloutbatch.core import leadership

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(path: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((ROOT / path).read_text()) if doc]


def test_two_replicas_roll_one_at_a_time_on_separate_nodes_where_possible():
    (deploy,) = load("manifests/manager/deployment.yaml")
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    (container,) = pod["containers"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert deploy["metadata"]["namespace"] == leadership.DEFAULT_NAMESPACE


def test_the_pdb_keeps_one_and_is_installed():
    (pdb,) = load("manifests/manager/pdb.yaml")
    (deploy,) = load("manifests/manager/deployment.yaml")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": deploy["spec"]["selector"]["matchLabels"]}}
    assert "pdb.yaml" in load("manifests/manager/kustomization.yaml")[0]["resources"]


def test_the_lease_role_is_namespaced_and_least():
    role, binding = load("manifests/rbac/leader_election_role.yaml")
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", leadership.DEFAULT_NAMESPACE)
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "resourceNames": [leadership.LEASE_NAME], "verbs": ["get", "update"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rolloutbatch-operator",
                                    "namespace": leadership.DEFAULT_NAMESPACE}]
    assert "leader_election_role.yaml" in load("manifests/rbac/kustomization.yaml")[0]["resources"]
    (namespace,) = load("manifests/manager/namespace.yaml")
    assert namespace["metadata"]["labels"] == leadership.NAMESPACE_LABELS   # what a local operator creates
