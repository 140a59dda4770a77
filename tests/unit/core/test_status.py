"""The status subresource: every field of docs/design.md §3, ms rounding, minimal merge patches."""
import pytest

from rolloutbatch.core.model import BatchRef
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.stats import summarize
from rolloutbatch.core.status import build_status, status_patch
from tests.unit.core.factories import result

REF = BatchRef("ns", "b", "0123456789abcdef", 1)
SPEC = parse_spec({"episodes": 2, "task": {"files": {"episode.py": "x"}}})
FIELDS = {"observedGeneration", "conditions", "phase", "progress", "sandboxNamespace", "jobName", "resultsConfigMap",
          "episodes", "readyEpisodes", "runningEpisodes", "succeededEpisodes", "failedEpisodes", "lostEpisodes",
          "retriedEpisodes", "rewardSum", "rewardMean", "batchToAllReadySeconds", "batchToAllRewardsSeconds",
          "podToReadySeconds", "jobCompleteSeconds", "nodes", "imageIDs", "startTime", "completionTime", "message"}


def status(phase="Running", summary=None, **changes):
    kwargs = dict(ref=REF, spec=SPEC, phase=phase,
                  summary=summary or summarize([result(0, ready=1.23456)], episodes=2, origin=100.0),
                  running=1, ready=2, sandbox_namespace="rb-0123456789", job_name="rb-0123456789",
                  results_configmap="b-results", start_time="t0", completion_time=None, job_complete_seconds=None,
                  message="running", reason=None, previous={}, now_iso="t1")
    kwargs.update(changes)
    return build_status(**kwargs)


def test_every_field_is_present_and_rounded_to_ms():
    s = status(completion_time="t9", job_complete_seconds=12.34567)
    assert FIELDS <= set(s), FIELDS - set(s)
    assert s["progress"] == "1/2" and s["podToReadySeconds"] == {"p50": 1.235, "p95": 1.235, "max": 1.235}
    assert s["jobCompleteSeconds"] == 12.346 and s["batchToAllReadySeconds"] == 1.235
    assert s["nodes"] == {"n1": 1} and s["imageIDs"] == ["img"]


def test_never_a_per_episode_list():
    many = summarize([result(i) for i in range(500)], episodes=500, origin=100.0)
    s = status(summary=many, spec=parse_spec({"episodes": 500, "task": {"files": {"episode.py": "x"}}}))
    assert all(not isinstance(v, list) or k in ("conditions", "imageIDs") for k, v in s.items())
    assert len(s["imageIDs"]) <= 20


def test_patches_are_minimal():
    first = status()
    assert status_patch(first, first) == {}
    second = status(running=0, previous=first, now_iso="t2")
    assert status_patch(first, second) == {"runningEpisodes": 0}


def test_patch_semantics():
    assert status_patch({"gone": 1}, {}) == {"gone": None}
    assert status_patch({}, {"absent": None}) == {}
    assert status_patch({"nodes": {"a": 1, "b": 2}}, {"nodes": {"a": 1, "c": 1}}) == {"nodes": {"b": None, "c": 1}}
    assert status_patch({"conditions": [{"a": 1}]}, {"conditions": [{"a": 2}]}) == {"conditions": [{"a": 2}]}


def test_a_phase_change_patches_phase_and_flipped_conditions():
    first = status()
    done = status(phase="Succeeded", previous=first, now_iso="t2", completion_time="t2")
    patch = status_patch(first, done)
    assert patch["phase"] == "Succeeded" and patch["completionTime"] == "t2" and "conditions" in patch
    assert "episodes" not in patch and "resultsConfigMap" not in patch


# -- counts never go backwards; numbers stay finite ---------------------------------------------
def test_counts_never_go_backwards_while_running():
    before = status(summary=summarize([result(i) for i in range(2)], episodes=2, origin=100.0), ready=2)
    after_restart = status(summary=summarize([result(0)], episodes=2, origin=100.0), ready=1, previous=before)
    assert after_restart["progress"] == "2/2" and after_restart["succeededEpisodes"] == 2
    assert after_restart["readyEpisodes"] == 2


def test_terminal_status_is_the_truth():
    before = status(summary=summarize([result(i) for i in range(2)], episodes=2, origin=100.0))
    final = status(phase="Failed", summary=summarize([result(0), result(1, outcome="lost", reward=None)],
                                                     episodes=2, origin=100.0), previous=before)
    assert final["succeededEpisodes"] == 1 and final["lostEpisodes"] == 1 and final["progress"] == "2/2"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Stopped"])
def test_a_finished_batch_counts_no_episode_running(phase):
    """Its status is its last: pods a stop's grace or a stall left terminating would show as
    running in `kubectl get rb` for ever."""
    assert status(phase=phase, running=3)["runningEpisodes"] == 0
    assert status(phase="Running", running=3)["runningEpisodes"] == 3


def test_status_is_strict_json_whatever_the_numbers():
    import json
    import math

    from rolloutbatch.core.model import Summary
    bad = Summary(episodes=2, succeeded=2, failed=0, lost=0, retried=0, reward_sum=math.inf, reward_mean=math.nan,
                  batch_to_all_ready_seconds=-math.inf, batch_to_all_rewards_seconds=None, pod_to_ready_p50=math.nan,
                  pod_to_ready_p95=None, pod_to_ready_max=None, nodes={}, image_ids=())
    s = status(summary=bad, job_complete_seconds=math.inf)
    json.dumps(s, allow_nan=False)
    assert s["rewardSum"] is None and s["podToReadySeconds"]["p50"] is None


def test_final_phase_rule():
    from rolloutbatch.core.status import final_phase
    spec = parse_spec({"episodes": 2, "minSuccessfulEpisodes": 1, "task": {"files": {"episode.py": "x"}}})
    ok = final_phase(summarize([result(0), result(1, outcome="failed")], episodes=2, origin=1.0), spec, "b-results")
    assert ok[:2] == ("Succeeded", "EpisodesSucceeded")
    bad = final_phase(summarize([result(0, outcome="lost")], episodes=2, origin=1.0), spec, "b-results")
    assert bad[:2] == ("Failed", "TooFewSuccessfulEpisodes") and "b-results" in bad[2]


def test_a_status_not_recomputed_keeps_its_counts():
    """A finished batch after a restart has no tracker: its cleanup's patch must not erase counts."""
    before = status(phase="Succeeded")
    again = build_status(ref=REF, spec=SPEC, phase="Succeeded", summary=None, running=0, ready=0,
                         sandbox_namespace=None, job_name="j", results_configmap="b-results", start_time="t0",
                         completion_time="t9", job_complete_seconds=None, message="m", reason=None,
                         previous=before, now_iso="t10")
    patch = status_patch(before, again)
    assert not {k for k, v in patch.items() if v is None} - {"sandboxNamespace"}, patch
    assert again["succeededEpisodes"] == before["succeededEpisodes"] and again["progress"] == before["progress"]
