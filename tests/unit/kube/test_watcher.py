"""The operator's own list+watch (kube.watch.Watcher): how it resumes and relists."""
from __future__ import annotations

import time

from rolloutbatch.kube import watch
from rolloutbatch.kube.watch import Watcher
from tests.unit.fake_watch import FakeApi, event, gone

PODS = "/api/v1/pods"


def _listing(*items: dict) -> dict:
    return {"items": list(items), "metadata": {"resourceVersion": "5"}}


def _run_until(api: FakeApi, lists: int, waits: list[float]) -> None:
    """A watcher until it has made ``lists`` lists; its pauses recorded in ``waits``, not slept."""
    watcher = Watcher(api, PODS, "a=b", lambda kind, obj: None)
    watcher.stopped.wait = lambda seconds=None: waits.append(seconds) or watcher.stopped.is_set()
    watcher.start()
    end = time.monotonic() + 10
    try:
        while sum(1 for call in api.calls if call[0] == "get") < lists:
            assert time.monotonic() < end, api.calls
            time.sleep(0.01)
    finally:
        watcher.stop()


def test_a_relist_after_gone_is_at_once_and_pauses_when_gone_comes_again_before_any_event():
    """A list whose pages keep expiring (410 Gone) was listed again at once, for ever."""
    waits: list[float] = []
    _run_until(FakeApi(lists={PODS: [gone(), gone(), gone(), _listing()]}), 4, waits)
    assert waits[:2] == [0.5, 1.0]


def test_an_event_between_two_gones_makes_the_next_relist_immediate_again():
    waits: list[float] = []
    pod = {"metadata": {"uid": "u", "resourceVersion": "6"}}
    api = FakeApi(lists={PODS: [_listing(), _listing()]},
                  watches={PODS: [[gone()], [event("ADDED", pod), gone()], [1.0]]})
    _run_until(api, 3, waits)
    assert waits == []


def _connections(api: FakeApi, until) -> list[tuple]:
    """What a watcher tells its callbacks, in order, with when (``until(log)``: enough)."""
    log: list[tuple] = []
    watcher = Watcher(api, PODS, "a=b", lambda kind, obj: log.append(("event", kind, time.monotonic())),
                      on_connected=lambda up: log.append(("connected", up, time.monotonic())))
    watcher.stopped.wait = lambda seconds=None: watcher.stopped.is_set()   # no back-off sleeps
    watcher.start()
    end = time.monotonic() + 10
    try:
        while not until(log):
            assert time.monotonic() < end, log
            time.sleep(0.01)
    finally:
        watcher.stop()
    return log


def test_a_watch_resumed_after_a_break_is_connected_once_its_backlog_begins_to_arrive():
    """A resumed watch said it was connected as soon as it was answered, before the events since
    its version came: a pool round then read a view a reconnect's back-off old."""
    pod = {"metadata": {"uid": "u", "resourceVersion": "6"}}
    api = FakeApi(lists={PODS: [_listing()]},
                  watches={PODS: [[OSError("connection reset")], [0.3, event("MODIFIED", pod), 5.0]]})
    log = _connections(api, lambda log: len(log) >= 4)
    assert [entry[:2] for entry in log[:4]] == [("connected", True), ("connected", False),   # after the list: at once
                                                ("event", "MODIFIED"), ("connected", True)]


def test_a_resumed_watch_that_brings_nothing_is_connected_after_the_settle_time_and_never_after_it_ended(monkeypatch):
    monkeypatch.setattr(watch, "RESUME_SETTLE_SECONDS", 0.5)
    api = FakeApi(lists={PODS: [_listing()]}, watches={PODS: [[OSError("connection reset")], [0.05], [5.0]]})
    log = _connections(api, lambda log: len(log) >= 4)
    assert [entry[:2] for entry in log[:4]] == [("connected", True), ("connected", False),
                                                ("connected", False), ("connected", True)]
    assert log[3][2] - log[2][2] >= 0.4   # quiet for the settle time, not said at once


def _pod(version: str, name: str = "p") -> dict:
    return {"metadata": {"uid": f"u-{name}", "name": name, "namespace": "n", "resourceVersion": version}}


def _watched_from(api: FakeApi, sessions: int, on_event=lambda kind, obj: None) -> list[str]:
    """The resourceVersion each of a watcher's first ``sessions`` watches asked to start from."""
    watcher = Watcher(api, PODS, "a=b", on_event)
    watcher.stopped.wait = lambda seconds=None: watcher.stopped.is_set()   # no back-off sleeps
    watcher.start()
    end = time.monotonic() + 10
    try:
        while sum(1 for call in api.calls if call[0] == "watch") < sessions:
            assert time.monotonic() < end, api.calls
            time.sleep(0.01)
    finally:
        watcher.stop()
    return [call[2]["resourceVersion"] for call in api.calls if call[0] == "watch"][:sessions]


def test_a_watch_broken_by_a_dropped_connection_resumes_from_the_last_event_it_saw():
    """The version a session reached was a local of the session: when the connection dropped
    (the session raised), the watch resumed from where that session began, replaying up to its
    240 s of events (the pools' view went back to older pod states; a compacted version cost a
    410 and a full relist)."""
    api = FakeApi(lists={PODS: [_listing()]},
                  watches={PODS: [[event("ADDED", _pod("6")), event("MODIFIED", _pod("7")),
                                   OSError("connection reset")]]})
    assert _watched_from(api, 2) == ["5", "7"]


def test_a_watch_broken_by_a_truncated_line_resumes_from_the_last_event_it_saw():
    """A line cut short (not JSON) ended the session as a dropped connection did: resumed from
    the session's start, not from its last event."""
    api = FakeApi(lists={PODS: [_listing()]},
                  watches={PODS: [[event("ADDED", _pod("6")), event("MODIFIED", _pod("7")),
                                   b'{"type":"MODIFIED","obj']]})
    assert _watched_from(api, 2) == ["5", "7"]


def test_a_bookmark_moves_the_version_a_broken_watch_resumes_from():
    """A BOOKMARK is the server's word that nothing this watch sees changed up to its version:
    a watch broken after one resumes from there."""
    bookmark = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}}
    api = FakeApi(lists={PODS: [_listing()]},
                  watches={PODS: [[event("ADDED", _pod("6")), event("BOOKMARK", bookmark), OSError("reset")]]})
    assert _watched_from(api, 2) == ["5", "42"]


def test_an_event_the_callback_fails_on_is_skipped_with_a_log_line_not_replayed_for_ever(caplog):
    """Once a watch resumes from its last event, a callback that raised on an event would get it
    again at each resume, for ever, had the watch kept the version of the event before it: the
    event is logged and skipped, and the watch goes on with the next one on the same session."""
    seen: list[str] = []

    def on_event(kind: str, obj: dict) -> None:
        if obj["metadata"]["name"] == "bad":
            raise KeyError("status")
        seen.append(obj["metadata"]["name"])

    api = FakeApi(lists={PODS: [_listing()]},
                  watches={PODS: [[event("ADDED", _pod("6", "bad")), event("ADDED", _pod("7", "good")),
                                   OSError("reset")]]})
    with caplog.at_level("ERROR", logger=watch.__name__):
        assert _watched_from(api, 3, on_event) == ["5", "7", "7"]
    assert seen == ["good"]
    assert sum("n/bad" in record.getMessage() for record in caplog.records) == 1, caplog.records
