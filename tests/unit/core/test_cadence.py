"""When progress is written (core.cadence): bounded writes per episode, bounded staleness."""
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core.cadence import Cadence

STATUS = Cadence(min_interval=1.0, max_interval=5.0, steps=40)


def test_a_small_batch_writes_every_change_once_the_shortest_interval_passed():
    assert STATUS.step(39) == 1
    assert STATUS.due(elapsed=1.0, changed=True, finished_since=0, episodes=39)
    assert not STATUS.due(elapsed=0.5, changed=True, finished_since=5, episodes=39)
    assert not STATUS.due(elapsed=60.0, changed=False, finished_since=0, episodes=39)


def test_a_large_batch_waits_for_a_share_of_its_episodes_or_the_longest_interval():
    assert STATUS.step(1000) == 25
    assert not STATUS.due(elapsed=2.0, changed=True, finished_since=24, episodes=1000)
    assert STATUS.due(elapsed=2.0, changed=True, finished_since=25, episodes=1000)
    assert not STATUS.due(elapsed=0.9, changed=True, finished_since=500, episodes=1000)
    assert STATUS.due(elapsed=5.0, changed=True, finished_since=0, episodes=1000)   # a running count changed


def test_nonsense_settings_still_give_a_rule():
    odd = Cadence(min_interval=3.0, max_interval=1.0, steps=0)
    assert odd.step(10) == 10
    assert not odd.due(elapsed=2.0, changed=True, finished_since=0, episodes=10)
    assert odd.due(elapsed=3.0, changed=True, finished_since=0, episodes=10)


@settings(max_examples=150, deadline=None)
@given(episodes=st.integers(1, 100_000), seconds=st.floats(1.0, 300.0), tick=st.floats(0.05, 1.0))
def test_writes_are_bounded_by_progress_and_time_and_nothing_waits_past_the_longest_interval(episodes, seconds,
                                                                                               tick):
    """A batch finishing its episodes evenly over ``seconds``, checked every ``tick`` seconds (a round)."""
    rate = episodes / seconds
    now = finished = written_finished = 0.0
    last_write, writes, oldest_unwritten = -1e9, 0, None
    while finished < episodes:
        now += tick
        finished = min(episodes, int(now * rate))
        if finished > written_finished and oldest_unwritten is None:
            oldest_unwritten = now
        if STATUS.due(elapsed=now - last_write, changed=finished > written_finished,
                      finished_since=int(finished - written_finished), episodes=episodes):
            writes += 1
            last_write, written_finished, oldest_unwritten = now, finished, None
        elif oldest_unwritten is not None:
            assert now - oldest_unwritten <= STATUS.max_interval + tick
    wall = now
    step = STATUS.step(episodes)
    bound = (episodes if step == 1 else episodes / step) + wall / STATUS.max_interval + 1
    assert writes <= min(bound, wall / STATUS.min_interval + 1)
