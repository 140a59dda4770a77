"""Groups and large inputs in the SDK: samples_per_input, inputs by reference, sharded results."""
from __future__ import annotations

import json

import pytest

from rolloutbatch import sdk
from rolloutbatch.core.result_shards import assemble
from rolloutbatch.core.results import encode_results
from rolloutbatch.core.spec import INPUT_KEY, MAX_CONFIG_BYTES, parse_spec
from rolloutbatch.kube.errors import Invalid
from rolloutbatch.sdk.build import INLINE_INPUTS_MAX, plan_inputs

TASK = sdk.Task(files={"episode.py": "print(1)"}, command=["python", "/task/episode.py"])
BIG = [{"task": g, "text": "x" * 16 * 1024} for g in range(512)]


def test_samples_per_input_is_validated_by_the_operators_parser():
    batch = sdk.build_batch("g", TASK, episodes=8, inputs=[{"a": 1}, {"a": 2}], samples_per_input=4)
    assert batch["spec"]["samplesPerInput"] == 4 and len(batch["spec"]["inputs"]) == 2
    with pytest.raises(ValueError, match="2 inputs x samplesPerInput 3 = 6"):
        sdk.build_batch("g", TASK, episodes=9, inputs=[{}, {}], samples_per_input=3)
    with pytest.raises(ValueError, match="must divide spec.episodes"):
        sdk.build_batch("g", TASK, episodes=7, samples_per_input=2)


def test_small_inputs_stay_inline():
    batch = sdk.build_batch("g", TASK, episodes=2, inputs=[{"a": 1}, {"a": 2}])
    body, configmaps = plan_inputs(batch, "rl")
    assert configmaps == [] and body["spec"]["inputs"] == [{"a": 1}, {"a": 2}]


def test_large_inputs_go_by_reference_in_shards_that_fit():
    batch = sdk.build_batch("step-", TASK, episodes=4096, inputs=BIG, samples_per_input=8, parallelism=64)
    body, configmaps = plan_inputs(batch, "rl")
    ref = body["spec"]["inputsFrom"]
    assert "inputs" not in body["spec"] and ref["count"] == 512 and ref["configMaps"] == [
        c["metadata"]["name"] for c in configmaps]
    assert 9 <= len(configmaps) <= 12
    keys = {}
    for c in configmaps:
        assert c["metadata"]["namespace"] == "rl" and c["metadata"]["name"].startswith("step-in-")
        assert sum(len(k) + len(v.encode()) for k, v in c["data"].items()) <= MAX_CONFIG_BYTES
        keys.update(c["data"])
    assert sorted(keys) == sorted(INPUT_KEY.format(g) for g in range(512))
    assert json.loads(keys["input-77.json"]) == BIG[77]
    parse_spec(body["spec"])
    assert len(json.dumps(body)) < INLINE_INPUTS_MAX


def test_one_input_too_big_for_a_configmap_is_refused():
    with pytest.raises(ValueError, match=r"spec.inputs\[1\].*must fit a ConfigMap"):
        sdk.build_batch("g", TASK, episodes=2, inputs=[{}, {"x": "y" * MAX_CONFIG_BYTES}])


class RecordingApi:
    url = "https://fake"

    def __init__(self, refuse_batch=None):
        self.refuse_batch, self.calls = refuse_batch, []

    def create(self, path, body, what, dry_run=False):
        self.calls.append(("create", path, body["kind"], dry_run))
        if body["kind"] == "RolloutBatch" and not dry_run and self.refuse_batch:
            raise self.refuse_batch
        meta = dict(body["metadata"], uid=f"uid-{len(self.calls)}")
        meta.setdefault("name", meta.get("generateName", "") + "abcde")
        return dict(body, metadata=meta)

    def merge_patch(self, path, patch, what):
        self.calls.append(("patch", path, patch))
        return {}

    def delete(self, path, what, body=None):
        self.calls.append(("delete", path, body["preconditions"]["uid"]))
        return {}


def test_submit_creates_owned_input_configmaps_and_removes_them_when_refused():
    batch = sdk.build_batch("step-", TASK, episodes=4096, inputs=BIG, samples_per_input=8)
    api = RecordingApi()
    handle = sdk.Client(api=api, namespace="rl").submit(batch)
    kinds = [c[2] if c[0] == "create" else c[0] for c in api.calls]
    n = kinds.count("ConfigMap")
    assert kinds == ["RolloutBatch"] + ["ConfigMap"] * n + ["RolloutBatch"] + ["patch"] * n
    assert api.calls[0][3] is True          # checked by a dry run before any upload
    owner = api.calls[-1][2]["metadata"]["ownerReferences"][0]
    assert owner["uid"] == handle.uid and owner["kind"] == "RolloutBatch" and owner["name"] == handle.name
    assert handle.obj["spec"]["inputsFrom"]["count"] == 512

    api = RecordingApi(refuse_batch=Invalid("quota", status=422))
    with pytest.raises(sdk.InvalidBatch):
        sdk.Client(api=api, namespace="rl").submit(batch)
    deleted = [c for c in api.calls if c[0] == "delete"]
    assert len(deleted) == n and all(uid.startswith("uid-") for _, _, uid in deleted)


class ShardApi:
    url = "https://fake"

    def __init__(self, objects, items):
        self.objects, self.items, self.params = objects, items, []

    def get(self, path, what, **params):
        if path in self.objects:
            return self.objects[path]
        if path.endswith("/configmaps"):
            self.params.append(params)
            return {"metadata": {}, "items": self.items}
        raise sdk.NotFound(what, status=404)


def _cm(name, document):
    data, binary = encode_results(document)
    return {"metadata": {"name": name}, "data": data, "binaryData": binary}


def test_results_read_the_head_and_every_shard():
    uid, k = "u-9", 2
    rows = [{"index": i, "group": i // k, "sample": i % k, "valid": True, "reward": float(i), "outcome": "succeeded"}
            for i in range(6)]
    head = {"batch": "b", "namespace": "n", "uid": uid, "episodes": 6, "samples_per_input": k,
            "shards": [{"name": "b-results-0", "rows": 4, "full": True}, {"name": "b-results-1", "rows": 2, "full": False}]}
    shards = [{"uid": uid, "shard": 0, "pods": rows[:4][::-1], "groups": []},
              {"uid": uid, "shard": 1, "pods": rows[4:], "groups": []}]
    api = ShardApi({"/api/v1/namespaces/n/configmaps/b-results": _cm("b-results", head)},
                   [_cm("b-results-0", shards[0]), _cm("b-results-1", shards[1]),
                    {"metadata": {"name": "b-results-7"}, "data": {"results.json": "garbage"}}])
    h = sdk.BatchHandle(sdk.Client(api=api, namespace="n"), {"metadata": {"name": "b", "namespace": "n", "uid": uid}})
    assert [r["index"] for r in h.results()] == list(range(6))
    document = h.document()
    assert document == dict(assemble(head, shards), unreadable_shards=["b-results-7"])
    assert [g["reward_mean"] for g in document["groups"]] == [0.5, 2.5, 4.5]
    assert api.params[0]["labelSelector"] == "rl.agentruntime.io/batch-uid=u-9,rl.agentruntime.io/role=results-shard"
