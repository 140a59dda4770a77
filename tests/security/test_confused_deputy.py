"""Confused deputy: a submitter gets nothing through the operator that its own rights would not give.

The submitter is the adversary of docs/design.md §8.1: a ServiceAccount of the namespace holding
only ``rolloutbatch-edit`` there (manifests/rbac/user_roles.yaml), acting through kubectl --as.
It cannot read ConfigMaps nor create pods; the operator creates with its own, wider rights, so
every batch below must be refused (by the CRD at create time, or Stalled before anything exists),
and the refusal must show nothing of what the submitter could not read.
"""
from __future__ import annotations

import json

import pytest

from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS
from tests.support.batches import condition, episode_batch, get, unique, wait_finished
from tests.support.operator import ROOT, kubectl
from tests.support.tenant import Tenant

pytestmark = [pytest.mark.cluster]

GOOD = '''
import json, os, time
def emit(e, **f): print(json.dumps(dict(event=e, at=time.time(), episode_id=os.environ["EPISODE_ID"], **f)), flush=True)
emit("ready"); emit("reward", reward=1)
'''


class Submitter(Tenant):
    """A Tenant with the rights of the project's submitter role only, not the whole ``edit``."""

    def __init__(self, namespace: str, name: str = "submitter") -> None:
        roles = ROOT / "manifests" / "rbac" / "user_roles.yaml"
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(roles))
        self.namespace, self.name = namespace, name
        self.user = f"system:serviceaccount:{namespace}:{name}"
        kubectl("create", "serviceaccount", name, "-n", namespace, check=False)
        kubectl("create", "rolebinding", f"{name}-rolloutbatches", "--clusterrole=rolloutbatch-edit",
                f"--serviceaccount={namespace}:{name}", "-n", namespace, check=False)


@pytest.fixture
def submitter(namespace):
    who = Submitter(namespace)
    assert who.can("create", "rolloutbatches")
    assert not who.can("get", "configmaps") and not who.can("create", "pods")
    return who


def created_children(uid: str) -> list[str]:
    """Whatever exists of the batch's sandbox: namespaces, Jobs, pods with its uid label."""
    out = kubectl("get", "namespaces,jobs,pods", "-A", "-l", f"rl.agentruntime.io/batch-uid={uid}", "-o", "name")
    return out.stdout.split()


def refused_at_create(submitter: Submitter, namespace: str, **spec) -> str:
    name = unique("deputy")
    out = submitter.create(episode_batch(name, GOOD, episodes=1, **spec), check=False)
    assert out.returncode != 0, f"the API server accepted {spec}"
    assert get(name, namespace) is None
    return out.stderr


def test_a_system_priority_class_is_refused_at_create(operator_process, namespace, submitter):
    for name in ("system-node-critical", "system-cluster-critical"):
        err = refused_at_create(submitter, namespace, podTemplate={"priorityClassName": name})
        assert "must not be a system PriorityClass" in err, err


@pytest.mark.parametrize("toleration", [
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
], ids=["blanket", "blanket-noschedule", "control-plane", "unschedulable", "unreachable-forever"])
def test_tolerations_of_every_taint_or_of_a_protective_one_are_refused_at_create(operator_process, namespace,
                                                                                 submitter, toleration):
    err = refused_at_create(submitter, namespace, podTemplate={"tolerations": [toleration]})
    assert "spec.podTemplate.tolerations" in err and ("needs a key" in err or "must not tolerate" in err), err


@pytest.mark.exclusive   # its priorities would preempt other tests' pods
def test_a_priority_class_above_the_user_range_cannot_exist_and_the_top_of_it_runs(operator_process, namespace,
                                                                                  submitter):
    """The live value check (PriorityClassNotAllowed) is a second line: the API server itself
    refuses a class above 1000000000 unless it is one of the system-* ones the CRD refuses."""
    high = unique("rb-test-high")
    refused = kubectl("create", "-f", "-", check=False, input=json.dumps(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high},
         "value": 1_000_000_001}))
    assert refused.returncode != 0 and "1000000000" in refused.stderr, refused.stderr
    top = unique("rb-test-top")
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                  "metadata": {"name": top}, "value": 1_000_000_000}))
    try:
        name = unique("deputy")
        submitter.create(episode_batch(name, GOOD, episodes=1, podTemplate={
            "priorityClassName": top, "tolerations": [{"key": "example.com/rl", "operator": "Exists"}]}))
        obj = wait_finished(name, namespace, timeout=120, operator=operator_process)
        assert obj["status"]["phase"] == "Succeeded", obj["status"]
    finally:
        kubectl("delete", "priorityclass", top, check=False)


SECRET = {"input-0.json": '{"token": "hunter2-a8f3"}', "db-password": "hunter2-a8f3", "tls.key": "-----BEGIN"}


@pytest.mark.parametrize("isolation", ["Dedicated", "Shared"])
def test_inputs_from_a_configmap_not_opted_in_stall_and_show_nothing_of_it(operator_process, namespace, submitter,
                                                                          isolation):
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-secrets"}, "data": SECRET}))
    name = unique("deputy")
    submitter.create(episode_batch(name, GOOD, episodes=1, isolation={"namespace": isolation},
                                   inputsFrom={"configMaps": ["app-secrets"], "count": 1}))
    obj = wait_finished(name, namespace, timeout=60, operator=operator_process)
    stalled = condition(obj, "Stalled")
    assert obj["status"]["phase"] == "Failed" and stalled["reason"] == "InputsNotFound", obj["status"]
    assert "app-secrets" in stalled["message"] and f"{LABEL_INPUTS}={INPUTS_OPT_IN}" in stalled["message"]
    assert created_children(obj["metadata"]["uid"]) == []
    seen = json.dumps(obj["status"])
    events = kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    results = get(f"{name}-results", namespace, kind="configmap")
    for text in (seen, events, json.dumps(results or {})):
        for secret in ("input-0", "db-password", "tls.key", "hunter2", "BEGIN"):
            assert secret not in text, (secret, text[:2000])
