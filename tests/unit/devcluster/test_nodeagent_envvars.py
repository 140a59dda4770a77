"""devcluster.nodeagent.envvars: container environment and command."""
from __future__ import annotations

import base64

import pytest

from devcluster.nodeagent.envvars import (ConfigError, build_command, build_env, expand, field_value,
                                          kubernetes_service_env, referenced_objects, resource_value)

POD = {"metadata": {"name": "p-0", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"},
                    "annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
       "spec": {"nodeName": "devnode-1", "serviceAccountName": "sa"}}
CM = {"data": {"k": "v", "other": "o"}, "binaryData": {"b": base64.b64encode(b"bin").decode()}}
SEC = {"data": {"token": base64.b64encode(b"s3").decode()}}


def _env(container, cms=None, secs=None):
    return build_env(POD, container, base={"PATH": "/bin"}, configmaps=cms or {}, secrets=secs or {},
                     pod_ip="10.244.1.5", host_ip="127.0.0.1", allocatable={"cpu": "32", "memory": "64Gi"})


def test_expand():
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)", env) == "x-y"
    assert expand("$(MISSING)", env) == "$(MISSING)"
    assert expand("$$(A)", env) == "$(A)"
    assert expand("cost $5 $(A", env) == "cost $5 $(A"


def test_field_refs():
    assert field_value(POD, "metadata.annotations['batch.kubernetes.io/job-completion-index']", None, "h") == "3"
    assert field_value(POD, "metadata.labels['app']", None, "h") == "a"
    assert field_value(POD, "status.podIP", "10.0.0.1", "h") == "10.0.0.1"
    assert field_value(POD, "spec.nodeName", None, "h") == "devnode-1"
    assert field_value(POD, "metadata.labels", None, "h") == 'app="a"'
    with pytest.raises(ConfigError):
        field_value(POD, "spec.bogus", None, "h")


def test_values_refs_and_order():
    c = {"env": [{"name": "A", "value": "1"},
                 {"name": "B", "value": "$(A)-$(C)"},
                 {"name": "C", "value": "3"},
                 {"name": "IDX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                 {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                 {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                 {"name": "T", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}}],
         "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}]}
    env = _env(c, {"cm": CM}, {"sec": SEC})
    assert env["B"] == "1-$(C)"  # only earlier variables expand
    assert env["IDX"] == "3" and env["NS"] == "ns" and env["IP"] == "10.244.1.5"
    assert env["K"] == "v" and env["T"] == "s3" and env["CM_other"] == "o" and env["CM_b"] == "bin"
    assert env["PATH"] == "/bin"


def test_missing_references():
    with pytest.raises(ConfigError, match='configmap "nope" not found'):
        _env({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]})
    with pytest.raises(ConfigError, match="couldn't find key"):
        _env({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "zz"}}}]}, {"cm": CM})
    env = _env({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}}],
                "envFrom": [{"secretRef": {"name": "nope", "optional": True}}]})
    assert "X" not in env


def test_resource_field_refs():
    c = {"resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "250m"}}}
    assert resource_value(c, "limits.memory", "1Mi", {}) == "128"
    assert resource_value(c, "requests.cpu", "1m", {}) == "250"
    assert resource_value(c, "requests.cpu", None, {}) == "1"  # rounded up
    assert resource_value(c, "limits.cpu", None, {"cpu": "32"}) == "32"  # node allocatable


def test_build_command():
    env = {"N": "5"}
    assert build_command({"command": ["python", "-c", "x"], "args": ["$(N)"]}, ("python3",), env) == ["python", "-c", "x", "5"]
    assert build_command({"args": ["sh", "-c", "echo"]}, ("sh",), env) == ["sh", "-c", "echo"]
    assert build_command({}, ("python3",), env) == ["python3"]


def test_referenced_objects():
    pod = {"spec": {"containers": [{"envFrom": [{"configMapRef": {"name": "a"}}],
                                    "env": [{"name": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
                    "volumes": [{"name": "v", "configMap": {"name": "b"}},
                                {"name": "p", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}},
                                                                        {"secret": {"name": "s2"}}]}}]}}
    assert referenced_objects(pod) == ({"a", "b", "kube-root-ca.crt"}, {"s", "s2"})


def test_image_entrypoint_and_cmd():
    env = {}
    ep = ("rolloutbatch", "operator")
    assert build_command({}, (), env, ep) == ["rolloutbatch", "operator"]
    assert build_command({"args": ["--metrics-port=8080"]}, (), env, ep) == ["rolloutbatch", "operator", "--metrics-port=8080"]
    assert build_command({"command": ["sh"], "args": ["-c", "x"]}, (), env, ep) == ["sh", "-c", "x"]


def test_kubernetes_service_env_is_what_in_cluster_clients_read():
    env = kubernetes_service_env("10.9.1.1", 443)
    assert env["KUBERNETES_SERVICE_HOST"] == "10.9.1.1" and env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["KUBERNETES_PORT_443_TCP"] == "tcp://10.9.1.1:443"
