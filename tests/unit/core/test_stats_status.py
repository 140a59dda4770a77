"""Statistics (the guide's definitions), conditions, status and its minimal patches."""
import pytest

from rolloutbatch.core.conditions import conditions_for, set_condition
from rolloutbatch.core.model import BatchRef, EpisodeResult
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.stats import percentile, summarize
from rolloutbatch.core.status import build_status, status_patch


@pytest.mark.parametrize("values,q,expected", [
    ([1.0], 0.5, 1.0), ([1.0, 2.0], 0.5, 1.5), ([3.0, 1.0, 2.0], 0.5, 2.0),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95, 9.55), ([1, 2, 3, 4], 0.0, 1), ([1, 2, 3, 4], 1.0, 4)])
def test_percentile_interpolates_linearly(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        percentile([], 0.5)


def result(i, outcome="succeeded", reward=1.0, ready=1.0, done=2.0, node="n1"):
    return EpisodeResult(index=i, pod=f"p{i}", node=node, image_id="img", outcome=outcome,
                         reason=None if outcome == "succeeded" else "NonZeroExit", message="", reward=reward,
                         pod_created=100.0, ready_at=100.0 + ready, reward_at=100.0 + done,
                         pod_to_ready_seconds=ready)


def test_summary_counts_and_timings_over_succeeded_only():
    s = summarize([result(0, ready=1, done=3), result(1, ready=2, done=4, node="n2"),
                   result(2, "failed", None, ready=50, done=60)], episodes=4, origin=100.0, retried=1)
    assert (s.succeeded, s.failed, s.lost, s.retried, s.finished) == (2, 1, 0, 1, 3)
    assert s.reward_sum == 2.0 and s.reward_mean == 1.0
    assert s.batch_to_all_ready_seconds == 2.0 and s.batch_to_all_rewards_seconds == 4.0
    assert (s.pod_to_ready_p50, s.pod_to_ready_max) == (1.5, 2.0)
    assert s.nodes == {"n1": 2, "n2": 1} and s.image_ids == ("img",)


def test_conditions_follow_the_phase():
    running = conditions_for("Running", "EpisodesRunning", "m", 1, [], "t1")
    assert {c["type"]: c["status"] for c in running} == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    done = conditions_for("Succeeded", "EpisodesSucceeded", "ok", 1, running, "t2")
    assert {c["type"]: c["status"] for c in done} == {"Ready": "True", "Succeeded": "True", "Reconciling": "False",
                                                      "Stalled": "False"}
    stalled = {c["type"]: c for c in done}["Stalled"]
    assert stalled["lastTransitionTime"] == "t1"  # status did not flip
    failed = conditions_for("Failed", "RuntimeClassNotFound", "no", 1, [], "t3")
    assert {c["type"]: c["status"] for c in failed}["Stalled"] == "True"


def test_set_condition_keeps_transition_time_when_status_is_unchanged():
    first = set_condition([], "Ready", "False", "A", "a", 1, "t1")
    again = set_condition(first, "Ready", "False", "B", "b", 2, "t2")
    assert again[0]["lastTransitionTime"] == "t1" and again[0]["reason"] == "B"
    flipped = set_condition(again, "Ready", "True", "C", "c", 2, "t3")
    assert flipped[0]["lastTransitionTime"] == "t3"


def test_status_has_every_field_and_patches_are_minimal():
    ref = BatchRef("ns", "b", "0123456789abcdef", 1)
    spec = parse_spec({"episodes": 2, "task": {"files": {"episode.py": "x"}}})
    summary = summarize([result(0)], episodes=2, origin=100.0)
    kwargs = dict(ref=ref, spec=spec, summary=summary, running=1, ready=2, sandbox_namespace="rb-0123456789",
                  job_name="rb-0123456789", results_configmap="b-results", start_time="t0", completion_time=None,
                  job_complete_seconds=None, message="running", reason=None, previous={}, now_iso="t1")
    first = build_status(phase="Running", **kwargs)
    assert first["progress"] == "1/2" and first["podToReadySeconds"]["p50"] == 1.0
    assert status_patch(first, first) == {}
    second = build_status(phase="Running", **{**kwargs, "running": 0, "previous": first, "now_iso": "t2"})
    assert status_patch(first, second) == {"runningEpisodes": 0}
    assert status_patch({"gone": 1}, {}) == {"gone": None}
