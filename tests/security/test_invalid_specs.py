"""Bad input: every invalid RolloutBatch is refused by the API server with a readable message.

Table-driven against the real kube-apiserver with the shipped CRD: the schema and its CEL rules
are the first line of defence, so nothing invalid ever reaches the operator.
"""
from __future__ import annotations

import copy
import json

import pytest

from tests.support import kube
from tests.support.batches import unique
from tests.support.operator import install_crd, kubectl

pytestmark = pytest.mark.cluster

GOOD_SPEC = {"episodes": 2, "task": {"files": {"episode.py": "print('hi')"}}}


def with_(path: str, value) -> dict:
    spec = copy.deepcopy(GOOD_SPEC)
    node = spec
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return spec


DELETE = object()

CASES = [
    ("zero episodes", with_("episodes", 0), "should be greater than or equal to 1"),
    ("negative episodes", with_("episodes", -3), "should be greater than or equal to 1"),
    ("too many episodes", with_("episodes", 100001), "should be less than or equal to 100000"),
    ("episodes as string", with_("episodes", "ten"), 'must be of type integer'),
    ("missing episodes", with_("episodes", DELETE), "spec.episodes: Required value"),
    ("missing task", with_("task", DELETE), "spec.task is required, unless spec.poolRef names a pool"),
    ("a task and a pool", with_("poolRef", {"name": "warm"}), "spec.task and spec.poolRef are exclusive"),
    ("empty task files", with_("task.files", {}), "should have at least 1 properties"),
    ("parallelism above episodes", with_("parallelism", 3), "spec.parallelism must be less than or equal to spec.episodes"),
    ("zero parallelism", with_("parallelism", 0), "should be greater than or equal to 1"),
    ("min successful above episodes", with_("minSuccessfulEpisodes", 5), "spec.minSuccessfulEpisodes must be less than or equal to spec.episodes"),
    ("inputs of the wrong length", with_("inputs", [{}, {}, {}]), "spec.inputs must be empty or have exactly spec.episodes / spec.samplesPerInput entries"),
    ("inputs that are not objects", with_("inputs", [1, 2]), "spec.inputs[0] in body must be of type object"),
    ("negative episode timeout", with_("episodeTimeoutSeconds", -1), "should be greater than or equal to 1"),
    ("negative batch deadline", with_("activeDeadlineSeconds", -5), "should be greater than or equal to 1"),
    ("episode timeout above deadline", {**GOOD_SPEC, "episodeTimeoutSeconds": 100, "activeDeadlineSeconds": 50},
     "spec.episodeTimeoutSeconds must not exceed spec.activeDeadlineSeconds"),
    ("unknown isolation", with_("isolation", {"namespace": "Private"}), 'Unsupported value: "Private"'),
    ("unknown network mode", with_("isolation", {"network": "Open"}), 'Unsupported value: "Open"'),
    ("unknown cleanup policy", with_("cleanup", {"sandbox": "Sometimes"}), 'Unsupported value: "Sometimes"'),
    ("negative retries", with_("retries", {"infrastructure": -1}), "should be greater than or equal to 0"),
    ("too many retries", with_("retries", {"infrastructure": 50}), "should be less than or equal to 10"),
    ("reserved env name", with_("env", [{"name": "EPISODE_ID", "value": "x"}]), "spec.env must not set EPISODE_ID"),
    ("invalid env name", with_("env", [{"name": "1=2", "value": "x"}]), "spec.env[0].name"),
    ("env valueFrom other than secretKeyRef", with_("env", [{"name": "A", "valueFrom": {
        "fieldRef": {"fieldPath": "status.podIP"}}}]), 'unknown field "spec.env[0].valueFrom.fieldRef"'),
    ("env secretKeyRef optional", with_("env", [{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k", "optional": True}}}]),
     'unknown field "spec.env[0].valueFrom.secretKeyRef.optional"'),
    ("env value and valueFrom", with_("env", [{"name": "A", "value": "x", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}}}]), "an env entry sets value or valueFrom, not both"),
    ("verifier env secretKeyRef bad key", with_("verifier", {"env": [{"name": "A", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": ".."}}}]}), "spec.verifier.env[0].valueFrom.secretKeyRef.key"),
    ("invalid resource quantity", with_("resources", {"limits": {"cpu": "lots"}}), "spec.resources.limits.cpu"),
    ("invalid runtime class name", with_("runtimeClassName", "Not_Valid"), "spec.runtimeClassName"),
    ("relative mount path", with_("task.mountPath", "task"), "spec.task.mountPath"),
    ("unknown spec field", {**GOOD_SPEC, "replicas": 3}, 'unknown field "spec.replicas"'),
]


@pytest.fixture(scope="module")
def namespace():
    install_crd()
    name = unique("invalid")
    kubectl("create", "namespace", name)
    kube.OWN_NAMESPACES.add(name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("title,spec,expected", CASES, ids=[c[0] for c in CASES])
def test_invalid_spec_is_refused(namespace, title, spec, expected):
    obj = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
           "metadata": {"name": "bad", "namespace": namespace}, "spec": spec}
    out = kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0, f"{title}: accepted"
    assert expected in out.stderr, f"{title}: {out.stderr}"


def test_name_too_long_is_refused(namespace):
    obj = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
           "metadata": {"name": "x" * 60, "namespace": namespace}, "spec": GOOD_SPEC}
    out = kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0 and "metadata.name must be at most 55 characters" in out.stderr, out.stderr


def test_spec_is_immutable(namespace):
    name = unique("immutable")
    obj = {"apiVersion": "rl.agentruntime.io/v1alpha1", "kind": "RolloutBatch",
           "metadata": {"name": name, "namespace": namespace},
           # cleanup Never and a runtime class that does not exist: the operator (if running)
           # stalls it without touching anything, and the object stays for the edit.
           "spec": {**GOOD_SPEC, "runtimeClassName": "immutable-test-none"}}
    kubectl("create", "-f", "-", input=json.dumps(obj))
    out = kubectl("patch", "rb", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"episodes":3}}', check=False)
    assert out.returncode != 0 and "spec is immutable" in out.stderr, out.stderr
