"""The episode verdict rules and reasons (DESIGN section 4), one row per reason."""
import dataclasses
import json

import pytest

from rolloutbatch.core.events import parse_log
from rolloutbatch.core.verdict import is_infrastructure_failure, judge_episode, parse_time, pod_facts

CREATED = "2026-11-29T07:00:00Z"
T0 = parse_time(CREATED)


def pod_json(phase="Succeeded", exit_code=0, restarts=0, **status_extra):
    state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": CREATED, "finishedAt": "2026-11-29T07:00:05Z"}}
    return {"metadata": {"name": "rb-1-3-abc", "namespace": "rb-1", "uid": "u1", "creationTimestamp": CREATED,
                         "annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
            "spec": {"nodeName": "devnode-1"},
            "status": {"phase": phase, "containerStatuses": [{"name": "episode", "restartCount": restarts,
                                                               "imageID": "img@sha256:1", "state": state}],
                       **status_extra}}


def log_of(*events):
    return parse_log(b"\n".join(json.dumps(e).encode() for e in events))


READY = {"event": "ready", "at": T0 + 1, "episode_id": "rb-1-3-abc"}
REWARD = {"event": "reward", "at": T0 + 2, "episode_id": "rb-1-3-abc", "reward": 1, "tests_exit": 0}


def test_pod_facts():
    f = pod_facts(pod_json())
    assert (f.index, f.node, f.exit_code, f.image_id, f.created) == (3, "devnode-1", 0, "img@sha256:1", T0)


def test_success_with_the_guides_timings():
    r = judge_episode(pod_facts(pod_json()), log_of(READY, REWARD))
    assert (r.outcome, r.reason, r.reward, r.pod_to_ready_seconds) == ("succeeded", None, 1.0, 1.0)
    assert r.extra == {"tests_exit": 0}


def with_(event, **changes):
    return {**event, **changes}


CASES = [
    ("NonZeroExit", pod_json("Failed", 1), (READY, REWARD)),
    ("Restarted", pod_json(restarts=1), (READY, REWARD)),
    ("NoReadyEvent", pod_json(), (REWARD,)),
    ("NoRewardEvent", pod_json(), (READY,)),
    ("DuplicateReady", pod_json(), (READY, READY, REWARD)),
    ("DuplicateReward", pod_json(), (READY, REWARD, REWARD)),
    ("IdentityMismatch", pod_json(), (READY, with_(REWARD, episode_id="rb-1-4-xyz"))),
    ("IdentityMismatch", pod_json(), (with_(READY, episode_id=None), REWARD)),
    ("InvalidReward", pod_json(), (READY, with_(REWARD, reward="1"))),
    ("InvalidReward", pod_json(), (READY, with_(REWARD, reward=True))),
    ("InvalidReward", pod_json(), (READY, with_(REWARD, reward=None))),
    ("MissingTimestamp", pod_json(), (with_(READY, at="soon"), REWARD)),
    ("RewardBeforeReady", pod_json(), (with_(READY, at=T0 + 30), REWARD)),
    ("ClockSkew", pod_json(), (with_(READY, at=T0 - 60), REWARD)),
    ("Timeout", pod_json("Failed", 137, reason="DeadlineExceeded", message="too long"), (READY,)),
]


@pytest.mark.parametrize("reason,pod,events", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_failure_reasons(reason, pod, events):
    r = judge_episode(pod_facts(pod), log_of(*events))
    assert (r.outcome, r.reason) == ("failed", reason), r.message
    assert r.message


def test_nan_reward_is_invalid():
    log = parse_log(json.dumps(READY).encode() + b'\n{"event":"reward","at":%f,"episode_id":"rb-1-3-abc","reward":NaN}'
                    % (T0 + 2))
    assert judge_episode(pod_facts(pod_json()), log).reason == "InvalidReward"


def test_small_skew_is_flagged_not_failed():
    r = judge_episode(pod_facts(pod_json()), log_of(with_(READY, at=T0 - 0.5), REWARD))
    assert r.outcome == "succeeded" and "ClockSkewWithinTolerance" in r.flags


def test_truncated_log_without_reward_says_so():
    log = dataclasses.replace(log_of(READY), truncated=True)
    assert judge_episode(pod_facts(pod_json()), log).reason == "LogLimitExceeded"


def test_log_unavailable_is_lost_when_the_pod_is_gone():
    pod = pod_json()
    pod["metadata"]["deletionTimestamp"] = CREATED
    r = judge_episode(pod_facts(pod), None, log_error="the pod was deleted")
    assert (r.outcome, r.reason) == ("lost", "LogUnavailable")


def test_image_pull_failure():
    pod = pod_json("Pending")
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ErrImagePull", "message": "no runtime"}}
    assert judge_episode(pod_facts(pod), log_of()).reason == "ImagePullFailed"


def test_infrastructure_failures():
    evicted = pod_json("Failed", 143, conditions=[{"type": "DisruptionTarget", "status": "True",
                                                   "reason": "EvictionByEvictionAPI"}])
    assert is_infrastructure_failure(pod_facts(evicted))
    assert not is_infrastructure_failure(pod_facts(pod_json("Failed", 1)))
    assert judge_episode(pod_facts(evicted), None, log_error="infrastructure retries exhausted",
                         attempts=3).reason == "InfrastructureFailure"


@pytest.mark.parametrize("text,expected", [
    ("2026-11-29T07:00:00Z", T0), ("2026-11-29T07:00:00.250000Z", T0 + 0.25),
    ("2026-11-29T08:00:00+01:00", T0), ("garbage", None), (None, None)])
def test_parse_time(text, expected):
    assert parse_time(text) == expected


ORDER = [  # when several problems apply, the first in the documented order wins
    ("Timeout", pod_json("Failed", 137, reason="DeadlineExceeded"), ()),
    ("NonZeroExit", pod_json("Failed", 1, restarts=1), ()),
    ("NoReadyEvent", pod_json(), (REWARD, REWARD)),
    ("DuplicateReady", pod_json(), (READY, READY, with_(REWARD, episode_id="x"))),
    ("IdentityMismatch", pod_json(), (READY, with_(REWARD, episode_id="x", reward="bad"))),
    ("InvalidReward", pod_json(), (with_(READY, at=None), with_(REWARD, reward=float("inf")))),
    ("ClockSkew", pod_json(), (with_(READY, at=T0 - 60), with_(REWARD, at=T0 - 120))),
]


@pytest.mark.parametrize("reason,pod,events", ORDER, ids=[c[0] for c in ORDER])
def test_reason_order(reason, pod, events):
    assert judge_episode(pod_facts(pod), log_of(*events)).reason == reason


def test_messages_say_what_was_seen():
    r = judge_episode(pod_facts(pod_json()), log_of(READY, REWARD, REWARD))
    assert r.message == "expected 1 reward event, saw 2"


def test_huge_integer_reward_is_invalid_not_a_crash():
    data = json.dumps(READY).encode() + b'\n{"event":"reward","at":%f,"episode_id":"rb-1-3-abc","reward":1%s}' % (
        T0 + 2, b"0" * 400)
    r = judge_episode(pod_facts(pod_json()), parse_log(data))
    assert (r.reason, r.reward) == ("InvalidReward", None)


def test_reward_before_ready_within_tolerance_is_flagged_once():
    r = judge_episode(pod_facts(pod_json()), log_of(with_(READY, at=T0 - 0.5), with_(REWARD, at=T0 - 1.5)))
    assert r.outcome == "succeeded" and r.flags == ("ClockSkewWithinTolerance",)


def test_log_unavailable_on_a_terminal_pod_is_a_failure():
    r = judge_episode(pod_facts(pod_json()), None, log_error="log read timed out", log_tail="tail")
    assert (r.outcome, r.reason, r.message, r.log_tail) == ("failed", "LogUnavailable", "log read timed out", "tail")


def test_pod_facts_from_a_sparse_or_labelled_pod():
    f = pod_facts({"metadata": {"name": "p", "labels": {"batch.kubernetes.io/job-completion-index": "7"}}})
    assert (f.index, f.phase, f.created, f.exit_code, f.restart_count, f.disrupted, f.deleting) == \
        (7, "Pending", 0.0, None, 0, False, False)
    assert pod_facts({"metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": "x"}}}).index is None


def test_node_side_reasons_are_infrastructure():
    for reason in ("Evicted", "NodeLost", "UnexpectedAdmissionError"):
        assert is_infrastructure_failure(pod_facts(pod_json("Failed", 137, reason=reason)))
    assert not is_infrastructure_failure(pod_facts(pod_json("Failed", 137, reason="DeadlineExceeded")))
    deleting = pod_json("Running", 0)
    deleting["metadata"]["deletionTimestamp"] = CREATED
    assert not is_infrastructure_failure(pod_facts(deleting))   # see the docstring: the Job would FailIndex it
