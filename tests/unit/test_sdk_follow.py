"""sdk.follow and the blocking client's watches on a fake API: wait, stream, groups, resumption."""
from __future__ import annotations

import pytest

from rolloutbatch import sdk
from rolloutbatch.core.results import encode_results
from rolloutbatch.kube.errors import Forbidden, Unavailable
from tests.unit.fake_watch import FakeApi, event, gone

NS, NAME, UID = "team", "b", "u-1"
BATCHES = f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NS}/rolloutbatches"
CMS = f"/api/v1/namespaces/{NS}/configmaps"


def batch(status=None, episodes=4, k=2, uid=UID):
    return {"metadata": {"name": NAME, "namespace": NS, "uid": uid, "resourceVersion": "1"},
            "spec": {"episodes": episodes, "samplesPerInput": k}, "status": status or {}}


def row(index, k=2, reward=1.0, outcome="succeeded"):
    valid = outcome == "succeeded"
    return {"index": index, "group": index // k, "sample": index % k, "valid": valid, "outcome": outcome,
            "reward": reward if valid else None, "reason": None if valid else "NoReward", "pod": f"p{index}"}


def cm(rows, name=f"{NAME}-results", rv="5", uid=UID, **extra):
    data, binary = encode_results({"uid": uid, "pods": rows, **extra})
    obj = {"metadata": {"name": name, "namespace": NS, "resourceVersion": rv,
                        "labels": {"rl.agentruntime.io/batch-uid": uid}}, "data": data}
    if binary:
        obj["binaryData"] = binary
    return obj


def listing(items, rv="10"):
    return {"metadata": {"resourceVersion": rv}, "items": items}


def handle(api, **status):
    return sdk.BatchHandle(sdk.Client(api=api, namespace=NS), batch(status))


def test_wait_reports_each_change_and_returns_the_final_status():
    running = batch({"phase": "Running", "progress": "1/4"})
    done = batch({"phase": "Succeeded", "progress": "4/4"})
    api = FakeApi(lists={BATCHES: [listing([running])]},
                  watches={BATCHES: [[event("MODIFIED", running), event("MODIFIED", done)]]})
    seen = []
    final = handle(api).wait(timeout=5, on_progress=seen.append)
    assert final["phase"] == "Succeeded"
    assert [s.get("progress") for s in seen] == [None, "1/4", "4/4"]
    # One list, then a watch from its resourceVersion, selected by name: never a poll.
    assert api.calls[0] == ("get", BATCHES, {"fieldSelector": f"metadata.name={NAME}", "limit": 100})
    assert api.calls[1][0] == "watch" and api.calls[1][2]["resourceVersion"] == "10"


def test_wait_stops_on_stalled_settles_and_times_out():
    stalled = {"phase": "Pending", "conditions": [{"type": "Stalled", "status": "True"}]}
    api = FakeApi(lists={BATCHES: [listing([batch(stalled)])]})
    assert handle(api).wait(timeout=5) == stalled
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])]})
    with pytest.raises(TimeoutError, match="not finished after 0.3s"):
        handle(api).wait(timeout=0.3)
    done = {"phase": "Succeeded", "jobName": "j"}
    api = FakeApi(lists={BATCHES: [listing([batch(done)])]},
                  watches={BATCHES: [[0.2, event("MODIFIED", batch(dict(done, jobCompleteSeconds=3.5)))]]})
    assert handle(api).wait(timeout=5, settle=3)["jobCompleteSeconds"] == 3.5


def test_stream_survives_dropped_watches_and_relists_without_duplicates():
    final = batch({"phase": "Succeeded"})
    api = FakeApi(
        lists={BATCHES: [listing([batch({"phase": "Running"})])],
               CMS: [listing([cm([row(0)])], rv="10"), listing([cm([row(0), row(1), row(2)])], rv="20"),
                     listing([cm([row(0), row(1), row(2), row(3)])], rv="30")]},
        watches={CMS: [[event("MODIFIED", cm([row(0), row(1)], rv="11")), Unavailable("dropped")],
                       [event("MODIFIED", cm([row(1), row(0)], rv="12")),
                        b'{"type":"ERROR","object":{"code":410,"message":"too old"}}'],
                       gone(), [0.3]],
                 BATCHES: [[0.6, event("MODIFIED", final)]]})
    rows = list(handle(api).stream(timeout=5))
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    watches = [c for c in api.calls if c[0] == "watch" and c[1] == CMS]
    assert watches[1][2]["resourceVersion"] == "11"      # resumed where the drop happened
    lists = [c for c in api.calls if c[0] == "get" and c[1] == CMS]
    assert len(lists) >= 3                                # 410 twice: relisted


def test_stream_sweeps_once_after_the_batch_is_final():
    """The batch watch says final before the ConfigMap watch delivered the last rows."""
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Failed"})])],
                         CMS: [listing([cm([row(0)])]), listing([cm([row(0), row(1), row(2), row(3, outcome="failed")])])]})
    rows = list(handle(api).stream(timeout=5))
    assert [r["index"] for r in rows] == [0, 1, 2, 3] and rows[3]["reward"] is None


def test_groups_once_complete_and_leftovers_at_the_end():
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])],
                         CMS: [listing([cm([row(1, reward=0.0), row(0, reward=1.0), row(2, reward=2.0)])])]},
                  watches={BATCHES: [[0.2, event("MODIFIED", batch({"phase": "Failed"}))]]})
    groups = list(handle(api).groups(timeout=5))
    first, second = groups
    assert first["group"] == 0 and first["final"] and [r["sample"] for r in first["rows"]] == [0, 1]
    assert first["reward_mean"] == 0.5 and first["reward_std"] == 0.5 and first["valid"] == 2
    assert second["group"] == 1 and not second["final"] and len(second["rows"]) == 1


def test_rows_of_other_batches_and_garbage_are_ignored():
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Succeeded"})])],
                         CMS: [listing([cm([row(0)], uid="other"), {"metadata": {"labels": {
                             "rl.agentruntime.io/batch-uid": UID}}, "binaryData": {"results.json.gz": "!!"}},
                             cm([{"index": 9, "outcome": "succeeded"}, {"index": 1, "outcome": "nonsense"}, row(3)])])]})
    assert [r["index"] for r in handle(api).stream(timeout=1)] == [3]


def test_a_deleted_batch_and_a_forbidden_watch_end_the_stream():
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])]},
                  watches={BATCHES: [[event("DELETED", batch({"phase": "Running"}))]]})
    with pytest.raises(sdk.NotFound, match="was deleted"):
        handle(api).wait(timeout=5)
    api = FakeApi(lists={BATCHES: [Forbidden("no", status=403)]})
    with pytest.raises(sdk.Forbidden):
        handle(api).wait(timeout=5)


def test_a_growing_shard_row_count_is_streamed_in_completion_order():
    shard = dict(cm([row(3), row(0)], name=f"{NAME}-results-0"))
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])], CMS: [listing([shard])]},
                  watches={CMS: [[event("MODIFIED", cm([row(3), row(0), row(2), row(1)], name=f"{NAME}-results-0"))]],
                           BATCHES: [[0.3, event("MODIFIED", batch({"phase": "Succeeded"}))]]})
    assert [r["index"] for r in handle(api).stream(timeout=5)] == [3, 0, 2, 1]
