"""core.leadership: client-go's leader-election rules, and a simulation of candidates racing over one
Lease (a compare-and-swap store) with arbitrary request delays, lost responses, pauses, skewed
wall clocks and unrelated monotonic clocks: no two ever believe they lead at the same instant."""
from __future__ import annotations

import datetime
import heapq
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import leadership as L

T = L.Timing()
EPOCH = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


def at(seconds: float) -> datetime.datetime:
    return EPOCH + datetime.timedelta(seconds=seconds)


def test_timing_defaults_are_client_gos_and_nonsense_is_refused():
    assert (T.lease_duration, T.renew_deadline, T.retry_period, T.lease_seconds) == (15, 10, 2, 15)
    assert L.Timing(2.5, 2, 0.5).lease_seconds == 3
    for bad in ((10, 10, 2), (15, 2, 2), (0, 10, 2), (float("nan"), 10, 2), (15, 10, -1),
                (3e9, 2e9, 1), (1e12, 1e11, 1e10),     # past int32, past what a wait can take
                (0.003, 0.002, 0.001)):                 # a flood of requests that time out at once
        with pytest.raises(ValueError):
            L.Timing(*bad)


def test_a_record_round_trips_and_a_hand_edited_spec_reads_as_unset():
    rec = L.Record("pod-a_x1", 15, L.micro_time(at(0)), L.micro_time(at(3)), 4)
    assert L.Record.from_spec(rec.to_spec()) == rec
    assert rec.to_spec()["renewTime"] == "2030-01-01T00:00:03.000000Z"
    odd = L.Record.from_spec({"holderIdentity": 7, "leaseDurationSeconds": "15", "leaseTransitions": True})
    assert odd == L.Record()
    assert L.Record.from_spec(None) == L.Record()


def test_decide_acquires_a_free_or_released_lease_renews_its_own_and_waits_for_anothers():
    assert L.decide(None, "me", 0, T).action is L.Action.ACQUIRE
    free = L.observe(None, L.released(L.Record("other", 15), at(0)), "1", 100.0)
    assert L.decide(free, "me", 100.0, T).action is L.Action.ACQUIRE   # released: no wait at all
    mine = L.observe(None, L.Record("me", 15, renew_time="x"), "2", 100.0)
    assert L.decide(mine, "me", 100.0, T).action is L.Action.RENEW
    theirs = L.observe(None, L.Record("other", 15, renew_time="a"), "3", 100.0)
    assert L.decide(theirs, "me", 114.9, T) == L.Decision(L.Action.WAIT, 115.0)
    assert L.decide(theirs, "me", 115.0, T).action is L.Action.ACQUIRE


def test_expiry_counts_from_when_the_record_was_first_seen_not_from_its_renew_time():
    first = L.observe(None, L.Record("other", 15, renew_time="2001-01-01T00:00:00.000000Z"), "3", 50.0)
    same = L.observe(first, L.Record("other", 15, renew_time="2001-01-01T00:00:00.000000Z"), "3", 60.0)
    assert same.observed_at == 50.0                     # unchanged: still counted from 50
    rewritten = L.observe(first, first.record, "4", 60.0)
    assert rewritten.observed_at == 60.0                # written again, even the same: from now
    renewed = L.observe(same, L.Record("other", 15, renew_time="2001-01-01T00:00:02.000000Z"), "5", 61.0)
    assert renewed.observed_at == 61.0
    assert L.decide(renewed, "me", 75.9, T).action is L.Action.WAIT   # a renewTime from 2001 is not "old"
    odd = L.observe(None, L.Record("other", 0), "6", 0.0)             # no duration written: ours
    assert L.expires_at(odd, T) == 15


def test_records_written_count_transitions_and_keep_the_acquire_time():
    acquired = L.next_record(None, "a", at(0), T)
    assert (acquired.holder, acquired.transitions, acquired.lease_seconds) == ("a", 0, 15)
    renewed = L.next_record(acquired, "a", at(2), T)
    assert renewed.acquire_time == acquired.acquire_time and renewed.renew_time == L.micro_time(at(2))
    assert renewed.transitions == 0
    taken = L.next_record(renewed, "b", at(20), T)
    assert (taken.holder, taken.transitions, taken.acquire_time) == ("b", 1, L.micro_time(at(20)))
    gone = L.released(taken, at(30))
    assert (gone.holder, gone.lease_seconds, gone.transitions) == ("", 1, 1)
    assert L.next_record(gone, "a", at(31), T).transitions == 2


def test_live_holder_and_valid_until_read_the_record_by_the_wall_clock():
    rec = L.next_record(None, "pod-a_k3j", at(0), T)
    assert L.live_holder(rec, at(14)) == "pod-a_k3j"
    assert L.live_holder(rec, at(15)) is None
    assert L.live_holder(L.released(rec, at(1)), at(1)) is None
    assert L.live_holder(L.Record("x", 15, renew_time="garbage"), at(0)) is None
    assert L.valid_until(rec) == "2030-01-01T00:00:15Z"
    assert L.valid_until(L.Record()) == "an unknown time"
    assert L.holder_pod(L.identity("rolloutbatch-operator-6d9f-abcde", "k3j")) == "rolloutbatch-operator-6d9f-abcde"
    assert L.parse_micro_time("2030-01-01T00:00:15Z") == at(15)


# -- the simulation ------------------------------------------------------------------------------
@dataclass
class Attempt:
    gap: float          # idle before the attempt starts
    to_read: float      # start -> the GET is served
    to_write: float     # GET answered -> the PUT is served
    back: float         # PUT served -> its answer arrives
    lost: bool          # the PUT's answer never arrives (it may still have landed)
    release: bool       # a graceful stop: a leader stops reconciling, then releases


@dataclass
class Candidate:
    name: str
    mono: float                     # its monotonic clock = global time + mono
    wall: float                     # its wall clock = global time + wall (skewed at will)
    attempts: list[Attempt]
    obs: L.Observation | None = None
    belief_end: float | None = None  # global time its belief in leading ends
    dead: bool = False
    beliefs: list[tuple[float, float]] = field(default_factory=list)


class Store:
    """The API server: one Lease, updates conditioned on the resourceVersion."""

    def __init__(self) -> None:
        self.record: L.Record | None = None
        self.version = 0

    def write(self, expected: int | None, record: L.Record) -> int | None:
        if expected != (self.version if self.record is not None else None):
            return None   # 409 (or 409 AlreadyExists for a create)
        self.record, self.version = record, self.version + 1
        return self.version


def simulate(candidates: list[Candidate], until=L.leading_until) -> list[tuple[str, float, float]]:
    """Run every candidate's attempts; the intervals (global time) during which each believed it led."""
    store, events, seq = Store(), [], 0

    def push(time: float, cand: Candidate, step: str, payload=None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (time, seq, cand, step, payload))

    def lapse(cand: Candidate, now: float) -> None:
        # the watchdog: a holder whose deadline passed stops at once (the process exits)
        if cand.belief_end is not None and now >= cand.belief_end:
            cand.beliefs[-1] = (cand.beliefs[-1][0], cand.belief_end)
            cand.dead = True

    for cand in candidates:
        if cand.attempts:
            push(cand.attempts[0].gap, cand, "start", 0)
    while events:
        now, _, cand, step, payload = heapq.heappop(events)
        lapse(cand, now)
        if cand.dead:
            continue
        if step == "start":
            att = cand.attempts[payload]
            started = now + cand.mono
            if att.release and cand.belief_end is not None:
                cand.beliefs[-1] = (cand.beliefs[-1][0], now)   # stopped reconciling, then releases
                cand.dead = True
                store.write(int(cand.obs.version), L.released(cand.obs.record, at(now + cand.wall)))
                continue
            if cand.belief_end is not None:   # the holder's fast path: renew with what it last wrote
                push(now + att.to_read + att.to_write, cand, "write", (payload, started, cand.obs))
            else:
                push(now + att.to_read, cand, "read", (payload, started))
        elif step == "read":
            index, started = payload
            record, version = store.record, store.version
            att = cand.attempts[index]
            push(now + att.to_write, cand, "decide", (index, started, record, version, now + cand.mono))
        elif step == "decide":
            index, started, record, version, seen = payload
            if record is not None:
                cand.obs = L.observe(cand.obs, record, str(version), seen)
            decision = L.decide(cand.obs if record is not None else None, cand.name, now + cand.mono, T)
            if decision.action is L.Action.WAIT:
                schedule_next(cand, index, now, push)
            else:
                push(now, cand, "write", (index, started, cand.obs if record is not None else None))
        elif step == "write":
            index, started, obs = payload
            att = cand.attempts[index]
            new = L.next_record(obs.record if obs else None, cand.name, at(now + cand.wall), T)
            version = store.write(int(obs.version) if obs else None, new)
            if version is not None and not att.lost:
                push(now + att.back, cand, "won", (index, started, L.Observation(new, str(version), started)))
            else:
                if version is None:
                    cand.obs = None if cand.belief_end is None else cand.obs
                schedule_next(cand, index, now + att.back, push)
        elif step == "won":
            index, started, obs = payload
            cand.obs = obs
            end = until(started, T) - cand.mono
            if cand.belief_end is None:
                cand.beliefs.append((now, end))
            cand.belief_end = max(end, cand.belief_end or end)
            cand.beliefs[-1] = (cand.beliefs[-1][0], cand.belief_end)
            schedule_next(cand, index, now, push)
    return [(c.name, start, end) for c in candidates for start, end in c.beliefs]


def schedule_next(cand: Candidate, index: int, now: float, push) -> None:
    if index + 1 < len(cand.attempts):
        push(now + cand.attempts[index + 1].gap, cand, "start", index + 1)
    elif cand.belief_end is not None:   # out of attempts: it stops renewing, the watchdog ends it
        push(cand.belief_end, cand, "start", index)


def overlaps(beliefs: list[tuple[str, float, float]]) -> list:
    return [(a, b) for i, a in enumerate(beliefs) for b in beliefs[i + 1:]
            if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]


# Mostly what a healthy cluster does (quick answers, a try every retry period), sometimes a slow
# answer or a long pause: the overlaps worth finding sit within a second of an expiry.
delay = st.one_of(st.floats(0, 0.2), st.floats(0, 8))
gap = st.one_of(st.floats(T.retry_period, (1 + L.JITTER) * T.retry_period),
                st.floats(T.renew_deadline, T.lease_duration + 3), st.floats(0, 30))
attempts_with_release = st.lists(st.builds(
    Attempt, gap=gap, to_read=delay, to_write=delay, back=delay,
    lost=st.sampled_from([False, False, True]), release=st.sampled_from([False] * 6 + [True])),
    min_size=1, max_size=25)
candidate = st.builds(Candidate, name=st.sampled_from(["x"]), mono=st.floats(-1e6, 1e6),
                      wall=st.floats(-7200, 7200), attempts=attempts_with_release)


@settings(max_examples=400, deadline=None)
@given(st.lists(candidate, min_size=2, max_size=3))
def test_no_two_candidates_ever_believe_they_lead_at_once(cands):
    for n, cand in enumerate(cands):
        cand.name = f"pod-{n}_{n}"
    assert overlaps(simulate(cands)) == []


def test_a_standby_takes_over_a_dead_holder_after_the_lease_duration_and_a_released_one_at_once():
    def steady(n, gap=T.retry_period):
        return [Attempt(gap, 0.01, 0.01, 0.01, False, False) for _ in range(n)]
    first = [Attempt(0, 0.01, 0.01, 0.01, False, False)]
    a = Candidate("a_1", 0, 0, first + steady(2))
    b = Candidate("b_2", 500, -3600, [Attempt(0.5, 0.01, 0.01, 0.01, False, False)] + steady(20))
    (_, a_start, a_end), (_, b_start, _) = simulate([a, b])
    last_renewal = a_end - T.renew_deadline
    # a renews every ~2 s, then stops: b saw its last renewal within one retry and takes over
    # within one retry of that sight + the lease duration, never before it
    assert a_start < 0.1 and 3.9 < last_renewal < 4.2
    assert last_renewal + T.lease_duration <= b_start <= last_renewal + T.lease_duration + 2 * T.retry_period + 0.1
    a = Candidate("a_1", 0, 0, first + steady(2) + [Attempt(2, 0.01, 0.01, 0.01, False, True)])
    b = Candidate("b_2", 7, 0, [Attempt(0.5, 0.01, 0.01, 0.01, False, False)] + steady(10))
    (_, _, a_end), (_, b_start, _) = simulate([a, b])
    assert b_start - a_end <= T.retry_period + 0.1   # released: the next try takes it


def test_the_simulation_catches_a_holder_that_counts_its_deadline_from_the_answer():
    """The rule the property rests on: a belief counted from the write's *answer* (not from the
    start of its attempt) outlives the lease when the answer is slow; the simulation sees the
    overlap, so the property test above is not vacuous."""
    slow = [Attempt(0, 0.01, 0.01, 0.01, False, False), Attempt(2, 0.01, 0.01, 7.5, False, False)]
    a = Candidate("a_1", 0, 0, slow)
    b = Candidate("b_2", 0, 0, [Attempt(0.5, 0.01, 0.01, 0.01, False, False)]
                  + [Attempt(T.retry_period, 0.01, 0.01, 0.01, False, False) for _ in range(15)])
    assert overlaps(simulate([a, b])) == []
    careless = [Candidate("a_1", 0, 0, list(slow)), Candidate("b_2", 0, 0, list(b.attempts))]

    def from_the_answer(started, timing):   # each attempt's answer came back `back` after it started
        return started + (7.52 if started > 1 else 0.03) + timing.renew_deadline
    assert overlaps(simulate(careless, until=from_the_answer)) != []
