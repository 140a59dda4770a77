"""Statistics with the guide's definitions: linear-interpolation percentiles, offsets from the Job's creation."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core.model import usable_reward
from rolloutbatch.core.stats import MAX_IMAGE_IDS, RunningSummary, percentile, summarize
from rolloutbatch.core.strictjson import finite
from rolloutbatch.core.tracker import BatchTracker
from tests.unit.core.factories import result


@pytest.mark.parametrize("values,q,expected", [
    ([1.0], 0.5, 1.0),
    ([1.0], 0.95, 1.0),
    ([1.0, 2.0], 0.5, 1.5),
    ([3.0, 1.0, 2.0], 0.5, 2.0),                     # sorted first
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.5, 5.5),     # i = 4.5 -> 5 + 0.5*(6-5)
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95, 9.55),   # i = 8.55 -> 9 + 0.55*(10-9)
    ([3.7, 3.3, 3.4, 3.6, 3.5], 0.95, 3.68),         # i = 3.8 over [3.3..3.7] -> 3.6 + 0.8*0.1
    ([1, 2, 3, 4], 0.0, 1), ([1, 2, 3, 4], 1.0, 4),
    ([10, 20], 0.25, 12.5),
])
def test_percentile_matches_hand_computed_values(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_summary_rewards_over_graded_timings_over_succeeded_only():
    s = summarize([result(0, ready=1, done=3), result(1, ready=2, done=4, node="n2"),
                   result(2, "failed", None, ready=50, done=60), result(3, "lost", None, ready=70, done=80)],
                  episodes=5, origin=100.0, retried=1)
    assert (s.succeeded, s.failed, s.lost, s.retried, s.finished) == (2, 1, 1, 1, 4)
    # the failed episode counts with the worst reward (0.0), the lost one not at all
    assert s.reward_sum == 2.0 and s.reward_mean == 2.0 / 3
    assert s.batch_to_all_ready_seconds == 2.0 and s.batch_to_all_rewards_seconds == 4.0
    assert (s.pod_to_ready_p50, s.pod_to_ready_max) == (1.5, 2.0)
    assert s.nodes == {"n1": 3, "n2": 1} and s.image_ids == ("img",)


def test_origin_is_the_job_creation_not_the_first_pod():
    s = summarize([result(0, ready=1, done=3)], episodes=1, origin=90.0)
    assert s.batch_to_all_ready_seconds == 11.0 and s.batch_to_all_rewards_seconds == 13.0


def test_no_data_gives_none_not_zero():
    s = summarize([], episodes=5, origin=None)
    assert (s.reward_sum, s.reward_mean, s.pod_to_ready_p50, s.pod_to_ready_p95, s.pod_to_ready_max) == \
        (0.0, None, None, None, None)
    assert s.batch_to_all_ready_seconds is None and s.finished == 0
    unknown_origin = summarize([result(0)], episodes=1, origin=None)
    assert unknown_origin.batch_to_all_ready_seconds is None and unknown_origin.pod_to_ready_p50 == 1.0


def test_lost_and_failed_do_not_move_rewards_or_timings():
    s = summarize([result(0, reward=0.5), result(1, "lost", reward=None, ready=99, done=99),
                   result(2, "failed", reward=7.0, ready=99, done=99)], episodes=3, origin=100.0)
    assert (s.succeeded, s.failed, s.lost) == (1, 1, 1)
    assert s.reward_sum == 0.5 and s.pod_to_ready_max == 1.0


def test_image_ids_are_distinct_and_capped():
    rows = [result(i, image_id=f"img@sha256:{i}") for i in range(MAX_IMAGE_IDS + 10)]
    assert len(summarize(rows, episodes=len(rows), origin=100.0).image_ids) == MAX_IMAGE_IDS


def test_overflowing_rewards_stay_finite():
    # Two rewards of 1e308 once summed to inf and the status patch was refused forever.
    rows = [result(0, reward=1e308), result(1, reward=1e308), result(2, reward=float("inf")),
            result(3, reward=float("nan")), result(4, reward=2.0)]
    s = summarize(rows, episodes=5, origin=100.0)
    assert (s.reward_sum, s.reward_mean) == (2.0, 2.0)


def test_summary_survives_rows_of_any_type():
    rows = [result(0, reward="lots", pod_to_ready_seconds="soon", ready_at=[1], reward_at=None, node=7,
                   image_id={"x": 1}),
            result(1, pod_to_ready_seconds=float("inf"), ready_at=float("nan")), result(2, outcome="weird")]
    s = summarize(rows, episodes=3, origin=100.0)
    assert (s.succeeded, s.finished, s.reward_sum, s.pod_to_ready_p50) == (2, 2, 1.0, None)
    assert s.batch_to_all_ready_seconds is None and s.batch_to_all_rewards_seconds == 2.0
    assert s.nodes == {"n1": 2} and s.image_ids == ("img",)     # nodes count every finished row


def test_timings_at_the_edge_of_floats_stay_finite():
    rows = [result(0, pod_to_ready_seconds=-1.7e308, ready_at=1.7e308), result(1, pod_to_ready_seconds=1.7e308)]
    s = summarize(rows, episodes=2, origin=-1.7e308)
    assert s.pod_to_ready_p50 == 0.0 and s.pod_to_ready_p95 == pytest.approx(1.53e308)
    # row 0's offset overflows and is left out; row 1's (101 - -1.7e308) is the maximum
    assert s.batch_to_all_ready_seconds == 1.7e308
    assert percentile([-1.7e308, 1.7e308], 0.5) == 0.0


# -- the running summary against a plain oracle (folded in once, never recomputed) --


_numbers = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10),
                     st.sampled_from(["x", True]))
_results = st.lists(st.builds(
    lambda outcome, reward, ready, done, startup, node, image: dict(
        outcome=outcome, reward=reward, ready_at=ready, reward_at=done, pod_to_ready_seconds=startup,
        node=node, image_id=image),
    st.sampled_from(["succeeded", "failed", "lost"]), _numbers, _numbers, _numbers, _numbers,
    st.sampled_from(["n1", "n2", "", None]), st.sampled_from(["a", "b", "", None])), max_size=30)


def _oracle(rows, origin):
    """The summary's definitions written out plainly, over the whole list at once."""
    ok = [r for r in rows if r.outcome == "succeeded"]
    rewards = [x for x in (usable_reward(r.reward) for r in ok) if x is not None]
    startup = sorted(x for x in (finite(r.pod_to_ready_seconds) for r in ok) if x is not None)

    def offsets(name):
        out = []
        for r in ok:
            ts = finite(getattr(r, name))
            if origin is not None and ts is not None and finite(ts - origin) is not None:
                out.append(round(max(0.0, ts - origin), 3))   # never negative; in ms, as its row holds it
        return max(out) if out else None
    return {"succeeded": len(ok), "failed": sum(r.outcome == "failed" for r in rows),
            "lost": sum(r.outcome == "lost" for r in rows), "reward_sum": math.fsum(rewards),
            "all_ready": offsets("ready_at"), "all_rewards": offsets("reward_at"),
            "p50": percentile(startup, 0.5) if startup else None, "max": startup[-1] if startup else None,
            "nodes": sorted({r.node for r in rows if isinstance(r.node, str) and r.node}),
            "ready": sum(r.ready_at is not None for r in rows)}


def _seen(s, ready):
    return {"succeeded": s.succeeded, "failed": s.failed, "lost": s.lost, "reward_sum": s.reward_sum,
            "all_ready": s.batch_to_all_ready_seconds, "all_rewards": s.batch_to_all_rewards_seconds,
            "p50": s.pod_to_ready_p50, "max": s.pod_to_ready_max, "nodes": sorted(s.nodes), "ready": ready}


@settings(max_examples=200, deadline=None)
@given(_results, st.sampled_from([None, 100.0, -1.7e308]))
def test_running_summary_equals_the_whole_computation_after_every_result(specs, origin):
    rows = [result(i).replace(**spec) for i, spec in enumerate(specs)]
    running = RunningSummary(origin)
    for n, row in enumerate(rows, start=1):
        running.add(row)
        assert _seen(running.summary(episodes=len(rows)), running.ready) == _oracle(rows[:n], origin)


@settings(max_examples=100, deadline=None)
@given(_results, st.integers(0, 30))
def test_the_trackers_summary_follows_restores_finals_and_a_late_origin(specs, restored):
    rows = [result(i).replace(**spec) for i, spec in enumerate(specs)]
    tracker = BatchTracker(len(rows), 0)
    tracker.restore({r.index: r for r in rows[:restored]})
    assert _seen(tracker.summary(None), tracker.ready) == _oracle(rows[:restored], None)
    for row in rows[restored:]:
        tracker.record(row, uid=f"u{row.index}")
    assert _seen(tracker.summary(None), tracker.ready) == _oracle(rows, None)
    assert _seen(tracker.summary(100.0), tracker.ready) == _oracle(rows, 100.0)   # the Job's creation seen


def test_the_live_summary_is_the_one_rebuilt_from_the_rows_after_a_restart():
    """Rows hold start-up times in ms; the live summary interpolated the unrounded ones, so a
    restart moved podToReadySeconds.p95 (0.003 live, 0.004 from the rows) and the results
    document's p95 was not that of its own rows."""
    from rolloutbatch.core.model import EpisodeResult
    from rolloutbatch.core.results import results_from_document

    def res(i: int, startup: float) -> EpisodeResult:
        return EpisodeResult(index=i, pod=f"p{i}", node="n", image_id="i", outcome="succeeded", reason=None,
                             message="", reward=1.0, pod_created=100.0, ready_at=100.0 + startup,
                             reward_at=101.0 + startup, pod_to_ready_seconds=startup)

    live = [res(0, 0.0036), res(1, 0.0004), res(2, 0.0016)]
    rows = [r.to_row(100.0) for r in live]
    restored = list(results_from_document({"pods": rows}).values())
    before, after = (summarize(rs, episodes=3, origin=100.0) for rs in (live, restored))
    assert before == after
    assert before.pod_to_ready_p95 == percentile([row["pod_to_ready_seconds"] for row in rows], 0.95)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e4)), min_size=1, max_size=8),
       st.floats(-1e4, 1e4))
def test_the_batch_timings_are_the_largest_of_the_rows(offsets, shift):
    """The guide's script: batch_to_all_ready_seconds = max(row batch_to_ready_seconds), and the
    same for rewards. Rows round each offset to the millisecond; the summary was the unrounded
    offset (1.123856782913208 beside its only row's 1.124, and the status' 1.124)."""
    origin = 100.0 + shift
    results = [result(i, ready=ready, done=ready + work) for i, (ready, work) in enumerate(offsets)]
    s = summarize(results, episodes=len(results), origin=origin)
    rows = [r.to_row(origin) for r in results]
    assert s.batch_to_all_ready_seconds == max(r["batch_to_ready_seconds"] for r in rows)
    assert s.batch_to_all_rewards_seconds == max(r["batch_to_reward_seconds"] for r in rows)


def test_a_result_whose_clock_was_wrong_gives_the_batch_no_timing():
    # its row reports no durations: a forged `at` reaches no figure of the batch either
    from rolloutbatch.core import vocabulary as v
    skewed = result(0, ready=1e6, done=2e6, flags=(v.FLAG_SKEW_BEYOND,))
    s = summarize([skewed, result(1, ready=1, done=3)], episodes=2, origin=100.0)
    assert (s.batch_to_all_ready_seconds, s.batch_to_all_rewards_seconds) == (1.0, 3.0)
