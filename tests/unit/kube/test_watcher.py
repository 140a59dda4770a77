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
