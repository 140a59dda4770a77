"""The RolloutPool CRD (crds/rl.agentruntime.io_rolloutpools.yaml, from core.crd_pool): sample pools
validated against the generated schema, what it refuses, and that the pod fields are the batch's.

The schema is checked by a real JSON-schema validator (tests/support/crd_schema.py). Its CEL rules
are not evaluated there; as tests/unit/test_crd_env.py does for the batch, each rule is evaluated
here by a Python twin written from the rule's text, and a rule without a twin fails the test, so
a new rule cannot go unchecked. The API server's own evaluation is what `kubectl apply` of these
samples shows on the devcluster (README, "Warm pools").
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from rolloutbatch import GROUP, POOL_KIND, POOL_PLURAL, VERSION, crdgen
from rolloutbatch.core import defaults as d
from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.crd import openapi_schema as batch_openapi_schema
from rolloutbatch.core.crd_pool import POOL_OWNED_BATCH_FIELDS, build_pool_crd
from rolloutbatch.core.pool_spec import parse_pool_spec
from rolloutbatch.core.spec_env import SHELL_NAME_PATTERN
from tests.support import crd_schema

CRD = crd_schema.load_crd(crd_schema.ROOT / "crds" / crdgen.POOL_FILE)
VERSION_ = CRD["spec"]["versions"][0]
SCHEMA = crd_schema.openapi_schema(CRD)
SPEC, STATUS = SCHEMA["properties"]["spec"], SCHEMA["properties"]["status"]
BATCH_SPEC = batch_openapi_schema()["properties"]["spec"]

MINIMAL = {"size": 2, "task": {"files": {"prepare.sh": "pip install -r /task/requirements.txt"}}}
FULL = {
    "size": 3, "maxSize": 8, "image": "python:3.12-slim", "runtimeClassName": "gvisor",
    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": 1, "memory": "1Gi"}},
    "env": [{"name": "PIP_INDEX_URL", "value": "http://mirror/simple"}, {"name": "EMPTY"}],
    "task": {"mountPath": "/opt/task", "files": {"requirements.txt": "requests\n", "setup.sh": "echo ok"}},
    "workspace": {"mountPath": "/work", "sizeLimit": "2Gi"},
    "prepare": {"command": ["sh", "-c", "cd /work && git init"], "timeoutSeconds": 120},
    "network": "AllowEgress",
    "podTemplate": {"nodeSelector": {"pool": "rl"}, "tolerations": [{"key": "rl", "operator": "Exists"}],
                    "priorityClassName": "batch-low"},
}


# --- CEL, evaluated by Python twins of the rules as written -------------------------------------------
def _under(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(_under(b)) or b.startswith(_under(a))


TWINS: dict[str, Callable[[Any], bool]] = {
    f"self.size <= (has(self.maxSize) ? self.maxSize : {d.POOL_MAX_SIZE})":
        lambda s: s["size"] <= s.get("maxSize", d.POOL_MAX_SIZE),
    "!has(self.task.mountPath) || !has(self.workspace) || !has(self.workspace.mountPath) || "
    "!(self.task.mountPath == self.workspace.mountPath || self.task.mountPath.startsWith("
    "(self.workspace.mountPath.endsWith('/') ? self.workspace.mountPath : self.workspace.mountPath + '/')) || "
    "self.workspace.mountPath.startsWith((self.task.mountPath.endsWith('/') ? self.task.mountPath : "
    "self.task.mountPath + '/')))":
        lambda s: "mountPath" not in s["task"] or "mountPath" not in s.get("workspace", {})
        or not _overlap(s["task"]["mountPath"], s["workspace"]["mountPath"]),
    "!has(self.verifier) || !has(self.verifier.mountPath) || ((!has(self.task.mountPath) || "
    "!(self.task.mountPath == self.verifier.mountPath || self.task.mountPath.startsWith("
    "(self.verifier.mountPath.endsWith('/') ? self.verifier.mountPath : self.verifier.mountPath + '/')) || "
    "self.verifier.mountPath.startsWith((self.task.mountPath.endsWith('/') ? self.task.mountPath : "
    "self.task.mountPath + '/')))) && (!has(self.workspace) || !has(self.workspace.mountPath) || "
    "!(self.workspace.mountPath == self.verifier.mountPath || self.workspace.mountPath.startsWith("
    "(self.verifier.mountPath.endsWith('/') ? self.verifier.mountPath : self.verifier.mountPath + '/')) || "
    "self.verifier.mountPath.startsWith((self.workspace.mountPath.endsWith('/') ? self.workspace.mountPath : "
    "self.workspace.mountPath + '/')))))":
        lambda s: "mountPath" not in s.get("verifier", {}) or (
            ("mountPath" not in s["task"] or not _overlap(s["task"]["mountPath"], s["verifier"]["mountPath"]))
            and ("mountPath" not in s.get("workspace", {})
                 or not _overlap(s["workspace"]["mountPath"], s["verifier"]["mountPath"]))),
    "self.all(e, !(e.name in [" + ", ".join(repr(n) for n in d.RESERVED_ENV) + "]))":
        lambda env: all(e["name"] not in d.RESERVED_ENV for e in env),
    "has(self.key) && size(self.key) > 0": lambda t: bool(t.get("key")),
    "!has(self.key) || !(self.key in [" + ", ".join(repr(k) for k in d.PROTECTED_TAINTS) + "])":
        lambda t: t.get("key") not in d.PROTECTED_TAINTS,
    f"!self.startsWith('{d.SYSTEM_PRIORITY_PREFIX}')": lambda name: not name.startswith(d.SYSTEM_PRIORITY_PREFIX),
}


def _at(value: Any, path: str) -> Iterator[Any]:
    """The values at a cel_rules path below the spec ('.env', '.podTemplate.tolerations[]'), if present."""
    parts = [p for p in path.replace("[]", ".[]").split(".") if p]
    values = [value]
    for part in parts:
        if part == "[]":
            values = [item for v_ in values if isinstance(v_, list) for item in v_]
        else:
            values = [v_[part] for v_ in values if isinstance(v_, dict) and part in v_]
    yield from values


def refusals(spec: dict) -> list[str]:
    """What the API server would refuse in this spec: the schema's errors, else the CEL messages
    (it applies the defaults first, then evaluates the rules)."""
    found = crd_schema.errors(spec, SPEC)
    if found:
        return found
    stored = crd_schema.apply_defaults(spec, SPEC)
    return [rule["message"] for path, rule in crd_schema.cel_rules(SPEC)
            for value in _at(stored, path) if not TWINS[rule["rule"]](value)]


def test_every_cel_rule_has_a_twin_here():
    assert sorted(r["rule"] for _, r in crd_schema.cel_rules(SPEC)) == sorted(TWINS)


# --- accepted -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [MINIMAL, FULL, {**MINIMAL, "size": 0},
                                  {**MINIMAL, "size": d.MAX_POOL_SIZE, "maxSize": d.MAX_POOL_SIZE},
                                  {**MINIMAL, "size": d.POOL_MAX_SIZE},     # up to the default maxSize
                                  {**MINIMAL, "prepare": {"command": ["true"]}},
                                  {**MINIMAL, "task": {"mountPath": "/task", "files": {"a": ""}},
                                   "workspace": {"mountPath": "/tasks"}},   # a shared prefix is no overlap
                                  {**MINIMAL, "verifier": {}},
                                  {**FULL, "verifier": {"image": "python:3.12-slim", "mountPath": "/grade",
                                                        "resources": {"requests": {"cpu": "50m"}}}}],
                         ids=["minimal", "full", "empty", "largest", "default-max", "prepare", "near-paths",
                              "verifier", "full-verifier"])
def test_sample_pools_are_accepted(spec):
    assert refusals(spec) == []



def _example_pools() -> Iterator:
    for path in sorted((crd_schema.ROOT / "examples").glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc and doc.get("kind") == POOL_KIND:
                yield pytest.param(doc, id=f"{path.name}#{i}")


EXAMPLE_POOLS = list(_example_pools())


@pytest.mark.parametrize("pool", EXAMPLE_POOLS)
def test_every_example_pool_is_accepted_by_the_schema_and_the_operator(pool):
    assert refusals(pool["spec"]) == []
    parse_pool_spec(pool["spec"])                   # raises what the operator would refuse


def test_an_example_pool_is_there_and_claimed_by_its_batch():
    (pool,) = [p.values[0] for p in EXAMPLE_POOLS]
    path = crd_schema.ROOT / "examples" / "shipping-fix-pool.yaml"
    batches = [doc for doc in yaml.safe_load_all(path.read_text()) if doc["kind"] == "RolloutBatch"]
    assert [b["spec"]["poolRef"]["name"] for b in batches] == [pool["metadata"]["name"]]
    assert "verifier" in pool["spec"] and "verifier" in batches[0]["spec"]

def test_the_api_server_defaults_a_minimal_pool_as_a_batch_is_defaulted():
    stored = crd_schema.apply_defaults(MINIMAL, SPEC)
    assert stored == {**MINIMAL, "maxSize": d.POOL_MAX_SIZE, "image": d.IMAGE, "resources": d.RESOURCES,
                      "task": {**MINIMAL["task"], "mountPath": d.TASK_MOUNT_PATH},
                      "workspace": {"mountPath": d.WORKSPACE_MOUNT_PATH, "sizeLimit": d.WORKSPACE_SIZE_LIMIT},
                      "network": v.NETWORK_MODES[0], "podTemplate": {}}
    with_prepare = crd_schema.apply_defaults({**MINIMAL, "prepare": {"command": ["true"]}}, SPEC)
    assert with_prepare["prepare"]["timeoutSeconds"] == d.PREPARE_TIMEOUT_SECONDS


# --- refused --------------------------------------------------------------------------------------------
REFUSED = {
    "size over maxSize": ({**MINIMAL, "size": 5, "maxSize": 4}, "spec.size must be less than or equal to spec.maxSize"),
    "size over the default maxSize": ({**MINIMAL, "size": d.POOL_MAX_SIZE + 1}, "spec.maxSize"),
    "size over the bound": ({**MINIMAL, "size": d.MAX_POOL_SIZE + 1, "maxSize": d.MAX_POOL_SIZE}, "size"),
    "maxSize over the bound": ({**MINIMAL, "maxSize": d.MAX_POOL_SIZE + 1}, "maxSize"),
    "maxSize zero": ({**MINIMAL, "size": 0, "maxSize": 0}, "maxSize"),
    "negative size": ({**MINIMAL, "size": -1}, "size"),
    "missing size": ({"task": MINIMAL["task"]}, "'size' is a required property"),
    "missing task": ({"size": 1}, "'task' is a required property"),
    "task without files": ({"size": 1, "task": {"mountPath": "/task"}}, "'files' is a required property"),
    "task with no file": ({"size": 1, "task": {"files": {}}}, "task.files"),
    "valueFrom in env": ({**MINIMAL, "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
                         "valueFrom"),
    "a reserved env name": ({**MINIMAL, "env": [{"name": "EPISODE_INDEX", "value": "3"}]},
                            "spec.env must not set EPISODE_ID"),
    "an env name a shell drops": ({**MINIMAL, "env": [{"name": "MY-VAR", "value": "1"}]}, "does not match"),
    "an env name that starts with a digit": ({**MINIMAL, "env": [{"name": "1X", "value": "1"}]}, "does not match"),
    "env past its bound": ({**MINIMAL, "env": [{"name": f"V{i}"} for i in range(d.MAX_ENV_ITEMS + 1)]}, "env"),
    "prepare without a command": ({**MINIMAL, "prepare": {"timeoutSeconds": 5}}, "'command' is a required property"),
    "prepare with an empty command": ({**MINIMAL, "prepare": {"command": []}}, "prepare.command"),
    "prepare timeout past its bound": ({**MINIMAL, "prepare": {"command": ["true"],
                                                               "timeoutSeconds": d.MAX_PREPARE_TIMEOUT_SECONDS + 1}},
                                       "timeoutSeconds"),
    "an unknown network": ({**MINIMAL, "network": "Open"}, "network"),
    "overlapping mounts": ({**MINIMAL, "task": {"mountPath": "/work/task", "files": {"a": ""}},
                            "workspace": {"mountPath": "/work"}}, "must not overlap"),
    "the workspace's default under the task": ({**MINIMAL, "task": {"mountPath": "/", "files": {"a": ""}}},
                                               "must not overlap"),
    "a protected toleration": ({**MINIMAL, "podTemplate": {"tolerations": [{"key": "CriticalAddonsOnly",
                                                                            "operator": "Exists"}]}},
                               "must not tolerate"),
    "a system PriorityClass": ({**MINIMAL, "podTemplate": {"priorityClassName": "system-node-critical"}},
                               "must not be a system PriorityClass"),
    "a batch-only field": ({**MINIMAL, "episodes": 3}, "episodes"),
    "a verifier's files under the workspace": ({**MINIMAL, "verifier": {"mountPath": "/workspace/v"}},
                                               "spec.verifier.mountPath must not overlap"),
    "a verifier's files over the task": ({**MINIMAL, "verifier": {"mountPath": "/"}}, "must not overlap"),
    "a verifier's command (the batch's)": ({**MINIMAL, "verifier": {"command": ["true"]}}, "command"),
    "a verifier's quantity that is not one": ({**MINIMAL, "verifier": {"resources": {"limits": {"cpu": "lots"}}}},
                                              "cpu"),
    "an image past its bound": ({**MINIMAL, "image": "i" * (d.MAX_IMAGE_LENGTH + 1)}, "image"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_pools_are_refused(name):
    spec, said = REFUSED[name]
    found = refusals(spec)
    assert found and any(said in problem for problem in found), found


# --- the pool's pods are the batch's ----------------------------------------------------------------------
def _shape(node: Any) -> Any:
    """A schema without its descriptions: what it accepts, not how it says it."""
    if isinstance(node, dict):
        return {k: _shape(val) for k, val in node.items() if k != "description"}
    if isinstance(node, list):
        return [_shape(item) for item in node]
    return node


@pytest.mark.parametrize("field", ["image", "runtimeClassName", "resources", "task", "workspace", "podTemplate"])
def test_the_pod_fields_accept_what_the_batchs_accept(field):
    assert _shape(SPEC["properties"][field]) == _shape(BATCH_SPEC["properties"][field])


def test_env_is_the_batchs_without_value_from_and_with_shell_names():
    pool, batch = SPEC["properties"]["env"], copy.deepcopy(BATCH_SPEC["properties"]["env"])
    assert pool["x-kubernetes-validations"] == batch["x-kubernetes-validations"]   # the reserved names
    del batch["items"]["properties"]["valueFrom"]
    del batch["items"]["x-kubernetes-validations"]                                 # value xor valueFrom
    batch["items"]["properties"]["name"]["pattern"] = SHELL_NAME_PATTERN           # the pods start under /bin/sh
    assert _shape(pool) == _shape(batch)


@pytest.mark.parametrize("name", ["A", "_x", "PIP_INDEX_URL", "a1", "MY-VAR", "1X", "A.B", "x y", "é"])
def test_the_schema_refuses_an_env_name_as_the_operator_does(name):
    spec = {**MINIMAL, "env": [{"name": name, "value": "1"}]}
    schema_refuses = any("does not match" in problem for problem in refusals(spec))
    try:
        parse_pool_spec(spec)
        operator_refuses = False
    except ValueError:
        operator_refuses = True
    assert schema_refuses == operator_refuses, (name, schema_refuses)


def test_network_is_the_batchs_network_word():
    network = SPEC["properties"]["network"]
    assert network["enum"] == list(v.NETWORK_MODES) and network["default"] == v.NETWORK_MODES[0]


def test_the_fields_a_pooled_batch_leaves_out_are_batch_fields():
    from rolloutbatch.core.crd_spec import SPEC_FIELDS

    assert set(POOL_OWNED_BATCH_FIELDS) <= SPEC_FIELDS


# --- the resource itself --------------------------------------------------------------------------------
def test_names_subresources_and_columns():
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == f"{POOL_PLURAL}.{GROUP}" and spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": POOL_KIND, "listKind": f"{POOL_KIND}List", "plural": POOL_PLURAL,
                             "singular": "rolloutpool", "shortNames": ["rp"], "categories": ["rl"]}
    assert (VERSION_["name"], VERSION_["served"], VERSION_["storage"]) == (VERSION, True, True)
    # kubectl scale rp/NAME --replicas=N sets spec.size; its READY is the warm pods
    assert VERSION_["subresources"] == {"status": {}, "scale": {"specReplicasPath": ".spec.size",
                                                                "statusReplicasPath": ".status.readyPods"}}
    columns = {c["name"]: (c["jsonPath"], c.get("priority", 0)) for c in VERSION_["additionalPrinterColumns"]}
    assert columns == {"Size": (".spec.size", 0), "Ready": (".status.readyPods", 0),
                       "Starting": (".status.startingPods", 0), "Claimed": (".status.claimedPods", 0),
                       # a stalled pool says so in `kubectl get rp`, not only with -o wide
                       "Status": ('.status.conditions[?(@.type=="Ready")].reason', 0),
                       "Age": (".metadata.creationTimestamp", 0), "Sandbox": (".status.sandboxNamespace", 1),
                       "Message": (".status.message", 1)}
    assert CRD == build_pool_crd()


@pytest.mark.parametrize("root", ["spec", "status"])
def test_every_field_has_a_description(root):
    # As tests/unit/test_crd.py reads it: every named field (a list's items are described by the list).
    def fields(node: dict, path: str) -> Iterator[tuple[str, dict]]:
        for name, sub in (node.get("properties") or {}).items():
            yield f"{path}.{name}", sub
            yield from fields(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from fields(node["items"], f"{path}[]")

    top = SCHEMA["properties"][root]
    missing = [p for p, node in [(root, top), *fields(top, root)] if not str(node.get("description", "")).strip()]
    assert not missing, f"no description (kubectl explain prints <no description>): {missing}"


def test_the_defaults_and_bounds_are_in_the_descriptions():
    props = SPEC["properties"]
    for name in ("maxSize", "image"):
        assert str(props[name]["default"]) in props[name]["description"], name
    assert str(d.MAX_POOL_SIZE) in props["maxSize"]["description"]
    prepare = props["prepare"]["properties"]["timeoutSeconds"]
    assert str(d.PREPARE_TIMEOUT_SECONDS) in prepare["description"]
    assert str(d.MAX_PREPARE_TIMEOUT_SECONDS) in prepare["description"]


# --- status ------------------------------------------------------------------------------------------------
STATUS_SAMPLE = {
    "observedGeneration": 4, "sandboxNamespace": "rp-0123456789", "readyPods": 3, "startingPods": 1,
    "claimedPods": 17, "message": "3/4 warm",
    "conditions": [
        {"type": v.CONDITION_READY, "status": v.CONDITION_FALSE, "reason": v.PoolReason.FILLING,
         "message": "1 pod starting", "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 4},
        {"type": v.CONDITION_STALLED, "status": v.CONDITION_FALSE, "reason": v.PoolReason.FILLING,
         "message": "", "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 4},
    ],
}


def test_a_status_the_operator_writes_validates():
    assert crd_schema.errors(STATUS_SAMPLE, STATUS) == []
    reasons = STATUS["properties"]["conditions"]["items"]["properties"]["reason"]["description"]
    assert all(reason in reasons for reason in v.POOL_REASONS)


@pytest.mark.parametrize("change, said", [
    ({"readyPods": -1}, "readyPods"),
    ({"claimedPods": 1.0}, "claimedPods"),
    ({"phase": "Running"}, "phase"),                                # not a pool's field: it would be pruned
    ({"conditions": [STATUS_SAMPLE["conditions"][0]] * 2}, "conditions"),   # one per type
])
def test_a_wrong_status_does_not(change, said):
    found = crd_schema.errors({**STATUS_SAMPLE, **change}, STATUS)
    assert found and any(said in problem or said in repr(change) for problem in found), found
