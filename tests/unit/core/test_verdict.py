"""The episode verdict rules and reasons (docs/design.md), one row per reason."""
import dataclasses
import json
import time

import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.model import MAX_ABS_REWARD
from rolloutbatch.core.stats import RunningSummary
from rolloutbatch.core.verdict import is_infrastructure_failure, judge_episode, missing_reason, never_ran
from rolloutbatch.core.verdict_verified import judge_verified
from rolloutbatch.core.pod_reading import parse_time, pod_facts

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
    ("RewardBeforeReady", pod_json(), (with_(READY, at=T0 + 3), REWARD)),
    ("RewardBeforeReady", pod_json(), (with_(READY, at=T0 + 2.5), REWARD)),     # one clock: no tolerance
    ("RewardBeforeReady", pod_json(), (REWARD, READY)),                         # by line, times in order
    ("ClockSkew", pod_json(), (with_(READY, at=T0 - 60), REWARD)),
    ("ClockSkew", pod_json(), (READY, with_(REWARD, at=T0 + 60))),              # after the pod finished
    ("ClockSkew", pod_json(), (READY, with_(REWARD, at=1e12))),                 # far future
    ("InvalidReward", pod_json(), (READY, with_(REWARD, reward=1e308))),         # out of range
    ("InvalidReward", pod_json(), (READY, with_(REWARD, reward=-MAX_ABS_REWARD * 10))),
    ("Timeout", pod_json("Failed", 137, reason="DeadlineExceeded", message="too long"), (READY,)),
    # without a verifier the pod's deadline is the episode's only clock: one that traps the
    # kubelet's SIGTERM and prints its reward in the grace period, exiting 0, still timed out
    ("Timeout", pod_json("Failed", 0, reason="DeadlineExceeded"), (READY, REWARD)),
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
    # the durations it gives are never negative: in the row, its percentiles and the batch's
    row = r.to_row(origin=T0)
    assert (r.pod_to_ready_seconds, row["pod_to_ready_seconds"], row["batch_to_ready_seconds"]) == (0.0, 0.0, 0.0)
    stats = RunningSummary(origin=T0)
    stats.add(r)
    summary = stats.summary(episodes=1)
    assert summary.batch_to_all_ready_seconds == 0.0 and summary.pod_to_ready_p50 == 0.0


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


DISRUPTED = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]


def test_infrastructure_failures():
    evicted = pod_json("Failed", 143, conditions=DISRUPTED)
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
    # The API's clock before the episode's: times from a wrong clock say nothing, their order included.
    ("ClockSkew", pod_json(), (with_(READY, at=T0 - 60), with_(REWARD, at=T0 - 120))),
    ("ClockSkew", pod_json(), (REWARD, with_(READY, at=T0 + 60))),
    ("RewardBeforeReady", pod_json(), (with_(READY, at=T0 + 1.5), with_(REWARD, at=T0 - 0.5))),
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


def test_reward_before_ready_has_no_tolerance():
    # Both events come from the episode's own clock: 1 s early is a violation.
    r = judge_episode(pod_facts(pod_json()), log_of(with_(READY, at=T0 - 0.5), with_(REWARD, at=T0 - 1.5)))
    assert (r.outcome, r.reason) == ("failed", "RewardBeforeReady")


def test_api_timestamps_keep_the_tolerance_and_flag_once():
    r = judge_episode(pod_facts(pod_json()), log_of(with_(READY, at=T0 - 0.5), with_(REWARD, at=T0 + 6)))
    assert r.outcome == "succeeded" and r.flags == ("ClockSkewWithinTolerance",)


def test_the_reward_bound_is_inclusive():
    ok = judge_episode(pod_facts(pod_json()), log_of(READY, with_(REWARD, reward=-MAX_ABS_REWARD)))
    assert (ok.outcome, ok.reward) == ("succeeded", -MAX_ABS_REWARD)
    bad = judge_episode(pod_facts(pod_json()), log_of(READY, with_(REWARD, reward=MAX_ABS_REWARD * 2)))
    assert "out of range" in bad.message and bad.reward is None     # never recorded: restore would refuse it


def test_unknown_finish_is_bounded_by_the_judgement_time():
    facts = dataclasses.replace(pod_facts(pod_json()), finished_at=None)
    far = log_of(READY, with_(REWARD, at=T0 + 3600))
    assert judge_episode(facts, far, now=T0 + 10).reason == "ClockSkew"
    assert judge_episode(facts, log_of(READY, REWARD), now=T0 + 10).outcome == "succeeded"


def test_truncated_log_never_succeeds():
    # Events first, then the read limit: a second reward past it would have gone unseen.
    log = dataclasses.replace(log_of(READY, REWARD), truncated=True)
    r = judge_episode(pod_facts(pod_json()), log)
    assert (r.outcome, r.reason) == ("failed", "LogLimitExceeded") and "read limit" in r.message


DEADLINE = T0 + 4


def killed_pod(exit_code=143, finished="2026-11-29T07:00:05Z", deleting=False):
    pod = pod_json("Failed", exit_code)
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = finished
    if deleting:
        pod["metadata"]["deletionTimestamp"] = finished
    return pod


def test_batch_deadline_is_a_batch_timeout_not_a_non_zero_exit():
    r = judge_episode(pod_facts(killed_pod()), log_of(READY), batch_deadline_at=DEADLINE)
    assert (r.outcome, r.reason) == ("failed", "BatchTimeout") and "activeDeadlineSeconds" in r.message
    # the same pod without the deadline (or ended well before it) is what it was
    assert judge_episode(pod_facts(killed_pod()), log_of(READY)).reason == "NonZeroExit"
    assert judge_episode(pod_facts(killed_pod()), log_of(READY), batch_deadline_at=T0 + 60).reason == "NonZeroExit"


def test_batch_deadline_takes_a_deleted_pod_whose_log_is_gone():
    facts = dataclasses.replace(pod_facts(killed_pod(deleting=True)), finished_at=None, phase="Running",
                                exit_code=None)
    r = judge_episode(facts, None, log_error=v.LOG_POD_GONE,
                      batch_deadline_at=DEADLINE, now=DEADLINE + 1)
    assert r.reason == "BatchTimeout"
    early = judge_episode(facts, None, log_error="gone", batch_deadline_at=DEADLINE, now=DEADLINE - 60)
    assert (early.outcome, early.reason) == ("lost", "LogUnavailable")
    # without the time of judgement a deletion is not assumed to be the deadline's doing
    assert judge_episode(facts, None, log_error="gone", batch_deadline_at=DEADLINE).reason == "LogUnavailable"


def test_batch_deadline_leaves_clean_exits_and_the_episode_timeout_alone():
    assert judge_episode(pod_facts(pod_json()), log_of(READY, REWARD), batch_deadline_at=DEADLINE).outcome == \
        "succeeded"
    timeout = pod_json("Failed", 137, reason="DeadlineExceeded", message="too long")
    assert judge_episode(pod_facts(timeout), log_of(READY), batch_deadline_at=DEADLINE).reason == "Timeout"


def outlived_deletion(deleted_at: str, start="2026-11-29T07:00:00Z", own_deadline=12, grace=30):
    """A pod the Job deleted whose container ignored SIGTERM until the kubelet's own deadline ended it."""
    pod = pod_json("Failed", 137, reason="DeadlineExceeded", message="Pod was active on the node longer than "
                                                                     "the specified deadline", startTime=start)
    pod["spec"]["activeDeadlineSeconds"] = own_deadline
    delete = parse_time(deleted_at) + grace
    pod["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(delete))
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


def test_a_pod_the_job_deleted_at_the_batch_deadline_is_a_batch_timeout_even_if_it_outlived_its_own():
    """Seen on a real kubelet: the Job deleted both running pods at its deadline, their shells ignored
    SIGTERM, and the kubelet ended them at their own deadline with DeadlineExceeded."""
    facts = pod_facts(outlived_deletion("2026-11-29T07:00:04Z"))
    assert (facts.delete_requested_at, facts.own_deadline_at) == (T0 + 4, T0 + 12)
    assert judge_episode(facts, log_of(READY), batch_deadline_at=DEADLINE).reason == "BatchTimeout"


@pytest.mark.parametrize("deleted_at, deadline", [
    ("2026-11-29T07:00:02Z", DEADLINE),       # deleted before the batch deadline: not the deadline's doing
    ("2026-11-29T07:00:13Z", DEADLINE),       # deleted after its own deadline had passed
    ("2026-11-29T07:00:04Z", None),           # no batch deadline known
])
def test_a_pod_past_its_own_deadline_otherwise_stays_a_timeout(deleted_at, deadline):
    facts = pod_facts(outlived_deletion(deleted_at))
    assert judge_episode(facts, log_of(READY), batch_deadline_at=deadline).reason == "Timeout"


def test_deletion_and_deadline_facts_tolerate_odd_values():
    pod = outlived_deletion("2026-11-29T07:00:04Z")
    pod["metadata"]["deletionGracePeriodSeconds"] = "30"
    pod["spec"]["activeDeadlineSeconds"] = True
    pod["status"]["startTime"] = 5
    facts = pod_facts(pod)
    assert (facts.delete_requested_at, facts.own_deadline_at) == (T0 + 34, None)
    assert pod_facts(pod_json()).delete_requested_at is None


def test_never_ran_and_missing_reasons():
    r = never_ran(4, missing_reason(True, "DeadlineExceeded"), "the batch deadline passed")
    assert (r.index, r.outcome, r.reason, r.attempts, r.reward) == (4, "lost", "BatchTimeout", 0, None)
    assert missing_reason(True, "BackoffLimitExceeded") == "JobFailed"
    assert missing_reason(False, None) == "LogUnavailable"
    with pytest.raises(ValueError):
        never_ran(1, "DeadlineExceeded", "the Job's own word is not an episode reason")


def test_log_unavailable_on_a_terminal_pod_is_lost():
    # the API's failure, never the episode's: a bounded byte read no content can break
    r = judge_episode(pod_facts(pod_json()), None, log_error="log read timed out", log_tail="tail")
    assert (r.outcome, r.reason, r.message, r.log_tail, r.valid) == \
        ("lost", "LogUnavailable", "log read timed out", "tail", False)


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


def test_an_eviction_in_progress_is_not_yet_an_infrastructure_failure():
    # The program may exit 0 on SIGTERM; the Job then counts the index succeeded.
    evicting = pod_json("Running", 0, conditions=DISRUPTED)
    evicting["metadata"]["deletionTimestamp"] = CREATED
    assert not is_infrastructure_failure(pod_facts(evicting))
    exited_clean = pod_json("Succeeded", 0, conditions=DISRUPTED)
    exited_clean["metadata"]["deletionTimestamp"] = CREATED
    assert not is_infrastructure_failure(pod_facts(exited_clean))
    assert judge_episode(pod_facts(exited_clean), log_of(READY, REWARD)).outcome == "succeeded"
    assert is_infrastructure_failure(pod_facts(pod_json("Failed", 143, conditions=DISRUPTED)))


def test_odd_completion_indexes_are_none():
    for value in ("-1", " 3", "1_0", "3.0", "9" * 5000, 3, "3\n"):
        pod = pod_json()
        pod["metadata"]["annotations"][v.COMPLETION_INDEX_KEY] = value
        assert pod_facts(pod).index is None, value


def test_a_log_without_an_error_or_a_log_is_lost_not_a_crash():
    assert (judge_episode(pod_facts(pod_json()), None).outcome) == "lost"


def test_hostile_values_in_messages_cannot_raise():
    from rolloutbatch.core.model import Event, ParsedLog
    ready = Event("ready", T0 + 1, "rb-1-3-abc", None, {}, 1)
    reward = Event("reward", T0 + 2, "rb-1-3-abc", 10 ** 5000, {"x": float("nan")}, 2)
    r = judge_episode(pod_facts(pod_json()), ParsedLog((ready,), (reward,), (), 0, False))
    assert (r.reason, r.extra) == ("InvalidReward", {"x": None}) and "too large" in r.message


BY_KUBELET = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]


@pytest.mark.parametrize("message", [
    'Usage of EmptyDir volume "workspace" exceeds the limit "1Gi". ',
    "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. ",
    'Container episode exceeded its local ephemeral storage limit "1Gi". ',
])
def test_an_eviction_over_the_pods_own_limits_is_its_own_failure(message):
    # Filling its own disk must not buy an agent a fresh attempt (a re-roll of a bad one).
    facts = pod_facts(pod_json("Failed", 137, reason="Evicted", message=message, conditions=BY_KUBELET))
    assert not is_infrastructure_failure(facts)
    r = judge_episode(facts, log_of(READY, REWARD))
    assert (r.outcome, r.reason) == ("failed", "StorageLimitExceeded") and message.strip() in r.message


def test_an_eviction_for_the_nodes_pressure_stays_infrastructure():
    message = "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 10Mi. "
    assert is_infrastructure_failure(pod_facts(pod_json("Failed", 137, reason="Evicted", message=message,
                                                        conditions=BY_KUBELET)))


def test_a_finished_pod_deleted_before_its_log_was_read_is_lost_not_failed():
    # The taint manager (a node that missed heartbeats) deleted Completed pods before their log was
    # read (bench, 2026-12-01): what they did is unknown, an infrastructure loss, not the episode's.
    r = judge_episode(pod_facts(pod_json()), None, log_error=v.LOG_POD_GONE)
    assert (r.outcome, r.reason, r.valid) == ("lost", "LogUnavailable", False)


# --- whose failure: core.outcomes -----------------------------------------------------------------
def test_every_episode_reason_is_classified_once():
    from rolloutbatch.core.outcomes import AGENT, CLASS_OUTCOME, INFRASTRUCTURE, OWNER, REASON_CLASS
    assert set(REASON_CLASS) == set(v.EPISODE_REASONS) and len(v.EPISODE_REASONS) == len(set(v.EPISODE_REASONS))
    assert set(REASON_CLASS.values()) == {AGENT, INFRASTRUCTURE, OWNER} == set(CLASS_OUTCOME)
    # only the owner's stop is the owner's: it is neither the agent's failure nor a loss
    assert [r for r, whose in REASON_CLASS.items() if whose == OWNER] == [v.EP_BATCH_STOPPED]


def test_a_stopped_episode_is_neither_failed_nor_lost_and_never_valid():
    from rolloutbatch.core.outcomes import never_ran_outcome, outcome_of
    assert outcome_of(v.EP_BATCH_STOPPED) == never_ran_outcome(v.EP_BATCH_STOPPED) == v.OUTCOME_STOPPED
    assert never_ran_outcome(v.EP_BATCH_STALLED) == v.OUTCOME_LOST     # the others never ran: lost, as before
    row = never_ran(4, v.EP_BATCH_STOPPED, "never ran").to_row(T0)
    assert (row["outcome"], row["reason"], row["valid"], row["reward"]) == ("stopped", "BatchStopped", False, None)


def test_exhausted_infrastructure_retries_are_lost_not_failed():
    evicted = pod_json("Failed", 143, conditions=DISRUPTED)
    r = judge_episode(pod_facts(evicted), None, log_error="infrastructure retries exhausted", attempts=3)
    row = r.to_row(T0)
    assert (row["outcome"], row["reason"], row["valid"], row["reward"]) == \
        ("lost", "InfrastructureFailure", False, None)


def test_a_clock_skew_row_reports_no_durations():
    r = judge_episode(pod_facts(pod_json()), log_of(with_(READY, at=1e12), with_(REWARD, at=1e12 + 1)))
    row = r.to_row(T0)
    assert r.reason == "ClockSkew" and r.pod_to_ready_seconds is None
    assert (row["pod_to_ready_seconds"], row["batch_to_ready_seconds"], row["batch_to_reward_seconds"]) == \
        (None, None, None)
    assert (row["valid"], row["reward"]) == (True, 0.0)


def test_a_forged_clock_with_reward_before_ready_is_clock_skew_and_reports_no_durations():
    """Events stamped in 1970, in the wrong order: the wrong clock is the reason, and none of
    its times reach the row's durations (pod_to_ready_seconds was about -1.8e9)."""
    r = judge_episode(pod_facts(pod_json()), log_of(with_(READY, at=2.0), with_(REWARD, at=1.0)), now=T0 + 10)
    row = r.to_row(T0)
    assert (r.reason, row["pod_to_ready_seconds"], row["batch_to_ready_seconds"], row["batch_to_reward_seconds"]) \
        == ("ClockSkew", None, None, None)


@pytest.mark.parametrize("reason,pod,events", [
    ("NonZeroExit", pod_json("Failed", 1), (with_(READY, at=1e12), with_(REWARD, at=1e12 + 1))),
    ("Restarted", pod_json(restarts=1), (with_(READY, at=2.0), REWARD)),
    ("InvalidReward", pod_json(), (READY, with_(REWARD, reward="lots", at=1e12))),
    ("MissingTimestamp", pod_json(), (with_(READY, at=2.0), with_(REWARD, at=None))),
], ids=["non-zero-exit", "restarted", "invalid-reward", "missing-timestamp"])
def test_no_row_has_durations_from_a_clock_beyond_the_tolerance_whichever_reason_wins(reason, pod, events):
    from rolloutbatch.core.model import EpisodeResult
    r = judge_episode(pod_facts(pod), log_of(*events))
    assert (r.reason, r.pod_to_ready_seconds, r.timings_trusted) == (reason, None, False)
    assert v.FLAG_SKEW_BEYOND in r.flags
    row = r.to_row(T0)
    assert (row["pod_to_ready_seconds"], row["batch_to_ready_seconds"], row["batch_to_reward_seconds"]) == \
        (None, None, None)
    assert EpisodeResult.from_row(row).to_row(T0) == row      # so after a restart too


def test_a_failure_whose_clock_is_within_the_tolerance_keeps_its_durations():
    r = judge_episode(pod_facts(pod_json("Failed", 1)), log_of(with_(READY, at=T0 - 0.5), REWARD))
    assert (r.reason, r.pod_to_ready_seconds, r.flags) == ("NonZeroExit", 0.0, ())
    assert r.to_row(T0)["batch_to_reward_seconds"] == 2.0


@pytest.mark.parametrize("events", [(REWARD,), (READY, READY, REWARD), (READY, with_(REWARD, reward=1e308)),
                                    (READY, with_(REWARD, reward="1"))],
                         ids=["no-ready", "two-readies", "reward-out-of-range", "string-reward"])
def test_a_contract_breaker_counts_with_the_worst_reward(events):
    row = judge_episode(pod_facts(pod_json()), log_of(*events)).to_row(T0)
    assert (row["outcome"], row["valid"], row["reward"]) == ("failed", True, 0.0), row


def test_a_crashed_plain_episode_counts_with_the_worst_reward():
    row = judge_episode(pod_facts(pod_json("Failed", 1)), log_of(READY, REWARD)).to_row(T0)
    assert (row["reason"], row["valid"], row["reward"], row["claimed_reward"]) == ("NonZeroExit", True, 0.0, 1.0)


# --- spec.verifier: hostile agents against the verifier ---------------------------------------------
def verified_pod(verifier_state, phase="Succeeded", reason=None):
    """A verified episode's pod: the agent phase ran (its launcher's record), then ``verifier_state``."""
    agent_msg = json.dumps(READY) + '\n{"event":"agent_exit","exit_code":1,"timed_out":false}\n'
    status = {"phase": phase,
              "initContainerStatuses": [{"name": "agent", "state": {"terminated": {
                  "exitCode": 0, "message": agent_msg, "startedAt": CREATED, "finishedAt": "2026-11-29T07:00:02Z"}}}],
              "containerStatuses": [{"name": "verifier", "restartCount": 0, "state": verifier_state}]}
    if reason:
        status["reason"] = reason
    return {"metadata": {"name": "rb-1-3-abc", "namespace": "rb-1", "uid": "u1", "creationTimestamp": CREATED,
                         "annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
            "spec": {"nodeName": "devnode-1"}, "status": status}


def ended(code, reason="Error", message=None):
    t = {"exitCode": code, "reason": reason, "startedAt": "2026-11-29T07:00:03Z", "finishedAt": "2026-11-29T07:00:05Z"}
    if message is not None:
        t["message"] = message
    return {"terminated": t}


def judge_pod(pod, verifier_log=None, **kw):
    from rolloutbatch.core.events import parse_termination_message, split_agent_record
    facts = pod_facts(pod)
    agent_log = parse_termination_message(split_agent_record(facts.agent.message)[0])
    if verifier_log is None and facts.termination_message:
        verifier_log = parse_termination_message(facts.termination_message)
    return judge_verified(facts, agent_log, verifier_log, **kw)


VERIFIER_REWARD = json.dumps({**REWARD, "reward": 0})
HOSTILE_VERIFIER_CASES = {
    # the agent's code, imported by the verifier, killed every process of its UID (kill -1), or
    # the verifier's parent: the verifier died of SIGKILL
    "kill -1 from imported code": (verified_pod(ended(137), "Failed"), None),
    # a switch file left in the workspace made the verifier refuse to grade
    "leftover .no-attempt": (verified_pod(ended(1), "Failed"), None),
    # a sparse 40 GiB file read whole: the kernel's OOM killer
    "sparse huge file": (verified_pod(ended(137, "OOMKilled"), "Failed"), None),
    # chmod 0 /dev/termination-log from imported code: the verifier could not write its reward,
    # and exited 0 having printed nothing (the message is empty, stdout has no event)
    "chmod 0 termination-log": (verified_pod(ended(0, "Completed", "")), parse_log(b"Traceback: PermissionError\n")),
    # a hanging verifier, stopped by its launcher at verifier.timeoutSeconds
    "verifier timeout": (verified_pod(ended(v.VERIFIER_TIMEOUT_EXIT), "Failed"), None),
    # stopped (SIGSTOP) or hung until the pod's deadline
    "pod deadline": (verified_pod(ended(137), "Failed", "DeadlineExceeded"), None),
    # an out-of-range or non-finite reward written in the verifier's name
    "non-finite reward": (verified_pod(ended(0, "Completed", json.dumps({**REWARD, "reward": 1e308}))), None),
}


@pytest.mark.parametrize("case", HOSTILE_VERIFIER_CASES)
def test_a_verifier_failing_on_the_agents_work_is_the_agents_failure(case):
    pod, log = HOSTILE_VERIFIER_CASES[case]
    r = judge_pod(pod, log)
    row = r.to_row(T0)
    assert (row["outcome"], row["reason"], row["valid"], row["reward"]) == ("failed", "VerifierFailed", True, 0.0), \
        (case, r.message)
    if case == "verifier timeout":
        assert "verifier.timeoutSeconds" in r.message


def test_an_honest_verified_zero_and_a_failed_verifier_weigh_the_same():
    honest = judge_pod(verified_pod(ended(0, "Completed", VERIFIER_REWARD))).to_row(T0)
    broken = judge_pod(HOSTILE_VERIFIER_CASES["kill -1 from imported code"][0]).to_row(T0)
    assert (honest["outcome"], honest["reward"]) == ("succeeded", 0.0)
    assert (broken["valid"], broken["reward"]) == (honest["valid"], honest["reward"])


@pytest.mark.parametrize("state, reason", [
    ({"waiting": {"reason": "CreateContainerConfigError", "message": "secret not found"}}, "VerifierNotStarted"),
    ({"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}, "ImagePullFailed"),
    ({"terminated": {"exitCode": 128, "reason": "StartError", "startedAt": "1970-01-01T00:00:00Z",
                     "finishedAt": "2026-11-29T07:00:05Z"}}, "VerifierNotStarted"),
], ids=["create-error", "image-pull", "start-error"])
def test_a_verifier_that_never_started_loses_the_episode(state, reason):
    r = judge_pod(verified_pod(state, "Failed", "DeadlineExceeded"))
    assert (r.outcome, r.reason, r.valid) == ("lost", reason, False), r.message


def test_a_verifier_log_the_api_could_not_give_is_lost():
    r = judge_pod(verified_pod(ended(0, "Completed", "")), verifier_error="log read failed: connection reset")
    assert (r.outcome, r.reason, r.valid) == ("lost", "LogUnavailable", False)


def test_reward_extras_over_budget_are_said_not_dropped_silently():
    big = with_(REWARD, diff="x" * 6000, small="ok", tokens=list(range(2000)))
    r = judge_episode(pod_facts(pod_json()), log_of(READY, big))
    assert (r.outcome, r.reward) == ("succeeded", 1.0)
    assert set(r.extra) == {"tests_exit", "small"}
    assert v.FLAG_EXTRAS_DROPPED in r.flags and "diff" in r.message and "tokens" in r.message
    row = r.to_row(None)
    assert v.FLAG_EXTRAS_DROPPED in row["flags"] and "tokens" in row["message"]
    plain = judge_episode(pod_facts(pod_json()), log_of(READY, REWARD))
    assert v.FLAG_EXTRAS_DROPPED not in plain.flags and plain.message == ""


def test_a_dropped_extras_name_reaches_the_message_escaped():
    """An episode chooses its extras' names: one that is a terminal's control sequence (clear the
    screen, set the window title) is quoted into the row's message escaped, as a log tail is shown."""
    hostile = "\x1b[2J\x1b[H\x1b]0;pwned\x07\x9b1A\u2028\u202e"
    r = judge_episode(pod_facts(pod_json()), log_of(READY, with_(REWARD, **{hostile: "x" * 6000})))
    assert (r.outcome, r.flags) == ("succeeded", (v.FLAG_EXTRAS_DROPPED,))
    assert r.message.endswith("\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\x9b1A\\u2028\\u202e"), r.message
    assert r.message.isprintable() and r.to_row(None)["message"] == r.message


def rejected(reason="OutOfcpu", node="devnode-1"):
    """A pod a kubelet refused at admission (kubelet's rejectPod): Failed, its reason and
    message, no container status at all."""
    pod = pod_json("Failed", 0, reason=reason, message="Pod was rejected: Node didn't have enough resource: cpu")
    del pod["status"]["containerStatuses"]
    pod["spec"]["nodeName"] = node
    return pod


@pytest.mark.parametrize("reason", ["OutOfcpu", "OutOfmemory", "OutOfpods", "NodeAffinity", "SomeFutureReason"])
def test_a_pod_its_node_refused_at_admission_is_an_infrastructure_failure(reason):
    facts = pod_facts(rejected(reason))
    assert not facts.containers_reported
    assert is_infrastructure_failure(facts)
    result = judge_episode(facts, None, log_error="infrastructure retries exhausted", attempts=2)
    assert (result.outcome, result.reason) == ("lost", "InfrastructureFailure")
    assert reason in result.message


def test_a_failed_pod_that_reported_a_container_is_not_taken_for_a_refusal():
    # any container status (a run, a start error, a wait) means the node took the pod: judged
    assert pod_facts(pod_json("Failed", 1)).containers_reported
    assert not is_infrastructure_failure(pod_facts(pod_json("Failed", 1, reason="OutOfcpu")))
    with_init = rejected()
    with_init["status"]["initContainerStatuses"] = [{"name": "agent", "state": {"terminated": {"exitCode": 1}}}]
    assert not is_infrastructure_failure(pod_facts(with_init))
    # not Failed, or never bound to a node: not a node's refusal
    pending = rejected()
    pending["status"]["phase"] = "Pending"
    assert not is_infrastructure_failure(pod_facts(pending))
    assert not is_infrastructure_failure(pod_facts(rejected(node=None)))
