"""Properties of the pure core over hostile input: whole classes of input, not single cases.

Any bytes as a log, any JSON value as an event, any rows as a results document, any numbers as
rewards and timestamps, any pod facts: parsing never raises, the verdict is total and a success
means what the success rule says, statistics stay finite, what we write is strict JSON and
round-trips, restore accepts only well-typed rows.
"""
import json
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.model import MAX_ABS_REWARD, EpisodeResult, Event, ParsedLog, PodFacts
from rolloutbatch.core.outcomes import FAILURE_REWARD, outcome_of
from rolloutbatch.core.results import decode_results, encode_results, results_document, results_from_document
from rolloutbatch.core.stats import percentile, summarize
from rolloutbatch.core.strictjson import finite
from rolloutbatch.core.verdict import judge_episode
from tests.unit.core.factories import REF

# No example database (the checkout is shared); a failure prints its example in full.
FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
T0 = 1_795_935_600.0
NAME = "rb-1-3-abc"
TOLERANCE = 2.0

# Numbers as a hostile episode or a hand edit would write them, plus plausible ones near T0.
EDGES = st.sampled_from([0, -0.0, 1, -1, 1e308, -1e308, 1.7976931348623157e308, 5e-324, 10 ** 400, -(10 ** 30),
                         MAX_ABS_REWARD, -MAX_ABS_REWARD, MAX_ABS_REWARD * (1 + 1e-15), 1e12, 2 ** 63,
                         float("nan"), float("inf"), float("-inf"), True, False])
NUMBERS = st.one_of(EDGES, st.integers(), st.floats(), st.floats(T0 - 10, T0 + 10))
TIMES = st.one_of(st.none(), NUMBERS, st.floats(T0 - 5, T0 + 15), st.floats(T0 - 5, T0 + 15), st.floats(T0, T0 + 6))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                    max_leaves=12)
TEXT_OR_NONE = st.one_of(st.none(), st.text(max_size=12))


def strict_loads(text):
    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def is_strict_json(value):
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


# --- logs ---------------------------------------------------------------------------------------
@FAST
@given(st.binary(max_size=3000), st.booleans())
def test_any_bytes_parse(data, truncated):
    parsed = parse_log(data, truncated=truncated)
    assert parsed.bytes_read == len(data) and parsed.truncated == truncated
    for event in parsed.ready + parsed.reward:
        assert event.at is None or math.isfinite(event.at)
        assert is_strict_json(event.extra) and event.line >= 1


def event_line(record):
    # allow_nan: NaN/Infinity tokens are what a Python episode prints by default
    return json.dumps(record, allow_nan=True).encode()


EVENT_RECORDS = st.fixed_dictionaries(
    {"event": st.sampled_from(["ready", "reward", "other"])},
    optional={"at": st.one_of(TIMES, JSON), "episode_id": st.one_of(st.just(NAME), JSON),
              "reward": st.one_of(NUMBERS, JSON), "note": JSON})


@FAST
@given(st.lists(st.one_of(EVENT_RECORDS, JSON), max_size=6), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_any_json_as_event_lines_parses(records, separator):
    parsed = parse_log(separator.join(event_line(r) for r in records))
    for event in parsed.ready + parsed.reward:
        assert event.kind in ("ready", "reward")
        assert event.at is None or math.isfinite(event.at)
        assert event.episode_id is None or isinstance(event.episode_id, str)
        assert is_strict_json(event.extra)


# --- the verdict --------------------------------------------------------------------------------
def mostly(good, bad):
    """Usually ``good`` (so successes and late checks are reached), sometimes ``bad``."""
    good = good if isinstance(good, st.SearchStrategy) else st.just(good)
    return st.integers(0, 19).flatmap(lambda i: good if i < 18 else bad)


FACTS = st.builds(
    PodFacts, name=mostly(NAME, st.sampled_from(["other", ""])), namespace=st.just("rb-1"), uid=st.just("u1"),
    index=mostly(st.integers(0, 5), st.one_of(st.none(), st.integers(-3, -1))),
    created=mostly(T0, st.one_of(st.just(0.0), NUMBERS)),
    phase=mostly("Succeeded", st.sampled_from(["Failed", "Running", "Pending", "Unknown"])),
    node=TEXT_OR_NONE, image_id=TEXT_OR_NONE, exit_code=mostly(0, st.sampled_from([None, 1, 137, 143])),
    restart_count=mostly(0, st.just(1)), terminated_reason=TEXT_OR_NONE,
    pod_reason=mostly(None, st.sampled_from(["DeadlineExceeded", "Evicted", "NodeLost"])),
    pod_message=TEXT_OR_NONE, disrupted=st.booleans(), deleting=st.booleans(), ready=st.booleans(),
    started_at=TIMES, finished_at=mostly(T0 + 5, TIMES),
    waiting_reason=mostly(None, st.sampled_from(v.IMAGE_WAITING_REASONS)), waiting_message=TEXT_OR_NONE)


def events(kind, at, line):
    return st.builds(Event, kind=st.just(kind), at=mostly(st.floats(*at), TIMES),
                     episode_id=mostly(NAME, TEXT_OR_NONE),
                     reward=mostly(st.floats(-10, 10), st.one_of(NUMBERS, JSON)),
                     extra=st.dictionaries(st.text(max_size=5), JSON, max_size=3),
                     line=mostly(line, st.integers(0, 20)))


def one_usually(strategy):
    return mostly(strategy.map(lambda e: (e,)), st.lists(strategy, max_size=3).map(tuple))


LOGS = st.builds(ParsedLog, ready=one_usually(events("ready", (T0 - 3, T0 + 3), 1)),
                 reward=one_usually(events("reward", (T0 + 1, T0 + 8), 2)), problems=st.just(()),
                 bytes_read=st.integers(0, 10 ** 9), truncated=mostly(False, st.just(True)))


@settings(FAST, max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "400")))
@given(FACTS, mostly(LOGS, st.none()),
       mostly(None, st.sampled_from(["log read failed", "infrastructure retries exhausted"])),
       mostly(None, TIMES), mostly(None, TIMES))
def test_the_verdict_is_total_and_a_success_means_the_rule(facts, log, log_error, deadline, now):
    r = judge_episode(facts, log, log_error=log_error, batch_deadline_at=deadline, now=now,
                      skew_tolerance=TOLERANCE, attempts=1)
    assert isinstance(r, EpisodeResult) and r.outcome in v.OUTCOMES
    assert (r.reason is None) == (r.outcome == v.OUTCOME_SUCCEEDED)
    assert r.reason is None or r.reason in v.EPISODE_REASONS
    assert isinstance(r.message, str) and is_strict_json(r.extra)
    for number in (r.reward, r.pod_created, r.ready_at, r.reward_at, r.pod_to_ready_seconds):
        assert number is None or (type(number) is float and math.isfinite(number))
    assert r.reward is None or abs(r.reward) <= MAX_ABS_REWARD
    # whose failure: one table decides the outcome, and a failure counts with the worst reward
    row = r.to_row(T0)
    assert r.outcome == v.OUTCOME_SUCCEEDED or r.outcome == outcome_of(r.reason)
    assert row["valid"] == (r.outcome != v.OUTCOME_LOST)
    assert row["reward"] == {v.OUTCOME_FAILED: FAILURE_REWARD, v.OUTCOME_LOST: None}.get(r.outcome, r.reward)
    if r.outcome == v.OUTCOME_SUCCEEDED:
        assert log is not None and not log.truncated and log_error is None
        assert len(log.ready) == len(log.reward) == 1
        ready, reward = log.ready[0], log.reward[0]
        assert facts.phase == "Succeeded" and facts.exit_code == 0 and not facts.restart_count
        assert ready.episode_id == reward.episode_id == facts.name
        assert r.reward is not None and r.reward == float(reward.reward)
        assert ready.line <= reward.line and r.ready_at <= r.reward_at
        if r.pod_created is not None:
            assert r.pod_created - TOLERANCE <= r.ready_at
        finished = finite(facts.finished_at)   # an int past a float's range is no time (math.isfinite raises)
        if finished is not None:
            assert r.reward_at <= finished + 1.0 + TOLERANCE   # finishedAt counts to the end of its second
    if r.index >= 0:   # what the verdict records, a restart reads back (after one rounding)
        once = restore_all([r])
        assert list(once) == [r.index] and restore_all(once.values()) == once


def restore_all(results):
    results = list(results)
    summary = summarize(results, episodes=len(results), origin=T0)
    document = results_document(ref=REF, spec=None, summary=summary, results=results, origin=T0, extra={})
    data, binary = encode_results(document)
    return results_from_document(decode_results({"data": data, "binaryData": binary}))


# --- statistics ---------------------------------------------------------------------------------
ANY_RESULT = st.builds(
    EpisodeResult, index=st.integers(0, 50), pod=st.text(max_size=5), node=st.one_of(TEXT_OR_NONE, NUMBERS),
    image_id=st.one_of(TEXT_OR_NONE, NUMBERS), outcome=st.one_of(st.sampled_from(v.OUTCOMES), st.text(max_size=5)),
    reason=TEXT_OR_NONE, message=st.text(max_size=5), reward=st.one_of(st.none(), NUMBERS, JSON),
    pod_created=st.one_of(TIMES, JSON), ready_at=st.one_of(TIMES, JSON), reward_at=st.one_of(TIMES, JSON),
    pod_to_ready_seconds=st.one_of(TIMES, JSON))


@FAST
@given(st.lists(ANY_RESULT, max_size=8), st.one_of(st.none(), NUMBERS), st.integers(0, 10))
def test_statistics_stay_finite_whatever_rows_they_get(results, origin, retried):
    s = summarize(results, episodes=len(results), origin=origin, retried=retried)
    assert math.isfinite(s.reward_sum)
    for number in (s.reward_mean, s.batch_to_all_ready_seconds, s.batch_to_all_rewards_seconds,
                   s.pod_to_ready_p50, s.pod_to_ready_p95, s.pod_to_ready_max):
        assert number is None or math.isfinite(number)
    assert s.finished <= len(results)
    assert s.pod_to_ready_p50 is None or s.pod_to_ready_p50 <= s.pod_to_ready_p95 <= s.pod_to_ready_max


@FAST
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=10), st.floats(0, 1))
def test_percentiles_stay_inside_the_sample(values, q):
    p = percentile(values, q)
    assert math.isfinite(p) and min(values) <= p <= max(values)


# --- the results document -----------------------------------------------------------------------
@FAST
@given(st.dictionaries(st.text(max_size=8), JSON, max_size=6), st.lists(JSON, max_size=4))
def test_any_document_encodes_to_strict_json_that_round_trips(document, pods):
    document = {**document, "pods": pods}
    data, binary = encode_results(document)
    assert binary == {}     # small documents stay plain
    back = strict_loads(data["results.json"])
    assert decode_results({"data": data}) == back
    # a second pass changes nothing: what we wrote is already what we would write
    assert encode_results(back) == (data, {})


ROW_FIELDS = {
    "index": st.one_of(st.integers(-2, 6), JSON), "pod": st.one_of(st.text(max_size=5), JSON),
    "node": st.one_of(TEXT_OR_NONE, JSON), "image_id": TEXT_OR_NONE,
    "outcome": st.one_of(st.sampled_from(v.OUTCOMES), JSON), "reason": st.one_of(TEXT_OR_NONE, JSON),
    "message": st.one_of(st.text(max_size=5), JSON), "reward": st.one_of(st.none(), NUMBERS, JSON),
    "pod_created": TIMES, "ready_at": TIMES, "reward_at": TIMES, "pod_to_ready_seconds": st.one_of(TIMES, JSON),
    "attempts": st.one_of(st.integers(-1, 4), JSON), "log_tail": st.one_of(TEXT_OR_NONE, JSON),
    "extra": st.one_of(st.dictionaries(st.text(max_size=4), JSON, max_size=3), JSON),
    "flags": st.one_of(st.lists(st.text(max_size=8), max_size=2), JSON),
    "session": st.one_of(st.fixed_dictionaries({"commands": st.one_of(st.integers(-1, 10 ** 10), JSON),
                                                "command_seconds": st.one_of(NUMBERS, JSON)}), JSON),
}
ROWS = st.fixed_dictionaries({}, optional=ROW_FIELDS)


def well_typed(r):
    def number(x):
        return x is None or (type(x) is float and math.isfinite(x))
    return (type(r.index) is int and r.index >= 0 and r.outcome in v.OUTCOMES and isinstance(r.pod, str)
            and isinstance(r.message, str) and all(x is None or isinstance(x, str)
                                                  for x in (r.node, r.image_id, r.reason, r.log_tail))
            and all(number(x) for x in (r.reward, r.pod_created, r.ready_at, r.reward_at, r.pod_to_ready_seconds))
            and (r.reward is None or abs(r.reward) <= MAX_ABS_REWARD) and type(r.attempts) is int
            and r.attempts >= 0 and isinstance(r.extra, dict) and is_strict_json(r.extra)
            and all(isinstance(f, str) for f in r.flags))


@settings(FAST, max_examples=300)
@given(st.lists(st.one_of(ROWS, JSON), max_size=6))
def test_restore_accepts_only_well_typed_rows_and_is_stable(rows):
    restored = results_from_document({"pods": rows})
    for index, result in restored.items():
        assert result.index == index and well_typed(result)
    again = restore_all(restored.values())
    assert restore_all(again.values()) == again
    assert list(again) == sorted(restored)
    for index, result in again.items():   # only derived rounding may differ from the first read
        first = restored[index]
        assert (result.outcome, result.reason, result.reward, result.ready_at, result.reward_at, result.attempts) \
            == (first.outcome, first.reason, first.reward, first.ready_at, first.reward_at, first.attempts)
