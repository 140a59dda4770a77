"""Failing differently never pays: the agent's failures count in its group like an honest 0.

The adversary is the agent. Each case below is a real verdict (judge_episode / judge_verified)
of a bad attempt that breaks the contract instead of scoring 0, one for every reason the agent
could cause (core.outcomes); the group statistics and advantages must treat each exactly like an
honest attempt that scored FAILURE_REWARD.
"""
import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import vocabulary as v
from rolloutbatch.core.events import parse_log
from rolloutbatch.core.groups import advantages, group_entry
from rolloutbatch.core.outcomes import AGENT, FAILURE_REWARD, REASON_CLASS
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.verdict_verified import judge_verified
from rolloutbatch.core.pod_reading import pod_facts
from tests.unit.core import test_verifier_core as vc
from tests.unit.core.factories import result
from tests.unit.core.test_verdict import READY, REWARD, T0, killed_pod, log_of, pod_json, with_

NAN_REWARD = parse_log(json.dumps(READY).encode()
                       + b'\n{"event":"reward","at":%f,"episode_id":"rb-1-3-abc","reward":NaN}' % (T0 + 2))
STORAGE = "Pod ephemeral local storage usage exceeds the total limit of containers 2Gi. "


def _verified(**facts):
    """A verified pod whose agent phase ran and whose verifier started, then ``facts``."""
    return judge_verified(vc.facts(agent=vc.agent(), **facts), vc.log(vc.ev("ready", vc.T0 + 1)),
                          vc.log(vc.ev("reward", vc.T0 + 8, reward=1)))


def plain(pod, *events, **kw):
    return judge_episode(pod_facts(pod), log_of(*events), **kw)


# (what the agent did, its verdict)
BREAKERS = [
    ("never prints ready", plain(pod_json(), REWARD)),
    ("prints two readies", plain(pod_json(), READY, READY, REWARD)),
    ("prints no reward", plain(pod_json(), READY)),
    ("prints two rewards", plain(pod_json(), READY, REWARD, REWARD)),
    ("crashes", plain(pod_json("Failed", 1), READY)),
    ("restarts", plain(pod_json(restarts=1), READY, REWARD)),
    ("a NaN reward", judge_episode(pod_facts(pod_json()), NAN_REWARD)),
    ("a reward of 1e308", plain(pod_json(), READY, with_(REWARD, reward=1e308))),
    ("another episode's id", plain(pod_json(), READY, with_(REWARD, episode_id="rb-1-4-xyz"))),
    ("no `at`", plain(pod_json(), with_(READY, at="soon"), REWARD)),
    ("a forged `at`", plain(pod_json(), READY, with_(REWARD, at=1e12))),
    ("reward before ready", plain(pod_json(), REWARD, READY)),
    ("floods its log", judge_episode(pod_facts(pod_json()), dataclasses.replace(log_of(READY), truncated=True))),
    ("runs past its timeout", plain(pod_json("Failed", 137, reason="DeadlineExceeded"), READY)),
    ("runs into the batch deadline", plain(killed_pod(), READY, batch_deadline_at=T0 + 5)),
    ("fills its disk", plain(pod_json("Failed", 137, reason="Evicted", message=STORAGE), READY, REWARD)),
    ("kills its verifier (kill -1)", _verified(phase="Failed", exit_code=137, terminated_reason="Error")),
    ("hangs its verifier", _verified(phase="Failed", exit_code=v.VERIFIER_TIMEOUT_EXIT, terminated_reason="Error")),
    ("makes its verifier print nothing", judge_verified(vc.facts(agent=vc.agent()), vc.log(vc.ev("ready", vc.T0 + 1)),
                                                        parse_log(b""))),
]


def test_every_reason_the_agent_can_cause_has_a_hostile_case():
    agents = {r for r, who in REASON_CLASS.items() if who == AGENT}
    assert {r.reason for _, r in BREAKERS} == agents


def test_each_breaker_is_a_valid_row_with_the_worst_reward():
    for what, r in BREAKERS:
        row = r.to_row(T0)
        assert (row["outcome"], row["valid"], row["reward"]) == ("failed", True, FAILURE_REWARD), (what, row)


def test_one_good_and_three_contract_breakers_are_a_quarter_like_three_honest_zeros():
    honest = {i: result(i, reward=1.0 if i == 0 else 0.0).to_row(None, 4) for i in range(4)}
    broken = {0: honest[0], **{i: BREAKERS[j][1].replace(index=i).to_row(None, 4) for i, j in ((1, 0), (2, 1), (3, 4))}}
    assert group_entry(0, 4, honest)["reward_mean"] == 0.25
    assert group_entry(0, 4, broken)["reward_mean"] == 0.25 and group_entry(0, 4, broken)["valid"] == 4
    assert advantages(group_entry(0, 4, broken), broken.values()) == advantages(group_entry(0, 4, honest),
                                                                                honest.values())


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=8), st.data())
def test_replacing_an_honest_zero_by_any_breaker_never_raises_the_mean_nor_an_advantage(rewards, data):
    k = len(rewards)
    at = data.draw(st.integers(0, k - 1), label="the honest zero")
    what, breaker = data.draw(st.sampled_from(BREAKERS), label="the breaker")
    rewards[at] = 0.0
    honest = {i: result(i, reward=r).to_row(None, k) for i, r in enumerate(rewards)}
    broken = {**honest, at: breaker.replace(index=at).to_row(None, k)}
    before, after = group_entry(0, k, honest), group_entry(0, k, broken)
    assert after["reward_mean"] <= before["reward_mean"], what
    old, new = advantages(before, honest.values()), advantages(after, broken.values())
    assert new.keys() == old.keys(), what                # nobody left out, the breaker included
    for index, value in new.items():
        assert value <= old[index], (what, index)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=4))
def test_a_hand_edited_rows_huge_rewards_give_finite_group_statistics(rewards):
    """A results document edited by hand (rows valid, rewards of 1e308) is still read: its group's
    mean and std are finite or None (its sum overflowed: OverflowError), and a reward past
    MAX_ABS_REWARD, which no row of the operator's holds, is not counted."""
    rows = {i: {"index": i, "valid": True, "reward": r, "outcome": "succeeded"} for i, r in enumerate(rewards)}
    entry = group_entry(0, len(rewards), rows)
    for key in ("reward_mean", "reward_std"):
        assert entry[key] is None or abs(entry[key]) <= 2e12, entry
