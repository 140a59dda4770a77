"""A pool pod's episode that ran past its time is a Timeout by the API's times, whatever its launcher
recorded (core.verdict.agent_overran, episode_overran). The launcher reads its time from the script it
was handed; a process left running in the container (a pool prepare's) took the hand-over, rewrote
ROLLOUTBATCH_TIMEOUT and handed the launcher the script again under the same key: the agent wrote
its answer 15 s past its time, the launcher recorded no timeout, and the verifier's reward counted
(a hostile review's attack on the devcluster)."""
from __future__ import annotations

import dataclasses

import pytest

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.launchers import VERIFIER_SLACK_SECONDS
from rolloutbatch.core.verdict import CLOCK_SKEW_TOLERANCE_SECONDS, agent_overran, judge_episode
from rolloutbatch.core.verdict_verified import judge_verified
from tests.unit.core.test_verifier_core import RECORD, T0, ev, facts, log, verifier_log
from rolloutbatch.core.model import AgentFacts

TIMEOUT = 10
HANDED = T0 + 1.0          # the claim's hand-over, written down by the operator
BOUND = TIMEOUT + VERIFIER_SLACK_SECONDS + CLOCK_SKEW_TOLERANCE_SECONDS


def verified(agent_finished: float, *, pooled: bool = True):
    agent = AgentFacts(state="terminated", exit_code=0, message=RECORD % (0, "false"), finished_at=agent_finished)
    return facts(agent=agent, pooled=pooled, delivered_at=HANDED, finished_at=agent_finished + 3)


def graded(pod, **kw):
    """The verifier's reward, printed as it ends (the pod's finish)."""
    return judge_verified(pod, log(ev("ready", HANDED + 0.5)), verifier_log(ev("reward", pod.finished_at, reward=1)),
                          **kw)


@pytest.mark.parametrize("late", [BOUND + 0.5, 15 + TIMEOUT, 3600])
def test_a_verified_agent_past_its_time_by_the_apis_times_is_a_timeout(late) -> None:
    result = graded(verified(HANDED + late), episode_timeout=TIMEOUT)
    assert (result.outcome, result.reason, result.valid) == (v.OUTCOME_FAILED, v.EP_TIMEOUT, True)
    assert "by the API's times" in result.message


@pytest.mark.parametrize("finished", [TIMEOUT - 1, TIMEOUT, BOUND - 0.5])
def test_an_agent_within_its_time_and_the_tolerances_is_graded(finished) -> None:
    result = graded(verified(HANDED + finished), episode_timeout=TIMEOUT)
    assert (result.outcome, result.reward) == (v.OUTCOME_SUCCEEDED, 1.0), result.message


def test_the_check_needs_a_pools_pod_its_hand_over_and_the_time() -> None:
    late = HANDED + 3600
    assert graded(verified(late), episode_timeout=None).outcome == v.OUTCOME_SUCCEEDED     # not told the time
    assert graded(verified(late, pooled=False), episode_timeout=TIMEOUT).outcome == v.OUTCOME_SUCCEEDED  # a Job's
    unhanded = dataclasses.replace(verified(late), delivered_at=None)
    assert not agent_overran(unhanded, TIMEOUT)


def test_a_verified_agent_past_its_time_whose_verifier_never_started_is_not_lost() -> None:
    """The pod's deadline came while the agent ran on: a verifier never started would make the
    attempt lost, and retried (a re-roll of its bad draw)."""
    pod = dataclasses.replace(verified(HANDED + 60), phase="Failed", exit_code=None, pod_reason="DeadlineExceeded",
                              terminated_reason=None, finished_at=None)
    result = judge_verified(pod, log(ev("ready", HANDED + 0.5)), None, episode_timeout=TIMEOUT)
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_TIMEOUT)


def unverified(finished: float, **over):
    return facts(pooled=True, delivered_at=HANDED, finished_at=finished, **over)


def rewarded():
    return log(ev("ready", HANDED + 0.5), ev("reward", HANDED + 1, reward=1))


def test_an_unverified_pooled_episode_past_its_time_is_a_timeout() -> None:
    result = judge_episode(unverified(HANDED + 25), rewarded(), episode_timeout=TIMEOUT)
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_TIMEOUT)
    assert judge_episode(unverified(HANDED + TIMEOUT), rewarded(), episode_timeout=TIMEOUT).reward == 1.0
    assert judge_episode(unverified(HANDED + 25), rewarded()).reward == 1.0            # not told the time
    job_pod = facts(delivered_at=HANDED, finished_at=HANDED + 25)                     # not a pool's
    assert judge_episode(job_pod, rewarded(), episode_timeout=TIMEOUT).reward == 1.0
