"""GRPO groups: index -> (group, sample), validity, group statistics."""
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core.groups import group_entries, group_entry, groups_completed_by
from tests.unit.core.factories import result


def test_rows_carry_group_sample_and_validity():
    ok = result(5, reward=0.5).to_row(None, 2)
    assert (ok["group"], ok["sample"], ok["valid"], ok["reward"]) == (2, 1, True, 0.5)
    # a failed episode is graded with the worst reward; what it claimed is never its reward
    bad = result(4, outcome="failed", reward=1.0).to_row(None, 2)
    assert (bad["valid"], bad["reward"], bad["claimed_reward"]) == (True, 0.0, 1.0)
    lost = result(3, outcome="lost", reward=None).to_row(None, 2)
    assert lost["valid"] is False and lost["reward"] is None and "claimed_reward" not in lost


def test_a_failed_rows_claim_survives_a_restore_but_never_counts():
    from rolloutbatch.core.model import EpisodeResult
    row = result(1, outcome="failed", reward=1.0).to_row(None, 1)
    back = EpisodeResult.from_row(row)
    assert back.reward == 1.0 and back.valid and back.to_row(None, 1)["reward"] == 0.0
    assert back.to_row(None, 1) == row


def test_group_statistics_use_valid_rewards_only():
    rows = {0: result(0, reward=1.0).to_row(None, 3), 1: result(1, reward=0.0).to_row(None, 3),
            2: result(2, outcome="lost", reward=None).to_row(None, 3)}
    entry = group_entry(0, 3, rows)
    assert entry == {"group": 0, "episodes": 3, "succeeded": 2, "valid": 2, "reward_mean": 0.5, "reward_std": 0.5,
                     "final": True}
    # a failed sample counts as 0.0, exactly like the honest 0.0 beside it
    rows[2] = result(2, outcome="failed", reward=1.0).to_row(None, 3)
    assert group_entry(0, 3, rows)["valid"] == 3 and group_entry(0, 3, rows)["reward_mean"] == 1 / 3
    assert group_entry(1, 3, rows)["final"] is False and group_entry(1, 3, rows)["reward_mean"] is None


def test_groups_completed_by_reports_each_group_once():
    final = {0, 1, 2, 3}
    assert groups_completed_by([1, 0, 3], 2, final) == [0, 1]
    assert groups_completed_by([4], 2, final | {4}) == []


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.lists(st.tuples(st.sampled_from(["succeeded", "failed", "lost"]),
                                             st.floats(-1e12, 1e12, allow_nan=False)), min_size=1, max_size=30))
def test_group_statistics_are_finite_and_count_what_they_say(k, outcomes):
    episodes = len(outcomes) - len(outcomes) % k or k
    rows = {i: result(i, outcome=o, reward=r if o != "lost" else None).to_row(None, k)
            for i, (o, r) in enumerate(outcomes[:episodes])}
    entries = group_entries(episodes, k, rows)
    assert len(entries) == episodes // k
    for e in entries:
        members = [rows.get(e["group"] * k + s) for s in range(k)]
        assert e["valid"] == sum(1 for m in members if m and m["valid"])
        for key in ("reward_mean", "reward_std"):
            assert e[key] is None or math.isfinite(e[key])


def test_index_group_and_members_agree():
    from rolloutbatch.core.groups import group_and_sample, group_count, group_members
    for k in (1, 2, 3, 8):
        for index in range(4 * k):
            group, sample = group_and_sample(index, k)
            assert (group, sample) == (index // k, index % k)
            assert list(group_members(group, k))[sample] == index
        assert group_count(4 * k, k) == 4
        assert [i for g in range(group_count(4 * k, k)) for i in group_members(g, k)] == list(range(4 * k))


def test_a_group_with_a_stopped_sample_is_never_final():
    """The owner's stop must not drop an agent's stalled attempt from its group's statistics."""
    rows = {0: {"outcome": "succeeded", "valid": True, "reward": 1.0},
            1: {"outcome": "stopped", "valid": False, "reward": None}}
    entry = group_entry(0, 2, rows)
    assert entry["final"] is False and entry["valid"] == 1
