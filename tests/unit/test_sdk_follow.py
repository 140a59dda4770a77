"""sdk.follow and the blocking client's watches on a fake API: wait, stream, groups, resumption."""
from __future__ import annotations

import threading

import pytest

from rolloutbatch import sdk
from rolloutbatch.core.results import configmap_digest, decode_results, encode_results
from rolloutbatch.sdk import result_ops
from rolloutbatch.sdk.follow import Follower, ListWatch
from rolloutbatch.kube.errors import Forbidden, Gone, Unavailable, classify
from tests.unit.fake_watch import FakeApi, event, gone

NS, NAME, UID = "team", "b", "u-1"
BATCHES = f"/apis/rl.agentruntime.io/v1alpha1/namespaces/{NS}/rolloutbatches"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
HEAD = f"{CMS}/{NAME}-results"


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


def recorded(status, *configmaps):
    """``status`` as the operator patches it after writing ``configmaps`` (``resultsDigests``)."""
    return dict(status, resultsDigests={c["metadata"]["name"]: configmap_digest(c) for c in configmaps})


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


FINAL_UNSETTLED = {"phase": "Succeeded", "jobName": "j", "progress": "4/4"}   # jobCompleteSeconds still to come


def test_a_timeout_inside_the_settle_returns_the_final_status():
    # settle is "up to": a batch that is final is finished, not timed out
    api = FakeApi(lists={BATCHES: [listing([batch(FINAL_UNSETTLED)])]},
                  objects={f"{BATCHES}/{NAME}": batch(FINAL_UNSETTLED)})
    assert handle(api).wait(timeout=0.5, settle=10)["phase"] == "Succeeded"
    assert handle(api, **FINAL_UNSETTLED).wait(timeout=0, settle=10)["phase"] == "Succeeded"
    assert handle(api).stop(wait=True, timeout=0.5)["phase"] == "Succeeded"


STALLED_AFTER_ITS_JOB = {"phase": "Failed", "reason": "ImagePullFailed", "jobName": "b-job", "progress": "0/4",
                         "conditions": [{"type": "Stalled", "status": "True", "reason": "ImagePullFailed"}]}


@pytest.mark.parametrize("status", [STALLED_AFTER_ITS_JOB, {"phase": "Stopped", "jobName": "b-job"}],
                         ids=["stalled", "stopped"])
def test_wait_does_not_settle_for_a_job_that_will_never_complete(status):
    """A stalled batch's Job is deleted (``core.lifecycle.job_will_complete``), so its
    jobCompleteSeconds never comes; the settle exempted only a stopped batch, and wait() on a
    batch stalled ImagePullFailed held its final status for the whole settle (10 s by default)."""
    follower = Follower(batch(status), rows=False, settle_seconds=30)
    assert follower.done(now=0.0)
    unsettled = Follower(batch(FINAL_UNSETTLED), rows=False, settle_seconds=30)
    assert not unsettled.done(now=0.0) and unsettled.done(now=30.0)   # a Job that completes is waited for
    api = FakeApi(lists={BATCHES: [listing([batch(status)])]})
    done, error = _returns_within(lambda: handle(api).wait(timeout=60, settle=30), seconds=5)
    assert done and error is None


def _returns_within(call, seconds: float = 3.0):
    """Run ``call`` in a daemon thread: (whether it came back, its exception or None); a wait that
    never ends fails the test rather than hangs it."""
    outcome: dict = {}

    def body():
        try:
            call()
        except BaseException as exc:   # noqa: BLE001 - recorded for the assertion
            outcome["error"] = exc
        outcome["done"] = True
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome.get("done", False), outcome.get("error")


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, True, "5"])
@pytest.mark.parametrize("verb", ["wait", "stream", "groups", "stop"])
def test_a_timeout_that_is_no_finite_number_is_refused_before_any_call(verb, timeout):
    """A NaN timeout never fires (``now >= start + nan`` is never true; ``queue.get(timeout=nan)``
    blocks): a trainer's ``budget - elapsed`` gone NaN waited for good. Refused instead."""
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])], CMS: [listing([])]})
    running = handle(api, phase="Running")
    call = {"wait": lambda: running.wait(timeout=timeout), "stream": lambda: list(running.stream(timeout=timeout)),
            "groups": lambda: list(running.groups(timeout=timeout)),
            "stop": lambda: running.stop(wait=True, timeout=timeout)}[verb]
    done, error = _returns_within(call)
    assert done, f"{verb}(timeout={timeout!r}) never returned"
    assert isinstance(error, ValueError) and "timeout must be a finite number of seconds" in str(error)
    assert api.calls == []


@pytest.mark.parametrize("call", ["wait-settle", "stream-watch_seconds", "groups-watch_seconds"])
def test_the_followers_other_times_are_checked_too(call):
    """wait's settle (a NaN never settles: a finished batch waited out its whole timeout) and a
    watch's length (sent to the API as it came)."""
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])], CMS: [listing([])]})
    running = handle(api, phase="Running")
    nan = float("nan")
    run = {"wait-settle": lambda: running.wait(timeout=5, settle=nan),
           "stream-watch_seconds": lambda: list(running.stream(timeout=5, watch_seconds=nan)),
           "groups-watch_seconds": lambda: list(running.groups(timeout=5, watch_seconds=nan))}[call]
    with pytest.raises(ValueError, match=f"{call.split('-')[1]} must be a finite number of seconds"):
        run()
    assert api.calls == []


@pytest.mark.parametrize("verb", ["stream", "groups"])
def test_a_zero_watch_seconds_is_refused_not_taken_for_the_default(verb):
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])], CMS: [listing([])]})
    running = handle(api, phase="Running")
    with pytest.raises(ValueError, match="watch_seconds must be a finite number of seconds, above 0"):
        list(getattr(running, verb)(timeout=5, watch_seconds=0))
    assert api.calls == []


def test_a_fraction_of_a_second_watch_is_sent_as_whole_seconds():
    """The API server's timeoutSeconds is an integer: 1.5 would be refused with a 400."""
    follower = Follower(batch({"phase": "Running"}), watch_seconds=1.5)
    assert follower.batch_watch.watch_seconds == 2 and isinstance(follower.batch_watch.watch_seconds, int)


def test_a_zero_timeout_looks_once():
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])], CMS: [listing([])]})
    with pytest.raises(TimeoutError, match="not finished after 0s"):
        handle(api).wait(timeout=0)


def test_stream_survives_dropped_watches_and_relists_without_duplicates():
    # The status records the first and the last write; those between wait, then the last holds them.
    final = batch(recorded({"phase": "Succeeded"}, cm([row(0), row(1), row(2), row(3)])))
    api = FakeApi(
        lists={BATCHES: [listing([batch(recorded({"phase": "Running"}, cm([row(0)])))])],
               CMS: [listing([cm([row(0)])], rv="10"), listing([cm([row(0), row(1), row(2)])], rv="20"),
                     listing([cm([row(0), row(1), row(2), row(3)])], rv="30")]},
        watches={CMS: [[event("MODIFIED", cm([row(0), row(1)], rv="11")), Unavailable("dropped")],
                       [event("MODIFIED", cm([row(1), row(0)], rv="12")),
                        b'{"type":"ERROR","object":{"code":410,"message":"too old"}}'],
                       gone(), [0.3]],
                 # the drop waits 0.5 s, and so does the second 410 in a row (no watch event between)
                 BATCHES: [[1.5, event("MODIFIED", final)]]})
    rows = list(handle(api).stream(timeout=5))
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    watches = [c for c in api.calls if c[0] == "watch" and c[1] == CMS]
    assert watches[1][2]["resourceVersion"] == "11"      # resumed where the drop happened
    lists = [c for c in api.calls if c[0] == "get" and c[1] == CMS]
    assert len(lists) >= 3                                # 410 twice: relisted


def test_list_continuation_expired_relists_from_scratch():
    """A paginated list whose continue token expires (410 Gone) must start a fresh list:
    re-sending the expired token gets 410 again, forever, with no delay (on_error returns 0)."""
    lw = ListWatch("/api/v1/namespaces/ns/configmaps", label_selector="a=b")
    lw.on_list({"metadata": {"continue": "expired-token"}, "items": [{"metadata": {"name": "x"}}]})
    assert lw.listing
    assert lw.on_error(Gone("list: the provided continue parameter is too old", status=410)) == 0.0
    assert lw.listing
    assert "continue" not in lw.list_params(), lw.list_params()


def test_a_gone_again_before_any_watch_event_waits_before_the_next_request():
    """Relisting at once after a 410 is right; a second 410 with no watch event between (a list
    page that expires again, a watch that answers 410 at once) waits as other errors do."""
    lw = ListWatch(CMS, label_selector="a=b")
    assert lw.on_error(Gone("too old", status=410)) == 0.0
    lw.on_list(listing([]))
    with pytest.raises(Gone) as expired:    # a watch's ERROR 410 line goes the way of a 410 answer
        lw.on_line(b'{"type":"ERROR","object":{"code":410,"message":"too old"}}')
    assert lw.on_error(expired.value) > 0 and lw.listing
    lw.on_list(listing([]))
    lw.on_line(event("BOOKMARK", {"metadata": {"resourceVersion": "11"}}))
    assert lw.on_error(Gone("too old", status=410)) == 0.0


def test_stream_relists_from_scratch_when_a_list_page_expires():
    """Page 2 of the ConfigMap list answers 410 (its continue token expired): the list starts
    again from page 1, and the rows of page 1 seen twice are handed out once."""
    head, shard = cm([row(0), row(1)]), cm([row(2), row(3)], name=f"{NAME}-results-0")
    status = recorded({"phase": "Running"}, head, shard)
    final = batch(dict(status, phase="Succeeded"))

    def page(items, token=None):
        return {"metadata": {"resourceVersion": "10", **({"continue": token} if token else {})}, "items": items}
    api = FakeApi(lists={BATCHES: [listing([batch(status)])],
                         CMS: [page([head], "t1"), Gone("the provided continue parameter is too old", status=410),
                               page([head], "t2"), page([shard])]},
                  objects={HEAD: head, f"{HEAD}-0": shard},
                  watches={BATCHES: [[0.5, event("MODIFIED", final)]]})
    rows = [r["index"] for r in handle(api).stream(timeout=5)]
    assert sorted(rows) == [0, 1, 2, 3]
    lists = [c[2].get("continue") for c in api.calls if c[0] == "get" and c[1] == CMS]
    assert lists[:4] == [None, "t1", None, "t2"]


def test_stream_sweeps_once_after_the_batch_is_final():
    """The batch watch says final before the ConfigMap watch delivered the last rows."""
    last = cm([row(0), row(1), row(2), row(3, outcome="failed")])
    api = FakeApi(lists={BATCHES: [listing([batch(recorded({"phase": "Failed"}, last))])],
                         CMS: [listing([cm([row(0)])])]}, objects={HEAD: last})
    rows = list(handle(api).stream(timeout=5))
    assert [r["index"] for r in rows] == [0, 1, 2, 3] and rows[3]["reward"] is None
    assert [c[1] for c in api.calls].count(HEAD) == 1     # the sweep reads the head by name, once


def test_groups_once_complete_and_leftovers_at_the_end():
    results = cm([row(1, reward=0.0), row(0, reward=1.0), row(2, reward=2.0)])
    api = FakeApi(lists={BATCHES: [listing([batch(recorded({"phase": "Running"}, results))])],
                         CMS: [listing([results])]}, objects={HEAD: results},
                  watches={BATCHES: [[0.2, event("MODIFIED", batch(recorded({"phase": "Failed"}, results)))]]})
    groups = list(handle(api).groups(timeout=5))
    first, second = groups
    assert first["group"] == 0 and first["final"] and [r["sample"] for r in first["rows"]] == [0, 1]
    assert first["reward_mean"] == 0.5 and first["reward_std"] == 0.5 and first["valid"] == 2
    assert second["group"] == 1 and not second["final"] and len(second["rows"]) == 1


def test_rows_of_other_batches_and_garbage_are_ignored():
    ours = cm([{"index": 9, "outcome": "succeeded"}, {"index": 1, "outcome": "nonsense"}, row(3)])
    garbage = {"metadata": {"name": f"{NAME}-results-0", "labels": {"rl.agentruntime.io/batch-uid": UID}},
               "binaryData": {"results.json.gz": "!!"}}
    other = cm([row(0)], uid="other")
    api = FakeApi(lists={BATCHES: [listing([batch(recorded({"phase": "Succeeded"}, ours, garbage))])],
                         CMS: [listing([other, garbage, ours])]}, objects={HEAD: ours})
    assert [r["index"] for r in handle(api).stream(timeout=1)] == [3]


def test_a_watch_that_fails_unexpectedly_ends_the_wait_with_its_error_not_at_the_timeout():
    """A surprise in a watch (a malformed page, a bug) ended its thread without a word: the wait
    went on to its timeout, saying only that it timed out."""
    api = FakeApi(lists={BATCHES: [RuntimeError("a page nobody expected")]})
    with pytest.raises(RuntimeError, match="a page nobody expected"):
        handle(api).wait(timeout=10)


@pytest.mark.parametrize("page", [None, []], ids=["null", "list"])
def test_a_page_that_is_no_object_ends_the_wait_with_its_error(page):
    """An AttributeError is retried only when the follower closed the response under its reader."""
    api = FakeApi(lists={BATCHES: [page]})
    with pytest.raises(AttributeError):
        handle(api).wait(timeout=10)


def test_a_batch_deleted_while_the_watch_was_down_ends_the_wait_at_the_relist():
    """No DELETED comes for an object deleted while a watch is down: the relist after its 410 Gone
    lacks it, and the wait ran on to its timeout."""
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})]), listing([])]},
                  watches={BATCHES: [[gone()]]})
    with pytest.raises(sdk.NotFound, match="was deleted"):
        handle(api).wait(timeout=10)


def test_every_list_of_the_batch_is_a_consistent_read():
    """LISTED ends the wait as deleted when the list lacks the batch: a list served from a cache
    (resourceVersion=0, or any version with resourceVersionMatch) could predate the batch's own
    create. First list, continue pages, the relist after a 410: none names a version."""
    page = {"metadata": {"resourceVersion": "10", "continue": "next"}, "items": [batch({"phase": "Running"})]}
    api = FakeApi(lists={BATCHES: [page, listing([batch({"phase": "Running"})]), listing([])]},
                  watches={BATCHES: [[gone()]]})
    with pytest.raises(sdk.NotFound, match="was deleted"):
        handle(api).wait(timeout=10)
    lists = [params for kind, path, params in api.calls if kind == "get" and path == BATCHES]
    assert len(lists) == 3 and lists[1].get("continue") == "next", lists
    assert not [p for p in lists if {"resourceVersion", "resourceVersionMatch"} & set(p)], lists


def test_wait_on_a_final_batch_deleted_during_the_settle_returns_its_final_status():
    """wait() saw Succeeded and settled for jobCompleteSeconds; the batch was deleted meanwhile
    (its ttlSecondsAfterFinished, or the trainer's other thread) and wait() raised NotFound: the
    verdict it had seen was lost, though a final batch returns its status."""
    done = {"phase": "Succeeded", "jobName": "j", "progress": "4/4"}
    api = FakeApi(lists={BATCHES: [listing([batch(done)])]},
                  watches={BATCHES: [[0.3, event("DELETED", batch(done))]]})
    got: list = []
    finished, error = _returns_within(lambda: got.append(handle(api).wait(timeout=30, settle=10)), seconds=5)
    assert finished and error is None      # ended at the deletion, not after the settle
    assert got[0]["phase"] == "Succeeded"


@pytest.mark.parametrize("before", [True, False], ids=["deleted-before-final", "deleted-after-final"])
def test_a_deletion_after_the_final_status_ends_stream_and_groups_as_the_sweep_found(before):
    """Rows read are the trainer's; a final batch deleted with its results (owned ConfigMaps go
    with it) ends in ResultsIncomplete naming the head the sweep could no longer read, not in
    NotFound. A batch deleted before it was seen final is still NotFound."""
    head = cm([row(0), row(1), row(2), row(3)])
    follower = Follower(batch(recorded({"phase": "Running"}, cm([row(0)]))), groups=True)
    assert [v["index"] for k, v in follower.feed(follower.results_watch, "ADDED", cm([row(0)])) if k == "row"] == [0]
    if before:
        follower.feed(follower.batch_watch, "DELETED", batch({"phase": "Running"}))
        assert follower.done(now=0) and isinstance(follower.end_error(), sdk.NotFound)
        return
    follower.feed(follower.batch_watch, "MODIFIED", batch(recorded({"phase": "Succeeded"}, head)))
    assert follower.needs_sweep()
    from rolloutbatch.sdk.result_ops import ResultsRead
    follower.swept_with(ResultsRead(head=f"{NAME}-results", status=follower.status, confirmed=True,
                                    got={f"{NAME}-results": None}, docs={f"{NAME}-results": None}))
    follower.feed(follower.batch_watch, "DELETED", batch(follower.status))
    assert follower.done(now=0)
    error = follower.end_error()
    assert isinstance(error, sdk.ResultsIncomplete) and error.shards == [f"{NAME}-results"]
    complete = Follower(batch(recorded({"phase": "Succeeded"}, head)), groups=True)
    out = complete.feed(complete.results_watch, "ADDED", head)
    complete.feed(complete.batch_watch, "DELETED", batch(complete.status))
    assert complete.done(now=0) and complete.end_error() is None
    assert [v["final"] for k, v in out if k == "group"] == [True, True]


def test_a_deleted_batch_and_a_forbidden_watch_end_the_stream():
    api = FakeApi(lists={BATCHES: [listing([batch({"phase": "Running"})])]},
                  watches={BATCHES: [[event("DELETED", batch({"phase": "Running"}))]]})
    with pytest.raises(sdk.NotFound, match="was deleted"):
        handle(api).wait(timeout=5)
    api = FakeApi(lists={BATCHES: [Forbidden("no", status=403)]})
    with pytest.raises(sdk.Forbidden):
        handle(api).wait(timeout=5)


@pytest.mark.parametrize("verb", ["wait", "stream", "groups"])
def test_an_expired_token_ends_the_follow_with_its_401_not_at_the_timeout(verb):
    """A token that expired (or was rotated) mid-step: every list answers 401. Asking again with it
    cannot help, yet the watch retried it to the caller's timeout (an hour by default), and the
    TimeoutError said nothing of the 401."""
    api = FakeApi(lists={BATCHES: [classify(401, "Unauthorized", "Unauthorized", f"list {BATCHES}")],
                         CMS: [listing([])]})
    running = handle(api, phase="Running")
    follow = {"wait": lambda: running.wait(timeout=3), "stream": lambda: list(running.stream(timeout=3)),
              "groups": lambda: list(running.groups(timeout=3))}[verb]
    with pytest.raises(sdk.Unauthorized) as refused:
        follow()
    assert refused.value.status == 401


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 413, 415, 418, 422])
def test_a_client_error_that_asking_again_cannot_fix_ends_the_watch(status):
    assert ListWatch(CMS).on_error(classify(status, "no", what="list")) is None


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503, None])
def test_a_timeout_a_conflict_a_rate_limit_and_a_server_error_are_asked_again(status):
    assert ListWatch(CMS).on_error(classify(status, "not now", what="list")) > 0


def test_a_growing_shard_row_count_is_streamed_in_completion_order():
    shard = dict(cm([row(3), row(0)], name=f"{NAME}-results-0"))
    grown = cm([row(3), row(0), row(2), row(1)], name=f"{NAME}-results-0")
    api = FakeApi(lists={BATCHES: [listing([batch(recorded({"phase": "Running"}, shard))])], CMS: [listing([shard])]},
                  watches={CMS: [[event("MODIFIED", grown)]],
                           BATCHES: [[0.3, event("MODIFIED", batch(recorded({"phase": "Succeeded"}, grown)))]]})
    assert [r["index"] for r in handle(api).stream(timeout=5)] == [3, 0, 2, 1]


def test_a_forged_shard_is_never_streamed():
    """Right label and name, a well-formed row with reward 1e6, listed before the real rows."""
    first, last = cm([row(0), row(1)]), cm([row(0), row(1), row(2), row(3)], rv="11")
    forged = cm([row(3, reward=1e6)], name=f"{NAME}-results-0")
    api = FakeApi(lists={BATCHES: [listing([batch(recorded({"phase": "Running"}, first))])],
                         CMS: [listing([forged, first])]},
                  watches={CMS: [[event("MODIFIED", last), event("MODIFIED", dict(forged, data=last["data"]))]],
                           BATCHES: [[0.3, event("MODIFIED", batch(recorded({"phase": "Succeeded"}, last)))]]})
    rows = list(handle(api).stream(timeout=5))
    assert [(r["index"], r["reward"]) for r in rows] == [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]


def test_a_configmap_is_streamed_once_the_status_records_it():
    follower = Follower(batch(recorded({"phase": "Running"}, cm([row(0)]))))
    watch = follower.results_watch
    written = cm([row(0), row(1)], rv="6")
    assert follower.feed(watch, "MODIFIED", written) == []            # the status lags the write
    progress = recorded({"phase": "Running", "progress": "1/4"}, cm([row(0)]))
    assert follower.feed(follower.batch_watch, "MODIFIED", batch(progress)) == [("status", progress)]   # not yet
    status = recorded({"phase": "Running"}, written)
    out = follower.feed(follower.batch_watch, "MODIFIED", batch(status))
    assert out == [("status", status), ("row", row(0)), ("row", row(1))] and not follower.pending
    assert follower.feed(watch, "MODIFIED", written) == []            # redelivered: each index once


def test_a_configmap_the_status_holds_as_pending_is_streamed_at_once():
    """The operator records a write's digest as pending before it writes: the write is then
    streamed as it comes, and once only when the status records it for good."""
    written = cm([row(0), row(1)], rv="6")
    status = dict(recorded({"phase": "Running"}, cm([row(0)])), pendingResultsDigests=recorded({}, written)["resultsDigests"])
    follower = Follower(batch(status))
    assert [v["index"] for _, v in follower.feed(follower.results_watch, "MODIFIED", written)] == [0, 1]
    out = follower.feed(follower.batch_watch, "MODIFIED", batch(recorded({"phase": "Running"}, written)))
    assert [k for k, _ in out] == ["status"]


def test_results_vouched_for_only_as_pending_are_read():
    """An operator that died between a results write and the status that records it: the SDK
    reads the results (their digest is the pending one) and refuses a forgery all the same."""
    written = cm([row(0), row(1), row(2), row(3)], final=True)
    status = dict(recorded({"phase": "Succeeded"}, cm([row(0)])),
                  pendingResultsDigests={f"{NAME}-results": configmap_digest(written)})
    api = FakeApi(objects={HEAD: written, f"{BATCHES}/{NAME}": batch(status)})
    assert [r["index"] for r in handle(api).results()] == [0, 1, 2, 3]
    forged = cm([row(0, reward=1e6)], final=True)
    api = FakeApi(objects={HEAD: forged, f"{BATCHES}/{NAME}": batch(status)})
    with pytest.raises(sdk.ResultsNotReady, match="do not trust it"):
        handle(api).results()


def test_an_operator_restart_that_rewrites_loses_nothing():
    """A write whose status patch a crash prevented is superseded by the restarted operator's."""
    follower = Follower(batch(recorded({"phase": "Running"}, cm([row(0)]))))
    watch = follower.results_watch
    assert [v["index"] for _, v in follower.feed(watch, "ADDED", cm([row(0)]))] == [0]
    assert follower.feed(watch, "MODIFIED", cm([row(0), row(1)], rv="6")) == []      # never recorded
    rewritten = cm([row(0), row(2), row(1, reward=0.5)], rv="7")                     # judged again
    assert follower.feed(watch, "MODIFIED", rewritten) == [] and len(follower.pending) == 1
    out = follower.feed(follower.batch_watch, "MODIFIED", batch(recorded({"phase": "Succeeded"}, rewritten)))
    assert [(v["index"], v["reward"]) for k, v in out if k == "row"] == [(2, 1.0), (1, 0.5)]


def test_unrecorded_configmaps_are_bounded_and_ignored_by_the_sweep():
    from rolloutbatch.sdk.follow import MAX_PENDING
    from rolloutbatch.sdk.result_ops import ResultsRead

    follower = Follower(batch({"phase": "Running"}))
    for n in range(MAX_PENDING + 5):
        follower.feed(follower.results_watch, "ADDED", cm([row(n % 4, reward=1e6)], name=f"{NAME}-results-{n}"))
    assert len(follower.pending) == MAX_PENDING and f"{NAME}-results-0" not in follower.pending
    ours = cm([row(0), row(1), row(2)])
    follower.feed(follower.batch_watch, "MODIFIED", batch(recorded({"phase": "Failed"}, ours)))
    assert follower.needs_sweep()
    read = ResultsRead(head=f"{NAME}-results", status=follower.status, confirmed=True,
                       got={f"{NAME}-results": ours}, docs={f"{NAME}-results": decode_results(ours)})
    out = follower.swept_with(read)
    assert [v["index"] for _, v in out] == [0, 1, 2] and f"{NAME}-results-9" in follower.unverified
    assert all(r["reward"] == 1.0 for r in follower.rows.values()) and follower.done(now=0)
    assert follower.incomplete_error() is None     # a forged name no head lists is no loss: the batch ended short


@pytest.fixture(autouse=True)
def _no_status_reread_pauses(monkeypatch):
    """The re-reads of a lagging status keep their count, not their pauses (seconds each)."""
    monkeypatch.setattr(result_ops, "STATUS_REREADS", tuple(0.0 for _ in result_ops.STATUS_REREADS))


def _sharded_results():
    head = cm([], shards=[{"name": f"{NAME}-results-{n}", "rows": 2, "full": True} for n in range(2)])
    shards = [cm([row(0), row(1)], name=f"{NAME}-results-0"), cm([row(2), row(3)], name=f"{NAME}-results-1")]
    return head, shards


def test_the_sweep_reads_an_unlabelled_shard_by_name():
    """A neighbour stripped shard 0's labels before the follower listed: the label watch never
    sees it, the final sweep reads what the head's index names."""
    head, shards = _sharded_results()
    bare = dict(shards[0], metadata={k: v for k, v in shards[0]["metadata"].items() if k != "labels"})
    final = batch(recorded({"phase": "Succeeded"}, head, *shards))
    api = FakeApi(lists={BATCHES: [listing([final])], CMS: [listing([head, shards[1]])]},
                  objects={HEAD: head, f"{HEAD}-0": bare, f"{HEAD}-1": shards[1]})
    assert sorted(r["index"] for r in handle(api).stream(timeout=5)) == [0, 1, 2, 3]


def test_a_final_batch_whose_listed_shard_is_gone_raises_rather_than_ends_short():
    head, shards = _sharded_results()
    final = batch(recorded({"phase": "Succeeded"}, head, *shards))

    def api():
        return FakeApi(lists={BATCHES: [listing([final])], CMS: [listing([head, shards[1]])]},
                       objects={HEAD: head, f"{HEAD}-1": shards[1]})
    got = []
    with pytest.raises(sdk.ResultsIncomplete, match=f"{NAME}-results-0 are gone or not what the operator wrote") as exc:
        for r in handle(api()).stream(timeout=5):
            got.append(r["index"])
    assert sorted(got) == [2, 3] and exc.value.shards == [f"{NAME}-results-0"]
    with pytest.raises(sdk.ResultsIncomplete, match="2 of 4 rows received"):
        list(handle(api()).groups(timeout=5))


def _final_with_unlisted_head():
    """A final batch whose head the label watch never showed: the sweep reads it by name."""
    last = cm([row(0), row(1), row(2), row(3)])
    return last, batch(recorded({"phase": "Succeeded", "progress": "4/4"}, last))


@pytest.mark.parametrize("verb", ["stream", "groups"])
def test_a_transient_error_in_the_final_sweep_is_asked_again(verb):
    """The watches ask again after a 5xx or a 429; the end-of-batch sweep did not: one 503 on the
    head's GET ended the trainer's stream with Unavailable after it had taken rows (and a new
    stream() hands every row out again)."""
    last, final = _final_with_unlisted_head()
    api = FakeApi(lists={BATCHES: [listing([final])], CMS: [listing([])],
                         HEAD: [Unavailable("503 the server is busy", status=503),
                                classify(429, "slow down", what="get"), last]})
    got = list(getattr(handle(api), verb)(timeout=10))
    indexes = [r["index"] for r in got] if verb == "stream" else [r["index"] for g in got for r in g["rows"]]
    assert sorted(indexes) == [0, 1, 2, 3]
    assert [c[1] for c in api.calls].count(HEAD) == 3


def test_the_sweep_ends_at_once_on_a_final_4xx_and_at_the_deadline_on_a_lasting_5xx():
    """Asked again only while it can help: a 403 is the same answer each time; a 5xx that lasts
    is raised itself once the next pause would end past the timeout (not a TimeoutError, which
    would say the batch is not final)."""
    _, final = _final_with_unlisted_head()
    api = FakeApi(lists={BATCHES: [listing([final])], CMS: [listing([])], HEAD: [Forbidden("no", status=403)]})
    with pytest.raises(sdk.Forbidden):
        list(handle(api).stream(timeout=10))
    assert [c[1] for c in api.calls].count(HEAD) == 1
    api = FakeApi(lists={BATCHES: [listing([final])], CMS: [listing([])],
                         HEAD: [Unavailable("503 the server is busy", status=503)]})
    done, error = _returns_within(lambda: list(handle(api).stream(timeout=2)), seconds=5)
    assert done and isinstance(error, sdk.Unavailable)
    # asked again after 0.5 s and 1 s; the next pause (2 s) would end past the timeout
    assert 2 <= [c[1] for c in api.calls].count(HEAD) <= 3


RESULTS_CONFLICT = {"phase": "Failed", "reason": "ResultsConfigMapConflict", "progress": "0/4",
                    "message": "ConfigMap team/b-results exists and is not this batch's (retained results of uid old-uid)",
                    "conditions": [{"type": "Stalled", "status": "True", "reason": "ResultsConfigMapConflict"}]}


@pytest.mark.parametrize("at_the_name", ["nothing", "an earlier namesake's retained head"])
def test_a_batch_stalled_before_its_first_results_write_ends_stream_and_groups_quietly(at_the_name):
    """A batch whose name's results an earlier namesake retained stalls ResultsConfigMapConflict
    before any episode runs: the operator never wrote nor recorded its head. With nothing at the
    name the stream ended with no rows; with the earlier set there it raised ResultsIncomplete
    ("b-results are gone or not what the operator wrote"), blaming a head that was never ours."""
    objects = {}
    if at_the_name != "nothing":
        earlier = cm([row(0), row(1), row(2), row(3)], uid="old-uid")
        earlier["metadata"]["labels"]["rl.agentruntime.io/results-retained"] = "true"
        objects[HEAD] = earlier

    def api():
        return FakeApi(lists={BATCHES: [listing([batch(RESULTS_CONFLICT)])], CMS: [listing([])]}, objects=objects)
    assert list(handle(api()).stream(timeout=5)) == []
    groups = list(handle(api()).groups(timeout=5))
    assert [(g["group"], g["final"], g["rows"]) for g in groups] == [(0, False, []), (1, False, [])]


def test_settle_reads_a_final_batch_again_until_its_job_complete_seconds_comes():
    """What `watch` and `submit --watch` show last: their summary lacked client_job_complete_seconds,
    which the operator writes a moment after the phase (settle read nothing again)."""
    path = f"{BATCHES}/{NAME}"
    api = FakeApi(objects={path: batch(FINAL_UNSETTLED)})
    threading.Timer(0.7, lambda: api.objects.__setitem__(path, batch(dict(FINAL_UNSETTLED, jobCompleteSeconds=2.5)))
                    ).start()
    assert handle(api, **FINAL_UNSETTLED).settle(10)["jobCompleteSeconds"] == 2.5
    # bounded, and nothing to wait for when the Job will never complete or the batch is not final
    api = FakeApi(objects={path: batch(FINAL_UNSETTLED)})
    assert "jobCompleteSeconds" not in handle(api, **FINAL_UNSETTLED).settle(0.6)
    for status in (STALLED_AFTER_ITS_JOB, {"phase": "Running", "jobName": "j"}):
        quiet = FakeApi(objects={path: batch(status)})
        assert handle(quiet, **status).settle(10) == status and quiet.calls == []
