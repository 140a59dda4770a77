"""service.leadership over the in-memory API server: one holder at a time, a standby that waits and
says who leads, a takeover after expiry or release, a leader that stops at its renew deadline,
and an operator life in which a standby never starts the reconciler."""
from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time

import pytest

from rolloutbatch.core import leadership as L
from rolloutbatch.kube import leases
from rolloutbatch.kube.errors import Forbidden, Unavailable
from rolloutbatch.service.leadership import Elector, operate
from tests.support.memory_api import MemoryApi

NS = "rolloutbatch-system"
T = L.Timing(lease_duration=15, renew_deadline=10, retry_period=2)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=self.now)


@pytest.fixture
def api() -> MemoryApi:
    api = MemoryApi()
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


def elector(api, name: str, clock: Clock, **kw) -> Elector:
    return Elector(api, NS, name, T, clock=clock, wall=clock.wall, **kw)


def holder(api) -> str:
    return api.get_object("Lease", L.LEASE_NAME, NS)["spec"]["holderIdentity"]


def test_the_first_candidate_creates_the_lease_and_the_second_waits_saying_who_leads(api, caplog):
    clock = Clock()
    a, b = elector(api, "pod-a_1", clock), elector(api, "pod-b_2", clock)
    with caplog.at_level(logging.INFO, "rolloutbatch.leadership"):
        assert a.try_once() and a.leading.is_set() and a.status()["role"] == "leader"
        assert not b.try_once() and not b.leading.is_set()
        assert not b.try_once()   # said once, not at every try
    assert holder(api) == "pod-a_1"
    assert b.status() == {"role": "standby", "identity": "pod-b_2", "holder": "pod-a_1",
                          "holderUntil": "2030-01-01T00:16:55Z", "lease": f"{NS}/{L.LEASE_NAME}", "error": None}
    standby = [r.getMessage() for r in caplog.records if r.getMessage().startswith("standby:")]
    assert standby == ["standby: rolloutbatch-operator lease held by pod-a_1 until 2030-01-01T00:16:55Z "
                       "(renewed by its holder; checked every 2s)"]
    assert "leader: acquired lease rolloutbatch-system/rolloutbatch-operator as pod-a_1" in caplog.text


def test_a_renewing_leader_keeps_the_lease_and_a_dead_one_loses_it_after_the_lease_duration(api):
    clock = Clock()
    lost = []
    a, b = elector(api, "pod-a_1", clock, on_lost=lambda: lost.append("a")), elector(api, "pod-b_2", clock)
    a.try_once()
    for _ in range(20):                 # 40 s of renewals: b never gets it
        clock.now += 2
        assert a.try_once() and not b.try_once()
    calls = len(api.calls)
    a.try_once()
    assert [m for m, _ in api.calls[calls:]] == ["PUT"]   # the holder renews without reading first
    clock.now += 2
    b.try_once()                        # b sees the last renewal now
    clock.now += T.lease_duration - 0.01
    assert not b.try_once()
    clock.now += 0.01
    assert b.try_once() and holder(api) == "pod-b_2"
    assert api.get_object("Lease", L.LEASE_NAME, NS)["spec"]["leaseTransitions"] == 1
    assert not a.try_once() and holder(api) == "pod-b_2"   # a late renewal loses on resourceVersion ...
    assert lost == ["a"] and not a.leading.is_set() and a.status()["role"] == "stopped"   # ... and a stops


@pytest.mark.parametrize("handover", ["deleted", "emptied"])
def test_a_leader_whose_lease_another_took_stops_at_once_and_never_takes_it_back(api, handover):
    """An admin deletes the Lease (or empties its holder) to force a handover; the standby takes
    it. The old leader's next round sees a live holder that is not it: it stops at once (never
    renewing over the other's record, which would make two leaders until its deadline)."""
    clock = Clock()
    lost, leads = [], []
    a = elector(api, "pod-a_1", clock, on_lost=lambda: lost.append("a"), on_leader=leads.append)
    b = elector(api, "pod-b_2", clock, on_lost=lambda: lost.append("b"))
    assert a.try_once() and not b.try_once()
    lease = api.get_object("Lease", L.LEASE_NAME, NS)
    if handover == "deleted":
        api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{L.LEASE_NAME}", "delete the Lease")
    else:
        leases.update_lease(api, lease, {**lease["spec"], "holderIdentity": ""})
    assert b.try_once() and holder(api) == "pod-b_2"
    clock.now += 2
    assert not a.try_once()
    assert lost == ["a"] and leads == [True, False] and not a.leading.is_set()
    for _ in range(30):                 # a minute of rounds: b alone leads, every one of them
        clock.now += 2
        assert b.try_once() and holder(api) == "pod-b_2"
    assert api.get_object("Lease", L.LEASE_NAME, NS)["spec"]["leaseTransitions"] <= 1


def test_a_leader_deposed_by_a_record_at_the_end_of_the_calendar_stops_all_the_same(api):
    """Any client may write the Lease: a renewTime near year 9999 overflows its expiry's sum. The
    deposed leader formatted that expiry for its log line after standing its watchdog down and
    before stepping down, and the loop swallowed the error: two reconcilers at once."""
    clock, lost = Clock(), []
    a = elector(api, "pod-a_1", clock, on_lost=lambda: lost.append("a"))
    assert a.try_once() and a.leading.is_set()
    lease = api.get_object("Lease", L.LEASE_NAME, NS)
    leases.update_lease(api, lease, {**lease["spec"], "holderIdentity": "pod-b_2",
                                     "renewTime": "9999-12-31T23:59:59.000000Z",
                                     "acquireTime": "9999-12-31T23:59:59.000000Z"})
    clock.now += 2
    assert not a.try_once()
    assert lost == ["a"] and not a.leading.is_set()
    b = elector(api, "pod-c_3", clock)
    assert not b.try_once() and b.status()["holder"] == "pod-b_2"   # a standby says who holds it


def test_of_two_candidates_taking_an_expired_lease_one_wins(api):
    clock = Clock()
    elector(api, "pod-a_1", clock).try_once()
    b, c = elector(api, "pod-b_2", clock), elector(api, "pod-c_3", clock)
    b.try_once(), c.try_once()
    clock.now += T.lease_duration
    api.meanwhile("PUT", "Lease", lambda: c.try_once())   # c writes between b's read and b's write
    assert not b.try_once()
    assert holder(api) == "pod-c_3" and c.leading.is_set() and not b.leading.is_set()


def test_a_released_lease_is_taken_at_the_next_try_and_a_standby_never_releases(api):
    clock = Clock()
    a, b = elector(api, "pod-a_1", clock), elector(api, "pod-b_2", clock)
    a.try_once(), b.try_once()
    b.stop(release=True)
    assert holder(api) == "pod-a_1"
    a.stop(release=True)
    spec = api.get_object("Lease", L.LEASE_NAME, NS)["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    c = elector(api, "pod-c_3", clock)
    assert c.try_once() and holder(api) == "pod-c_3"   # no wait: the same instant


def test_stopping_waits_for_the_election_threads_one_renew_deadline_in_all(api):
    """stop() joined each of its two threads for a renew deadline, twice that in all when both
    were slow: with the drain and kopf's own stop that outlasted the pod's grace period, and the
    kubelet killed it before the release (tests/unit/test_graceful_stop_budget.py)."""
    clock = Clock()
    a = Elector(api, NS, "pod-a_1", L.Timing(lease_duration=3, renew_deadline=1, retry_period=0.2),
                clock=clock, wall=clock.wall)
    assert a.try_once()
    hung = threading.Event()
    a._threads = [threading.Thread(target=hung.wait, daemon=True) for _ in range(2)]   # two stuck requests
    for thread in a._threads:
        thread.start()
    started = time.monotonic()
    a.stop(release=True)
    took = time.monotonic() - started
    hung.set()
    assert took < 1.5 and holder(api) == ""


def test_a_leader_that_cannot_renew_stops_at_its_deadline_and_says_why(api, caplog):
    lost, leads = threading.Event(), []
    clock = Clock()
    a = elector(api, "pod-a_1", clock, on_lost=lost.set, on_leader=leads.append)
    a.try_once()
    api.fail("PUT", "Lease", Unavailable("apiserver down", status=503), times=100)
    api.fail("GET", "Lease", Unavailable("apiserver down", status=503), times=100)
    with caplog.at_level(logging.INFO, "rolloutbatch.leadership"):
        a.start()
        clock.now += T.renew_deadline - 0.5
        assert not lost.wait(0.8)
        clock.now += 0.5
        assert lost.wait(5)
        a.stop(release=True)
    assert leads == [True, False] and a.status()["role"] == "stopped"
    assert "not renewed within the 10s renew deadline" in caplog.text and "apiserver down" in caplog.text
    assert "stopping at once, a standby takes over" in caplog.text
    assert holder(api) == "pod-a_1"     # not released: it did not know whether it still led


def test_a_forbidden_lease_is_explained_once(api, caplog):
    clock = Clock()
    a = elector(api, "pod-a_1", clock)
    api.fail("GET", "Lease", Forbidden("leases is forbidden", status=403), times=3)
    with caplog.at_level(logging.WARNING, "rolloutbatch.leadership"):
        a.start()
        assert not a.leading.wait(0.5)
        a.stop(release=True)
    assert caplog.text.count("leader_election_role.yaml") == 1
    assert a.status()["role"] == "stopped"


def run_operate(api, candidate: Elector, started: list, stop_after: float) -> None:
    async def reconcile(stop: asyncio.Event) -> None:
        started.append(candidate.identity)
        await asyncio.wait_for(stop.wait(), stop_after)

    async def main() -> None:
        task = asyncio.create_task(operate(candidate, reconcile))
        await asyncio.sleep(stop_after)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_a_standby_never_starts_the_reconciler(api):
    clock = Clock()
    leader = elector(api, "pod-a_1", clock)
    leader.try_once()
    started: list = []
    standby = elector(api, "pod-b_2", clock)
    run_operate(api, standby, started, stop_after=0.6)
    assert started == [] and holder(api) == "pod-a_1"
    assert standby.status()["role"] == "stopped"


def test_the_leader_starts_the_reconciler_and_releases_once_it_ended(api):
    clock = Clock()
    started: list = []

    async def reconcile(stop: asyncio.Event) -> None:
        started.append(holder(api))
        await asyncio.to_thread(lambda: None)   # a worker thread the release must wait for
        stop.set()

    candidate = elector(api, "pod-a_1", clock)
    asyncio.run(operate(candidate, reconcile))
    assert started == ["pod-a_1"]
    assert holder(api) == ""            # released once reconcile returned


def test_calls_left_running_past_the_settle_bound_keep_the_lease_and_never_hold_the_loop(api):
    """A worker thread still in a call when kopf stopped: operate gives up after settle_timeout,
    leaves the lease to expire (a standby must not start while a write may land), and the event
    loop (/healthz is served on it) keeps turning meanwhile."""
    clock = Clock()
    release = threading.Event()
    ticks: list = []

    async def reconcile(stop: asyncio.Event) -> None:
        asyncio.get_running_loop().run_in_executor(None, release.wait, 5)   # a call that hangs
        await asyncio.sleep(0)

    async def main() -> float:
        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.02)
        ticker = asyncio.create_task(tick())
        began = time.monotonic()
        await operate(elector(api, "pod-a_1", clock), reconcile, settle_timeout=0.4)
        took = time.monotonic() - began
        ticker.cancel()
        release.set()
        return took

    took = asyncio.run(main())
    assert took < 2.0
    assert len(ticks) > 10                  # the loop ran while operate waited
    assert holder(api) == "pod-a_1"         # not released: it expires instead


def test_the_elector_takes_over_when_the_holder_releases(api):
    clock = Clock()
    first = elector(api, "pod-a_1", clock)
    first.try_once()
    started: list = []

    async def reconcile(stop: asyncio.Event) -> None:
        started.append("pod-b_2")

    async def main() -> None:
        task = asyncio.create_task(operate(elector(api, "pod-b_2", clock), reconcile))
        await asyncio.sleep(0.3)
        assert started == []
        first.stop(release=True)
        await asyncio.wait_for(task, 2 * T.retry_period * (1 + L.JITTER) + 2)
    asyncio.run(main())
    assert started == ["pod-b_2"]


def test_ensure_namespace_creates_a_missing_one_once():
    api = MemoryApi()
    assert leases.ensure_namespace(api, NS, L.NAMESPACE_LABELS)
    assert not leases.ensure_namespace(api, NS, L.NAMESPACE_LABELS)
    labels = api.get_object("Namespace", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_a_namespace_that_may_not_be_read_is_left_unchecked_and_one_that_may_not_be_made_is_said():
    """A namespaced local operator may lack get on namespaces: the Lease's namespace may still
    exist, and the election's own requests tell. Only a refused create is an error here."""
    api = MemoryApi()
    api.fail("GET", "Namespace", Forbidden("namespaces is forbidden"))
    assert not leases.ensure_namespace(api, NS, L.NAMESPACE_LABELS)
    assert api.get_object("Namespace", NS) is None
    api.fail("POST", "Namespace", Forbidden("namespaces is forbidden"))
    with pytest.raises(Forbidden):
        leases.ensure_namespace(api, NS, L.NAMESPACE_LABELS)


def test_tasks_the_reconciler_left_on_the_loop_end_before_the_lease_is_released(api):
    """kopf stops its own tasks; a hand-over, a retried annotation or a channel's close the
    handlers started with create_task ran on after operate released the lease: a write of the
    old leader could land after a standby took over. They are cancelled and waited for first,
    and one that will not end keeps the lease (it expires instead)."""
    clock = Clock()
    seen: list = []

    async def late_write() -> None:
        try:
            await asyncio.sleep(10)
            seen.append("wrote after the stop")
        except asyncio.CancelledError:
            seen.append(("cancelled", holder(api)))   # the lease still held while it ends
            raise

    async def reconcile(stop: asyncio.Event) -> None:
        asyncio.create_task(late_write())
        await asyncio.sleep(0)

    async def main() -> None:
        await operate(elector(api, "pod-a_1", clock), reconcile, settle_timeout=2)
    asyncio.run(main())
    assert seen == [("cancelled", "pod-a_1")] and holder(api) == ""

    ended: list = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(1)   # ends a second after it was told: past the settle bound
            ended.append(True)

    async def reconcile_stubborn(stop: asyncio.Event) -> None:
        asyncio.create_task(stubborn())
        await asyncio.sleep(0)

    async def main_stubborn() -> bool:
        await operate(elector(api, "pod-b_2", clock), reconcile_stubborn, settle_timeout=0.3)
        return bool(ended)   # whether operate waited for it past its bound
    assert asyncio.run(main_stubborn()) is False and holder(api) == "pod-b_2"   # not waited for; kept: it expires
