"""Readers work out what a batch's status vouches for once per status, not once per shard: a
read of a batch with MAX_SHARDS shards checks each shard against one map (it was quadratic)."""
import json

from rolloutbatch.core.result_shards import MAX_SHARDS
from rolloutbatch.core.results import configmap_digest
from rolloutbatch.sdk import follow, result_ops
from rolloutbatch.sdk.result_ops import ResultsRead


def _counting(monkeypatch, module) -> list[int]:
    calls = []
    original = module.vouched_digests

    def counted(status):
        calls.append(1)
        return original(status)
    monkeypatch.setattr(module, "vouched_digests", counted)
    return calls


def test_a_read_checks_every_shard_against_one_map(monkeypatch):
    calls = _counting(monkeypatch, result_ops)
    got = {f"b-results-{i}": {"data": {"results.json": json.dumps({"shard": i})}} for i in range(MAX_SHARDS)}
    got["b-results"] = {"data": {"results.json": json.dumps({"shards": [{"name": n} for n in got]})}}
    digests = {name: configmap_digest(cm) for name, cm in got.items()}
    status = {"resultsDigests": digests, "pendingResultsDigests": dict(list(digests.items())[:2])}
    read = ResultsRead(head="b-results", status=status, confirmed=True, got=got,
                       docs={name: json.loads(cm["data"]["results.json"]) for name, cm in got.items()})
    assert read.pending() == [] and read.pending() == []
    assert len(calls) == 1
    read.status = {**status, "resultsDigests": {}}   # a fresh status: worked out again, and used
    assert not read.recorded("b-results-7") or "b-results-7" in status["pendingResultsDigests"]
    assert len(calls) == 2


def test_the_follower_works_it_out_once_per_status(monkeypatch):
    calls = _counting(monkeypatch, follow)
    status = {"phase": "Running", "resultsDigests": {"b-results": "sha256:x"}}
    follower = follow.Follower({"metadata": {"name": "b", "namespace": "n", "uid": "u"}, "spec": {"episodes": 2},
                                "status": status})
    for i in range(50):
        follower.feed(follower.results_watch, "MODIFIED", {"metadata": {"name": f"b-results-{i}", "labels": {
            "rl.agentruntime.io/batch-uid": "u"}}, "data": {"results.json": "{}"}})
    assert len(calls) == 1
