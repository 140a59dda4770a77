"""RBAC proven: the operator works under its own ServiceAccount and nothing more.

The rendered install manifests (`kubectl kustomize manifests/default`) are dry-run applied
server-side, the ServiceAccount and its roles are applied for real, and the operator runs with a
token of that ServiceAccount (TokenRequest): a full batch succeeds and is cleaned up. `kubectl
auth can-i` shows what it must not do.
"""
from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.support.batches import apply, episode_batch, unique, wait_finished, wait_gone
from tests.support.operator import ROOT, STATE, OperatorProcess, kubectl

pytestmark = pytest.mark.cluster

SA = "system:serviceaccount:rolloutbatch-system:rolloutbatch-operator"
EPISODE = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); emit("reward", reward=1)
'''


@pytest.fixture(scope="module")
def rendered():
    out = kubectl("kustomize", str(ROOT / "manifests" / "default")).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_install_manifests_pass_a_server_side_dry_run(rendered):
    kinds = {doc["kind"] for doc in rendered}
    assert {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Deployment",
            "Service", "Namespace"} <= kinds
    namespace = [d for d in rendered if d["kind"] == "Namespace"]
    others = [d for d in rendered if d["kind"] != "Namespace"]
    # The namespace must exist for namespaced objects to be dry-run: apply it, dry-run the rest.
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(namespace))
    out = kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-f", "-",
                  input=yaml.safe_dump_all(others))
    assert "deployment.apps/rolloutbatch-operator serverside-applied (server dry run)" in out.stdout


def test_role_has_no_wildcards_or_dangerous_verbs(rendered):
    for doc in rendered:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []), doc["metadata"]["name"]
            assert not {"escalate", "bind", "impersonate"} & set(rule.get("verbs", []))


@pytest.fixture(scope="module")
def operator_identity(rendered, tmp_path_factory):
    wanted = [d for d in rendered if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                                      "Role", "RoleBinding")]
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(wanted))
    token = kubectl("create", "token", "rolloutbatch-operator", "-n", "rolloutbatch-system",
                    "--duration=3600s").stdout.strip()
    admin = yaml.safe_load((STATE / "kubeconfig").read_text())
    cluster = admin["clusters"][0]
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
              "users": [{"name": "operator", "user": {"token": token}}],
              "contexts": [{"name": "operator", "context": {"cluster": cluster["name"], "user": "operator"}}],
              "current-context": "operator"}
    path = pathlib.Path(tmp_path_factory.mktemp("sa")) / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("verb,resource,where", [
    ("list", "secrets", ["--all-namespaces"]),      # Secrets by name only (secrets_role.yaml)
    ("watch", "secrets", ["-n", "default"]),
    ("update", "secrets", ["-n", "default"]),
    # (kubectl auth can-i reads "pods/exec" as the pod named exec: the subresource is a flag)
    ("create", "pods", ["--subresource=exec", "-n", "default"]),   # a claim is an attach, no command
    ("create", "pods", ["--subresource=portforward", "-n", "default"]),
    ("escalate", "clusterroles", []),
    ("bind", "clusterroles", []),
    ("impersonate", "users", []),
    ("delete", "nodes", []),
])
def test_operator_cannot(operator_identity, verb, resource, where):
    out = kubectl("auth", "can-i", verb, resource, *where, f"--as={SA}", check=False)
    assert out.stdout.strip() == "no", (verb, resource, out.stdout, out.stderr)


def test_operator_can_what_it_needs(operator_identity):
    for verb, resource, sub in [("patch", "rolloutbatches.rl.agentruntime.io", "status"), ("create", "jobs.batch", ""),
                                ("patch", "jobs.batch", ""),   # spec.stop suspends the Job
                                ("patch", "pods", ""),         # spec.inputImages: a gated pod's image
                                ("get", "pods", "log"), ("create", "namespaces", ""), ("watch", "pods", ""),
                                ("delete", "networkpolicies.networking.k8s.io", ""),
                                ("list", "servicecidrs.networking.k8s.io", ""),   # ClusterIPs in ipBlocks
                                ("get", "secrets", ""), ("create", "secrets", ""), ("delete", "secrets", ""),
                                # warm pools: the pool watched, its status written; a claimed pod
                                # given its episode by attach, or evicted when it cannot be
                                ("watch", "rolloutpools.rl.agentruntime.io", ""),
                                ("patch", "rolloutpools.rl.agentruntime.io", "status"),
                                # a WebSocket attach is authorized as get, then create
                                ("get", "pods", "attach"), ("create", "pods", "attach"), ("create", "pods", "eviction"),
                                ("create", "pods", ""), ("delete", "pods", "")]:   # a pool's warm pods
        extra = [f"--subresource={sub}"] if sub else []
        out = kubectl("auth", "can-i", verb, resource, *extra, "--all-namespaces", f"--as={SA}", check=False)
        assert out.stdout.strip() == "yes", (verb, resource, sub)


def test_full_batch_under_the_operators_own_token(solo_operator, namespace, operator_identity):
    restricted = OperatorProcess("operator-rbac", env={"KUBECONFIG": str(operator_identity)})
    try:
        restricted.start()
        # An env Secret key (copied into the sandbox), an ipBlock (the Service CIDR is read) and a
        # peer that selects nothing (namespaces and pods are read): each under the operator's rights.
        kubectl("create", "secret", "generic", "llm", "-n", namespace, "--from-literal=api-key=x")
        kubectl("label", "secret", "llm", "-n", namespace, "rl.agentruntime.io/episode-env=true")
        secret_env = [{"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "api-key"}}}]
        egress = [{"to": [{"ipBlock": {"cidr": "203.0.113.7/32"}},
                          {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "no-such-ns"}}}]}]
        name = unique("rbac")
        # An image per input: the pods' patches go through the operator's own rights too.
        apply(episode_batch(name, EPISODE, episodes=3, env=secret_env, isolation={"egress": egress},
                            inputImages=["python:3.11", "", "python:3.12-slim"]), namespace)
        obj = wait_finished(name, namespace, operator=restricted)
        assert obj["status"]["phase"] == "Succeeded" and obj["status"]["succeededEpisodes"] == 3
        warned = kubectl("get", "events", "-n", namespace, "-o", "name", "--field-selector",
                         f"involvedObject.name={name},reason=EgressPeerSelectsNothing").stdout.split()
        assert len(warned) == 1, "the peer check could not read namespaces under the operator's rights"
        wait_gone("namespace", obj["status"]["sandboxNamespace"])  # DeleteOnSuccess, done by the operator
        kubectl("delete", "rb", name, "-n", namespace, "--timeout=60s", timeout=70)
        wait_gone("configmap", f"{name}-results", namespace)
        # Shared: the operator removes the Job and its per-batch NetworkPolicy itself, then the
        # TTL deletes the batch (a refused policy deletion used to stall it and skip the TTL).
        shared = unique("rbac-shared")
        apply(episode_batch(shared, EPISODE, episodes=2, env=secret_env, isolation={"namespace": "Shared"},
                            cleanup={"sandbox": "Always", "ttlSecondsAfterFinished": 3}), namespace)
        obj = wait_finished(shared, namespace, operator=restricted)
        assert obj["status"]["phase"] == "Succeeded", obj["status"]
        wait_gone("rolloutbatch", shared, namespace, timeout=60)
        assert not kubectl("get", "networkpolicies", "-n", namespace, "-o", "name").stdout.strip()
        # the Shared copy of the Secret key went with the sandbox; the user's Secret stays
        assert kubectl("get", "secrets", "-n", namespace, "-o", "name").stdout.split() == ["secret/llm"]
        log = restricted.log_path.read_text(errors="replace")
        assert "Forbidden" not in log and "Service CIDR unknown" not in log and "Not checking whether" not in log
    finally:
        restricted.stop()
