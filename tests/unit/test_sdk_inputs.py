"""Groups and large inputs in the SDK: samples_per_input, inputs by reference, sharded results."""
from __future__ import annotations

import json

import pytest

from rolloutbatch import sdk
from rolloutbatch.core.result_shards import assemble
from rolloutbatch.core.results import configmap_digest, encode_results
from rolloutbatch.core import manifests
from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import INPUT_KEY, MAX_CONFIG_BYTES, input_text, parse_spec
from rolloutbatch.kube.errors import Forbidden, Invalid, Unavailable
from rolloutbatch.sdk.build import INLINE_INPUTS_MAX, LABEL_INPUTS_TOKEN, LABEL_ROLE, ROLE_INPUTS, plan_inputs
from rolloutbatch.sdk import ops, result_ops
from tests.support.memory_api import MemoryApi

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
        self.objects, self.items, self.params, self.paths = objects, items, [], []

    def get(self, path, what, **params):
        self.paths.append(path)
        if path in self.objects:
            return self.objects[path]
        if path.endswith("/configmaps"):
            self.params.append(params)
            return {"metadata": {}, "items": self.items}
        raise sdk.NotFound(what, status=404)


def _cm(name, document, uid="u-9"):
    data, binary = encode_results(document)
    # The labels and ownerReference the operator's own ConfigMaps carry: anyone may copy them.
    return {"metadata": {"name": name, "labels": {"rl.agentruntime.io/batch-uid": uid,
                                                  "rl.agentruntime.io/role": "results-shard"},
                         "ownerReferences": [{"kind": "RolloutBatch", "name": "b", "uid": uid}]},
            "data": data, "binaryData": binary}


def _digests(*configmaps):
    """``status.resultsDigests`` as the operator records it after writing ``configmaps``."""
    return {c["metadata"]["name"]: configmap_digest(c) for c in configmaps}


HEAD_PATH = "/api/v1/namespaces/n/configmaps/b-results"


def _by_name(*configmaps):
    """What a GET of each ConfigMap by name answers."""
    return {f"/api/v1/namespaces/n/configmaps/{c['metadata']['name']}": c for c in configmaps}
BATCH_PATH = "/apis/rl.agentruntime.io/v1alpha1/namespaces/n/rolloutbatches/b"


def _batch(uid="u-9", **status):
    return {"metadata": {"name": "b", "namespace": "n", "uid": uid}, "status": status}


def test_results_read_the_head_and_every_shard():
    uid, k = "u-9", 2
    rows = [{"index": i, "group": i // k, "sample": i % k, "valid": True, "reward": float(i), "outcome": "succeeded"}
            for i in range(6)]
    head = {"batch": "b", "namespace": "n", "uid": uid, "episodes": 6, "samples_per_input": k,
            "shards": [{"name": "b-results-0", "rows": 4, "full": True}, {"name": "b-results-1", "rows": 2, "full": False}]}
    shards = [{"uid": uid, "shard": 0, "pods": rows[:4][::-1], "groups": []},
              {"uid": uid, "shard": 1, "pods": rows[4:], "groups": []}]
    cms = [_cm("b-results", head), _cm("b-results-0", shards[0]), _cm("b-results-1", shards[1])]
    api = ShardApi({HEAD_PATH: cms[0], f"{HEAD_PATH}-0": cms[1], f"{HEAD_PATH}-1": cms[2]},
                   [{"metadata": {"name": "b-results-7"}, "data": {"results.json": "garbage"}}])
    h = sdk.BatchHandle(sdk.Client(api=api, namespace="n"), _batch(uid, phase="Succeeded", resultsDigests=_digests(*cms)))
    assert [r["index"] for r in h.results()] == list(range(6))
    document = h.document()
    assert document == assemble(head, shards)
    assert [g["reward_mean"] for g in document["groups"]] == [0.5, 2.5, 4.5]
    assert api.params == []                  # the head's index names the shards: no label selector
    assert BATCH_PATH not in api.paths       # terminal and every one recorded: the status is not read again


def _sharded(uid="u-9"):
    rows = [{"index": i, "group": i, "sample": 0, "valid": True, "reward": 1.0, "outcome": "succeeded"}
            for i in range(4)]
    head = {"batch": "b", "namespace": "n", "uid": uid, "episodes": 4, "samples_per_input": 1,
            "shards": [{"name": f"b-results-{n}", "rows": 2, "full": True} for n in range(2)]}
    return rows, [_cm("b-results", head), _cm("b-results-0", {"uid": uid, "shard": 0, "pods": rows[:2], "groups": []}),
                  _cm("b-results-1", {"uid": uid, "shard": 1, "pods": rows[2:], "groups": []})]


def test_a_forged_shard_is_left_out_and_named():
    """Right labels, ownerReference and a well-formed row: not the operator's by its status."""
    uid = "u-9"
    rows, cms = _sharded(uid)
    big = dict(rows[3], reward=1e6)
    forged = [_cm("b-results-1", {"uid": uid, "shard": 1, "pods": [rows[2], big], "groups": []}),   # edited
              _cm("b-results-2", {"uid": uid, "shard": 2, "pods": [dict(rows[0], reward=1e6)], "groups": []})]
    api = ShardApi({HEAD_PATH: cms[0], f"{HEAD_PATH}-0": cms[1], f"{HEAD_PATH}-1": forged[0],
                    f"{HEAD_PATH}-2": forged[1]}, [forged[1], cms[1], forged[0]])
    h = sdk.BatchHandle(sdk.Client(api=api, namespace="n"),
                        _batch(uid, phase="Succeeded", resultsDigests=_digests(*cms)))
    with pytest.raises(sdk.ResultsIncomplete, match="b-results-1 not what the operator wrote") as exc:
        h.results()
    assert exc.value.shards == ["b-results-1"]
    document = h.document()
    assert [(r["index"], r["reward"]) for r in document["pods"]] == [(0, 1.0), (1, 1.0)]
    assert document["unverified_shards"] == ["b-results-1"]     # b-results-2: in no index, never read
    assert document["missing_shards"] == ["b-results-1"] and "unreadable_shards" not in document
    assert f"{HEAD_PATH}-2" not in api.paths
    assert 1e6 not in [g.get("reward_mean") for g in document["groups"]]
    # final, yet read again (bounded): the operator rewrites a final batch's results once more
    assert 1 <= api.paths.count(BATCH_PATH) <= len(result_ops.STATUS_REREADS)


def test_a_forged_or_edited_head_is_refused():
    uid = "u-9"
    rows, cms = _sharded(uid)
    whole = _cm("b-results", {"batch": "b", "uid": uid, "episodes": 4, "pods": [dict(r, reward=1e6) for r in rows]})
    for status in ({"phase": "Succeeded", "resultsDigests": _digests(*cms)}, {"phase": "Failed"}):
        api = ShardApi({HEAD_PATH: whole}, cms[1:])
        with pytest.raises(sdk.ResultsNotReady, match="changed since the operator wrote it.*do not trust it"):
            sdk.Client(api=api, namespace="n").results_document(_batch(uid, **status))
        assert api.paths.count(BATCH_PATH) <= len(result_ops.STATUS_REREADS)
    # Not final: the status is read again, a bounded number of times (it lags a write by one call).
    api = ShardApi({HEAD_PATH: whole, BATCH_PATH: _batch(uid, phase="Running", resultsDigests=_digests(*cms))}, cms[1:])
    with pytest.raises(sdk.ResultsNotReady, match="not yet confirmed by the batch's status.*try again"):
        sdk.Client(api=api, namespace="n").results_document(_batch(uid, phase="Running", resultsDigests=_digests(*cms)))
    assert api.paths.count(BATCH_PATH) == len(result_ops.STATUS_REREADS)


def test_a_status_that_lags_the_write_is_read_again_once():
    uid = "u-9"
    rows, cms = _sharded(uid)
    fresh = _batch(uid, phase="Running", resultsDigests=_digests(*cms))
    api = ShardApi({**_by_name(*cms), BATCH_PATH: fresh}, cms[1:])
    stale = _batch(uid, phase="Running", resultsDigests=_digests(cms[1]))   # before the head and shard 1
    document = sdk.Client(api=api, namespace="n").results_document(stale)
    assert [r["index"] for r in document["pods"]] == [0, 1, 2, 3] and "unverified_shards" not in document
    assert api.paths.count(BATCH_PATH) == 1
    # A namesake's status (another uid) vouches for nothing of ours.
    api = ShardApi({**_by_name(*cms), BATCH_PATH: dict(fresh, metadata=dict(fresh["metadata"], uid="u-other"))},
                   cms[1:])
    with pytest.raises(sdk.ResultsNotReady, match="cannot be confirmed: the batch is gone or was replaced"):
        sdk.Client(api=api, namespace="n").results_document(stale)


def test_the_sdks_input_configmaps_are_opted_in_and_read_by_the_operator():
    from rolloutbatch.core.admission import input_shards
    from rolloutbatch.core.naming import INPUTS_OPT_IN, LABEL_INPUTS

    batch = sdk.build_batch("step-", TASK, episodes=512, inputs=BIG)
    body, configmaps = plan_inputs(batch, "rl")
    assert configmaps and all(c["metadata"]["labels"][LABEL_INPUTS] == INPUTS_OPT_IN for c in configmaps)
    ref = body["spec"]["inputsFrom"]
    shards = input_shards(configmaps, ref["configMaps"], ref["count"])
    assert sum(len(s) for s in shards) == 512


@pytest.fixture(autouse=True)
def _no_status_reread_pauses(monkeypatch):
    """The re-reads of a lagging status keep their count, not their pauses (seconds each)."""
    monkeypatch.setattr(result_ops, "STATUS_REREADS", tuple(0.0 for _ in result_ops.STATUS_REREADS))


def _unlabelled(cm):
    return dict(cm, metadata={k: v for k, v in cm["metadata"].items() if k != "labels"})


def test_an_unlabelled_shard_of_a_final_batch_is_still_read_by_name():
    """A neighbour's `kubectl label cm b-results-0 rl.agentruntime.io/role-`: the verified head's
    index still names it, so no label selector decides what the results hold."""
    uid = "u-9"
    rows, cms = _sharded(uid)
    bare = _unlabelled(cms[1])
    api = ShardApi(_by_name(cms[0], bare, cms[2]), [cms[2]])      # a label selector finds shard 1 only
    h = sdk.BatchHandle(sdk.Client(api=api, namespace="n"), _batch(uid, phase="Succeeded", resultsDigests=_digests(*cms)))
    assert h.results() == rows
    assert h.document()["missing_shards"] == []


def test_a_deleted_listed_shard_makes_results_raise_naming_it():
    uid = "u-9"
    rows, cms = _sharded(uid)
    api = ShardApi(_by_name(cms[0], cms[2]), [cms[2]])
    h = sdk.BatchHandle(sdk.Client(api=api, namespace="n"), _batch(uid, phase="Succeeded", resultsDigests=_digests(*cms)))
    with pytest.raises(sdk.ResultsIncomplete, match="b-results-0 deleted") as exc:
        h.results()
    assert isinstance(exc.value, sdk.ResultsNotReady) and exc.value.shards == ["b-results-0"]
    document = h.document()                     # the rest, saying what it lacks
    assert document["pods"] == rows[2:] and document["missing_shards"] == ["b-results-0"]
    assert "unverified_shards" not in document and "unreadable_shards" not in document


def test_a_stale_handle_refuses_a_replayed_older_genuine_version():
    """Taken mid-run; the batch finished; someone writes the old (genuine) checkpoint back."""
    uid = "u-9"
    row = lambda i: {"index": i, "group": i, "sample": 0, "valid": True, "reward": 1.0, "outcome": "succeeded"}  # noqa: E731
    checkpoint = _cm("b-results", {"batch": "b", "uid": uid, "episodes": 4, "pods": [row(0)]})
    final = _cm("b-results", {"batch": "b", "uid": uid, "episodes": 4, "pods": [row(i) for i in range(4)]})
    stale = _batch(uid, phase="Running", resultsDigests=_digests(checkpoint))
    api = ShardApi({HEAD_PATH: checkpoint, BATCH_PATH: _batch(uid, phase="Succeeded", resultsDigests=_digests(final))},
                   [])
    with pytest.raises(sdk.ResultsNotReady, match="changed since the operator wrote it"):
        sdk.BatchHandle(sdk.Client(api=api, namespace="n"), stale).results()
    assert api.paths.count(BATCH_PATH) == len(result_ops.STATUS_REREADS)     # read again, bounded, then refused

    # Sharded: an older genuine shard written back under the final head.
    rows, cms = _sharded(uid)
    open_shard = _cm("b-results-0", {"uid": uid, "shard": 0, "pods": rows[:1], "groups": []})
    stale = _batch(uid, phase="Running", resultsDigests=_digests(cms[0], open_shard))
    api = ShardApi({**_by_name(cms[0], open_shard, cms[2]),
                    BATCH_PATH: _batch(uid, phase="Succeeded", resultsDigests=_digests(*cms))}, [open_shard, cms[2]])
    handle = sdk.BatchHandle(sdk.Client(api=api, namespace="n"), stale)
    with pytest.raises(sdk.ResultsIncomplete, match="b-results-0 not what the operator wrote"):
        handle.results()
    assert handle.document()["unverified_shards"] == ["b-results-0"]


def test_an_honest_reader_between_the_operators_two_writes_succeeds():
    """The operator writes a ConfigMap, then patches the status: whichever read lands between
    the two, the reader reads both again and gets the newest results."""
    from tests.unit.fake_watch import FakeApi

    uid = "u-9"
    row = lambda i: {"index": i, "group": i, "sample": 0, "valid": True, "reward": 1.0, "outcome": "succeeded"}  # noqa: E731
    v = [_cm("b-results", {"batch": "b", "uid": uid, "episodes": 4, "pods": [row(i) for i in range(n + 1)]})
         for n in range(3)]
    status = [_batch(uid, phase="Running", resultsDigests=_digests(c)) for c in v]
    # The head read is v1, then the status read is still S0 (v1's patch not yet done); then v2 is
    # written and patched: the ConfigMap held is older than the status, and is read again.
    api = FakeApi(lists={HEAD_PATH: [v[1], v[2]], BATCH_PATH: [status[0], status[2]]})
    document = sdk.Client(api=api, namespace="n").results_document(status[0])
    assert [r["index"] for r in document["pods"]] == [0, 1, 2]
    # The head read is v2, the status still S1 on the first read and S2 on the second.
    api = FakeApi(lists={HEAD_PATH: [v[2]], BATCH_PATH: [status[1], status[2]]})
    assert [r["index"] for r in sdk.BatchHandle(sdk.Client(api=api, namespace="n"), status[1]).results()] == [0, 1, 2]
    assert [c[1] for c in api.calls].count(BATCH_PATH) == 2


# --- submit when the API does not answer ---------------------------------------------------------
FEW_BIG = [{"task": g, "text": "x" * 16 * 1024} for g in range(64)]     # 1 MiB of inputs: by reference


def _memory_api(api: MemoryApi | None = None) -> MemoryApi:
    api = api or MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rl"}})
    return api


def _input_configmaps(api: MemoryApi) -> list[dict]:
    return [c for c in api.list_objects("ConfigMap", "rl")
            if (c["metadata"].get("labels") or {}).get(LABEL_ROLE) == ROLE_INPUTS]


class ServedThenTimedOut(MemoryApi):
    """The batch's POST is stored, but its answer is lost (a read timeout, a dropped connection, a
    proxy's 504): the client sees Unavailable. ``stored=False``: lost before it was stored."""

    def __init__(self, stored: bool = True) -> None:
        super().__init__()
        self.stored = stored

    def create(self, path, body, what, *, dry_run=False):
        if body.get("kind") == "RolloutBatch" and not dry_run:
            if self.stored:
                super().create(path, body, what)
            raise Unavailable(f"{what}: read timed out", status=504)
        return super().create(path, body, what, dry_run=dry_run)


@pytest.fixture
def _no_owner_patch_pauses(monkeypatch):
    monkeypatch.setattr(ops, "OWNER_PATCH_PAUSES", tuple(0.0 for _ in ops.OWNER_PATCH_PAUSES))


def test_a_batch_stored_but_unanswered_is_found_and_keeps_its_inputs():
    """Only a refusal deletes the inputs: a batch whose create went unanswered may exist, and
    without them it would stall InputsNotFound. Stored, it is found by the inputs' token it carries
    (a generateName has no name to get) and handed back, owning them."""
    api = _memory_api(ServedThenTimedOut())
    handle = sdk.Client(api=api, namespace="rl").submit(sdk.build_batch("step-", TASK, episodes=64, inputs=FEW_BIG))
    [created] = api.list_objects("RolloutBatch", "rl")
    assert handle.uid == created["metadata"]["uid"]
    names = created["spec"]["inputsFrom"]["configMaps"]
    kept = {c["metadata"]["name"]: c for c in _input_configmaps(api)}
    assert sorted(kept) == sorted(names)
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == handle.uid for c in kept.values())


def test_a_batch_unanswered_and_not_found_keeps_its_inputs_and_says_so():
    api = _memory_api(ServedThenTimedOut(stored=False))
    with pytest.raises(sdk.Unavailable, match=f"input ConfigMaps were kept, labelled {LABEL_INPUTS_TOKEN}=") as err:
        sdk.Client(api=api, namespace="rl").submit(sdk.build_batch("step-", TASK, episodes=64, inputs=FEW_BIG))
    assert err.value.status == 504
    kept = _input_configmaps(api)
    assert kept and api.list_objects("RolloutBatch", "rl") == []
    token = kept[0]["metadata"]["labels"][LABEL_INPUTS_TOKEN]
    assert token in str(err.value) and all(token in c["metadata"]["name"] for c in kept)


def test_a_transient_error_making_the_batch_their_owner_is_retried(_no_owner_patch_pauses):
    """A 503 on the ownership patch once: the batch exists, so submit must not raise (a retried
    submit would make a second batch), and the inputs must not be left owned by nothing."""
    api = _memory_api()
    api.fail("PATCH", "ConfigMap", Unavailable("patch ConfigMap: 503 etcdserver: leader changed", status=503))
    handle = sdk.Client(api=api, namespace="rl").submit(sdk.build_batch("step-", TASK, episodes=64, inputs=FEW_BIG))
    unowned = [c["metadata"]["name"] for c in _input_configmaps(api)
               if [o["uid"] for o in c["metadata"].get("ownerReferences") or []] != [handle.uid]]
    assert unowned == []


def test_a_batch_that_exists_is_handed_back_though_its_inputs_could_not_be_made_its_own(_no_owner_patch_pauses):
    api = _memory_api()
    api.fail("PATCH", "ConfigMap", Unavailable("patch ConfigMap: 503", status=503), times=100)
    with pytest.warns(RuntimeWarning, match=f"could not be made owned by it.*labelled {LABEL_INPUTS_TOKEN}="):
        handle = sdk.Client(api=api, namespace="rl").submit(sdk.build_batch("step-", TASK, episodes=64,
                                                                            inputs=FEW_BIG))
    [created] = api.list_objects("RolloutBatch", "rl")
    assert handle.uid == created["metadata"]["uid"] and _input_configmaps(api)


def test_a_refused_batch_on_a_memory_api_deletes_its_inputs():
    api = _memory_api()
    api.fail("POST", "RolloutBatch", Forbidden("exceeded quota", status=403),
             when=lambda path: True, times=2)
    with pytest.raises(sdk.Forbidden):
        sdk.Client(api=api, namespace="rl").submit(sdk.build_batch("step-", TASK, episodes=64, inputs=FEW_BIG))
    assert _input_configmaps(api) == []


# --- one measure, one rule, for inputs inline and by reference ------------------------------------
def test_inputs_are_measured_as_parse_spec_measures_them():
    """by_reference and parse_spec measured the same inputs differently (compact JSON against
    json.dumps' spaces): inputs the SDK kept inline were refused as too large, the very thing it
    was to move by reference."""
    task = sdk.Task(files={"big.txt": "x" * (790 * 1024)}, command=["python"])
    inputs = [{"v": [1] * 20000} for _ in range(2)]      # 80 KB compact, 120 KB with spaces
    batch = sdk.build_batch("g-", task, episodes=2, inputs=inputs)
    assert batch["spec"]["inputs"] == inputs
    body, configmaps = plan_inputs(batch, "rl")
    assert configmaps == [] and parse_spec(body["spec"])
    assert manifests.inputs_configmap(BatchRef("rl", "g-x", "u"), parse_spec(body["spec"]), None)["data"] == {
        INPUT_KEY.format(i): input_text(value, i) for i, value in enumerate(inputs)}   # what was measured


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("bad,why", [(_nested(150), "100 levels deep"), ({"seed": 10 ** 400}, "past a double")])
def test_an_input_the_operator_refuses_is_refused_before_any_call_inline_or_by_reference(bad, why):
    """The operator refuses such an input in an inputsFrom ConfigMap (InvalidInputs: too deep, or a
    number that is not finite); by reference, build_batch used to upload it and the batch stalled."""
    with pytest.raises(ValueError, match=rf"spec.inputs\[1\].*{why}"):
        sdk.build_batch("g-", TASK, episodes=2, inputs=[{"t": "x" * 200 * 1024}, bad])     # by reference
    with pytest.raises(ValueError, match=rf"spec.inputs\[0\].*{why}"):
        sdk.build_batch("g-", TASK, episodes=1, inputs=[bad])                               # inline
