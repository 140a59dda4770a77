"""The devcluster's control plane behaves like Kubernetes: admission, quota, GC, namespaces.

None of these tests needs a pod to RUN (they only create objects), so they pass as soon as
etcd, kube-apiserver and kube-controller-manager are up, with or without nodes.
"""
from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.kube import create_namespace, delete_namespace, gone, raw_get, unique_name, wait_for

pytestmark = pytest.mark.cluster

SLEEPER = {"name": "main", "image": "python:3.12-alpine",
           "command": ["python", "-c", "import time; time.sleep(3600)"]}


def test_components_report_healthy(kube_api):
    """/readyz of the apiserver covers etcd; the version is the one localkube was built as."""
    assert raw_get(kube_api, "/readyz") == (200, "ok")
    assert client.VersionApi(kube_api).get_code().git_version.startswith("v1.37")


def test_runtime_class_cube_has_overhead(kube_api):
    rc = client.NodeV1Api(kube_api).read_runtime_class("cube")
    assert rc.handler == "cube"
    assert rc.overhead.pod_fixed == {"cpu": "250m", "memory": "120Mi"}


def test_runtime_class_overhead_lands_on_pod(core, kube_namespace):
    """RuntimeClass admission copies the overhead into the pod spec at creation."""
    pod = core.create_namespaced_pod(kube_namespace, {
        "metadata": {"name": "with-overhead"},
        "spec": {"runtimeClassName": "cube", "restartPolicy": "Never",
                 "nodeSelector": {"devcluster.test/nowhere": "true"},  # never runs
                 "containers": [SLEEPER]},
    })
    assert pod.spec.overhead == {"cpu": "250m", "memory": "120Mi"}


def test_default_service_account_and_token(core, kube_namespace):
    """serviceaccount controller creates `default`; TokenRequest signs a token with our SA key."""
    token = core.create_namespaced_service_account_token(
        "default", kube_namespace, {"spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"],
                                             "expirationSeconds": 600}})
    assert token.status.token.count(".") == 2
    # root-ca-certificate-publisher puts the cluster CA in every namespace
    cm = wait_for(lambda: core.read_namespaced_config_map("kube-root-ca.crt", kube_namespace),
                  timeout=30, what="kube-root-ca.crt")
    assert "BEGIN CERTIFICATE" in cm.data["ca.crt"]


def test_psa_restricted_namespace_rejects_privileged_pod(kube_api, core):
    ns = create_namespace(kube_api, "psa", labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(ns, {
                "metadata": {"name": "privileged"},
                "spec": {"containers": [dict(SLEEPER, securityContext={"privileged": True})]},
            })
        assert err.value.status == 403
        assert "violates PodSecurity" in err.value.body
        # the same namespace admits a pod that meets the restricted profile
        core.create_namespaced_pod(ns, {
            "metadata": {"name": "restricted-ok"},
            "spec": {
                "nodeSelector": {"devcluster.test/nowhere": "true"},
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [dict(SLEEPER, securityContext={
                    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})],
            },
        })
    finally:
        delete_namespace(kube_api, ns)


def test_resource_quota_is_enforced(core, kube_namespace):
    core.create_namespaced_resource_quota(kube_namespace, {
        "metadata": {"name": "q"}, "spec": {"hard": {"pods": "1", "configmaps": "100"}}})
    # the quota controller must have computed usage before admission enforces it
    wait_for(lambda: (core.read_namespaced_resource_quota("q", kube_namespace).status.used or {}).get("pods") == "0",
             timeout=30, what="quota status.used computed")
    parked = {"nodeSelector": {"devcluster.test/nowhere": "true"}, "containers": [SLEEPER]}
    core.create_namespaced_pod(kube_namespace, {"metadata": {"name": "one"}, "spec": parked})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(kube_namespace, {"metadata": {"name": "two"}, "spec": parked})
    assert err.value.status == 403
    assert "exceeded quota" in err.value.body


def test_deleting_owner_garbage_collects_dependents(core, kube_namespace):
    owner = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(kube_namespace, {"metadata": {
        "name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner.metadata.uid}],
    }})
    core.delete_namespaced_config_map("owner", kube_namespace)  # background propagation
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("dependent", kube_namespace)),
             timeout=60, what="dependent configmap garbage-collected")


def test_foreground_deletion_waits_for_dependents(core, kube_namespace):
    owner = core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "fg-owner"}})
    core.create_namespaced_config_map(kube_namespace, {"metadata": {
        "name": "fg-dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "fg-owner",
                             "uid": owner.metadata.uid, "blockOwnerDeletion": True}],
    }})
    core.delete_namespaced_config_map("fg-owner", kube_namespace,
                                      body={"propagationPolicy": "Foreground"})
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("fg-owner", kube_namespace)),
             timeout=60, what="foreground owner deleted")
    assert gone(lambda: core.read_namespaced_config_map("fg-dependent", kube_namespace))


def test_namespace_deletion_finishes(kube_api, core):
    ns = create_namespace(kube_api, "nsdel")
    for i in range(5):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
    core.create_namespaced_pod(ns, {"metadata": {"name": "parked"}, "spec": {
        "nodeSelector": {"devcluster.test/nowhere": "true"}, "containers": [SLEEPER]}})
    delete_namespace(kube_api, ns, wait=True, timeout=120)


def test_job_objects_are_accepted_and_controlled(kube_api, kube_namespace):
    """The Job controller creates pods for a Job (whether they run is the kubelet's part)."""
    batch = client.BatchV1Api(kube_api)
    core = client.CoreV1Api(kube_api)
    name = unique_name("parked")
    batch.create_namespaced_job(kube_namespace, {
        "metadata": {"name": name},
        "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0,
                 "template": {"spec": {"restartPolicy": "Never",
                                       "nodeSelector": {"devcluster.test/nowhere": "true"},
                                       "containers": [SLEEPER]}}},
    })
    pods = wait_for(lambda: len(core.list_namespaced_pod(kube_namespace, label_selector=f"job-name={name}").items) == 2,
                    timeout=30, what="job controller created 2 pods")
    assert pods
